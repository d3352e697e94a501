//! The counters `stats` reports, kept per core so that the hot path only touches lines
//! its own core writes.
//!
//! Each core (by [`Ctx::core`](super::Ctx)) owns one cache-line-aligned block of relaxed
//! atomic counters; [`Counters::snapshot`] sums the blocks. A core index beyond the
//! configured number of cores wraps (modulo), which is correct, only slower: the counters
//! are atomic read-modify-writes, so two threads sharing a block lose nothing.
//! Gauges (`curr_items`, `bytes`) are not counters: the store computes them from its
//! shards.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};

/// One statistic counted by the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(super) enum Counter {
    TotalItems,
    Evictions,
    EvictedUnfetched,
    ExpiredUnfetched,
    Reclaimed,
    GetHits,
    GetMisses,
    GetExpired,
    GetFlushed,
    CmdSet,
    CmdTouch,
    CmdFlush,
    TouchHits,
    TouchMisses,
    DeleteHits,
    DeleteMisses,
    IncrHits,
    IncrMisses,
    DecrHits,
    DecrMisses,
    CasHits,
    CasMisses,
    CasBadval,
    OutOfMemory,
}

/// Number of [`Counter`]s.
const COUNTERS: usize = Counter::OutOfMemory as usize + 1;

/// One core's counters, alone on their cache lines.
#[repr(align(128))]
struct Block([AtomicU64; COUNTERS]);

/// Per-core counter blocks.
pub(super) struct Counters {
    blocks: Box<[Block]>,
}

impl Counters {
    /// Blocks for `cores` cores (at least one).
    pub(super) fn new(cores: usize) -> Self {
        Counters {
            blocks: (0..cores.max(1))
                .map(|_| Block(core::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Adds `n` to `counter` in `core`'s block.
    #[inline]
    pub(super) fn add(&self, core: usize, counter: Counter, n: u64) {
        // `blocks` is never empty, so the modulo is defined.
        let block = &self.blocks[core % self.blocks.len()];
        // Relaxed: counters order nothing; a snapshot is approximate by nature.
        block.0[counter as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one to `counter` in `core`'s block.
    #[inline]
    pub(super) fn bump(&self, core: usize, counter: Counter) {
        self.add(core, counter, 1);
    }

    /// The sum of `counter` over every core.
    pub(super) fn sum(&self, counter: Counter) -> u64 {
        self.blocks
            .iter()
            .map(|b| b.0[counter as usize].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

/// A snapshot of the store's statistics, named as memcached's `stats` names them.
///
/// Counters are sums of per-core relaxed counters: each is exact once the store is
/// quiet, and never torn, but two counters read while operations run may disagree by
/// the operations in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Items currently stored (including expired ones not yet removed).
    pub curr_items: u64,
    /// Items ever stored (successful set/add/replace/append/prepend/cas/incr/decr).
    pub total_items: u64,
    /// Bytes currently accounted to items (see [`ITEM_OVERHEAD`](super::ITEM_OVERHEAD)).
    pub bytes: u64,
    /// Live items removed to make room.
    pub evictions: u64,
    /// Evicted items that had never been fetched.
    pub evicted_unfetched: u64,
    /// Expired items removed (lazily, by a sweep or in place of an eviction) that had
    /// never been fetched.
    pub expired_unfetched: u64,
    /// Times an expired item's memory was taken back to make room instead of evicting
    /// a live one.
    pub reclaimed: u64,
    /// `get`/`gets` keys found.
    pub get_hits: u64,
    /// `get`/`gets` keys not found (including expired and flushed ones).
    pub get_misses: u64,
    /// Misses because the item had expired.
    pub get_expired: u64,
    /// Misses because the item had been invalidated by `flush_all`.
    pub get_flushed: u64,
    /// Keys looked up by `get`/`gets` (`gat` counts as a touch, as in memcached).
    pub cmd_get: u64,
    /// Storage commands (set/add/replace/append/prepend/cas), whatever their outcome.
    pub cmd_set: u64,
    /// `touch`/`gat` keys.
    pub cmd_touch: u64,
    /// `flush_all` commands.
    pub cmd_flush: u64,
    /// Keys touched.
    pub touch_hits: u64,
    /// Keys not found by a touch.
    pub touch_misses: u64,
    /// Deletes that removed an item.
    pub delete_hits: u64,
    /// Deletes of absent keys.
    pub delete_misses: u64,
    /// Increments of present keys.
    pub incr_hits: u64,
    /// Increments of absent keys.
    pub incr_misses: u64,
    /// Decrements of present keys.
    pub decr_hits: u64,
    /// Decrements of absent keys.
    pub decr_misses: u64,
    /// `cas` commands that stored.
    pub cas_hits: u64,
    /// `cas` commands on absent keys.
    pub cas_misses: u64,
    /// `cas` commands refused because the unique id differed.
    pub cas_badval: u64,
    /// Stores refused for lack of memory (memcached reports these per slab class as
    /// `outofmemory`).
    pub outofmemory: u64,
    /// The memory limit (`-m`), bytes.
    pub limit_maxbytes: u64,
}

impl Counters {
    /// Fills the counter fields of a snapshot; the caller fills the gauges.
    pub(super) fn snapshot(&self) -> Stats {
        use Counter as C;
        Stats {
            total_items: self.sum(C::TotalItems),
            evictions: self.sum(C::Evictions),
            evicted_unfetched: self.sum(C::EvictedUnfetched),
            expired_unfetched: self.sum(C::ExpiredUnfetched),
            reclaimed: self.sum(C::Reclaimed),
            get_hits: self.sum(C::GetHits),
            get_misses: self.sum(C::GetMisses),
            get_expired: self.sum(C::GetExpired),
            get_flushed: self.sum(C::GetFlushed),
            cmd_get: self.sum(C::GetHits).wrapping_add(self.sum(C::GetMisses)),
            cmd_set: self.sum(C::CmdSet),
            cmd_touch: self.sum(C::CmdTouch),
            cmd_flush: self.sum(C::CmdFlush),
            touch_hits: self.sum(C::TouchHits),
            touch_misses: self.sum(C::TouchMisses),
            delete_hits: self.sum(C::DeleteHits),
            delete_misses: self.sum(C::DeleteMisses),
            incr_hits: self.sum(C::IncrHits),
            incr_misses: self.sum(C::IncrMisses),
            decr_hits: self.sum(C::DecrHits),
            decr_misses: self.sum(C::DecrMisses),
            cas_hits: self.sum(C::CasHits),
            cas_misses: self.sum(C::CasMisses),
            cas_badval: self.sum(C::CasBadval),
            outofmemory: self.sum(C::OutOfMemory),
            ..Stats::default()
        }
    }
}
