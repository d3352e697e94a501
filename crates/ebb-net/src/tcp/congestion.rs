//! Congestion control: the congestion window and slow-start threshold, grown by NewReno
//! (RFC 5681) or CUBIC (RFC 9438) and cut on loss.
//!
//! Loss *recovery* (fast retransmit, the NewReno partial-ACK rules of RFC 6582) lives in the
//! send path; this module only answers "how big may the window be". Both algorithms share
//! slow start and the fast-recovery inflation/deflation; they differ in the multiplicative
//! decrease (½ against CUBIC's β = 0.7) and in congestion avoidance (one MSS per RTT against
//! the cubic function of time since the last loss, never slower than Reno).
//!
//! Invariants: `cwnd >= mss` and `ssthresh >= 2 * mss` at all times; all sizes are bytes.

use core::time::Duration;

use ebb_core::Instant;

/// Which congestion-avoidance algorithm a layer's connections use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionAlgorithm {
    /// NewReno: RFC 5681 congestion avoidance with RFC 6582 recovery.
    #[default]
    NewReno,
    /// CUBIC (RFC 9438) with the same loss recovery.
    Cubic,
}

/// CUBIC's multiplicative decrease factor β.
const CUBIC_BETA: f64 = 0.7;
/// CUBIC's scaling constant C (segments / s³).
const CUBIC_C: f64 = 0.4;

/// The window state of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Congestion {
    algorithm: CongestionAlgorithm,
    mss: u32,
    /// Congestion window, bytes.
    pub(crate) cwnd: u32,
    /// Slow-start threshold, bytes.
    pub(crate) ssthresh: u32,
    /// NewReno congestion avoidance: bytes acknowledged since the window last grew.
    bytes_acked: u32,
    cubic: CubicState,
}

/// RFC 9438 state, in segments and seconds.
#[derive(Debug, Clone, Default)]
struct CubicState {
    /// Window before the last reduction.
    w_max: f64,
    /// Time from the epoch start until the window is back at `w_max`.
    k: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
    /// The Reno-friendly estimate.
    w_est: f64,
}

/// Cube root by Newton's method (`core` has no `cbrt`); `x >= 0`.
fn cbrt(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut y = if x > 1.0 { x / 3.0 } else { 1.0 };
    for _ in 0..64 {
        let next = (2.0 * y + x / (y * y)) / 3.0;
        if (next - y).abs() < 1e-9 {
            return next;
        }
        y = next;
    }
    y
}

impl Congestion {
    /// A window of `initial_segments` segments (RFC 6928) and an unbounded threshold.
    pub(crate) fn new(algorithm: CongestionAlgorithm, mss: usize, initial_segments: u32) -> Self {
        let mss = u32::try_from(mss).unwrap_or(u32::MAX).max(1);
        Congestion {
            algorithm,
            mss,
            cwnd: mss.saturating_mul(initial_segments.max(1)),
            ssthresh: u32::MAX,
            bytes_acked: 0,
            cubic: CubicState::default(),
        }
    }

    /// Changes the segment size (after the handshake settled the MSS).
    pub(crate) fn set_mss(&mut self, mss: usize, initial_segments: u32) {
        self.mss = u32::try_from(mss).unwrap_or(u32::MAX).max(1);
        self.cwnd = self.mss.saturating_mul(initial_segments.max(1));
    }

    /// The path MTU shrank: later growth counts in the smaller segment; the window in
    /// bytes stays (RFC 1191 §6.5: a PMTU change is not congestion).
    pub(crate) fn shrink_mss(&mut self, mss: usize) {
        self.mss = u32::try_from(mss).unwrap_or(u32::MAX).max(1);
    }

    /// `acked` new bytes were acknowledged outside recovery.
    pub(crate) fn on_ack(&mut self, acked: u32, now: Instant, srtt: Duration) {
        if self.cwnd < self.ssthresh {
            // Slow start with appropriate byte counting, L = 2 (RFC 3465).
            self.cwnd = self.cwnd.saturating_add(acked.min(2 * self.mss));
            return;
        }
        match self.algorithm {
            CongestionAlgorithm::NewReno => {
                self.bytes_acked = self.bytes_acked.saturating_add(acked);
                if self.bytes_acked >= self.cwnd {
                    self.bytes_acked -= self.cwnd;
                    self.cwnd = self.cwnd.saturating_add(self.mss);
                }
            }
            CongestionAlgorithm::Cubic => self.cubic_on_ack(acked, now, srtt),
        }
    }

