//! Initial sequence numbers after RFC 6528: `ISN = M + F(4-tuple, secret)`, where `M` is a
//! clock ticking every 4 µs and `F` a keyed hash.
//!
//! `no_std` has no randomness source, so the secret is the layer's configured seed; the
//! embedder must supply an unpredictable one (from the platform's RNG, RDRAND, or the
//! monitor) for the ISNs to resist off-path guessing. `F` is SipHash-2-4 keyed by the seed
//! (`core::hash::SipHasher`, deprecated in name only for hash tables), so ISNs of different
//! connections reveal nothing about each other.

#![allow(deprecated)]

use core::hash::{Hash, Hasher, SipHasher};

use ebb_core::Instant;

use super::FourTuple;
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
}
