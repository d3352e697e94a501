//! The numbers `incr`/`decr` read from and write into values, exactly as memcached 1.6
//! reads and writes them.
//!
//! memcached parses a value with `safe_strtoull` (util.c), i.e. C's `strtoull(.., 10)`
//! followed by two checks; we reproduce that over a value's segments without copying:
//!
//! * leading C whitespace (`' '`, `\t`, `\n`, `\v`, `\f`, `\r`) is skipped, then an
//!   optional `+` or `-`, then at least one decimal digit (leading zeros allowed);
//! * a value that overflows `u64` is refused (`ERANGE`);
//! * the digits must be followed by whitespace, a NUL (where `strtoull` stops reading)
//!   or the end of the value (memcached's value is followed by `\r\n`, which counts as
//!   whitespace), so `"12abc"` is refused and `"12 junk"` and `"12\0x"` read as 12;
//! * a `-` negates modulo 2^64 like `strtoull`, and the result is refused only when it
//!   is negative as an `i64` (so `"-5"` is refused but `"-0"` reads as 0).
//!
//! The result is written back with memcached's in-place rule (`do_add_delta`): when the
//! new decimal string is no longer than the old value it overwrites the start and the
//! rest is padded with spaces (`"100"` decremented by one reads back as `"99 "`); when it
//! is longer the value becomes exactly the digits.

use ebb::{IOBuf, IOBufChain};

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Where the parser is in the value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Skipping leading whitespace.
    Space,
    /// After a sign, before the first digit.
    Sign,
    /// Inside the digits.
    Digits,
}

/// The unsigned number a value (given as its segments) holds by memcached's rules, or
/// `None` if `incr`/`decr` must answer "non-numeric value". An empty value is
/// non-numeric.
pub(super) fn parse_u64<'a>(segments: impl IntoIterator<Item = &'a [u8]>) -> Option<u64> {
    let mut state = State::Space;
    let mut negative = false;
    let mut n: u64 = 0;
    for segment in segments {
        for &b in segment {
            match (state, b) {
                (State::Space, b) if is_c_space(b) => {}
                (State::Space, b'+') => state = State::Sign,
                (State::Space, b'-') => {
                    negative = true;
                    state = State::Sign;
                }
                (State::Space | State::Sign | State::Digits, b'0'..=b'9') => {
                    state = State::Digits;
                    n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                }
                // What follows the digits decides, and nothing after it matters.
                // strtoull stops at a NUL, and safe_strtoull takes it as the string's end.
                (State::Digits, b) => {
                    return (is_c_space(b) || b == 0).then(|| finish(n, negative))?;
                }
                _ => return None,
            }
        }
    }
    (state == State::Digits).then(|| finish(n, negative))?
}

/// Applies `strtoull`'s negation and `safe_strtoull`'s check for it.
fn finish(n: u64, negative: bool) -> Option<u64> {
    if !negative {
        return Some(n);
    }
    let r = n.wrapping_neg();
    // `(long long) ull < 0` with a '-' among the parsed characters: refused.
    ((r as i64) >= 0).then_some(r)
}

/// The decimal digits of `n` (no allocation: at most 20 digits).
pub(super) fn digits(n: u64) -> ([u8; 20], usize) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        // `n % 10 < 10`: the cast cannot truncate.
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = buf.len() - i;
    buf.copy_within(i.., 0);
    (buf, len)
}

/// Spaces to pad a number with, shared by every padded value.
static SPACES: [u8; 16 << 10] = [b' '; 16 << 10];

/// The value that replaces `old_len` bytes after an `incr`/`decr` to `n`: the digits,
/// space-padded to `old_len` when they fit (memcached's in-place update). The padding is
/// static buffers, not memory of its own: a client's 1 MB value of `1` and spaces must
/// not make its `incr` allocate 1 MB (the store copies the result into its fallible
/// pieces).
pub(super) fn render(n: u64, old_len: usize) -> IOBufChain {
    let (buf, len) = digits(n);
    let mut out = IOBufChain::from(IOBuf::copy_from_slice(&buf[..len]));
    let mut pad = old_len.saturating_sub(len);
    while pad > 0 {
        let take = pad.min(SPACES.len());
        out.push_back(IOBuf::from_static(&SPACES[..take]));
        pad -= take;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb::{IOBuf, IOBufChain};

    fn parse(s: &[u8]) -> Option<u64> {
        parse_u64([s])
    }

    #[test]
    fn parses_like_safe_strtoull() {
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"42"), Some(42));
        assert_eq!(parse(b"  \t42"), Some(42));
        assert_eq!(parse(b"+7"), Some(7));
        assert_eq!(parse(b"99 "), Some(99));
        assert_eq!(parse(b"12 junk"), Some(12));
        assert_eq!(parse(b"0000000000000000000000000000000005"), Some(5));
        assert_eq!(parse(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse(b"18446744073709551616"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"   "), None);
        assert_eq!(parse(b"hi"), None);
        assert_eq!(parse(b"12abc"), None);
        assert_eq!(parse(b"-5"), None);
        assert_eq!(parse(b"-0"), Some(0));
        assert_eq!(parse(b"-"), None);
        assert_eq!(parse(b"+-1"), None);
        // strtoull negates modulo 2^64; the result 1 is not negative as an i64.
        assert_eq!(parse(b"-18446744073709551615"), Some(1));
    }

    #[test]
    fn parses_across_segments() {
        let mut chain = IOBufChain::new();
        chain.push_back(IOBuf::copy_from_slice(b" 12"));
        chain.push_back(IOBuf::copy_from_slice(b"34"));
        chain.push_back(IOBuf::copy_from_slice(b" "));
        assert_eq!(parse_u64(chain.segments()), Some(1234));
    }

    #[test]
    fn renders_with_memcached_padding() {
        assert_eq!(render(99, 3).to_vec(), b"99 ");
        assert_eq!(render(100, 2).to_vec(), b"100");
        assert_eq!(render(0, 1).to_vec(), b"0");
        assert_eq!(render(u64::MAX, 0).to_vec(), b"18446744073709551615");
        let padded = render(7, 100_000);
        assert_eq!(padded.len(), 100_000);
        assert!(padded.to_vec()[1..].iter().all(|&b| b == b' '));
    }
}
