//! Per-connection timers: the retransmission timeout estimator (RFC 6298 with Karn's
//! rule), and the deadlines a connection keeps — retransmission, tail loss probe, persist
//! (zero-window probe), delayed ACK and TIME-WAIT.
//!
//! Time is never read here: every function takes `now`, so tests drive the clock. A
//! connection's next deadline is the earliest of its armed timers; the layer's
//! [`poll_at`](crate::transport::TcpInput::poll_at) is the earliest over all connections.

use core::time::Duration;

use ebb_core::Instant;

/// RFC 6298's clock granularity G: the floor on `4 * RTTVAR` we add to SRTT.
const GRANULARITY: Duration = Duration::from_millis(1);

/// The smoothed RTT and the retransmission timeout derived from it.
///
/// Karn's rule is the caller's duty: only segments never retransmitted are sampled. The
/// backed-off RTO is kept until a valid sample arrives (RFC 6298 §5.7 note, Karn's
/// algorithm).
#[derive(Debug, Clone)]
pub(crate) struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The RTO before backoff.
    base_rto: Duration,
    /// How many times the timer expired since the last valid sample (each doubles).
    backoff: u32,
    min_rto: Duration,
    max_rto: Duration,
}

impl RttEstimator {
    /// Before any sample: RTO = `initial` (1 s in RFC 6298).
    pub(crate) fn new(initial: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            base_rto: initial,
            backoff: 0,
            min_rto,
            max_rto,
        }
    }

    /// Takes one round-trip sample (RFC 6298 §2.2–2.3) and clears any backoff.
    pub(crate) fn sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(rtt);
                self.rttvar = self.rttvar * 3 / 4 + delta / 4;
                self.srtt = Some(srtt * 7 / 8 + rtt / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(rtt);
        self.base_rto = srtt + (self.rttvar * 4).max(GRANULARITY);
        self.backoff = 0;
    }

    /// The timer expired: double the RTO (RFC 6298 §5.5), up to the maximum.
    pub(crate) fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// The current timeout: the base clamped to `[min_rto, max_rto]`, doubled per backoff.
    pub(crate) fn rto(&self) -> Duration {
        let base = self.base_rto.clamp(self.min_rto, self.max_rto);
        let factor = 1u32.checked_shl(self.backoff.min(16)).unwrap_or(u32::MAX);
        base.saturating_mul(factor).min(self.max_rto)
    }

    /// Whether any sample was taken.
    pub(crate) fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// The smoothed RTT, or the initial RTO's worth before the first sample.
    pub(crate) fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(self.base_rto)
    }
}

/// The deadlines of one connection; `None` means disarmed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timers {
    /// Retransmission (also SYN, SYN-ACK and FIN retransmission).
    pub(crate) retransmit: Option<Instant>,
    /// Zero-window probe.
    pub(crate) persist: Option<Instant>,
    /// Tail loss probe (RFC 8985 §7).
    pub(crate) tail_probe: Option<Instant>,
    /// A delayed ACK is owed by then.
    pub(crate) delayed_ack: Option<Instant>,
    /// TIME-WAIT ends then (2 × MSL after entering it).
    pub(crate) time_wait: Option<Instant>,
}

impl Timers {
    /// The earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        [
            self.retransmit,
            self.persist,
            self.tail_probe,
            self.delayed_ack,
            self.time_wait,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Disarms everything (entering TIME-WAIT or CLOSED).
    pub(crate) fn clear(&mut self) {
        *self = Timers::default();
    }
}

/// Whether `deadline` is armed and due at `now`.
pub(crate) fn due(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| d <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rfc6298_first_and_later_samples() {
        let mut rtt = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        assert_eq!(rtt.rto(), ms(1000), "initial RTO");
        rtt.sample(ms(100));
        // SRTT = 100, RTTVAR = 50, RTO = 100 + 200 = 300.
        assert_eq!(rtt.rto(), ms(300));
        rtt.sample(ms(100));
        // RTTVAR = 37.5, SRTT = 100, RTO = 250.
        assert_eq!(rtt.rto(), Duration::from_micros(250_000));
    }

    #[test]
    fn minimum_backoff_and_maximum() {
        let mut rtt = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        rtt.sample(ms(1));
        assert_eq!(rtt.rto(), ms(200), "clamped to the configured minimum");
        rtt.back_off();
        assert_eq!(rtt.rto(), ms(400));
        rtt.back_off();
        assert_eq!(rtt.rto(), ms(800));
        for _ in 0..20 {
            rtt.back_off();
        }
        assert_eq!(rtt.rto(), ms(60_000), "capped at the maximum");
        rtt.sample(ms(1));
        assert_eq!(rtt.rto(), ms(200), "a valid sample clears the backoff");
    }
}
