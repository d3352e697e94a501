//! Size classes: what `stats slabs` and `stats items` report per class.
//!
//! memcached keeps items in slab classes (chunks growing by `-f 1.25` from 96 bytes) and
//! counts per class. This store has no slabs of its own: an item is several allocations
//! (see the store's "Memory limit"), each rounded by ebb-mem's allocator — its size
//! classes up to 2 KiB, then buddy blocks of 4 KiB to 4 MiB. Those rounding steps are
//! our classes: an item belongs to the smallest class at least as large as the bytes it
//! is accounted ([`Item::size`](super::item::Item)), so a class groups items of similar
//! footprint as memcached's do. Beyond the largest block, classes double (a 1 GiB `-I`
//! fits in [`MAX_CLASSES`]).
//!
//! Per class the store counts what memcached counts per class ([`ClassCounter`]) in
//! per-core blocks like the global counters; the gauges (items, bytes, oldest item) are
//! found by walking the shards when `stats` asks ([`Store::class_stats`](super::Store)).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The most classes: ids 1 to `MAX_CLASSES - 1` (memcached's `MAX_NUMBER_OF_SLAB_CLASSES`
/// is 64 with id 0 unused, as here).
pub const MAX_CLASSES: usize = 64;

/// The largest buddy block of ebb-mem's page allocator; larger classes double.
const LARGEST_BLOCK: usize = 4 << 20;

/// The chunk size of each class, by id (index 0 unused, 0): ebb-mem's rounding steps.
pub(super) fn chunk_sizes() -> Box<[usize]> {
    let mut sizes = Vec::with_capacity(MAX_CLASSES);
    sizes.push(0);
    let mut size = 1;
    while sizes.len() < MAX_CLASSES {
        let chunk = if size <= LARGEST_BLOCK {
            super::allocation_size(size)
        } else {
            size.next_power_of_two()
        };
        sizes.push(chunk);
        size = chunk + 1;
    }
    sizes.into_boxed_slice()
}

/// The id of the class of an item accounted `size` bytes in `chunk_sizes`: the smallest
/// whose chunk holds it, or the last.
pub(super) fn class_of(chunk_sizes: &[usize], size: usize) -> u8 {
    let id = chunk_sizes.partition_point(|&chunk| chunk < size);
    id.clamp(1, chunk_sizes.len() - 1) as u8
}

/// What the store counts per class (memcached's `slab_stats` and `itemstats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ClassCounter {
    /// `get` hits on items of the class.
    GetHits,
    /// Items of the class written by storage commands.
    CmdSet,
    /// Deletes that removed an item of the class.
    DeleteHits,
    /// Increments of items of the class.
    IncrHits,
    /// Decrements of items of the class.
    DecrHits,
    /// `cas` that replaced an item of the class.
    CasHits,
    /// `cas` refused on an item of the class (its id differed).
    CasBadval,
    /// Touches of items of the class.
    TouchHits,
    /// Live items of the class evicted.
    Evicted,
    /// Of those, items that had an expiry time.
    EvictedNonzero,
    /// Evicted items of the class never fetched.
    EvictedUnfetched,
    /// Expired items of the class taken to make room or replaced.
    Reclaimed,
    /// Expired items of the class removed never fetched.
    ExpiredUnfetched,
    /// Stores refused for lack of memory, by the class of the item refused.
    OutOfMemory,
}

/// Number of [`ClassCounter`]s.
pub const CLASS_COUNTERS: usize = ClassCounter::OutOfMemory as usize + 1;

/// Every [`ClassCounter`], in the order of their values.
pub const CLASS_COUNTER_ORDER: [ClassCounter; CLASS_COUNTERS] = {
    use ClassCounter as C;
    [
        C::GetHits,
        C::CmdSet,
        C::DeleteHits,
        C::IncrHits,
        C::DecrHits,
        C::CasHits,
        C::CasBadval,
        C::TouchHits,
        C::Evicted,
        C::EvictedNonzero,
        C::EvictedUnfetched,
        C::Reclaimed,
        C::ExpiredUnfetched,
        C::OutOfMemory,
    ]
};
const _: () = {
    let mut i = 0;
    while i < CLASS_COUNTERS {
        assert!(CLASS_COUNTER_ORDER[i] as usize == i);
        i += 1;
    }
};

