//! The demux table: [`FourTuple`] → connection ([`ConnTable`]), the multi-core
//! [`ConnectionDirectory`] it mirrors its claims in, and its hashing.
//!
//! The table does not know what a connection is beyond the four-tuple it is filed under
//! ([`Keyed`]); the layer stores its connection records in it.
//!
//! # Hashing
//!
//! A four-tuple key is hashed as two words by a seeded folded multiply (foldhash's /
//! wyhash's mixing step), for the table's `hashbrown` map.
//!
//! Trade-off: the peer chooses the remote address and port, so an unkeyed fast hash
//! (FxHash) would let it pick tuples that all land in one bucket chain and make every
//! segment's lookup linear (hash flooding). A keyed hash of cryptographic strength
//! (SipHash) costs several times the ~10 instructions this one does. The middle way used
//! here: the mixing is fast and not proven collision-resistant, but both of its constants
//! come from the layer's secret (`TcpConfig::isn_seed`), so a peer cannot compute
//! colliding tuples offline; what it could learn is only through timing.

use alloc::rc::Rc;
use core::hash::{BuildHasher, Hash, Hasher};
use core::net::SocketAddrV4;

use hashbrown::HashMap;

/// A connection's identity: our address and the peer's. The demux key, and the key a
/// multi-core steering maps to the owning core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddrV4,
    /// The peer's address and port.
    pub remote: SocketAddrV4,
}

/// Where a multi-core stack records which core owns each connection (see
/// [`crate::steering`]). A layer claims a four-tuple before the connection's first segment
/// leaves (so a peer's answer, arriving on any core, finds the owner) and releases it when
/// the connection leaves the table.
pub trait ConnectionDirectory {
    /// Records that this layer holds `tuple`. False if another core holds it: then this
    /// layer does not create the connection (a passive open drops the SYN, counted in
    /// [`TcpCounters::dropped_owned_elsewhere`](super::TcpCounters::dropped_owned_elsewhere); an active open tries another port or
    /// fails with `AddressInUse`).
    fn claim(&self, tuple: &FourTuple) -> bool;
    /// This layer no longer holds `tuple`.
    fn release(&self, tuple: &FourTuple);
}

/// What the table needs of a connection: the four-tuple it is filed under.
pub(super) trait Keyed {
    /// The connection's four-tuple (never changes while it is in a table).
    fn tuple(&self) -> &FourTuple;
}

/// The demux table: four-tuple to connection, mirrored in the multi-core directory when
/// there is one (`claim` before a connection's first segment, `remove` releases).
///
/// A `hashbrown` map under a seeded hash (see the module's doc for the choice of hash); nothing
/// iterates it, so its lack of order loses nothing. `last` caches the connection the
/// previous lookup found (a burst of segments usually belongs to one connection, and with
/// one connection the cache answers every lookup without hashing). Invariant: when set,
/// it is the entry `map` holds for its tuple — `insert` and `remove`, the only writers of
/// `map`, clear it for their tuple.
pub(super) struct ConnTable<C> {
    map: HashMap<TupleKey, Rc<C>, TupleHashBuilder>,
    last: Option<Rc<C>>,
    pub(super) directory: Option<Rc<dyn ConnectionDirectory>>,
}

impl<C: Keyed> ConnTable<C> {
    /// An empty table hashing with constants drawn from `secret`.
    pub(super) fn new(secret: [u64; 2]) -> ConnTable<C> {
        ConnTable {
            map: HashMap::with_hasher(TupleHashBuilder::new(secret)),
            last: None,
            directory: None,
        }
    }
    pub(super) fn get(&self, tuple: &FourTuple) -> Option<&Rc<C>> {
        self.map.get(&TupleKey(*tuple))
    }
    /// [`get`](Self::get) through the one-entry cache, which it updates.
    #[inline]
    pub(super) fn lookup(&mut self, tuple: &FourTuple) -> Option<Rc<C>> {
        if let Some(last) = &self.last
            && last.tuple() == tuple
        {
            return Some(last.clone());
        }
        let conn = self.map.get(&TupleKey(*tuple))?.clone();
        self.last = Some(conn.clone());
        Some(conn)
    }
    /// Forgets the cached connection if it is `tuple`'s.
    pub(super) fn uncache(&mut self, tuple: &FourTuple) {
        if self.last.as_ref().is_some_and(|c| c.tuple() == tuple) {
            self.last = None;
        }
    }
    /// Whether `tuple` may become a connection here: free in this table and claimed in
    /// the directory (if any).
    pub(super) fn claim(&self, tuple: &FourTuple) -> bool {
        !self.map.contains_key(&TupleKey(*tuple))
            && self.directory.as_ref().is_none_or(|d| d.claim(tuple))
    }
    /// Inserts a connection whose tuple was claimed.
    pub(super) fn insert(&mut self, conn: Rc<C>) {
        let tuple = *conn.tuple();
        self.uncache(&tuple);
        self.map.insert(TupleKey(tuple), conn);
    }
    pub(super) fn remove(&mut self, tuple: &FourTuple) -> Option<Rc<C>> {
        self.uncache(tuple);
        let removed = self.map.remove(&TupleKey(*tuple));
        if removed.is_some()
            && let Some(directory) = &self.directory
        {
            directory.release(tuple);
        }
        removed
    }
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
    /// Every connection, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Rc<C>> {
        self.map.values()
    }
}

