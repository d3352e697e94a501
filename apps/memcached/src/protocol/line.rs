//! A text command line's pieces, shared by the classic commands (`text`) and the meta
//! commands (`meta_parse`): what a line asks for ([`Line`]), its tokens as memcached's
//! `mcmc` tokenizer splits them ([`Tokens`]), and memcached's number parsers, quirks
//! included.
//!
//! Every byte offset used here is within the line given: tokens are computed from it,
//! and slices are taken with `get`.

use alloc::boxed::Box;

use super::meta::MetaFlags;
use super::{Command, ErrorKind, Key, StoreMode};

/// The tokenizer's limit (`MCMC_PARSER_MAX_TOKENS - 1`): later tokens are not split off
/// (so a `noreply` beyond the 23rd token is not seen, as in memcached).
pub(super) const MAX_TOKENS: usize = 23;
/// The tokenizer only looks at this many bytes of a line (`TOKENIZER_MAXLEN`).
const TOKENIZER_MAXLEN: usize = u16::MAX as usize - 1;

/// What a command line asks for, before its data block (if any) is read.
pub(super) enum Line {
    /// A complete request, already in the shape [`Parsed::Request`](super::Parsed)
    /// holds (a request is 200-odd bytes: each move of it is a `memcpy` call).
    Request(Command),
    /// A `get`/`gets`/`gat`/`gats` (a [`Request::Get`](super::Request) answered with
    /// `noreply` false) whose keys, from token `key_token` on, are still to be
    /// collected: the commonest request, built once, in the [`Parsed`](super::Parsed)
    /// returned (its keys are 88 bytes, moved once instead of twice).
    Get {
        cas: bool,
        touch: Option<i64>,
        key_token: usize,
    },
    /// A storage command whose data block (`vlen` bytes + `"\r\n"`) follows.
    Store {
        mode: StoreMode,
        key: Key,
        flags: u32,
        exptime: i64,
        cas: u64,
        vlen: usize,
        noreply: bool,
        /// `ms`: its flags (the request is a [`Request::MetaSet`]).
        meta: Option<Box<MetaFlags>>,
    },
    /// A refused line.
    Refused {
        kind: ErrorKind,
        /// The reply; `None` to close without one.
        reply: Option<&'static [u8]>,
        noreply: bool,
        /// Bytes after the line to swallow (a storage command's data block).
        swallow: usize,
        unlink: Option<Key>,
    },
}

impl Line {
    pub(super) fn refused(kind: ErrorKind, reply: &'static [u8], noreply: bool) -> Self {
        Line::Refused {
            kind,
            reply: Some(reply),
            noreply,
            swallow: 0,
            unlink: None,
        }
    }
}

/// The tokens of a line: `(start, end)` offsets of up to [`MAX_TOKENS`] space-separated
/// words, as memcached's `mcmc_tokenize`.
///
/// Offsets are `u16`: the tokenizer reads at most [`TOKENIZER_MAXLEN`] (< 2^16) bytes,
/// and the smaller struct is cheaper to build and to move.
pub(super) struct Tokens<'a> {
    line: &'a [u8],
    spans: [(u16, u16); MAX_TOKENS],
    count: usize,
    /// Whether the tokenizer read the whole line (it was no longer than
    /// [`TOKENIZER_MAXLEN`]).
    whole: bool,
}

