//! A byte stream cut into segments the way a fuzz input says: the byte-stream fuzz
//! targets (httpd's and memcached's) deliver the same stream cut anywhere and check that
//! the answers do not depend on the cut. Included by path by those fuzz projects
//! (workspaces of their own); `std` only.

/// Cuts `stream` into segments of 1 to `2^(split % 12)` bytes, their lengths drawn by
/// an xorshift generator seeded from `split` and `seed`: the same bytes, the same cut.
pub fn segments(stream: &[u8], split: u8, seed: u8) -> Vec<&[u8]> {
    let max = 1usize << (split % 12);
    let mut x = u32::from_le_bytes([split, seed, 0x5a, 0xa5]) | 1;
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let n = 1 + (x as usize) % max;
        let (a, b) = rest.split_at(n.min(rest.len()));
        out.push(a);
        rest = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::segments;

    #[test]
    fn a_cut_keeps_every_byte_in_order_within_its_bound() {
        let stream: Vec<u8> = (0..=255).cycle().take(10_000).collect();
        for (split, seed) in [(0, 0), (3, 7), (11, 255), (12, 1)] {
            let cut = segments(&stream, split, seed);
            assert_eq!(cut.concat(), stream);
            let max = 1usize << (split % 12);
            assert!(cut.iter().all(|s| (1..=max).contains(&s.len())));
            assert_eq!(cut, segments(&stream, split, seed), "not repeatable");
        }
        assert!(segments(&[], 5, 5).is_empty());
    }
}
