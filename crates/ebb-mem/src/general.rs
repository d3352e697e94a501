//! The general-purpose allocator: size classes over per-core slabs, larger requests straight
//! from the page allocator, and the rare giant one from the [`PageSource`].
//!
//! | request (size, align)                      | served by                               |
//! |--------------------------------------------|-----------------------------------------|
//! | size ≤ 2048 and align ≤ 64                  | the smallest [`SIZE_CLASSES`] entry that fits and is aligned enough, from the calling core's slab cache |
//! | up to 4 MiB (`MAX_BLOCK`)                  | a buddy block of the smallest order holding `max(size, align)` |
//! | larger                                     | [`PageSource::alloc_huge`] (hosted: its own mapping) |
//!
//! The route is a pure function of the layout, so `dealloc` finds the same allocator
//! `alloc` used without any per-object header. When the page allocator runs dry it asks
//! the source for another region (one grower at a time). A failed request is a value
//! ([`AllocError`]) for [`try_alloc`](GeneralPurposeAllocator::try_alloc) callers and a
//! null pointer for [`GlobalAlloc`] users; it is remembered so that the out-of-memory
//! report ([`report`](GeneralPurposeAllocator::report)) can say what was asked for and
//! what was free.

use crate::error::{AllocError, RegionError};
use crate::page::{MAX_BLOCK, PAGE_SIZE, PageAllocator, PageStats, order_for};
use crate::slab::{ClassParams, CoreSlots, MAX_SLAB_ALIGN, PageProvider};
use crate::source::{FixedMemory, PageSource};
use core::alloc::{GlobalAlloc, Layout};
use core::fmt;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Object sizes served from slabs. Each class is aligned to the largest power of two
/// dividing its size, capped at 64.
pub const SIZE_CLASSES: [usize; NCLASSES] = [
    8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
    1024, 1280, 1536, 1792, 2048,
];
const NCLASSES: usize = 26;
/// Largest size served from slabs.
pub const MAX_SMALL: usize = SIZE_CLASSES[NCLASSES - 1];

static CLASS_PARAMS: [ClassParams; NCLASSES] = {
    let mut params = [ClassParams::new(8, 0); NCLASSES];
    let mut i = 0;
    while i < NCLASSES {
        params[i] = ClassParams::new(SIZE_CLASSES[i], i as u16);
        i += 1;
    }
    params
};

/// `CLASS_OF[ceil(size / 8)]` is the smallest class holding `size` bytes.
static CLASS_OF: [u8; MAX_SMALL / 8 + 1] = {
    let mut table = [0u8; MAX_SMALL / 8 + 1];
    let (mut i, mut class) = (0, 0);
    while i < table.len() {
        while SIZE_CLASSES[class] < i * 8 {
            class += 1;
        }
        table[i] = class as u8;
        i += 1;
    }
    table
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Slab(usize),
    Pages(usize),
    Huge,
}

#[inline(always)]
fn route(layout: Layout) -> Route {
    let (size, align) = (layout.size(), layout.align());
    if size <= MAX_SMALL && align <= MAX_SLAB_ALIGN {
        // Cannot overflow: size ≤ 2048 and align ≤ 64. `Layout` guarantees a power-of-two
        // align, so a mask rounds up (`next_multiple_of` compiles to a `div` here).
        let rounded = (size + align - 1) & !(align - 1);
        let mut class = CLASS_OF[rounded.div_ceil(8)] as usize;
        while class < NCLASSES {
            if CLASS_PARAMS[class].align >= align {
                return Route::Slab(class);
            }
            class += 1;
        }
    }
    match order_for(size.max(align)) {
        Some(order) => Route::Pages(order),
        None => Route::Huge,
    }
}

/// The bytes a [`GeneralPurposeAllocator`] really takes to serve `layout`: its size
/// class, its buddy block, or (giant requests) the size in whole pages. For callers that
/// account memory by what it costs, not by what they asked for (a 600 KiB request takes
/// a 1 MiB block).
pub fn allocation_size(layout: Layout) -> usize {
    match route(layout) {
        Route::Slab(class) => SIZE_CLASSES[class],
        Route::Pages(order) => PAGE_SIZE << order,
        Route::Huge => layout.size().next_multiple_of(PAGE_SIZE),
    }
}

/// A general-purpose allocator: EbbRT's GP allocator Ebb, usable as `#[global_allocator]`.
///
/// `S` supplies memory beyond the regions added with [`add_region`](Self::add_region):
/// [`FixedMemory`] for none (native), `MmapSource` to grow from Linux (hosted).
///
/// ```ignore
/// #[global_allocator]
/// static GLOBAL: ebb_mem::GeneralPurposeAllocator<ebb_mem::MmapSource> =
///     ebb_mem::GeneralPurposeAllocator::new(ebb_mem::MmapSource::new());
/// ```
pub struct GeneralPurposeAllocator<S: PageSource = FixedMemory> {
    pages: PageAllocator,
    source: S,
    grow_lock: spin::Mutex<()>,
    cores: CoreSlots<NCLASSES>,
    large_pages: AtomicUsize,
    huge_bytes: AtomicUsize,
    failures: AtomicUsize,
    failed_size: AtomicUsize,
    failed_align: AtomicUsize,
}