impl<'a> Tokens<'a> {
    /// Tokenizes `line` (which ends with `"\n"`).
    ///
    /// One pass over the body, eight bytes at a time (SWAR, see [`space_mask`]): each
    /// word's space bytes become a bit mask, the bytes whose spaceness differs from the
    /// byte before them are a token's first byte or the space ending it, and those are
    /// visited with `trailing_zeros`. Lines are short (30 to 80 bytes for a `get`), so
    /// this beats a `memchr` per token, whose set-up dominates there; and it is plain
    /// integer code, as fast in the native image (no SSE) as hosted.
    pub(super) fn new(line: &'a [u8]) -> Self {
        let len = line.len().min(TOKENIZER_MAXLEN);
        let end = body_end(line.get(..len).unwrap_or_default());
        let body = line.get(..end).unwrap_or_default();
        let mut t = Self {
            line,
            spans: [(0, 0); MAX_TOKENS],
            count: 0,
            whole: line.len() <= TOKENIZER_MAXLEN,
        };
        let mut walk = EdgeWalk {
            start: 0,
            inside: false,
        };
        // The byte before the body counts as a space (its mask bit set), so a first
        // byte that is not a space starts a token.
        let mut prev = HIGH_BITS;
        let mut base = 0;
        let mut chunks = body.chunks_exact(8);
        for chunk in &mut chunks {
            let m = space_mask(load(chunk));
            let edges = m ^ ((m << 8) | (prev >> 56));
            prev = m;
            if walk.visit(&mut t, edges, base) {
                return t;
            }
            base += 8;
        }
        let rem = chunks.remainder().len();
        if rem > 0 {
            // The last 1 to 7 bytes, in the low bytes of `w`; the bytes above them are
            // masked out of `edges` whatever they hold.
            let w = if let Some(next) = line.get(base..base + 8) {
                // The line's "\r\n" (or more body bytes beyond the tokenizer's limit)
                // follows the body: a whole word can be read.
                load(next)
            } else if let Some(last) = body.get(end.wrapping_sub(8)..) {
                // The body's last eight bytes, shifted down to its last `rem`.
                load(last) >> (8 * (8 - rem))
            } else {
                // A body under 8 bytes in a line under 8 bytes ("get k\n").
                chunks
                    .remainder()
                    .iter()
                    .rev()
                    .fold(0, |w, &b| (w << 8) | u64::from(b))
            };
            let m = space_mask(w);
            let edges = (m ^ ((m << 8) | (prev >> 56))) & ((1u64 << (8 * rem)) - 1);
            if walk.visit(&mut t, edges, base) {
                return t;
            }
        }
        if walk.inside {
            t.push(walk.start, end);
        }
        t
    }

    /// The line tokenized, with its `"\n"`.
    pub(super) fn line(&self) -> &'a [u8] {
        self.line
    }

    /// Records the token `start..end` (the caller checks that there is room).
    #[inline]
    fn push(&mut self, start: usize, end: usize) {
        if let Some(span) = self.spans.get_mut(self.count) {
            // Lossless: both are at most TOKENIZER_MAXLEN < u16::MAX.
            *span = (start as u16, end as u16);
            self.count += 1;
        }
    }

    /// Where slot `i` of the spans starts (`0` past the last token, as the tokenizer
    /// leaves unused slots).
    #[inline]
    pub(super) fn span_start(&self, i: usize) -> Option<usize> {
        self.spans.get(i).map(|s| usize::from(s.0))
    }

    pub(super) fn len(&self) -> usize {
        self.count
    }

    /// Whether the tokens are every space-separated word of the line's body: the
    /// tokenizer read the whole line and stopped for want of words, not of slots.
    pub(super) fn complete(&self) -> bool {
        self.whole && self.count < MAX_TOKENS
    }

    pub(super) fn get(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.count {
            return None;
        }
        let &(s, e) = self.spans.get(i)?;
        self.line.get(usize::from(s)..usize::from(e))
    }

    /// The command: the body up to its first space, empty when it starts with one
    /// (token 0 if the line does not).
    pub(super) fn command(&self) -> &'a [u8] {
        match self.spans.first() {
            Some(&(0, e)) if self.count > 0 => self.line.get(..usize::from(e)).unwrap_or_default(),
            _ => b"",
        }
    }

    /// The line from token `i`'s start to the end of its body: what memcached's
    /// `strtol`-based parsers read from.
    pub(super) fn from(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.count {
            return None;
        }
        let &(s, _) = self.spans.get(i)?;
        self.line.get(usize::from(s)..body_end(self.line))
    }

    /// The last token is `noreply` (`_process_request_noreply`).
    pub(super) fn noreply(&self) -> bool {
        self.count > 0 && self.get(self.count - 1) == Some(b"noreply".as_slice())
    }
}

