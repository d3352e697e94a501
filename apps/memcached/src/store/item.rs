//! One stored item, and the expiry-time rules.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::borrow::Borrow;
use core::hash::{Hash, Hasher};
use core::mem::size_of;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use ebb::{IOBuf, IOBufChain};

/// Unix time in seconds, as the store keeps it (fits until 2106).
pub type UnixTime = u32;

/// The largest expiry memcached reads as a relative number of seconds (30 days); a
/// larger one is an absolute Unix time.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The absolute expiry (0 = never) of an exptime given at `now`, by memcached's
/// `realtime()` plus its protocol handlers' rule for negative times:
///
/// * `0` never expires;
/// * negative: already expired (memcached stores it as expiring at its start);
/// * up to 30 days: relative to `now`;
/// * beyond 30 days: an absolute Unix time (in the past means already expired).
///
/// "Already expired" is represented by `1`, a time that is always in the past (`0`
/// would mean "never").
pub fn absolute_expiry(exptime: i64, now: UnixTime) -> UnixTime {
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e > REALTIME_MAXDELTA => clamp_time(e),
        e => clamp_time(e.saturating_add(i64::from(now))),
    }
}

/// `t` as a [`UnixTime`]: at least 1 (0 means never), at most `u32::MAX`.
fn clamp_time(t: i64) -> UnixTime {
    UnixTime::try_from(t.max(1)).unwrap_or(UnixTime::MAX)
}

/// A stored item. Immutable once published except for the fields that are atomics:
/// `exptime` (changed in place by touch, under the shard's lock), and the CLOCK and
/// statistics bits (set by lock-free readers).
pub(super) struct Item {
    pub(super) key: ItemKey,
    pub(super) flags: u32,
    /// Absolute expiry, 0 = never; see [`absolute_expiry`].
    pub(super) exptime: AtomicU32,
    /// When the item was stored (for `flush_all` with a delay).
    pub(super) time: UnixTime,
    /// The CAS unique id: new for every new version of a key's value, never reused.
    pub(super) cas: u64,
    /// The value, shared with every reply that sends it.
    pub(super) value: Value,
    /// Bytes accounted to this item against the memory limit.
    pub(super) size: usize,
    /// Its size class (`classes`), by `size`.
    pub(super) class: u8,
    /// This item's index in its shard's CLOCK ring; fixed for the item's life.
    pub(super) slot: usize,
    /// CLOCK's second-chance bit: set by reads, cleared by the hand.
    pub(super) referenced: AtomicBool,
    /// Whether any read returned the item (for `*_unfetched` statistics).
    pub(super) fetched: AtomicBool,
}

impl Item {
    /// Whether the item has expired at `now`.
    pub(super) fn expired(&self, now: UnixTime) -> bool {
        // Relaxed: touch changes it under the shard lock; a reader racing with a touch
        // may see either value, as it could have run just before or after it.
        let exp = self.exptime.load(Ordering::Relaxed);
        exp != 0 && exp <= now
    }

    /// Marks the item used by a read: CLOCK's reference bit and the fetched flag. Loads
    /// first so that a hot item's line is not written on every read by every core.
    pub(super) fn mark_read(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
        if !self.fetched.load(Ordering::Relaxed) {
            self.fetched.store(true, Ordering::Relaxed);
        }
    }

    /// Whether any read returned the item.
    pub(super) fn was_fetched(&self) -> bool {
        self.fetched.load(Ordering::Relaxed)
    }
}

/// A stored value: its buffers, shared with every reply that sends them. Not an
/// `IOBufChain` (112 bytes with its inline segments): one buffer inline, or a boxed
/// slice for a value copied into several pieces (`Packing`), which keeps the item
/// about 85 bytes smaller. A read turns it back into a chain without allocating when
/// it has at most four pieces.
pub(super) enum Value {
    /// One buffer (possibly empty).
    One(IOBuf),
    /// Several buffers, in order, none empty.
    Many(Box<[IOBuf]>),
}

impl Value {
    /// The value of `chain`, sharing its buffers.
    pub(super) fn from_chain(chain: IOBufChain) -> Value {
        if chain.segment_count() <= 1 {
            Value::One(chain.into_iter().next().unwrap_or_default())
        } else {
            Value::Many(chain.into_iter().collect())
        }
    }

    /// A chain of the value's buffers (shared, not copied).
    pub(super) fn to_chain(&self) -> IOBufChain {
        match self {
            Value::One(b) => b.clone().into(),
            Value::Many(bs) => bs.iter().cloned().collect(),
        }
    }