/// Per-core blocks of per-class counters, and the per-class `evicted_time`.
pub(super) struct ClassCounters {
    /// One block per core, `MAX_CLASSES * CLASS_COUNTERS` counters each.
    blocks: Box<[Box<[AtomicU64]>]>,
    /// Per class: the age (seconds since stored) of the last item evicted.
    evicted_time: Box<[AtomicU32]>,
}

impl ClassCounters {
    /// Blocks for `cores` cores (at least one).
    pub(super) fn new(cores: usize) -> Self {
        ClassCounters {
            blocks: (0..cores.max(1))
                .map(|_| {
                    (0..MAX_CLASSES * CLASS_COUNTERS)
                        .map(|_| AtomicU64::new(0))
                        .collect()
                })
                .collect(),
            evicted_time: (0..MAX_CLASSES).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Adds one to `counter` of class `class` in `core`'s block.
    #[inline]
    pub(super) fn bump(&self, core: usize, class: u8, counter: ClassCounter) {
        // `blocks` is never empty; a class id is below MAX_CLASSES by `class_of`.
        let block = &self.blocks[core % self.blocks.len()];
        let at = usize::from(class) % MAX_CLASSES * CLASS_COUNTERS + counter as usize;
        // Relaxed: counters order nothing.
        if let Some(c) = block.get(at) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records the age of an item of `class` just evicted.
    pub(super) fn set_evicted_time(&self, class: u8, age: u32) {
        if let Some(t) = self.evicted_time.get(usize::from(class)) {
            t.store(age, Ordering::Relaxed);
        }
    }

    /// `counter` of `class`, summed over every core.
    pub(super) fn sum(&self, class: u8, counter: ClassCounter) -> u64 {
        let at = usize::from(class) % MAX_CLASSES * CLASS_COUNTERS + counter as usize;
        self.blocks
            .iter()
            .filter_map(|b| b.get(at))
            .map(|c| c.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// The age of the last item of `class` evicted.
    pub(super) fn evicted_time(&self, class: u8) -> u32 {
        self.evicted_time
            .get(usize::from(class))
            .map_or(0, |t| t.load(Ordering::Relaxed))
    }
}

/// One class as `stats slabs` and `stats items` report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// The class id (1-based, as memcached's).
    pub id: u8,
    /// Its chunk size: the largest accounted item size it holds.
    pub chunk_size: usize,
    /// Items of the class linked now.
    pub items: u64,
    /// Bytes they are accounted (memcached's `mem_requested`).
    pub bytes: u64,
    /// Seconds since the oldest of them was stored (memcached's `age`: the LRU tail's).
    pub age: u32,
    /// The counters, by [`ClassCounter`].
    pub counters: [u64; CLASS_COUNTERS],
    /// The age of the last item of the class evicted.
    pub evicted_time: u32,
}

impl ClassStats {
    /// One of the counters.
    pub fn get(&self, counter: ClassCounter) -> u64 {
        self.counters[counter as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_the_allocators_steps_then_doubling() {
        let sizes = chunk_sizes();
        assert_eq!(sizes.len(), MAX_CLASSES);
        assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
        assert!(sizes.contains(&2048) && sizes.contains(&4096) && sizes.contains(&LARGEST_BLOCK));
        assert!(
            *sizes.last().unwrap() >= 1 << 30,
            "a 1 GiB -I fits: {sizes:?}"
        );
        for size in [1, 100, 2048, 2049, 5000, 1 << 20, (1 << 20) + 1, 1 << 30] {
            let id = usize::from(class_of(&sizes, size));
            assert!(sizes[id] >= size && sizes[id - 1] < size, "{size} in {id}");
        }
        assert_eq!(usize::from(class_of(&sizes, usize::MAX)), MAX_CLASSES - 1);
    }

    #[test]
    fn class_counters_sum_over_cores() {
        let c = ClassCounters::new(2);
        c.bump(0, 3, ClassCounter::GetHits);
        c.bump(1, 3, ClassCounter::GetHits);
        c.bump(1, 4, ClassCounter::CmdSet);
        assert_eq!(c.sum(3, ClassCounter::GetHits), 2);
        assert_eq!(c.sum(4, ClassCounter::GetHits), 0);
        assert_eq!(c.sum(4, ClassCounter::CmdSet), 1);
        c.set_evicted_time(4, 9);
        assert_eq!(c.evicted_time(4), 9);
    }
}
