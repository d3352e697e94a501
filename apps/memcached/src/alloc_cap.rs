//! A global allocator that refuses every allocation larger than a cap: the hosted
//! server's `--fail-allocations-over BYTES`, a check that no request makes a large
//! allocation it cannot survive losing. A fallible one is refused and answered (`out of
//! memory`); an infallible one would abort the process, which the test that sets the cap
//! (`tests/alloc_failures.rs`) would see. Hosted only: natively the allocator is the
//! image's.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// `A`, refusing any allocation larger than [`Capped::set_cap`] said (none, until then).
#[derive(Debug)]
pub struct Capped<A> {
    inner: A,
    cap: AtomicUsize,
}

impl<A> Capped<A> {
    /// `inner` without a cap.
    pub const fn new(inner: A) -> Self {
        Capped {
            inner,
            cap: AtomicUsize::new(usize::MAX),
        }
    }

    /// From now on, allocations larger than `bytes` fail.
    pub fn set_cap(&self, bytes: usize) {
        self.cap.store(bytes, Ordering::Relaxed);
    }

    fn refuses(&self, size: usize) -> bool {
        size > self.cap.load(Ordering::Relaxed)
    }
}

// SAFETY: every call is forwarded to `inner`, a `GlobalAlloc`, with the caller's own
// arguments, or answered with null, which the contract allows for `alloc` and `realloc`
// (a null `realloc` leaves the old block as it was).
unsafe impl<A: GlobalAlloc> GlobalAlloc for Capped<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.refuses(layout.size()) {
            return core::ptr::null_mut();
        }
        // SAFETY: the caller's duties, forwarded.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's duties, forwarded (the block came from `inner`).
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.refuses(new_size) {
            return core::ptr::null_mut();
        }
        // SAFETY: the caller's duties, forwarded.
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}