    /// The value's buffers, in order.
    pub(super) fn buffers(&self) -> &[IOBuf] {
        match self {
            Value::One(b) => core::slice::from_ref(b),
            Value::Many(bs) => bs,
        }
    }

    /// The value's bytes, piece by piece.
    pub(super) fn segments(&self) -> impl Iterator<Item = &[u8]> {
        self.buffers().iter().map(IOBuf::as_slice)
    }

    /// The value's length.
    pub(super) fn len(&self) -> usize {
        self.segments().map(<[u8]>::len).sum()
    }

    /// Whether the value is empty.
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The longest key kept inside its item; longer ones (up to memcached's 250 bytes) are
/// boxed. 38 makes the key 40 bytes and the item 112, so that with its `Arc` counts it is
/// one 128-byte object of the allocator, two cache lines that the CPU fetches as a pair
/// (a key of 46 made it 136 bytes: a 160-byte object over three lines). About two in
/// three keys of the ETC workload (sizes GEV(30.8, 8.2, 0.079)) fit, and every
/// `memtier_benchmark` key.
const INLINE_KEY_MAX: usize = 38;

/// What an item occupies in memory with its `Arc`'s two counts (see [`INLINE_KEY_MAX`]).
const ITEM_OBJECT: usize = size_of::<Item>() + 2 * size_of::<usize>();
const _: () = assert!(ITEM_OBJECT <= 128, "an item outgrew its 128-byte object");

/// An item's key: inside the item when it is short, as most keys are.
///
/// A get follows a chain of pointers — the bucket, the map's node, the item, the key —
/// and each step is a cache miss for a key that has left the cache, so a boxed key cost
/// every get one more (perf: the key comparison was a third of `continue_get`'s time at a
/// paced 32k requests/s over 100k keys). Inline, the key shares the item's cache lines.
pub(super) enum ItemKey {
    /// `bytes[..len]`.
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_MAX],
    },
    /// A key longer than [`INLINE_KEY_MAX`].
    Boxed(Box<[u8]>),
}

impl ItemKey {
    /// `key`, inline if it fits.
    pub(super) fn new(key: &[u8]) -> ItemKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY_MAX => {
                let mut bytes = [0; INLINE_KEY_MAX];
                bytes[..key.len()].copy_from_slice(key);
                ItemKey::Inline { len, bytes }
            }
            _ => ItemKey::Boxed(key.into()),
        }
    }
}

/// What a key of `len` bytes allocates beyond the item: nothing when it is inline.
pub(super) fn key_allocation(len: usize) -> usize {
    if len <= INLINE_KEY_MAX {
        0
    } else {
        super::allocation_size(len)
    }
}

impl core::ops::Deref for ItemKey {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            ItemKey::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            ItemKey::Boxed(key) => key,
        }
    }
}

/// The map's key: the item itself, hashed and compared by its key bytes, so a key is
/// stored once (in the item) and lookups borrow it as `[u8]`.
#[derive(Clone)]
pub(super) struct KeyRef(pub(super) Arc<Item>);

impl Hash for KeyRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Exactly how `[u8]` hashes, as `Borrow<[u8]>` requires.
        <[u8] as Hash>::hash(&self.0.key[..], state);
    }
}

impl PartialEq for KeyRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.key[..] == other.0.key[..]
    }
}

impl Eq for KeyRef {}

impl Borrow<[u8]> for KeyRef {
    fn borrow(&self) -> &[u8] {
        &self.0.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_whether_inline_or_boxed() {
        for len in [0, 1, 45, INLINE_KEY_MAX, INLINE_KEY_MAX + 1, 250] {
            let key: alloc::vec::Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let stored = ItemKey::new(&key);
            assert_eq!(&stored[..], &key[..], "length {len}");
            assert_eq!(
                matches!(stored, ItemKey::Inline { .. }),
                len <= INLINE_KEY_MAX,
                "length {len}"
            );
        }
    }

    #[test]
    fn expiry_rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute_expiry(0, now), 0);
        assert_eq!(absolute_expiry(-1, now), 1);
        assert_eq!(absolute_expiry(i64::MIN, now), 1);
        assert_eq!(absolute_expiry(10, now), now + 10);
        // Exactly 30 days is still relative; one more second is absolute.
        assert_eq!(absolute_expiry(REALTIME_MAXDELTA, now), now + 2_592_000);
        assert_eq!(absolute_expiry(REALTIME_MAXDELTA + 1, now), 2_592_001);
        assert_eq!(absolute_expiry(now as i64 + 5, now), now + 5);
        assert_eq!(absolute_expiry(i64::MAX, now), u32::MAX);
    }
}