/// The tokenizer's state between words: inside a token (which began at `start`) or
/// between tokens.
struct EdgeWalk {
    start: usize,
    inside: bool,
}

impl EdgeWalk {
    /// Visits the edges of one word (bit 7 of byte `i` set: byte `base + i` is a space
    /// and the byte before it not, or the reverse), in order: alternately a token's
    /// first byte and the space after its last. Returns whether the spans are full.
    #[inline(always)]
    fn visit(&mut self, t: &mut Tokens<'_>, mut edges: u64, base: usize) -> bool {
        while edges != 0 {
            let pos = base + (edges.trailing_zeros() / 8) as usize;
            edges &= edges - 1;
            if self.inside {
                t.push(self.start, pos);
                if t.count == MAX_TOKENS {
                    return true;
                }
            } else {
                self.start = pos;
            }
            self.inside = !self.inside;
        }
        false
    }
}

/// Bit 7 of every byte.
const HIGH_BITS: u64 = u64::from_le_bytes([0x80; 8]);
/// Bits 0 to 6 of every byte.
const LOW_BITS: u64 = u64::from_le_bytes([0x7f; 8]);
/// Eight spaces.
const SPACES: u64 = u64::from_le_bytes([b' '; 8]);

/// Eight bytes as a little-endian word (byte `i` in bits `8i..8i+8`); `chunk` has at
/// least 8 bytes.
#[inline(always)]
fn load(chunk: &[u8]) -> u64 {
    let mut w = [0; 8];
    if let Some(c) = chunk.get(..8) {
        w.copy_from_slice(c);
    }
    u64::from_le_bytes(w)
}

/// Bit 7 of each byte of `w` that is a space, every other bit clear. Exact (unlike
/// the shorter `(x - 0x01..) & !x & 0x80..`, whose borrows can flag the byte above a
/// match): adding 0x7f to each byte's low 7 bits cannot carry into the next byte.
#[inline(always)]
fn space_mask(w: u64) -> u64 {
    let x = w ^ SPACES;
    !(((x & LOW_BITS).wrapping_add(LOW_BITS)) | x | LOW_BITS)
}

/// The pieces of `bytes` between spaces, exactly as `bytes.split(|&b| b == b' ')` gives
/// them (empty pieces included), found with `memchr`.
pub(super) fn split_spaces(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    core::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b' ', r) {
            Some(i) => {
                rest = r.get(i + 1..);
                r.get(..i)
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Where a line's body ends: before its `"\r\n"`, or before a bare `"\n"`.
pub(super) fn body_end(line: &[u8]) -> usize {
    let len = line.len();
    if len >= 2 && line.get(len - 2) == Some(&b'\r') {
        len - 2
    } else {
        len.saturating_sub(1)
    }
}

// Numbers. memcached parses most arguments with mcmc's strict converters (digits only,
// a bounded length, overflow refused) and flags/exptime of storage commands with
// strtoul/strtol (leading whitespace and a sign allowed, the result truncated to 32
// bits). Both are reproduced exactly, quirks included.

/// `mcmc_toktou32`: at most 11 digits, no sign, no overflow.
pub(super) fn mcmc_u32(tok: &[u8]) -> Option<u32> {
    if tok.len() > 11 {
        return None;
    }
    tok.iter().try_fold(0u32, |sum, &c| {
        let d = u32::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        sum.checked_mul(10)?.checked_add(d)
    })
}

/// `mcmc_toktou64`: at most 22 digits, no sign, no overflow.
pub(super) fn mcmc_u64(tok: &[u8]) -> Option<u64> {
    if tok.len() > 22 {
        return None;
    }
    tok.iter().try_fold(0u64, |sum, &c| {
        let d = u64::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        sum.checked_mul(10)?.checked_add(d)
    })
}

/// `mcmc_tokto32`: at most 11 bytes, an optional `-`, digits (a lone `-` is 0).
pub(super) fn mcmc_i32(tok: &[u8]) -> Option<i32> {
    if tok.len() > 11 {
        return None;
    }
    let (neg, digits) = match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, tok),
    };
    digits.iter().try_fold(0i32, |sum, &c| {
        let d = i32::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        let sum = sum.checked_mul(10)?;
        if neg {
            sum.checked_sub(d)
        } else {
            sum.checked_add(d)
        }
    })
}

