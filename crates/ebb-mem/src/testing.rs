//! Test helpers: aligned arenas standing in for physical memory, and a model of live
//! allocations to check allocators against.

use std::alloc::{Layout, alloc, dealloc};
use std::vec::Vec;

/// A block of host memory, aligned to the largest buddy block, freed on drop.
pub(crate) struct Arena {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the arena is plain owned memory.
unsafe impl Send for Arena {}
// SAFETY: `&Arena` only exposes the address and length.
unsafe impl Sync for Arena {}

impl Arena {
    pub(crate) fn new(len: usize) -> Arena {
        Self::with_align(len, crate::MAX_BLOCK)
    }

    pub(crate) fn with_align(len: usize, align: usize) -> Arena {
        let layout = Layout::from_size_align(len, align).unwrap();
        // SAFETY: the layout has a non-zero size (tests never ask for zero).
        let ptr = unsafe { alloc(layout) };
        assert!(!ptr.is_null());
        Arena { ptr, layout }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never frees the memory (for allocators that live for the whole process).
    pub(crate) fn leak(self) -> *mut u8 {
        let ptr = self.ptr;
        core::mem::forget(self);
        ptr
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_align` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// A live allocation in the model: where, how big, and the byte pattern written into it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Live {
    pub(crate) addr: usize,
    pub(crate) len: usize,
    pub(crate) fill: u8,
}

/// Live allocations, checked for overlap on insertion.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) live: Vec<Live>,
}

impl Model {
    /// Records a new allocation after checking it overlaps none that is live.
    pub(crate) fn insert(&mut self, live: Live) {
        for other in &self.live {
            let disjoint =
                live.addr + live.len <= other.addr || other.addr + other.len <= live.addr;
            assert!(disjoint, "{live:x?} overlaps live {other:x?}");
        }
        self.live.push(live);
    }
}

/// Fills `len` bytes at `ptr` with `fill`.
///
/// # Safety
///
/// `ptr..ptr+len` is a live allocation owned by the caller.
pub(crate) unsafe fn fill(ptr: *mut u8, len: usize, fill: u8) {
    // SAFETY: caller's duty.
    unsafe { core::ptr::write_bytes(ptr, fill, len) };
}

/// Checks that `len` bytes at `ptr` all hold `fill` (sampled at most 64 places plus ends,
/// to keep large blocks cheap under Miri).
///
/// # Safety
///
/// `ptr..ptr+len` is a live allocation owned by the caller, written by [`fill`].
pub(crate) unsafe fn check(ptr: *const u8, len: usize, fill: u8) {
    let step = (len / 64).max(1);
    let mut i = 0;
    while i < len {
        // SAFETY: `i < len`, inside the caller's allocation.
        assert_eq!(unsafe { *ptr.add(i) }, fill, "byte {i} of {ptr:p} changed");
        i += step;
    }
    // SAFETY: `len - 1 < len`, inside the caller's allocation.
    let last = unsafe { *ptr.add(len - 1) };
    assert_eq!(last, fill, "last byte of {ptr:p} changed");
}
