//! Values of the command-line options `ebb-vmm` and `ebb run --native` (ebb-cli) share:
//! memory sizes and timeouts, parsed once for both.

use std::time::Duration;

/// Parses a memory size: bytes, or with a K, M or G suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|e| format!("bad size {s:?}: {e}"))?;
    n.checked_shl(shift)
        .filter(|v| v >> shift == n)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses a duration in seconds (fractions allowed).
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("bad timeout {s:?}: {e}"))?;
    Duration::try_from_secs_f64(secs).map_err(|e| format!("bad timeout {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("99999999999999G").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_seconds("-1").is_err());
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
    }
}