/// C's `isspace` in the C locale.
fn is_c_space(c: u8) -> bool {
    c == b' ' || (b'\t'..=b'\r').contains(&c)
}

/// `strtoull(s, &end, 10)` followed by memcached's `safe_strto*` checks: whitespace,
/// an optional sign, at least one digit, no overflow, and then whitespace, NUL or the end
/// of the line. Returns the value (negated modulo 2^64 if signed `-`) and whether a `-`
/// was seen; for `strtol` semantics also the unreduced magnitude.
fn c_strtou(s: &[u8]) -> Option<(u64, bool, u128)> {
    let mut i = s.iter().take_while(|&&c| is_c_space(c)).count();
    let mut neg = false;
    match s.get(i) {
        Some(b'-') => {
            neg = true;
            i += 1;
        }
        Some(b'+') => i += 1,
        _ => {}
    }
    let digits = s.get(i..).unwrap_or_default();
    let n = digits.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let mut mag: u128 = 0;
    for &c in digits.get(..n).unwrap_or_default() {
        mag = mag * 10 + u128::from(c - b'0');
        if mag > u128::from(u64::MAX) + 1 {
            // Already out of every range checked below; stop before u128 overflows.
            mag = u128::from(u64::MAX) + 2;
        }
    }
    match digits.get(n) {
        None => {}
        Some(&c) if is_c_space(c) || c == 0 => {}
        Some(_) => return None,
    }
    let m = u64::try_from(mag).ok()?;
    Some((if neg { m.wrapping_neg() } else { m }, neg, mag))
}

/// memcached's `safe_strtoul` into a 32-bit flags field: ERANGE beyond 2^64, a negative
/// number refused only when it reads as negative as a signed long, the result
/// truncated to 32 bits (`*out = l`).
pub(super) fn c_strtoul_u32(s: &[u8]) -> Option<u32> {
    let (v, neg, _) = c_strtou(s)?;
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v as u32)
}

