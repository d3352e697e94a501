//! Benchmark tooling for Ebbflow.
//!
//! * [`echo_check`]: a correctness checker for TCP echo servers (many concurrent
//!   connections, large payloads, byte-exact verification, EOF handling).
//! * [`pingpong`]: OS-thread context-switch cost (two threads on one core).
//! * [`mc_workload`], [`mc_load`]: the memcached load generator's workloads (Facebook
//!   ETC after mutilate, fixed sizes) and its epoll engine (closed and open loop).
//! * [`server`]: a server process under test, found through its banner.
//! * [`sys`]: small Linux helpers (CPU pinning, fd limit).
//!
//! Binaries: `echo-load` (closed-loop load generator), `tokio-echo` (the tokio
//! peer server), `pthread-pingpong`, `net-sweep` (NetPIPE-style ping-pong sweep,
//! streaming echo and their plot; `bench/scripts/native-net.sh`), `mc-load` (memcached
//! load generator; `bench/scripts/mc-load-check.sh` compares it with memcaslap).

pub mod echo_check;
pub mod mc_load;
pub mod mc_workload;
pub mod pingpong;
pub mod server;
pub mod sys;

use std::time::Duration;

/// Parses a human duration such as `10s`, `500ms`, `250us`, `2m` or a bare
/// number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration `{s}` (expected e.g. 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" | "secs" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "ns" => value / 1e9,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("invalid duration unit `{other}` in `{s}`")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("invalid duration `{s}`"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}
