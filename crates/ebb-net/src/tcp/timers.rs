//! Per-connection timers: the retransmission timeout estimator (RFC 6298 with Karn's
//! rule), and the deadlines a connection keeps — retransmission, tail loss probe, persist
//! (zero-window probe), delayed ACK, TIME-WAIT and keepalive.
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
///
/// Kept in nanoseconds (`u64`, the unit of [`Instant`]): a sample is taken on almost every
/// ACK, and `Duration`'s seconds-and-nanoseconds arithmetic cost several times as much.
/// The results are the same as with `Duration`: the divisions are by 2, 4 and 8, which
/// divide 10⁹, so `Duration`'s division was an exact floor too; products are formed in
/// `u128`; what exceeds `u64` nanoseconds (584 years) saturates, as [`Instant`]'s addition
/// does anyway.
#[derive(Debug, Clone)]
pub(crate) struct RttEstimator {
    srtt: Option<u64>,
    rttvar: u64,
    /// The RTO before backoff.
    base_rto: u64,
    /// How many times the timer expired since the last valid sample (each doubles).
    backoff: u32,
    min_rto: u64,
    max_rto: u64,
}

/// `d` in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `a * num / den` without intermediate overflow (the result is at most `a` here).
fn scale(a: u64, num: u64, den: u64) -> u64 {
    u64::try_from(u128::from(a) * u128::from(num) / u128::from(den)).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// Before any sample: RTO = `initial` (1 s in RFC 6298).
    pub(crate) fn new(initial: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: 0,
            base_rto: nanos(initial),
            backoff: 0,
            min_rto: nanos(min_rto),
            max_rto: nanos(max_rto),
        }
    }

    /// Takes one round-trip sample (RFC 6298 §2.2–2.3) and clears any backoff.
    #[cfg(test)]
    pub(crate) fn sample(&mut self, rtt: Duration) {
        self.sample_nanos(nanos(rtt));
    }

    /// Takes one round-trip sample of `rtt` nanoseconds (RFC 6298 §2.2–2.3) and clears
    /// any backoff.
    pub(crate) fn sample_nanos(&mut self, rtt: u64) {
        let srtt = match self.srtt {
            None => {
                self.rttvar = rtt / 2;
                rtt
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(rtt);
                self.rttvar = scale(self.rttvar, 3, 4) + delta / 4;
                scale(srtt, 7, 8) + rtt / 8
            }
        };
        self.srtt = Some(srtt);
        let variance = self.rttvar.saturating_mul(4).max(nanos(GRANULARITY));
        self.base_rto = srtt.saturating_add(variance);
        self.backoff = 0;
    }

    /// The timer expired: double the RTO (RFC 6298 §5.5), up to the maximum.
    pub(crate) fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// The current timeout: the base clamped to `[min_rto, max_rto]`, doubled per backoff.
    pub(crate) fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto_nanos())
    }

    /// [`rto`](Self::rto) in nanoseconds, for arming a timer without a `Duration`
    /// (its conversions cost a segment about 25 instructions; see [`after`]).
    pub(crate) fn rto_nanos(&self) -> u64 {
        // Panics if `min_rto > max_rto`, as `Duration::clamp` did.
        let base = self.base_rto.clamp(self.min_rto, self.max_rto);
        let factor = 1u64 << self.backoff.min(16);
        base.saturating_mul(factor).min(self.max_rto)
    }

    /// Whether any sample was taken.
    pub(crate) fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// The smoothed RTT, or the initial RTO's worth before the first sample.
    pub(crate) fn srtt(&self) -> Duration {
        Duration::from_nanos(self.srtt_nanos())
    }

    /// [`srtt`](Self::srtt) in nanoseconds.
    pub(crate) fn srtt_nanos(&self) -> u64 {
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
    /// Keepalive: look at the connection's idleness then (see `send::on_keepalive`).
    pub(crate) keepalive: Option<Instant>,
}

impl Timers {
    /// The earliest armed deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        // Written out rather than as an iterator over the five: this runs after every
        // segment, and the iterator chain cost several times as many instructions.
        fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, None) => a,
                (None, b) => b,
            }
        }
        earlier(
            earlier(
                earlier(self.retransmit, self.persist),
                earlier(self.tail_probe, self.delayed_ack),
            ),
            earlier(self.time_wait, self.keepalive),
        )
    }

    /// Disarms everything (entering TIME-WAIT or CLOSED).
    pub(crate) fn clear(&mut self) {
        *self = Timers::default();
    }
}

/// `nanos` after `now`, saturating as `Instant + Duration` does.
#[inline]
pub(crate) fn after(now: Instant, nanos: u64) -> Instant {
    Instant::from_nanos(now.as_nanos().saturating_add(nanos))
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