/// memcached's `safe_strtoull`: ERANGE beyond 2^64, a negative number refused only
/// when it reads as negative as a signed long long.
pub(super) fn c_strtoull_u64(s: &[u8]) -> Option<u64> {
    let (v, neg, _) = c_strtou(s)?;
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtol`: `strtol` (a 64-bit long: ERANGE outside it) stored into
/// an `int32_t` (truncated).
pub(super) fn c_strtol_i32(s: &[u8]) -> Option<i32> {
    let (_, neg, mag) = c_strtou(s)?;
    let v: i64 = if neg {
        if mag > 1u128 << 63 {
            return None;
        }
        (mag as u64).wrapping_neg() as i64
    } else {
        i64::try_from(mag).ok()?
    };
    Some(v as i32)
}

#[cfg(test)]
mod number_tests {
    use super::*;

    #[test]
    fn mcmc_numbers() {
        assert_eq!(mcmc_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(mcmc_u32(b"4294967296"), None);
        assert_eq!(mcmc_u32(b"000000000001"), None, "longer than 11");
        assert_eq!(mcmc_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(mcmc_u64(b"18446744073709551616"), None);
        assert_eq!(mcmc_u64(b"-1"), None);
        assert_eq!(mcmc_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(mcmc_i32(b"2147483648"), None);
        assert_eq!(mcmc_i32(b"-"), Some(0));
        assert_eq!(mcmc_i32(b"1x"), None);
    }

    #[test]
    fn strto_numbers() {
        assert_eq!(c_strtoul_u32(b"5 0 1"), Some(5));
        assert_eq!(c_strtoul_u32(b"+5"), Some(5));
        assert_eq!(c_strtoul_u32(b"4294967296"), Some(0), "truncated");
        assert_eq!(c_strtoul_u32(b"-1"), None);
        assert_eq!(c_strtoul_u32(b"-0"), Some(0));
        assert_eq!(c_strtoul_u32(b"18446744073709551616"), None, "ERANGE");
        assert_eq!(c_strtoul_u32(b"5x"), None);
        assert_eq!(c_strtoul_u32(b"\t5"), Some(5));
        assert_eq!(c_strtoul_u32(b"x"), None);
        assert_eq!(c_strtol_i32(b"-1"), Some(-1));
        assert_eq!(c_strtol_i32(b"4294967297"), Some(1), "truncated");
        assert_eq!(c_strtol_i32(b"9223372036854775808"), None, "ERANGE");
        assert_eq!(c_strtol_i32(b"-9223372036854775808"), Some(0));
        assert_eq!(c_strtol_i32(b"-9223372036854775809"), None);
    }
}

#[cfg(test)]
mod tokenizer_tests {
    use alloc::vec::Vec;

    use proptest::prelude::*;

    use super::*;

    /// `mcmc_tokenize` written plainly, a byte at a time: what [`Tokens::new`] must give.
    fn reference(line: &[u8]) -> Vec<&[u8]> {
        let len = line.len().min(TOKENIZER_MAXLEN);
        let body = &line[..body_end(&line[..len])];
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < body.len() && tokens.len() < MAX_TOKENS {
            if body[i] == b' ' {
                i += 1;
                continue;
            }
            let start = i;
            while i < body.len() && body[i] != b' ' {
                i += 1;
            }
            tokens.push(&body[start..i]);
        }
        tokens
    }

    fn check(line: &[u8]) {
        let t = Tokens::new(line);
        let ours: Vec<&[u8]> = (0..t.len()).map(|i| t.get(i).unwrap()).collect();
        assert_eq!(ours, reference(line), "{:?}", line.escape_ascii());
        let body = &line[..body_end(line)];
        let first_word = body.split(|&b| b == b' ').next().unwrap_or_default();
        if line.len() <= TOKENIZER_MAXLEN {
            assert_eq!(t.command(), first_word);
        }
        if t.complete() {
            let words: Vec<&[u8]> = body
                .split(|&b| b == b' ')
                .filter(|w| !w.is_empty())
                .collect();
            assert_eq!(ours, words);
        }
    }

    #[test]
    fn tokenizer_edges() {
        for line in [
            &b"\n"[..],
            b"\r\n",
            b" \r\n",
            b"get k\n",
            b"get k\r\n",
            b"get k \r\n",
            b"get k\r\r\n",
            b"  get   a  b \n",
            b"get 0123456789abcdef\r\n",
            b"get 0123456789abcde \r\n",
            b"12345678\r\n",
            b"1234567 \r\n",
            b"        \r\n",
            b"a b c d e f g h i j k l m n o p q r s t u v w x y z\r\n",
            b"a b c d e f g h i j k l m n o p q r s t u v w\r\n",
            b"a b c d e f g h i j k l m n o p q r s t u v w \r\n",
        ] {
            check(line);
        }
        // Beyond the tokenizer's limit: tokens stop there, with the quirky end.
        for tail in [&b"\r\n"[..], b"\n", b" x\r\n"] {
            for n in [
                TOKENIZER_MAXLEN - 3,
                TOKENIZER_MAXLEN - 2,
                TOKENIZER_MAXLEN - 1,
                TOKENIZER_MAXLEN + 5,
            ] {
                let mut line = b"get ".to_vec();
                line.resize(n, b'k');
                line.extend_from_slice(tail);
                check(&line);
            }
        }
    }

    proptest! {
        #[test]
        fn tokenizer_is_mcmc_tokenize(
            body in proptest::collection::vec(
                prop_oneof![Just(b' '), Just(b' '), Just(b'a'), Just(b'\r'), Just(b'\n'), any::<u8>()],
                0..120),
            crlf in any::<bool>(),
        ) {
            let mut line = body;
            line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            check(&line);
        }
    }
}
