//! Where a general-purpose allocator gets memory beyond what it was given at start.
//!
//! A native image is given its memory once, from the boot-info memory map, and never grows
//! ([`FixedMemory`]). A hosted process asks Linux for more as it goes
//! ([`MmapSource`](crate::MmapSource), feature `std`).

use core::alloc::Layout;
use core::ptr::NonNull;

/// A supplier of fresh memory regions and of blocks too large for the page allocator.
///
/// # Safety
///
/// Implementors promise that every region returned by [`grow`](Self::grow) and every block
/// returned by [`alloc_huge`](Self::alloc_huge) is valid for reads and writes, is used by
/// nothing else, and stays valid for the life of the process (regions) or until passed to
/// [`free_huge`](Self::free_huge) (huge blocks); and that the pointers carry provenance over
/// the whole range.
pub unsafe trait PageSource: Sync {
    /// A new region of at least `min_bytes` bytes for the page allocator, as
    /// `(start, len)`, or `None` when no more memory can be had.
    fn grow(&self, min_bytes: usize) -> Option<(NonNull<u8>, usize)>;

    /// A block for a request larger than the page allocator's largest block, or `None`.
    fn alloc_huge(&self, layout: Layout) -> Option<NonNull<u8>> {
        let _ = layout;
        None
    }

    /// Returns a block from [`alloc_huge`](Self::alloc_huge).
    ///
    /// # Safety
    ///
    /// `ptr` came from `alloc_huge(layout)` on this source and nothing uses it any more.
    unsafe fn free_huge(&self, ptr: NonNull<u8>, layout: Layout) {
        let _ = (ptr, layout);
    }
}

/// A source that never grows: the allocator has only the regions added to it (the native
/// case, and tests of exhaustion).
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedMemory;

// SAFETY: it never returns memory.
unsafe impl PageSource for FixedMemory {
    fn grow(&self, _min_bytes: usize) -> Option<(NonNull<u8>, usize)> {
        None
    }
}
