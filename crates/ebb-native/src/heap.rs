//! The guest's global allocator: ebb-mem's [`GeneralPurposeAllocator`] (per-core slab
//! caches with remote-free lists over a buddy page allocator) fed with every
//! [`MemKind::Usable`] region of the boot memory map — and only those: the shared window
//! ([`MemKind::Shared`], see [`crate::window`]) belongs to the guest and the host together.
//!
//! The regions are handed over on the first allocation, from whichever core allocates
//! first (a `spin::Once`, so concurrent first allocations wait for it). Allocation failure
//! returns null, Rust's allocation-error handler then panics, and the monitor reports the
//! panic; [`report`] describes what was requested and what is free.

use crate::abi::MemKind;
use crate::entry::boot_info;
use core::alloc::{GlobalAlloc, Layout};
use ebb_mem::{FixedMemory, GeneralPurposeAllocator, MemReport};

/// The allocator; the image's `#[global_allocator]` when the `global-allocator` feature is on.
#[derive(Debug)]
pub struct Heap {
    gpa: GeneralPurposeAllocator<FixedMemory>,
    /// Bytes of usable memory handed to the allocator, once it has been.
    regions: spin::Once<usize>,
}

impl Heap {
    /// An allocator that takes the boot memory map on first use.
    pub const fn new() -> Heap {
        Heap {
            gpa: GeneralPurposeAllocator::new(FixedMemory),
            regions: spin::Once::new(),
        }
    }

    fn ready(&self) -> &GeneralPurposeAllocator<FixedMemory> {
        self.regions.call_once(|| {
            let info = boot_info();
            let count = (info.region_count as usize).min(info.regions.len());
            let mut added = 0;
            for region in info.regions[..count]
                .iter()
                .filter(|r| r.kind == MemKind::Usable as u32)
            {
                // Soundness: the monitor reports this range as usable guest memory that
                // nothing else uses (the image, stacks, per-core blocks and rings are other
                // kinds), identity-mapped and writable, for the whole run; it is handed to
                // the allocator exactly once (under this `Once`).
                // SAFETY: by the argument just above.
                let result = unsafe {
                    self.gpa
                        .add_region(region.start as *mut u8, region.len as usize)
                };
                if let Ok(bytes) = result {
                    added += bytes;
                }
            }
            added
        });
        &self.gpa
    }

    /// Bytes in free pages (one lock of the page allocator; slabs' free objects are
    /// not counted).
    pub fn free_page_bytes(&self) -> usize {
        self.ready().page_allocator().stats().free_pages * ebb_mem::PAGE_SIZE
    }

    /// What the allocator holds (and the last failed request, if any).
    pub fn report(&self) -> MemReport {
        self.ready().report(self.gpa.last_failure())
    }
}

impl Default for Heap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: forwards to `GeneralPurposeAllocator`'s `GlobalAlloc`, which upholds the contract,
// after the one-time hand-over of the boot memory map.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's duties are forwarded unchanged.
        unsafe { self.ready().alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's duties are forwarded unchanged.
        unsafe { self.ready().dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's duties are forwarded unchanged.
        unsafe { self.ready().realloc(ptr, layout, new_size) }
    }
}

/// The image's global allocator.
#[cfg(feature = "global-allocator")]
#[global_allocator]
pub static HEAP: Heap = Heap::new();

/// What the global allocator holds.
#[cfg(feature = "global-allocator")]
pub fn report() -> MemReport {
    HEAP.report()
}

/// Bytes in the global allocator's free pages.
#[cfg(feature = "global-allocator")]
pub fn free_page_bytes() -> usize {
    HEAP.free_page_bytes()
}