impl<S: PageSource> fmt::Debug for GeneralPurposeAllocator<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeneralPurposeAllocator")
            .field("report", &self.report(None))
            .finish()
    }
}

impl<S: PageSource> GeneralPurposeAllocator<S> {
    /// An allocator that takes all its memory from `source` (and from any region added).
    pub const fn new(source: S) -> Self {
        GeneralPurposeAllocator {
            pages: PageAllocator::new(),
            source,
            grow_lock: spin::Mutex::new(()),
            cores: CoreSlots::new(),
            large_pages: AtomicUsize::new(0),
            huge_bytes: AtomicUsize::new(0),
            failures: AtomicUsize::new(0),
            failed_size: AtomicUsize::new(0),
            failed_align: AtomicUsize::new(0),
        }
    }

    /// Gives the allocator a range of memory (the native boot memory map, or a test arena).
    ///
    /// # Safety
    ///
    /// As [`PageAllocator::add_region`].
    pub unsafe fn add_region(&self, start: *mut u8, len: usize) -> Result<usize, RegionError> {
        // SAFETY: forwarded caller duties.
        unsafe { self.pages.add_region(start, len) }
    }

    /// The page allocator underneath (for diagnostics, or to take whole pages).
    pub fn page_allocator(&self) -> &PageAllocator {
        &self.pages
    }

    /// Allocates memory for `layout` (uninitialized). A zero size is served as one byte.
    #[inline]
    pub fn try_alloc(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match route(layout) {
            Route::Slab(class) => self.cores.alloc(&CLASS_PARAMS[class], self),
            Route::Pages(order) => self.alloc_large(order),
            Route::Huge => self.alloc_huge(layout),
        }
    }

    /// Frees memory from [`try_alloc`](Self::try_alloc), on any core.
    ///
    /// # Safety
    ///
    /// 1. `ptr` came from this allocator for exactly `layout` (or was last resized to it)
    ///    and was not freed since.
    /// 2. Nothing uses the memory afterwards.
    #[inline]
    pub unsafe fn free(&self, ptr: NonNull<u8>, layout: Layout) {
        match route(layout) {
            Route::Slab(class) => {
                // SAFETY: the route is a function of the layout, so `ptr` came from this
                // class's slabs (duty 1); the caller gives it up (duty 2).
                unsafe { self.cores.free(&CLASS_PARAMS[class], self, ptr) }
            }
            Route::Pages(order) => {
                self.large_pages.fetch_sub(1 << order, Ordering::Relaxed);
                // SAFETY: as above, `ptr` is a block of `order` from `alloc_pages`.
                unsafe { PageProvider::free_pages(self, ptr, order) }
            }
            Route::Huge => {
                self.huge_bytes.fetch_sub(layout.size(), Ordering::Relaxed);
                // SAFETY: as above, `ptr` came from `alloc_huge(layout)`.
                unsafe { self.source.free_huge(ptr, layout) }
            }
        }
    }

