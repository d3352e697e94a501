//! The internet checksum (RFC 1071): what a device needs to complete a partial checksum
//! or to cut a TCP frame into segments, and what the stack's `wire` module sums headers
//! and payloads with. One copy of the sum for the whole network path.
//!
//! The checksum is the one's-complement of the one's-complement sum of 16-bit big-endian
//! words. [`data`] computes the folded sum (not yet complemented) of a slice; sums of
//! pieces [`combine`] into the sum of their concatenation (each piece but the last must
//! have even length); [`pseudo_header`] is the IPv4 pseudo-header sum that TCP and UDP
//! include. The value written into a header is `!sum`. A buffer whose stored checksum is
//! correct sums to `0xffff`.

use core::net::Ipv4Addr;

/// The folded one's-complement sum of `bytes` as big-endian 16-bit words; an odd final
/// byte is padded with zero.
///
/// Never inlined: one copy of the loop serves every caller (headers and payloads, both
/// directions), which keeps the per-packet code small enough to stay in the instruction
/// cache.
#[inline(never)]
pub fn data(bytes: &[u8]) -> u16 {
    // An option-less IPv4 or TCP header, the most frequent input by far (every segment
    // sums two on the way out and one on the way in): five big-endian 32-bit words.
    // Since 2^16 ≡ 1 modulo 2^16 - 1, their plain sum folds to the same value.
    if let Ok(header) = <&[u8; 20]>::try_from(bytes) {
        let word = |at: usize| {
            u64::from(u32::from_be_bytes([
                header[at],
                header[at + 1],
                header[at + 2],
                header[at + 3],
            ]))
        };
        return fold(word(0) + word(4) + word(8) + word(12) + word(16));
    }
    // The body as native-endian 64-bit words summed into 128 bits: one add and one
    // add-with-carry per 8 bytes and no overflow to handle (that would take 2^64 words).
    // Folding modulo 2^16 - 1 afterwards gives the one's-complement sum of the 16-bit
    // words, since 2^16 ≡ 1. The sum does not depend on byte order except for being
    // byte-swapped with it (RFC 1071 §2(B)), so the native-order result is put in
    // network order once, at the end.
    let (words, rest) = bytes.as_chunks::<8>();
    let mut wide: u128 = 0;
    for word in words {
        wide += u128::from(u64::from_ne_bytes(*word));
    }
    // 128 to 64 bits with the end-around carry (with a carry out the wrapped sum is at most 2^64 - 2, so adding it cannot carry again).
    let (low, carried) = (wide as u64).overflowing_add((wide >> 64) as u64);
    let body = fold(low + u64::from(carried));
    let mut sum = u64::from(u16::from_be(body));
    // The rest (under 8 bytes) starts at an even offset: big-endian words as usual.
    let mut rest = rest;
    if let Some((four, tail)) = rest.split_first_chunk::<4>() {
        sum += u64::from(u32::from_be_bytes(*four));
        rest = tail;
    }
    if let Some((two, tail)) = rest.split_first_chunk::<2>() {
        sum += u64::from(u16::from_be_bytes(*two));
        rest = tail;
    }
    if let [last] = rest {
        sum += u64::from(*last) << 8;
    }
    fold(sum)
}

/// Folds a wide one's-complement accumulator into 16 bits.
#[inline]
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Combines partial sums (from [`data`] over consecutive even-length pieces, or
/// [`pseudo_header`]) into the sum of the whole.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The sum of the IPv4 pseudo-header for a TCP or UDP segment of `length` bytes (header
/// plus payload) carried with IP protocol `protocol`.
#[inline]
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u16 {
    // The six big-endian words (source, destination, zero and protocol, length) added
    // and folded: what `data` gives for them, without the call.
    let [s0, s1, s2, s3] = src.octets();
    let [d0, d1, d2, d3] = dst.octets();
    let words = [
        u16::from_be_bytes([s0, s1]),
        u16::from_be_bytes([s2, s3]),
        u16::from_be_bytes([d0, d1]),
        u16::from_be_bytes([d2, d3]),
        u16::from(protocol),
        length,
    ];
    fold(words.iter().map(|&w| u64::from(w)).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// The reference: one 16-bit word at a time, exactly as RFC 1071 describes it.
    fn naive(bytes: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these bytes is ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(data(&bytes), 0xddf2);
        assert_eq!(!data(&bytes), 0x220d);
    }

    #[test]
    fn known_ipv4_header() {
        // A captured IPv4 header (checksum 0xb861 in place) sums to 0xffff.
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(data(&header), 0xffff);
        let mut zeroed = header;
        zeroed[10] = 0;
        zeroed[11] = 0;
        assert_eq!(!data(&zeroed), 0xb861);
    }

    proptest! {
        /// The 20-byte shortcut agrees with RFC 1071's word-by-word sum.
        #[test]
        fn twenty_bytes_match_naive(bytes in proptest::array::uniform20(any::<u8>())) {
            prop_assert_eq!(data(&bytes), naive(&bytes));
        }
    }

    #[test]
    fn twenty_byte_extremes() {
        for fill in [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
            assert_eq!(data(&[fill; 20]), naive(&[fill; 20]));
        }
    }

    #[test]
    fn odd_lengths_and_empty() {
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xab]), 0xab00);
        assert_eq!(data(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(data(&[0xff; 7]), naive(&[0xff; 7]));
    }

    #[test]
    fn pseudo_header_matches_bytes() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(192, 168, 7, 200);
        let bytes = [10, 0, 0, 1, 192, 168, 7, 200, 0, 6, 0x05, 0xdc];
        assert_eq!(pseudo_header(src, dst, 6, 1500), data(&bytes));
    }

    proptest! {
        #[test]
        fn matches_naive(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(data(&bytes), naive(&bytes));
        }

        #[test]
        fn matches_naive_on_mostly_ones(
            len in 0usize..2000,
            holes in proptest::collection::vec((0usize..2000, any::<u8>()), 0..4),
        ) {
            // Runs of 0xff push every carry to its limit.
            let mut bytes = std::vec![0xffu8; len];
            for (at, value) in holes {
                if at < len {
                    bytes[at] = value;
                }
            }
            prop_assert_eq!(data(&bytes), naive(&bytes));
        }

        #[test]
        fn combine_is_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..100),
            b in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let mut a = a;
            if a.len() % 2 == 1 { a.pop(); }
            let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
            // One's-complement zero has two forms; compare modulo 0xffff.
            let lhs = combine(&[data(&a), data(&b)]) % 0xffff;
            prop_assert_eq!(lhs, data(&whole) % 0xffff);
        }

        #[test]
        fn filled_checksum_verifies(mut bytes in proptest::collection::vec(any::<u8>(), 2..200)) {
            bytes[0] = 0;
            bytes[1] = 0;
            let c = !data(&bytes);
            bytes[0..2].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(data(&bytes), 0xffff);
        }
    }
}