/// `a * b` as 128 bits, its halves xor-ed.
#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The map's key: a four-tuple, hashed as two words (not through `FourTuple`'s derived
/// `Hash`, which feeds the hasher field by field).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct TupleKey(pub(super) FourTuple);

impl Hash for TupleKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        let FourTuple { local, remote } = self.0;
        let addrs = (u64::from(local.ip().to_bits()) << 32) | u64::from(remote.ip().to_bits());
        let ports = (u64::from(local.port()) << 16) | u64::from(remote.port());
        state.write_u64(addrs);
        state.write_u64(ports);
    }
}

/// Builds [`TupleHasher`]s with the layer's two secret constants.
#[derive(Clone, Copy)]
pub(super) struct TupleHashBuilder {
    seed: u64,
    multiplier: u64,
}

impl TupleHashBuilder {
    /// Constants derived from `secret` (the ISN secret, mixed so that neither constant
    /// is a word of it).
    pub(super) fn new(secret: [u64; 2]) -> TupleHashBuilder {
        // Digits of pi, as foldhash's seeds.
        const PI: [u64; 4] = [
            0x243f_6a88_85a3_08d3,
            0x1319_8a2e_0370_7344,
            0xa409_3822_299f_31d0,
            0x082e_fa98_ec4e_6c89,
        ];
        TupleHashBuilder {
            seed: folded_multiply(secret[0] ^ PI[0], secret[1] ^ PI[1]),
            // Odd, so the multiplication loses no low bits.
            multiplier: folded_multiply(secret[1] ^ PI[2], secret[0] ^ PI[3]) | 1,
        }
    }
}

impl Default for TupleHashBuilder {
    fn default() -> TupleHashBuilder {
        TupleHashBuilder::new([0, 0])
    }
}

impl BuildHasher for TupleHashBuilder {
    type Hasher = TupleHasher;
    #[inline]
    fn build_hasher(&self) -> TupleHasher {
        TupleHasher {
            state: self.seed,
            multiplier: self.multiplier,
        }
    }
}

/// Folds each word into the state with one multiplication.
pub(super) struct TupleHasher {
    state: u64,
    multiplier: u64,
}

impl Hasher for TupleHasher {
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.multiplier);
    }
    /// Only `write_u64` is used by [`TupleKey`]; anything else goes byte by byte.
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeMap;
    use alloc::vec::Vec;
    use core::net::{Ipv4Addr, SocketAddrV4};

    use super::*;
    use crate::tcp::layer::{ConnRecord, detached_conn};

    fn conn(tuple: FourTuple) -> Rc<ConnRecord> {
        detached_conn(tuple)
    }

    fn tuple(i: u32) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 15), 11211),
            // Peers differing in address, port or both.
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(0x0a00_0200 + i % 7), (i / 7) as u16),
        }
    }

    /// Many connections: inserts, removals and lookups (cached and not) interleaved,
    /// checked against an ordered map of the same connections.
    #[test]
    fn many_connections_find_their_own() {
        let mut table = ConnTable::new([1, 2]);
        let mut reference: BTreeMap<FourTuple, Rc<ConnRecord>> = BTreeMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next_random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for step in 0..20_000 {
            let t = tuple((next_random() % 500) as u32);
            match next_random() % 4 {
                0 if !reference.contains_key(&t) => {
                    assert!(table.claim(&t));
                    let c = conn(t);
                    table.insert(c.clone());
                    reference.insert(t, c);
                }
                1 => {
                    let removed = table.remove(&t);
                    let expected = reference.remove(&t);
                    assert_eq!(removed.is_some(), expected.is_some(), "step {step}");
                    if let (Some(a), Some(b)) = (removed, expected) {
                        assert!(Rc::ptr_eq(&a, &b));
                    }
                }
                _ => {}
            }
            // Twice: the second lookup goes through the cache.
            for _ in 0..2 {
                let found = table.lookup(&t);
                match reference.get(&t) {
                    Some(c) => assert!(found.is_some_and(|f| Rc::ptr_eq(&f, c)), "step {step}"),
                    None => assert!(found.is_none(), "step {step}"),
                }
            }
            assert_eq!(table.len(), reference.len());
            assert_eq!(table.claim(&t), !reference.contains_key(&t));
        }
        let all: Vec<_> = reference.keys().copied().collect();
        for t in all {
            assert!(Rc::ptr_eq(table.get(&t).unwrap(), &reference[&t]));
            assert!(table.remove(&t).is_some());
            assert!(table.lookup(&t).is_none());
        }
        assert_eq!(table.len(), 0);
    }

    /// The constants depend on the secret, so the hash does.
    #[test]
    fn hash_is_seeded() {
        let key = TupleKey(tuple(3));
        let a = TupleHashBuilder::new([1, 2]).hash_one(key);
        let b = TupleHashBuilder::new([1, 3]).hash_one(key);
        assert_ne!(a, b);
        assert_eq!(a, TupleHashBuilder::new([1, 2]).hash_one(key));
    }
}