    /// Resizes an allocation to `new_size` bytes (same alignment), in place when the new
    /// size is served by the same class or block order, otherwise by moving it. On error
    /// the old allocation is untouched.
    ///
    /// # Safety
    ///
    /// As [`free`](Self::free) for `ptr` and `layout`; on success the old pointer must not
    /// be used any more.
    pub unsafe fn try_realloc(
        &self,
        ptr: NonNull<u8>,
        layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = Layout::from_size_align(new_size, layout.align()).map_err(|_| {
            AllocError::TooLarge {
                size: new_size,
                align: layout.align(),
            }
        })?;
        let old_route = route(layout);
        if old_route == route(new_layout) && old_route != Route::Huge {
            return Ok(ptr);
        }
        let new = self.try_alloc(new_layout)?;
        // SAFETY: the old block is live and holds `layout.size()` bytes (caller), the new
        // one is fresh and holds `new_size`; they are distinct allocations. Then the old one
        // is freed with its own layout, as the caller allows.
        unsafe {
            ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), layout.size().min(new_size));
            self.free(ptr, layout);
        }
        Ok(new)
    }

    /// Gives the calling core's unused slabs (all classes) back to the page allocator.
    pub fn trim(&self) {
        for params in &CLASS_PARAMS {
            self.cores.trim(params, self);
        }
    }

    /// What is in use and what is free, and the last request that failed (or `requested`
    /// if given): the body of an out-of-memory report.
    pub fn report(&self, requested: Option<Layout>) -> MemReport {
        let slab_bytes = CLASS_PARAMS
            .iter()
            .map(|p| self.cores.live_slabs(p.index as usize) * p.slab_bytes())
            .sum();
        MemReport {
            requested: requested.or_else(|| self.last_failure()),
            failures: self.failures.load(Ordering::Relaxed),
            pages: self.pages.stats(),
            slab_bytes,
            large_bytes: self.large_pages.load(Ordering::Relaxed) * PAGE_SIZE,
            huge_bytes: self.huge_bytes.load(Ordering::Relaxed),
        }
    }

    /// The last layout a `GlobalAlloc` call failed to serve.
    pub fn last_failure(&self) -> Option<Layout> {
        if self.failures.load(Ordering::Acquire) == 0 {
            return None;
        }
        let size = self.failed_size.load(Ordering::Relaxed);
        let align = self.failed_align.load(Ordering::Relaxed);
        Layout::from_size_align(size, align).ok()
    }

    #[cold]
    fn record_failure(&self, layout: Layout) {
        self.failed_size.store(layout.size(), Ordering::Relaxed);
        self.failed_align.store(layout.align(), Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Release);
    }

    fn alloc_large(&self, order: usize) -> Result<NonNull<u8>, AllocError> {
        let block = self.alloc_pages(order)?;
        self.large_pages.fetch_add(1 << order, Ordering::Relaxed);
        Ok(block)
    }

    #[cold]
    fn alloc_huge(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let block = self
            .source
            .alloc_huge(layout)
            .ok_or(AllocError::too_large(layout))?;
        self.huge_bytes.fetch_add(layout.size(), Ordering::Relaxed);
        Ok(block)
    }

    /// Asks the source for a region holding a block of `order`, then allocates from it.
    #[cold]
    fn grow_and_alloc(&self, order: usize) -> Result<NonNull<u8>, AllocError> {
        let _one_grower = self.grow_lock.lock();
        if let Ok(block) = self.pages.alloc_raw(order) {
            return Ok(block); // another core grew the allocator meanwhile
        }
        // Twice the block: the region's first pages hold metadata, and alignment may cost.
        let want = (PAGE_SIZE << order).max(MAX_BLOCK) * 2;
        let (start, len) = self
            .source
            .grow(want)
            .ok_or(AllocError::OutOfPages { order: order as u8 })?;
        // SAFETY: `PageSource`'s contract: the region is valid, unused by anything else,
        // lives for good and carries provenance over its length.
        unsafe { self.pages.add_region(start.as_ptr(), len) }
            .map_err(|_| AllocError::OutOfPages { order: order as u8 })?;
        self.pages.alloc_raw(order)
    }
}

impl<S: PageSource> PageProvider for GeneralPurposeAllocator<S> {
    #[inline]
    fn alloc_pages(&self, order: usize) -> Result<NonNull<u8>, AllocError> {
        match self.pages.alloc_raw(order) {
            Err(AllocError::OutOfPages { .. }) => self.grow_and_alloc(order),
            result => result,
        }
    }

    unsafe fn free_pages(&self, ptr: NonNull<u8>, order: usize) {
        // SAFETY: forwarded caller duty.
        unsafe { PageProvider::free_pages(&self.pages, ptr, order) }
    }
}

// SAFETY: `alloc` returns null or a fresh block of at least `layout.size()` bytes aligned to
// `layout.align()` (slab classes are chosen for alignment, buddy blocks are aligned to their
// size ≥ align, huge blocks are mapped aligned); blocks stay valid until `dealloc`, which
// routes by layout to the allocator that served them. Nothing here panics or unwinds.
unsafe impl<S: PageSource> GlobalAlloc for GeneralPurposeAllocator<S> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.try_alloc(layout) {
            Ok(block) => block.as_ptr(),
            Err(_) => {
                self.record_failure(layout);
                ptr::null_mut()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(ptr) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc::dealloc`'s contract is `free`'s.
            unsafe { self.free(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(old) = NonNull::new(ptr) else {
            return ptr::null_mut();
        };
        // SAFETY: `GlobalAlloc::realloc`'s contract is `try_realloc`'s.
        match unsafe { self.try_realloc(old, layout, new_size) } {
            Ok(block) => block.as_ptr(),
            Err(_) => {
                if let Ok(layout) = Layout::from_size_align(new_size, layout.align()) {
                    self.record_failure(layout);
                }
                ptr::null_mut()
            }
        }
    }
}

/// What a general-purpose allocator holds: the body of an out-of-memory report.
#[derive(Clone, Copy, Debug)]
pub struct MemReport {
    /// The request that could not be served, if any.
    pub requested: Option<Layout>,
    /// How many `GlobalAlloc` requests have failed.
    pub failures: usize,
    /// The page allocator's occupancy.
    pub pages: PageStats,
    /// Bytes of slabs taken from the page allocator (used or cached by cores).
    pub slab_bytes: usize,
    /// Bytes of buddy blocks handed out for large requests.
    pub large_bytes: usize,
    /// Bytes of huge requests served by the page source.
    pub huge_bytes: usize,
}

impl fmt::Display for MemReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(layout) = self.requested {
            write!(
                f,
                "out of memory: requested {} bytes (align {}); ",
                layout.size(),
                layout.align()
            )?;
        }
        write!(
            f,
            "{}; slabs {} KiB, large blocks {} KiB, huge {} KiB; {} failed request(s)",
            self.pages,
            self.slab_bytes / 1024,
            self.large_bytes / 1024,
            self.huge_bytes / 1024,
            self.failures
        )
    }
}

#[cfg(test)]
mod tests;
