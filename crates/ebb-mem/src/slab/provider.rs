//! [`PageProvider`]: where slabs come from.

use crate::error::AllocError;
use crate::page::PageAllocator;
use core::ptr::NonNull;

/// Where slabs come from (the page allocator, possibly growing it).
pub(crate) trait PageProvider {
    fn alloc_pages(&self, order: usize) -> Result<NonNull<u8>, AllocError>;
    /// # Safety
    ///
    /// `ptr` is a block of `order` from `alloc_pages` that nothing uses any more.
    unsafe fn free_pages(&self, ptr: NonNull<u8>, order: usize);
}

impl PageProvider for PageAllocator {
    fn alloc_pages(&self, order: usize) -> Result<NonNull<u8>, AllocError> {
        self.alloc_raw(order)
    }

    unsafe fn free_pages(&self, ptr: NonNull<u8>, order: usize) {
        // SAFETY: forwarded caller duty. A refused block (impossible for a block we
        // allocated) would only be leaked.
        let result = unsafe { self.free_raw(ptr, order) };
        debug_assert!(result.is_ok(), "slab block refused: {result:?}");
    }
}
