//! The page allocator: a binary buddy allocator over one or more physical ranges.
//!
//! Blocks are `2^order` pages of [`PAGE_SIZE`] bytes, `order` in `0..=MAX_ORDER` (4 KiB up
//! to 4 MiB), always aligned to their own size. A free block is split in halves until it
//! has the order asked for; a freed block merges with its *buddy* — the block whose address
//! differs from it in exactly the bit `PAGE_SIZE << order` — whenever that buddy is free
//! and whole, and so on upwards. Free blocks are kept on one list per order, threaded
//! through the free memory itself; a metadata byte per page (carved from the start of each
//! region) says whether a page heads a free block, an allocated block, or neither, which is
//! what makes the buddy check and double-free detection exact. Adding a region writes those
//! metadata bytes and the free-list nodes of the small blocks at its unaligned edges; its
//! whole 4 MiB blocks are put on the list one at a time, only when no list can serve a
//! request, so a 4 MiB block the program never asks for is never written (the host may
//! back it lazily). Only the head page of each free block is written.
//!
//! One `PageAllocator` serves one NUMA node. It is the slow path under the per-core slab
//! caches, so a spin lock per node is enough. [`crate::ebbs`] wraps the per-node
//! allocators in a multicore Ebb whose representative on each core is its node's allocator.

mod buddy;
mod geometry;
mod stats;

pub use geometry::{MAX_BLOCK, MAX_ORDER, MAX_REGIONS, ORDERS, PAGE_SIZE, order_for};
pub use stats::PageStats;

use crate::error::{AllocError, FreeError, RegionError};
use buddy::BuddyState;
use core::fmt;
use core::ptr::NonNull;

/// A buddy allocator for one node's memory.
pub struct PageAllocator {
    state: spin::Mutex<BuddyState>,
}

impl Default for PageAllocator {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PageAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageAllocator")
            .field("stats", &self.stats())
            .finish()
    }
}

impl PageAllocator {
    /// An allocator with no memory yet; give it some with [`add_region`](Self::add_region).
    pub const fn new() -> Self {
        PageAllocator {
            state: spin::Mutex::new(BuddyState::new()),
        }
    }

    /// Hands the range `[start, start + len)` to the allocator for good. The range is cut to
    /// whole pages; its first pages hold the metadata (one byte per page). Returns how many
    /// pages became allocatable.
    ///
    /// # Safety
    ///
    /// 1. The range is valid for reads and writes, and nothing else uses it for as long as
    ///    the allocator and the blocks it hands out are in use.
    /// 2. `start` carries provenance over the whole range (it was not derived from a
    ///    pointer to a smaller object).
    pub unsafe fn add_region(&self, start: *mut u8, len: usize) -> Result<usize, RegionError> {
        // SAFETY: the caller's duties are exactly `BuddyState::add_region`'s.
        unsafe { self.state.lock().add_region(start, len) }
    }

    /// Allocates `2^order` contiguous pages, aligned to their size.
    pub fn alloc_pages(&self, order: usize) -> Result<PageBlock, AllocError> {
        let ptr = self.alloc_raw(order)?;
        Ok(PageBlock {
            ptr,
            order: order as u8,
        })
    }

    /// Returns a block to the allocator. Fails (and the block is dropped, leaked) only if
    /// the block came from another allocator.
    pub fn free_pages(&self, block: PageBlock) -> Result<(), FreeError> {
        // SAFETY: a `PageBlock` is the unique owner of its pages, and it is consumed here.
        unsafe { self.free_raw(block.ptr, block.order as usize) }
    }

    /// Counts of free and total pages, and free blocks per order.
    pub fn stats(&self) -> PageStats {
        self.state.lock().stats()
    }

    pub(crate) fn alloc_raw(&self, order: usize) -> Result<NonNull<u8>, AllocError> {
        if order > MAX_ORDER {
            return Err(AllocError::TooLarge {
                size: PAGE_SIZE.checked_shl(order as u32).unwrap_or(usize::MAX),
                align: PAGE_SIZE,
            });
        }
        self.state
            .lock()
            .alloc(order)
            .ok_or(AllocError::OutOfPages { order: order as u8 })
    }

    /// # Safety
    ///
    /// If the block is accepted, nothing may use its memory afterwards.
    pub(crate) unsafe fn free_raw(&self, ptr: NonNull<u8>, order: usize) -> Result<(), FreeError> {
        // SAFETY: forwarded caller duty.
        unsafe { self.state.lock().free(ptr, order) }
    }
}

/// An owned block of `2^order` pages from a [`PageAllocator`]. Dropping it leaks the pages;
/// give it back with [`PageAllocator::free_pages`].
#[must_use = "dropping a PageBlock leaks its pages"]
pub struct PageBlock {
    ptr: NonNull<u8>,
    order: u8,
}

// SAFETY: the block is uniquely owned memory; sending the owner sends the memory.
unsafe impl Send for PageBlock {}
// SAFETY: `&PageBlock` only exposes the address and order.
unsafe impl Sync for PageBlock {}

impl fmt::Debug for PageBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageBlock({:p}, order {})", self.ptr, self.order)
    }
}

impl PageBlock {
    /// Start of the block.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The block's order (it holds `2^order` pages).
    pub fn order(&self) -> usize {
        self.order as usize
    }

    /// Size of the block in bytes.
    pub fn len(&self) -> usize {
        PAGE_SIZE << self.order
    }

    /// Always false: a block holds at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Gives up ownership, returning the start address.
    pub fn into_raw(self) -> NonNull<u8> {
        self.ptr
    }

    /// Rebuilds a block from [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `ptr` and `order` come from one `into_raw` of a block of that order, and no other
    /// `PageBlock` for it exists.
    pub unsafe fn from_raw(ptr: NonNull<u8>, order: usize) -> Self {
        PageBlock {
            ptr,
            order: order as u8,
        }
    }
}

#[cfg(test)]
mod tests;