    fn cubic_on_ack(&mut self, acked: u32, now: Instant, srtt: Duration) {
        let mss = f64::from(self.mss);
        let cwnd = f64::from(self.cwnd) / mss;
        let acked_segments = f64::from(acked) / mss;
        let cubic = &mut self.cubic;
        let epoch_start = match cubic.epoch_start {
            Some(start) => start,
            None => {
                cubic.epoch_start = Some(now);
                if cwnd < cubic.w_max {
                    cubic.k = cbrt((cubic.w_max - cwnd) / CUBIC_C);
                } else {
                    cubic.k = 0.0;
                    cubic.w_max = cwnd;
                }
                cubic.w_est = cwnd;
                now
            }
        };
        let t = (now - epoch_start).as_secs_f64();
        let rtt = srtt.as_secs_f64();
        let w_cubic =
            |t: f64| CUBIC_C * (t - cubic.k) * (t - cubic.k) * (t - cubic.k) + cubic.w_max;
        // The Reno-friendly region (RFC 9438 §4.3).
        let alpha = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
        cubic.w_est += alpha * acked_segments / cwnd;
        let new_cwnd = if w_cubic(t) < cubic.w_est {
            cubic.w_est
        } else {
            let target = w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) / cwnd * acked_segments
        };
        let bytes = (new_cwnd * mss).min(f64::from(u32::MAX)) as u32;
        self.cwnd = bytes.max(self.cwnd);
    }

    /// The multiplicative decrease: the new threshold for a loss with `flight` bytes
    /// outstanding.
    fn reduce(&mut self, flight: u32) -> u32 {
        let floor = 2 * self.mss;
        match self.algorithm {
            CongestionAlgorithm::NewReno => (flight / 2).max(floor),
            CongestionAlgorithm::Cubic => {
                let mss = f64::from(self.mss);
                let cwnd = f64::from(self.cwnd) / mss;
                // Fast convergence (RFC 9438 §4.7).
                self.cubic.w_max = if cwnd < self.cubic.w_max {
                    cwnd * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    cwnd
                };
                self.cubic.epoch_start = None;
                ((f64::from(self.cwnd) * CUBIC_BETA) as u32).max(floor)
            }
        }
    }

    /// Three duplicate ACKs: cut the threshold and inflate the window for fast recovery
    /// (RFC 5681 §3.2 step 2–3).
    pub(crate) fn enter_fast_recovery(&mut self, flight: u32) {
        self.ssthresh = self.reduce(flight);
        self.cwnd = self.ssthresh.saturating_add(3 * self.mss);
        self.bytes_acked = 0;
    }

    /// Another duplicate ACK during recovery: one more segment has left the network.
    pub(crate) fn inflate(&mut self) {
        self.cwnd = self.cwnd.saturating_add(self.mss);
    }

    /// A partial ACK of `acked` bytes (RFC 6582 §3.2 step 5): deflate by what was acked,
    /// add back one segment.
    pub(crate) fn partial_ack(&mut self, acked: u32) {
        self.cwnd = self
            .cwnd
            .saturating_sub(acked)
            .saturating_add(self.mss)
            .max(self.mss);
    }

    /// A full ACK ends recovery (RFC 6582 §3.2 step 3, the "min" option).
    pub(crate) fn exit_fast_recovery(&mut self, flight: u32) {
        self.cwnd = self.ssthresh.min(flight.max(self.mss) + self.mss);
        self.bytes_acked = 0;
    }

    /// The retransmission timer fired: one segment of window (RFC 5681 §3.1).
    pub(crate) fn on_timeout(&mut self, flight: u32) {
        self.ssthresh = self.reduce(flight);
        self.cwnd = self.mss;
        self.bytes_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn cube_root_is_accurate() {
        for x in [0.001, 1.0, 8.0, 27.0, 1000.0, 12345.678] {
            let y = cbrt(x);
            assert!((y * y * y - x).abs() / x < 1e-6, "cbrt({x}) = {y}");
        }
    }

    #[test]
    fn slow_start_then_newreno_avoidance() {
        let mut cc = Congestion::new(CongestionAlgorithm::NewReno, MSS, 10);
        assert_eq!(cc.cwnd, 10_000);
        cc.on_ack(1000, at(0), Duration::from_millis(10));
        assert_eq!(cc.cwnd, 11_000, "slow start: one MSS per MSS acked");
        cc.ssthresh = 11_000;
        for _ in 0..10 {
            cc.on_ack(1000, at(0), Duration::from_millis(10));
        }
        assert_eq!(cc.cwnd, 11_000, "less than a window acked: no growth yet");
        cc.on_ack(1000, at(0), Duration::from_millis(10));
        assert_eq!(cc.cwnd, 12_000, "a window acked: one MSS more");
    }

    #[test]
    fn newreno_recovery_halves() {
        let mut cc = Congestion::new(CongestionAlgorithm::NewReno, MSS, 10);
        cc.cwnd = 20_000;
        cc.enter_fast_recovery(20_000);
        assert_eq!(cc.ssthresh, 10_000);
        assert_eq!(cc.cwnd, 13_000);
        cc.inflate();
        assert_eq!(cc.cwnd, 14_000);
        cc.partial_ack(3000);
        assert_eq!(cc.cwnd, 12_000);
        cc.exit_fast_recovery(5000);
        assert_eq!(cc.cwnd, 6000);
        cc.on_timeout(6000);
        assert_eq!((cc.cwnd, cc.ssthresh), (1000, 3000));
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows_to_w_max() {
        let mut cc = Congestion::new(CongestionAlgorithm::Cubic, MSS, 10);
        cc.cwnd = 100_000;
        cc.enter_fast_recovery(100_000);
        assert_eq!(cc.ssthresh, 70_000);
        cc.exit_fast_recovery(100_000);
        assert_eq!(cc.cwnd, 70_000);
        // Ack a window every 10 ms for 10 simulated seconds: the window returns past
        // w_max (100 segments) and keeps growing, concave then convex.
        let rtt = Duration::from_millis(10);
        let mut now_ms = 0;
        while now_ms < 10_000 {
            let acked = cc.cwnd;
            cc.on_ack(acked, at(now_ms), rtt);
            now_ms += 10;
        }
        assert!(cc.cwnd > 100_000, "cwnd {}", cc.cwnd);
    }
}
