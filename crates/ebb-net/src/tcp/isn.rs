//! Initial sequence numbers after RFC 6528: `ISN = M + F(4-tuple, secret)`, where `M` is a
//! clock ticking every 4 µs and `F` a keyed hash; and the starting point of the ephemeral
//! port search after RFC 6056's algorithm 3, `F(local address, remote endpoint, secret)`
//! (with a different key), so an off-path attacker cannot predict a connection's port.
//!
//! `no_std` has no randomness source, so the secret is the layer's configured seed; the
//! embedder must supply an unpredictable one (from the platform's RNG, RDRAND, or the
//! monitor) for the ISNs to resist off-path guessing. `F` is SipHash-2-4 keyed by the seed
//! (`core::hash::SipHasher`, deprecated in name only for hash tables), so ISNs of different
//! connections reveal nothing about each other.

#![allow(deprecated)]

use core::hash::{Hash, Hasher, SipHasher};

use ebb_core::Instant;

use super::conn_table::FourTuple;
use crate::wire::tcp::SeqNumber;

/// The per-layer ISN generator.
#[derive(Debug, Clone)]
pub(crate) struct IsnGenerator {
    key: [u64; 2],
}

impl IsnGenerator {
    /// A generator keyed by `seed`.
    pub(crate) fn new(seed: [u64; 2]) -> Self {
        IsnGenerator { key: seed }
    }

    /// The ISN for a connection on `tuple` opened at `now`.
    pub(crate) fn isn(&self, tuple: &FourTuple, now: Instant) -> SeqNumber {
        let mut hasher = SipHasher::new_with_keys(self.key[0], self.key[1]);
        tuple.hash(&mut hasher);
        let offset = hasher.finish() as u32;
        let clock = (now.as_nanos() / 4_000) as u32;
        SeqNumber(clock.wrapping_add(offset))
    }

    /// RFC 6056 algorithm 3's offset for connections from `local` to `remote`: where
    /// the ephemeral port search starts (plus a per-layer counter). Keyed differently
    /// from ISNs, so neither reveals the other.
    pub(crate) fn port_offset(
        &self,
        local: &core::net::Ipv4Addr,
        remote: &core::net::SocketAddrV4,
    ) -> u32 {
        let mut hasher = SipHasher::new_with_keys(!self.key[1], self.key[0].rotate_left(29));
        local.hash(&mut hasher);
        remote.hash(&mut hasher);
        hasher.finish() as u32
    }
}
