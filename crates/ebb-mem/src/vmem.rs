//! Virtual address ranges.
//!
//! EbbRT's VMemAllocator hands out ranges of the virtual address space that are *not* the
//! identity map of physical memory: stacks with guard gaps, large buffers mapped on demand,
//! device and shared-ring windows, per-core areas. Its user then maps pages into the range
//! (natively, page tables are written by the monitor or at boot, since the guest runs in
//! ring 3 without a fault handler). This allocator only keeps the books: which ranges of one
//! window are free. It is first fit over free ranges ordered by address, coalescing on free,
//! and it refuses frees that are out of the window or overlap free space (double frees).
//!
//! It allocates its bookkeeping from the global allocator, so it is not used inside the
//! global allocator itself. It is not internally synchronized: wrap it in a lock (or give
//! each core its own window) to share it.

use alloc::collections::BTreeMap;
use core::ops::Range;

/// Why a virtual range request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VMemError {
    /// The window or granule given to `new` is invalid (empty, unaligned or overflowing,
    /// or a granule that is not a power of two).
    #[error("invalid window or granule")]
    InvalidWindow,
    /// The length is zero, or the alignment is not a power of two.
    #[error("invalid length or alignment")]
    InvalidRequest,
    /// No free range is large enough.
    #[error("no free range of {len:#x} bytes aligned to {align:#x}")]
    Exhausted {
        /// Requested length.
        len: usize,
        /// Requested alignment.
        align: usize,
    },
    /// The range is not (entirely) free, so it cannot be reserved.
    #[error("range {0:#x?} is not free")]
    NotFree(Range<usize>),
    /// The range is outside the window, unaligned, or overlaps free space.
    #[error("range {0:#x?} was not allocated")]
    NotAllocated(Range<usize>),
}

/// A first-fit allocator of ranges of one virtual window, in multiples of a granule.
#[derive(Clone, Debug)]
pub struct VMemAllocator {
    window: Range<usize>,
    granule: usize,
    /// Free ranges, start -> end, disjoint and never adjacent (they are coalesced).
    free: BTreeMap<usize, usize>,
}

impl VMemAllocator {
    /// An allocator over `window`, all free, handing out multiples of `granule` (a power
    /// of two; the window's bounds must be multiples of it).
    pub fn new(window: Range<usize>, granule: usize) -> Result<Self, VMemError> {
        let aligned = |a: usize| a.is_multiple_of(granule);
        if !granule.is_power_of_two()
            || window.start >= window.end
            || !aligned(window.start)
            || !aligned(window.end)
        {
            return Err(VMemError::InvalidWindow);
        }
        let mut free = BTreeMap::new();
        free.insert(window.start, window.end);
        Ok(VMemAllocator {
            window,
            granule,
            free,
        })
    }

    /// The lowest free range of `len` bytes (rounded up to the granule) aligned to `align`
    /// (at least the granule).
    pub fn alloc(&mut self, len: usize, align: usize) -> Result<Range<usize>, VMemError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(VMemError::InvalidRequest);
        }
        let exhausted = VMemError::Exhausted { len, align };
        let len = len
            .checked_next_multiple_of(self.granule)
            .ok_or(exhausted.clone())?;
        let align = align.max(self.granule);
        let found = self.free.iter().find_map(|(&start, &end)| {
            let at = start.checked_next_multiple_of(align)?;
            let stop = at.checked_add(len)?;
            (stop <= end).then_some(at..stop)
        });
        let range = found.ok_or(exhausted)?;
        self.take(range.clone());
        Ok(range)
    }

    /// Marks a specific range as used (e.g. what the boot image already occupies).
    pub fn reserve(&mut self, range: Range<usize>) -> Result<(), VMemError> {
        let granular =
            range.start.is_multiple_of(self.granule) && range.end.is_multiple_of(self.granule);
        let inside_free = self
            .free
            .range(..=range.start)
            .next_back()
            .is_some_and(|(_, &end)| range.end <= end);
        if range.is_empty() || !granular || !inside_free {
            return Err(VMemError::NotFree(range));
        }
        self.take(range);
        Ok(())
    }

    /// Returns a range from [`alloc`](Self::alloc) or [`reserve`](Self::reserve) (or any
    /// used, granule-aligned part of the window), merging it with free neighbours.
    pub fn free(&mut self, range: Range<usize>) -> Result<(), VMemError> {
        let bad = || VMemError::NotAllocated(range.clone());
        let granular =
            range.start.is_multiple_of(self.granule) && range.end.is_multiple_of(self.granule);
        if range.is_empty()
            || !granular
            || range.start < self.window.start
            || range.end > self.window.end
        {
            return Err(bad());
        }
        let before = self
            .free
            .range(..range.end)
            .next_back()
            .map(|(&s, &e)| (s, e));
        if before.is_some_and(|(_, end)| end > range.start) {
            return Err(bad()); // overlaps a free range: not allocated
        }
        let (mut start, mut end) = (range.start, range.end);
        if let Some((s, e)) = before.filter(|&(_, e)| e == range.start) {
            self.free.remove(&s);
            debug_assert_eq!(e, range.start);
            start = s;
        }
        if let Some(e) = self.free.remove(&range.end) {
            end = e;
        }
        self.free.insert(start, end);
        Ok(())
    }

    /// Bytes free in the window.
    pub fn free_bytes(&self) -> usize {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// The longest free range.
    pub fn largest_free(&self) -> usize {
        self.free.iter().map(|(s, e)| e - s).max().unwrap_or(0)
    }

    /// The free ranges, lowest first.
    pub fn free_ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.free.iter().map(|(&s, &e)| s..e)
    }

    /// Removes `range`, which lies inside one free range, from the free set.
    fn take(&mut self, range: Range<usize>) {
        let Some((&start, &end)) = self.free.range(..=range.start).next_back() else {
            return;
        };
        debug_assert!(start <= range.start && range.end <= end);
        self.free.remove(&start);
        if start < range.start {
            self.free.insert(start, range.start);
        }
        if range.end < end {
            self.free.insert(range.end, end);
        }
    }
}

#[cfg(test)]
mod tests;
