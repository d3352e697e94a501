//! The guest's turn: when the I/O thread lets host input wait.
//!
//! On a CPU the I/O thread shares with the vCPU, the thread runs only when the guest
//! does not: each time host input wakes it, it preempts the guest, and under this
//! host's nested (PVM) KVM a switch between the two costs about 20 µs — more than the
//! guest's work for a request. A request that arrived while the guest was serving the
//! ones before it gained nothing from waking the thread at once: the guest could not
//! have started on it before finishing those. So after handing the guest frames that
//! ask for an answer, the thread waits for that answer (the guest's transmit kick)
//! before host input may wake it again, and then takes everything that arrived
//! meanwhile in one round: requests that came during a turn are served in the next
//! batch, two switches for the batch instead of two for each request.
//!
//! A turn lasts at most [`GUEST_TURN`]: a frame may ask for an answer that does not
//! come (part of a request, whose rest waits in the host's socket). So what a turn can
//! cost is bounded: a guest that never answers, or a peer trickling data that asks for
//! none, delays the host input behind it by at most [`GUEST_TURN`] a turn (counted: the
//! monitor's `guest_turns_expired`), and a guest gains nothing by misbehaving but its
//! own slower service. Only frames that ask for
//! an answer start a turn ([`asks_for_answer`]): a bare TCP acknowledgement does not,
//! or every ACK of the guest's own replies would hold host input back for the
//! whole bound. Where the thread has a CPU of its own, waking takes nothing from the
//! guest and turns are not used.

use super::NetStats;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The longest turn: how long host input may wait for the guest's answer.
pub(crate) const GUEST_TURN: Duration = Duration::from_micros(200);

/// Environment variable overriding [`GUEST_TURN`], in microseconds; 0 gives the guest
/// no turns (host input wakes the I/O thread whenever it arrives, as before turns).
pub const GUEST_TURN_ENV: &str = "EBB_VMM_GUEST_TURN_US";

/// Bytes of a frame [`asks_for_answer`] needs to see: an Ethernet header, an IPv4
/// header without options and the TCP header's flags.
pub(crate) const ANSWER_HEADERS: usize = 14 + 20 + 14;

/// Whether a frame for the guest asks it for an answer soon: anything but a TCP segment
/// over IPv4 that carries no data and neither opens, closes nor resets its connection (a
/// bare acknowledgement or window update). `head` is the start of the frame, at least
/// its headers; a frame too short to tell asks.
pub(crate) fn asks_for_answer(head: &[u8]) -> bool {
    const SYN_FIN_RST: u8 = 0x07;
    if head.len() < 14 + 20 || head[12..14] != [0x08, 0x00] {
        return true;
    }
    let ip = &head[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[9] != 6 || ip.len() < ihl + 14 {
        return true;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let tcp = &ip[ihl..];
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    tcp[13] & SYN_FIN_RST != 0 || total > ihl + data_offset
}

/// The guest's current turn: when it began, and the engine's count of answers then;
/// kept by the I/O thread between its rounds.
#[derive(Debug)]
pub(crate) struct GuestTurn {
    /// The longest turn ([`GUEST_TURN`] unless overridden).
    limit: Duration,
    current: Option<(Instant, u64)>,
}

impl Default for GuestTurn {
    fn default() -> Self {
        GuestTurn::lasting(GUEST_TURN)
    }
}

impl GuestTurn {
    /// Turns of at most `limit` (zero: none).
    pub(crate) fn lasting(limit: Duration) -> Self {
        GuestTurn {
            limit,
            current: None,
        }
    }

    /// Turns as long as [`GUEST_TURN_ENV`] says, else [`GUEST_TURN`].
    pub(crate) fn from_env() -> Self {
        match std::env::var(GUEST_TURN_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
        {
            Some(us) => GuestTurn::lasting(Duration::from_micros(us)),
            None => GuestTurn::default(),
        }
    }

    /// Before the thread sleeps at `now`: how much longer host input waits for the
    /// guest (`None`: it does not, so host input wakes the thread, and the engine stops
    /// awaiting an answer: `Engine::end_guest_turn`). `awaiting` and `answers` are the
    /// engine's (`Engine::awaiting_answer`, `Engine::answers`). A turn begins at the
    /// first sleep after the engine handed over frames that ask for an answer, and ends
    /// when the guest transmits (a round with frames both ways ends one turn and begins
    /// the next) or after the limit ([`GUEST_TURN`] by default). Counted in `stats`.
    pub(crate) fn left(
        &mut self,
        awaiting: bool,
        answers: u64,
        now: Instant,
        stats: &NetStats,
    ) -> Option<Duration> {
        if !awaiting || self.limit.is_zero() {
            self.current = None;
            return None;
        }
        let since = match self.current {
            Some((since, seen)) if seen == answers => since,
            _ => {
                stats.guest_turns.fetch_add(1, Ordering::Relaxed);
                self.current = Some((now, answers));
                now
            }
        };
        match self.limit.checked_sub(now.saturating_duration_since(since)) {
            Some(left) if !left.is_zero() => Some(left),
            _ => {
                stats.guest_turns_expired.fetch_add(1, Ordering::Relaxed);
                self.current = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::asks_for_answer;

    /// Ethernet, IPv4 with `options` words of options, TCP with `flags` and `payload`
    /// bytes; `protocol` in the IP header.
    fn frame(protocol: u8, options: usize, flags: u8, payload: usize) -> Vec<u8> {
        let mut f = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00".to_vec();
        let ihl = 5 + options;
        let total = (ihl * 4 + 20 + payload) as u16;
        f.extend_from_slice(&[0x40 | ihl as u8, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, protocol, 0, 0, 10, 0, 2, 2, 10, 0, 2, 15]);
        f.resize(f.len() + 4 * options, 1); // NOP options
        f.extend_from_slice(&[
            0x2b,
            0xcb,
            0x30,
            0x39,
            0,
            0,
            0,
            1,
            0,
            0,
            0,
            1,
            5 << 4,
            flags,
        ]);
        f.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        f.resize(f.len() + payload, b'x');
        f
    }

    #[test]
    fn only_a_bare_acknowledgement_asks_for_nothing() {
        assert!(!asks_for_answer(&frame(6, 0, 0x10, 0)), "a bare ACK");
        assert!(
            !asks_for_answer(&frame(6, 2, 0x10, 0)),
            "a bare ACK, IP options"
        );
        assert!(
            !asks_for_answer(&frame(6, 0, 0x10, 0)[..14 + 20 + 14]),
            "the headers up to the flags are enough"
        );
        assert!(asks_for_answer(&frame(6, 0, 0x18, 1)), "one byte of data");
        assert!(asks_for_answer(&frame(6, 2, 0x10, 100)), "data, IP options");
        for flags in [0x02, 0x12, 0x11, 0x04, 0x14] {
            assert!(
                asks_for_answer(&frame(6, 0, flags, 0)),
                "SYN, FIN or RST {flags:#x}"
            );
        }
        assert!(asks_for_answer(&frame(17, 0, 0x10, 0)), "UDP");
        let mut arp = frame(6, 0, 0x10, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(asks_for_answer(&arp), "ARP");
        let bare = frame(6, 0, 0x10, 0);
        for len in [0, 13, 14 + 19, 14 + 20 + 13] {
            assert!(
                asks_for_answer(&bare[..len]),
                "cut to {len} bytes: cannot tell"
            );
        }
        // IP options pushing the flags past what was read: cannot tell.
        assert!(asks_for_answer(&frame(6, 10, 0x10, 0)[..14 + 20 + 14]));
    }
}
