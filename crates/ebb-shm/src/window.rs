//! The only `unsafe` of the crate: atomic words and bounded copies in memory the other
//! side writes concurrently.

use alloc::sync::Arc;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::{CONTROL_BYTES, WindowError};

/// Memory both sides map: the host's view of a guest's shared window, or the guest's own.
///
/// # Safety
///
/// An implementor promises that `base()..base() + size()` is mapped, readable and
/// writable for as long as the value lives, that `base()` and `size()` never change, and
/// that nothing else in this program makes Rust references to those bytes (the other
/// side, in another address space or a guest, may write them at any time: that is the
/// point, and every access here is atomic or a raw copy).
pub unsafe trait Mapping: Send + Sync + 'static {
    /// The window's first byte.
    fn base(&self) -> *mut u8;
    /// Its length in bytes.
    fn size(&self) -> usize;
}

/// A validated mapping: page-aligned, at least the control page long.
pub(crate) struct Window {
    mapping: Arc<dyn Mapping>,
    base: *mut u8,
    len: usize,
}

// SAFETY: the window is a base pointer into memory the `Mapping` (itself `Send + Sync`)
// keeps mapped; every access through it is atomic or a raw copy, never a reference that
// another thread could alias.
unsafe impl Send for Window {}
// SAFETY: as above; `&Window` only hands out atomics.
unsafe impl Sync for Window {}

impl Window {
    pub(crate) fn new(mapping: Arc<dyn Mapping>) -> Result<Window, WindowError> {
        let (base, len) = (mapping.base(), mapping.size());
        if !(base as usize).is_multiple_of(4096) {
            return Err(WindowError::Misaligned(base as usize));
        }
        if len < CONTROL_BYTES {
            return Err(WindowError::TooSmall(len));
        }
        Ok(Window { mapping, base, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The atomic word at `offset` of the control page.
    pub(crate) fn u64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= CONTROL_BYTES);
        // SAFETY: in bounds (asserted; the window is at least the control page), aligned
        // (the base is page-aligned, the offset a multiple of 8), and valid for `&self`'s
        // lifetime because `self.mapping` keeps it mapped (the `Mapping` contract).
        // Concurrent writes by the other side are atomic accesses to the same word.
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    /// The atomic 32-bit word at `offset` of the control page.
    pub(crate) fn u32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= CONTROL_BYTES);
        // SAFETY: as for `u64`.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// The data area at `start` of `capacity` bytes, checked to lie in the window.
    fn area(&self, start: usize, capacity: usize) -> *mut u8 {
        assert!(capacity.is_power_of_two() && start >= CONTROL_BYTES);
        assert!(
            start
                .checked_add(capacity)
                .is_some_and(|end| end <= self.len)
        );
        let _ = &self.mapping;
        // SAFETY: `start < len` (asserted), so the pointer stays in the mapping.
        unsafe { self.base.add(start) }
    }

    /// Copies `src` into the ring whose data is at `start`, from stream position `at`.
    pub(crate) fn copy_in(&self, start: usize, capacity: usize, at: u64, src: &[u8]) {
        assert!(src.len() <= capacity);
        let area = self.area(start, capacity);
        let offset = (at % capacity as u64) as usize;
        let first = src.len().min(capacity - offset);
        // SAFETY: both pieces lie in the data area (`offset + first <= capacity`, the rest
        // at its start is `src.len() - first <= capacity`), which lies in the mapping
        // (`area`); `src` is private memory, so the two do not overlap. The peer does not
        // touch these bytes while the indices say they are ours to fill; a hostile peer
        // that does can only spoil its own data.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), area.add(offset), first);
            core::ptr::copy_nonoverlapping(src.as_ptr().add(first), area, src.len() - first);
        }
    }

    /// Copies bytes from stream position `at` of the ring at `start` into `dst`.
    pub(crate) fn copy_out(&self, start: usize, capacity: usize, at: u64, dst: &mut [u8]) {
        // SAFETY: `dst` is valid for writes of its length; the copy writes exactly that.
        unsafe { self.copy_out_to(start, capacity, at, dst.as_mut_ptr(), dst.len()) }
    }

    /// [`copy_out`](Self::copy_out) into memory never initialized (a fresh buffer's
    /// tailroom: no zero-fill before the copy); returns `dst`, now initialized.
    pub(crate) fn copy_out_uninit<'d>(
        &self,
        start: usize,
        capacity: usize,
        at: u64,
        dst: &'d mut [MaybeUninit<u8>],
    ) -> &'d mut [u8] {
        let len = dst.len();
        let ptr = dst.as_mut_ptr().cast::<u8>();
        // SAFETY: `dst` is valid for writes of `len` bytes (a `MaybeUninit<u8>` is a
        // byte); the copy writes every one of them, so afterwards all `len` are
        // initialized and may be viewed as `u8`s for `dst`'s lifetime, which the
        // returned borrow takes over.
        unsafe {
            self.copy_out_to(start, capacity, at, ptr, len);
            core::slice::from_raw_parts_mut(ptr, len)
        }
    }

    /// Copies `len` bytes from stream position `at` of the ring at `start` to `dst`.
    ///
    /// # Safety
    ///
    /// `dst` must be valid for writes of `len` bytes and not overlap the window.
    unsafe fn copy_out_to(&self, start: usize, capacity: usize, at: u64, dst: *mut u8, len: usize) {
        assert!(len <= capacity);
        let area = self.area(start, capacity);
        let offset = (at % capacity as u64) as usize;
        let first = len.min(capacity - offset);
        // SAFETY: as for `copy_in`, the other way round (the caller vouches for `dst`).
        // A hostile peer writing the bytes while we copy only changes what we read: it
        // is private memory from here on, and every parser above validates it.
        unsafe {
            core::ptr::copy_nonoverlapping(area.add(offset), dst, first);
            core::ptr::copy_nonoverlapping(area, dst.add(first), len - first);
        }
    }
}

/// A window in this program's own heap, zeroed and page-aligned: two ends in one process
/// (tests, benchmarks of the rings themselves, a front end playing a node).
pub struct HeapWindow {
    base: *mut u8,
    size: usize,
}

// SAFETY: the buffer is owned by the value and reached only through its raw pointer.
unsafe impl Send for HeapWindow {}
// SAFETY: as above; shared access is through atomics and raw copies only.
unsafe impl Sync for HeapWindow {}

impl HeapWindow {
    /// A zeroed window of `size` bytes (rounded up to whole pages), or `None` when the
    /// allocation fails or `size` is zero.
    pub fn new(size: usize) -> Option<Arc<HeapWindow>> {
        let size = size.checked_next_multiple_of(4096)?;
        let layout = core::alloc::Layout::from_size_align(size, 4096).ok()?;
        if size == 0 {
            return None;
        }
        // SAFETY: the layout's size is not zero.
        let base = unsafe { alloc::alloc::alloc_zeroed(layout) };
        (!base.is_null()).then(|| Arc::new(HeapWindow { base, size }))
    }
}

impl Drop for HeapWindow {
    fn drop(&mut self) {
        if let Ok(layout) = core::alloc::Layout::from_size_align(self.size, 4096) {
            // SAFETY: allocated in `new` with this very layout, freed once.
            unsafe { alloc::alloc::dealloc(self.base, layout) }
        }
    }
}

// SAFETY: the buffer stays allocated while the value lives; its base and size never
// change; nothing makes references into it (only `Window`'s atomics and copies).
unsafe impl Mapping for HeapWindow {
    fn base(&self) -> *mut u8 {
        self.base
    }
    fn size(&self) -> usize {
        self.size
    }
}
