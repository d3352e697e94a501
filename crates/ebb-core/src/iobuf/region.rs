//! [`Region`]: the reference-counted heap memory an [`IOBuf`](super::IOBuf) views.
//!
//! All of this module's `unsafe` is here. A region is one allocation: a 32-byte
//! [`Header`] (strong count, address of the bytes, capacity, initialized length, whether
//! the bytes are adopted) followed by `capacity` bytes. A region made by
//! [`Region::from_vec`] adopts a `Vec`'s buffer instead of copying it: then the
//! allocation is a bare header and the bytes are the `Vec`'s, given back to it when the
//! region is freed.
//!
//! # Invariants
//!
//! * `ptr` points to a live `Header` allocated with `layout(capacity)` (inline bytes) or
//!   `layout(0)` (adopted bytes), until the `Region` holding the last count drops it.
//! * The strong count is the number of `Region` handles on the allocation; no other
//!   (weak) kind of handle exists, so a count of one means `self` is the only handle.
//!   Clone increments it (relaxed, as `Arc`; aborting before it can overflow), drop
//!   decrements it (release) and the handle that takes it to zero frees the allocation
//!   after an acquire fence (`Arc`'s protocol).
//! * `data`, `capacity` and `adopted` never change after the header is written.
//! * `initialized <= capacity`, and the first `initialized` bytes of the region are
//!   initialized. `initialized` only changes, and the bytes are only written, through a
//!   [`RegionMut`], which exists only while the count is one (checked, with an acquire
//!   fence, by [`Region::get_mut`]) and borrows the sole handle exclusively. It only
//!   grows, so no byte once exposed is ever uninitialized again; bytes past it are
//!   never read.
//! * Adopted bytes (`adopted`) are a `Vec<u8>` buffer of exactly `capacity` bytes at
//!   `data`, owned by the region; otherwise `data` is the address just past the header
//!   in the same allocation, derived from the allocation's own pointer.
//! * **Lent** bytes (`lent`, made by [`LentMemory::new`]) are memory the region does not
//!   own (a device's shared ring memory): `capacity` initialized bytes at `data`, kept
//!   alive by a [`Keeper`] stored just past the header (the allocation is
//!   `layout(size_of::<Keeper>())`), dropped with the region. Their outside writer (a
//!   kernel) writes them only while the region is unique, and its owner forms no
//!   reference to them meanwhile: [`LentMemory::new`]'s contract.

use alloc::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::mem::{ManuallyDrop, MaybeUninit, size_of};
use core::ptr::{self, NonNull};
use core::slice;
use core::sync::atomic::{AtomicUsize, Ordering, fence};

/// The front of a region's allocation.
#[repr(C)]
struct Header {
    /// Handles on the region.
    strong: AtomicUsize,
    /// The region's first byte: just past the header, or the adopted `Vec`'s buffer.
    /// Stored rather than computed, so reading the bytes costs no branch.
    data: *mut u8,
    /// The region's size in bytes.
    capacity: u32,
    /// How many of the region's leading bytes are initialized; written only through a
    /// `RegionMut`.
    initialized: UnsafeCell<u32>,
    /// Whether `data` is an adopted `Vec`'s buffer (not the bytes after the header).
    adopted: bool,
    /// Whether `data` is lent memory, kept alive by the [`Keeper`] after the header.
    lent: bool,
}

/// What keeps lent memory alive (a device's mapping): dropped with the last handle.
pub type Keeper = alloc::sync::Arc<dyn core::any::Any + Send + Sync>;

/// Memory an outside owner lends to an [`IOBuf`](super::IOBuf) without a copy: see
/// [`IOBuf::from_lent`](super::IOBuf::from_lent).
pub struct LentMemory {
    pub(super) region: Region,
}

impl LentMemory {
    /// A region over `len` bytes at `data`, kept alive by `keeper`; all `len` bytes are
    /// the region's initialized bytes.
    ///
    /// # Safety
    ///
    /// * `data..data + len` is valid for reads and writes, and initialized, for as long
    ///   as `keeper` lives (the region drops its clone of it last);
    /// * apart from the region's own handles, the bytes are written only while the
    ///   region is unique (one handle: the owner's), and the owner forms no reference
    ///   to them through that handle meanwhile (it does not read or write the buffer),
    ///   nor moves that handle's region to another thread without synchronization.
    pub unsafe fn new(data: NonNull<u8>, len: usize, keeper: Keeper) -> Self {
        let cap = u32::try_from(len)
            .unwrap_or_else(|_| panic!("an IOBuf region is at most 4 GiB - 1 bytes"));
        let layout = layout(size_of::<Keeper>());
        // SAFETY: `layout` has a non-zero size (a header and a keeper).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `ptr` is a fresh allocation with room for a `Header` followed by a
        // `Keeper`; the keeper's offset (32) is a multiple of its alignment (8), which
        // the header's alignment (8) gives the allocation.
        unsafe {
            ptr.as_ptr().add(1).cast::<Keeper>().write(keeper);
            ptr.as_ptr().write(Header {
                strong: AtomicUsize::new(1),
                data: data.as_ptr(),
                capacity: cap,
                initialized: UnsafeCell::new(cap),
                adopted: false,
                lent: true,
            });
        }
        Self {
            region: Region { ptr },
        }
    }
}

/// More handles than this aborts (as `Arc` does): a count can then never wrap, even
/// with handles leaked by `mem::forget` on many threads at once.
const MAX_STRONG: usize = isize::MAX as usize;

/// The bytes a region's header adds to its allocation: a caller that sizes buffers to
/// the allocator's size classes (powers of two) asks for that much less, or every
/// buffer lands in the next class, twice the size.
pub const REGION_OVERHEAD: usize = size_of::<Header>();

// The size the module doc and `REGION_OVERHEAD`'s users count on.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<Header>() == 32);

/// The layout of a region of `capacity` inline bytes (0: a bare header).
fn layout(capacity: usize) -> Layout {
    // A region is at most u32::MAX bytes, so on 64-bit targets the sum never overflows;
    // on 32-bit ones a huge region fails here, before allocating, as `Vec` would.
    size_of::<Header>()
        .checked_add(capacity)
        .and_then(|size| Layout::from_size_align(size, align_of::<Header>()).ok())
        .unwrap_or_else(|| panic!("an IOBuf region of {capacity} bytes is too large"))
}

/// A shared handle on a heap region: a thin pointer to its header.
pub(super) struct Region {
    ptr: NonNull<Header>,
}

// SAFETY: a region is shared bytes with an atomic count, like `Arc<[u8]>`, which is
// `Send + Sync`: the count is only changed atomically, and the bytes and `initialized`
// are only written through a `RegionMut`, which exists only while the count is one and
// the sole handle is borrowed exclusively (so no other thread holds a handle to read
// through meanwhile; the acquire fence in `get_mut` orders the last other handle's
// reads before those writes, and whatever sends a handle to another thread orders the
// writes before that thread's reads).
unsafe impl Send for Region {}
// SAFETY: as for `Send`.
unsafe impl Sync for Region {}

// A panic caught mid-way cannot leave a region half-changed for another handle to see:
// `initialized` and the bytes change only through a `RegionMut`, which needs the one
// handle there is. So a region is unwind-safe, as the `Arc<Vec<u8>>` it replaced was
// (the `UnsafeCell` in the header would otherwise take that from `IOBuf`).
impl core::panic::UnwindSafe for Region {}
impl core::panic::RefUnwindSafe for Region {}

impl Region {
    /// A unique region of `capacity` bytes, none of them initialized.
    ///
    /// # Panics
    ///
    /// If `capacity` exceeds `u32::MAX` (`MAX_REGION`); on allocation failure, through
    /// `handle_alloc_error`.
    pub(super) fn new(capacity: usize) -> Self {
        match Self::try_new(capacity) {
            Some(region) => region,
            None => handle_alloc_error(layout(capacity)),
        }
    }

    /// A unique region of `capacity` bytes, none of them initialized, or `None` when the
    /// allocator cannot serve it (the caller decides what running out of memory means).
    ///
    /// # Panics
    ///
    /// If `capacity` exceeds `u32::MAX` (`MAX_REGION`).
    pub(super) fn try_new(capacity: usize) -> Option<Self> {
        let cap = u32::try_from(capacity)
            .unwrap_or_else(|_| panic!("an IOBuf region is at most 4 GiB - 1 bytes"));
        let layout = layout(capacity);
        // SAFETY: `layout` has a non-zero size (it holds a header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let ptr = NonNull::new(raw)?;
        // SAFETY: `ptr` is a fresh allocation with room and alignment for a `Header`,
        // followed by `capacity` bytes: one past the header is within it (or its end).
        unsafe {
            ptr.as_ptr().write(Header {
                strong: AtomicUsize::new(1),
                data: ptr.as_ptr().add(1).cast::<u8>(),
                capacity: cap,
                initialized: UnsafeCell::new(0),
                adopted: false,
                lent: false,
            });
        }
        Some(Self { ptr })
    }

    /// A unique region of `capacity` bytes whose first `zeroed` are initialized to zero.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new), or if `zeroed > capacity`.
    pub(super) fn with_zeroed_prefix(capacity: usize, zeroed: usize) -> Self {
        let mut region = Self::new(capacity);
        // The region was just made: `region` is its only handle.
        RegionMut {
            region: &mut region,
        }
        .init_zeroed(zeroed);
        region
    }

    /// A unique region holding `parts` one after another, all initialized, with no room
    /// to spare.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new), if the parts add up to more than `u32::MAX` bytes.
    pub(super) fn concat(parts: &[&[u8]]) -> Self {
        let len = parts
            .iter()
            .try_fold(0usize, |n, p| n.checked_add(p.len()))
            .unwrap_or_else(|| panic!("an IOBuf region is at most 4 GiB - 1 bytes"));
        let mut region = Self::new(len);
        let data = region.data();
        let mut at = 0;
        for part in parts {
            // SAFETY: the parts add up to `len`, the capacity, so `[at, at + part.len())`
            // lies within the region. The region was just made and `region` is its only
            // handle, so nothing else accesses it, and `part` (a borrow from before the
            // region existed) does not overlap it.
            unsafe { ptr::copy_nonoverlapping(part.as_ptr(), data.add(at), part.len()) };
            at += part.len();
        }
        // The region was just made: `region` is its only handle.
        RegionMut {
            region: &mut region,
        }
        .set_initialized(len);
        region
    }

    /// A unique region adopting `v`'s buffer, without copying: its capacity is the
    /// region, its length the initialized part.
    ///
    /// # Panics
    ///
    /// If `v`'s capacity exceeds `u32::MAX` (the caller shrinks it first).
    pub(super) fn from_vec(v: Vec<u8>) -> Self {
        let cap = u32::try_from(v.capacity())
            .unwrap_or_else(|_| panic!("an IOBuf region is at most 4 GiB - 1 bytes"));
        // `Vec::len <= capacity`, so this fits too.
        let len = v.len() as u32;
        let layout = layout(0);
        // SAFETY: `layout` has a non-zero size (a header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        // Only now (the allocation cannot fail any more) does the region take the buffer.
        let mut v = ManuallyDrop::new(v);
        // SAFETY: `ptr` is a fresh allocation with room and alignment for a `Header`.
        unsafe {
            ptr.as_ptr().write(Header {
                strong: AtomicUsize::new(1),
                data: v.as_mut_ptr(),
                capacity: cap,
                initialized: UnsafeCell::new(len),
                adopted: true,
                lent: false,
            });
        }
        Self { ptr }
    }

    fn header(&self) -> &Header {
        // SAFETY: the header lives while any handle does (invariant 1), and its fields
        // are read through this shared reference only: `initialized`, the one field
        // written after creation, sits in an `UnsafeCell`.
        unsafe { self.ptr.as_ref() }
    }

    /// The address of the region's first byte.
    #[inline]
    fn data(&self) -> *mut u8 {
        self.header().data
    }

    /// The region's size in bytes.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.header().capacity as usize
    }

    /// How many of the region's leading bytes are initialized.
    #[inline]
    pub(super) fn initialized(&self) -> usize {
        // SAFETY: `initialized` is written only through a `RegionMut`, which needs the
        // count at one and `&mut` the sole handle, so never while `&self` exists.
        unsafe { *self.header().initialized.get() as usize }
    }

    /// The region's initialized bytes.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: the first `initialized` bytes are initialized (invariant 4) and lie
        // within the live allocation or the adopted buffer; nothing writes them while
        // `&self` lives (writes need a `RegionMut`, see `initialized`). A zero-capacity
        // region's `data` is non-null and aligned (u8), as a zero-length slice needs.
        unsafe { slice::from_raw_parts(self.data(), self.initialized()) }
    }

    /// Whether `self` is the only handle on its region (a relaxed load: a hint, as
    /// `Arc::strong_count`; writers check again through [`get_mut`](Self::get_mut)).
    #[inline]
    pub(super) fn is_unique(&self) -> bool {
        self.header().strong.load(Ordering::Relaxed) == 1
    }

    /// The number of handles on the region.
    #[cfg(test)]
    fn strong_count(&self) -> usize {
        self.header().strong.load(Ordering::Acquire)
    }

    /// Whether `self` and `other` are handles on the same region.
    #[inline]
    pub(super) fn ptr_eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }

    /// Write access to the region, if `self` is its only handle.
    ///
    /// As `Arc::get_mut` without its locked compare-exchange on a weak count: no weak
    /// handle exists, so a count of one is uniqueness.
    #[inline]
    pub(super) fn get_mut(&mut self) -> Option<RegionMut<'_>> {
        if self.header().strong.load(Ordering::Relaxed) != 1 {
            return None;
        }
        // Pairs with the release decrement of the handle dropped last (possibly on
        // another core): its reads of the region happen before our writes.
        fence(Ordering::Acquire);
        Some(RegionMut { region: self })
    }
}

impl Clone for Region {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed, as `Arc::clone`: a new handle is made from an existing one, which
        // keeps the region alive; passing it to another thread synchronizes by itself.
        let old = self.header().strong.fetch_add(1, Ordering::Relaxed);
        if old > MAX_STRONG {
            abort();
        }
        Self { ptr: self.ptr }
    }
}

impl Drop for Region {
    #[inline]
    fn drop(&mut self) {
        if self.header().strong.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        self.drop_slow();
    }
}

impl Region {
    /// Frees the region, once the last handle's decrement took the count to zero. Out
    /// of line, as `Arc`'s: every drop site inlines only the decrement.
    #[inline(never)]
    fn drop_slow(&mut self) {
        // Pairs with the other handles' release decrements: all their uses of the
        // region happen before it is freed.
        fence(Ordering::Acquire);
        let (capacity, data) = (self.capacity(), self.data());
        if self.header().lent {
            // SAFETY: the count reached zero: nothing else uses the allocation. The
            // keeper was written just past the header by `LentMemory::new` (invariant
            // 6) and is read out once, here; the allocation had `layout(size_of::<Keeper>())`.
            // The lent bytes are not ours to free: dropping the keeper lets them go.
            unsafe {
                let keeper = self.ptr.as_ptr().add(1).cast::<Keeper>().read();
                dealloc(self.ptr.as_ptr().cast(), layout(size_of::<Keeper>()));
                drop(keeper);
            }
        } else if !self.header().adopted {
            // SAFETY: the count reached zero, so this was the last handle and nothing
            // else uses the allocation; it was allocated with `layout(capacity)`.
            unsafe { dealloc(self.ptr.as_ptr().cast(), layout(capacity)) };
        } else {
            // SAFETY: as above, the allocation and the adopted buffer are ours alone.
            // `data` and `capacity` are the adopted `Vec`'s pointer and capacity
            // (invariant 5); length 0 drops no elements (u8 needs none anyway).
            // The header was allocated with `layout(0)`.
            unsafe {
                drop(Vec::from_raw_parts(data, 0, capacity));
                dealloc(self.ptr.as_ptr().cast(), layout(0));
            }
        }
    }
}

/// Aborts the process, in `no_std` too: a panic while panicking aborts.
#[cold]
fn abort() -> ! {
    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("IOBuf region: aborting");
        }
    }
    let _guard = PanicOnDrop;
    panic!("IOBuf region: reference count overflow");
}

/// Write access to a region while it has a single handle, which this borrows.
pub(super) struct RegionMut<'a> {
    region: &'a mut Region,
}

impl<'a> RegionMut<'a> {
    fn set_initialized(&mut self, n: usize) {
        debug_assert!(n <= self.region.capacity());
        // SAFETY: `self` borrows the only handle exclusively (see `Region::get_mut`),
        // so no one else reads or writes `initialized` meanwhile. `n` fits in u32: it
        // is at most the capacity, a u32.
        unsafe { *self.region.header().initialized.get() = n as u32 };
    }

    /// The region's size in bytes.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.region.capacity()
    }

    /// How many of the region's leading bytes are initialized.
    #[inline]
    pub(super) fn initialized(&self) -> usize {
        self.region.initialized()
    }

    /// The region's initialized bytes, writable.
    #[inline]
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `Region::bytes`, and no other reference into the region exists: the
        // only handle is borrowed exclusively by `self`, and this borrow is tied to it.
        // `data` derives from the allocation's own pointer, so writing through it is
        // allowed.
        unsafe { slice::from_raw_parts_mut(self.region.data(), self.initialized()) }
    }

    /// The region's initialized bytes, writable for as long as the handle is borrowed.
    #[inline]
    pub(super) fn into_bytes_mut(self) -> &'a mut [u8] {
        let len = self.initialized();
        let region: &'a mut Region = self.region;
        // SAFETY: as `bytes_mut`; the slice borrows the sole handle for `'a`, as `self`
        // did, so no clone (and no other access) can happen while it lives.
        unsafe { slice::from_raw_parts_mut(region.data(), len) }
    }

    /// Initializes the bytes up to `to` (those not yet initialized) with zeros.
    ///
    /// # Panics
    ///
    /// If `to` exceeds the capacity.
    #[inline]
    pub(super) fn init_zeroed(&mut self, to: usize) {
        let from = self.initialized();
        if to <= from {
            return;
        }
        assert!(
            to <= self.capacity(),
            "IOBuf region: {to} past its capacity"
        );
        // SAFETY: `from < to <= capacity`, so `[from, to)` lies within the region, and no
        // one else accesses it (we hold the only handle exclusively).
        unsafe { self.region.data().add(from).write_bytes(0, to - from) };
        self.set_initialized(to);
    }

    /// Lets `fill` write the bytes from `from` to the capacity, none of them initialized
    /// yet, as uninitialized memory (a `read(2)` into a `MaybeUninit` buffer, without
    /// zero-filling it first), and returns how many it initialized: the length of the
    /// prefix it returned, which must start where the slice it was given does.
    ///
    /// # Panics
    ///
    /// If `from` is below the initialized bytes or past the capacity, or `fill` returned
    /// a slice that is not a prefix of the one it was given.
    pub(super) fn fill_uninit<E>(
        &mut self,
        from: usize,
        fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> Result<&mut [u8], E>,
    ) -> Result<usize, E> {
        let capacity = self.capacity();
        assert!(
            self.initialized() <= from && from <= capacity,
            "IOBuf region: fill from {from} outside its uninitialized bytes"
        );
        let len = capacity - from;
        // SAFETY: `[from, capacity)` lies within the region's bytes, and no other
        // reference into the region exists while `self` (borrowing the only handle
        // exclusively) is borrowed. `MaybeUninit<u8>` has `u8`'s layout. None of these
        // bytes counts as initialized (`initialized <= from`), so nothing `fill` writes
        // there (uninitialized values included) can break the invariant; only the
        // prefix it returns, which a `&mut [u8]` proves initialized, is counted below.
        let tail: &mut [MaybeUninit<u8>] =
            unsafe { slice::from_raw_parts_mut(self.region.data().add(from).cast(), len) };
        let given = tail.as_ptr() as usize;
        let filled = fill(tail)?;
        assert!(
            filled.is_empty() || (filled.as_ptr() as usize == given && filled.len() <= len),
            "IOBuf: a tailroom reader must return a prefix of the tailroom it was given"
        );
        let n = filled.len();
        self.set_initialized(from + n);
        Ok(n)
    }

    /// Writes `data` at offset `at`, initializing what it covers.
    ///
    /// # Panics
    ///
    /// If `at` is past the initialized bytes (which would leave a gap) or the data
    /// does not fit in the capacity.
    #[inline]
    pub(super) fn write(&mut self, at: usize, data: &[u8]) {
        let init = self.initialized();
        assert!(
            at <= init && data.len() <= self.capacity() - at,
            "IOBuf region: write of {} bytes at {at} out of bounds",
            data.len()
        );
        // SAFETY: `[at, at + len)` lies within the region (checked above). `data` cannot
        // overlap it: it is a shared borrow that outlives this call, while we hold the
        // only handle exclusively, so it does not point into this region.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), self.region.data().add(at), data.len()) };
        let end = at + data.len();
        if end > init {
            self.set_initialized(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::Region;
    use crate::iobuf::{IOBuf, MAX_REGION};

    const fn send_sync<T: Send + Sync>() {}
    // Buffers move between cores, and shared ones are read from several.
    const _: () = send_sync::<Region>();
    const _: () = send_sync::<IOBuf>();

    /// Lent memory: views share it without a copy, the lender sees when they are gone
    /// (`recycle`), and the keeper lives until the last handle drops.
    #[test]
    fn lent_memory_is_viewed_in_place_and_kept_alive_by_its_keeper() {
        use alloc::boxed::Box;
        use alloc::sync::Arc;
        use core::ptr::NonNull;

        use super::{Keeper, LentMemory};

        struct Mapping(NonNull<[u8]>);
        // SAFETY: (test) the mapping is a leaked box, freed only in `drop`.
        unsafe impl Send for Mapping {}
        // SAFETY: (test) as above.
        unsafe impl Sync for Mapping {}
        impl Drop for Mapping {
            fn drop(&mut self) {
                // SAFETY: (test) made by `Box::leak` below, dropped once.
                drop(unsafe { Box::from_raw(self.0.as_ptr()) });
            }
        }
        let bytes: &mut [u8] = Box::leak(vec![7u8; 64].into_boxed_slice());
        let whole = NonNull::from(bytes);
        // Derived from the whole allocation's pointer (its provenance covers the view).
        let data = whole.cast::<u8>().map_addr(|a| a.saturating_add(16));
        let mapping = Arc::new(Mapping(whole));
        let weak = Arc::downgrade(&mapping);
        let keeper: Keeper = mapping;
        // SAFETY: 32 initialized bytes inside the mapping the keeper owns; nothing else
        // writes them.
        let mut own = IOBuf::from_lent(unsafe { LentMemory::new(data, 32, keeper) });
        assert_eq!(own.len(), 32);
        let mut view = own.clone();
        view.trim_front(2).unwrap();
        assert_eq!(view.as_ptr(), data.as_ptr().wrapping_add(2).cast_const());
        assert_eq!(&view[..3], &[7, 7, 7]);
        assert!(!own.recycle(), "a view is out");
        drop(view);
        assert!(own.recycle(), "every view dropped");
        drop(own);
        assert!(
            weak.upgrade().is_none(),
            "the keeper went with the last handle"
        );
    }

    #[test]
    fn a_new_region_is_unique_and_uninitialized() {
        let mut r = Region::new(16);
        assert_eq!(r.capacity(), 16);
        assert_eq!(r.initialized(), 0);
        assert!(r.bytes().is_empty());
        assert!(r.is_unique());
        assert_eq!(r.strong_count(), 1);
        let m = r.get_mut().expect("unique");
        assert_eq!(m.capacity(), 16);
        assert_eq!(m.initialized(), 0);
    }

    #[test]
    fn clones_count_and_drops_uncount() {
        let mut r = Region::new(8);
        let clones: Vec<Region> = (0..5).map(|_| r.clone()).collect();
        assert_eq!(r.strong_count(), 6);
        assert!(clones.iter().all(|c| c.ptr_eq(&r) && c.strong_count() == 6));
        assert!(!r.is_unique());
        assert!(r.get_mut().is_none());
        let mut clones = clones.into_iter();
        for left in (1..=5).rev() {
            drop(clones.next());
            assert_eq!(r.strong_count(), left);
        }
        assert!(r.is_unique());
        assert!(r.get_mut().is_some());
        assert!(!r.ptr_eq(&Region::new(8)));
    }

    #[test]
    fn the_last_handle_may_be_dropped_elsewhere() {
        let r = Region::new(8);
        let c = r.clone();
        drop(r);
        assert!(c.is_unique());
        // The last handle frees the region on another thread (Miri checks for a leak
        // and for the free racing with this thread's uses).
        std::thread::spawn(move || drop(c)).join().expect("dropper");
    }

    #[test]
    fn unique_again_once_clones_dropped_on_other_threads() {
        let mut r = Region::new(64);
        r.get_mut().expect("unique").write(0, &[1; 64]);
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let c = r.clone();
                std::thread::spawn(move || {
                    let sum: u32 = c.bytes().iter().map(|&b| u32::from(b)).sum();
                    drop(c);
                    sum
                })
            })
            .collect();
        // No join first: what orders the readers' reads before the writes below is the
        // release decrement of their drops and the acquire fence in `get_mut`.
        let mut m = loop {
            if r.is_unique() {
                break r.get_mut().expect("unique");
            }
            std::thread::yield_now();
        };
        m.bytes_mut().fill(2);
        m.write(10, &[3; 4]);
        assert_eq!(&r.bytes()[8..16], &[2, 2, 3, 3, 3, 3, 2, 2]);
        for reader in readers {
            assert_eq!(reader.join().expect("reader"), 64);
        }
    }

    #[test]
    fn initialized_only_grows_and_bounds_what_is_exposed() {
        let mut r = Region::new(10);
        let mut m = r.get_mut().expect("unique");
        m.write(0, b"abc");
        assert_eq!(m.initialized(), 3);
        assert_eq!(m.bytes_mut(), b"abc");
        // A write within the initialized bytes does not move the mark back.
        m.write(1, b"X");
        assert_eq!(m.initialized(), 3);
        // Zero-fill only what was never initialized; a lower mark is a no-op.
        m.init_zeroed(6);
        m.init_zeroed(2);
        assert_eq!(m.initialized(), 6);
        assert_eq!(m.bytes_mut(), b"aXc\0\0\0");
        // A write may start at the mark (no gap) and run to the capacity.
        m.write(6, b"defg");
        assert_eq!(m.initialized(), 10);
        m.init_zeroed(10);
        assert_eq!(r.bytes(), b"aXc\0\0\0defg");
        // Clones see the same bytes.
        assert_eq!(r.clone().bytes(), b"aXc\0\0\0defg");
    }

    #[test]
    #[should_panic = "out of bounds"]
    fn a_write_past_the_mark_would_leave_a_gap() {
        let mut r = Region::new(10);
        r.get_mut().expect("unique").write(1, b"a");
    }

    #[test]
    #[should_panic = "out of bounds"]
    fn a_write_past_the_capacity_panics() {
        let mut r = Region::new(4);
        r.get_mut().expect("unique").write(0, b"abcde");
    }

    #[test]
    #[should_panic = "past its capacity"]
    fn zero_fill_past_the_capacity_panics() {
        let mut r = Region::new(4);
        r.get_mut().expect("unique").init_zeroed(5);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    #[should_panic = "at most 4 GiB - 1"]
    fn a_region_past_max_region_panics_before_allocating() {
        let _ = Region::new(MAX_REGION + 1);
    }

    #[test]
    fn capacity_edges() {
        let mut r = Region::new(1);
        let mut m = r.get_mut().expect("unique");
        m.write(0, b"");
        assert_eq!(m.initialized(), 0);
        m.write(0, b"z");
        m.write(1, b"");
        assert_eq!(m.initialized(), 1);
        assert_eq!(r.bytes(), b"z");
        // Sizes around the header's alignment all round-trip.
        for cap in [7, 8, 9, 23, 24, 25, 4095, 4096, 4097] {
            let data: Vec<u8> = (0..cap).map(|i| i as u8).collect();
            let mut r = Region::new(cap);
            r.get_mut().expect("unique").write(0, &data);
            assert_eq!(r.bytes(), &data[..]);
            assert_eq!(r.capacity(), cap);
        }
    }

    #[test]
    fn made_with_zeros_in_front_or_as_a_concatenation() {
        let mut r = Region::with_zeroed_prefix(8, 3);
        assert_eq!((r.capacity(), r.initialized()), (8, 3));
        assert_eq!(r.bytes(), &[0, 0, 0]);
        r.get_mut().expect("unique").write(3, b"abcde");
        assert_eq!(r.bytes(), b"\0\0\0abcde");

        let r = Region::concat(&[b"VALUE ", b"", b"key", b" ", b"42\r\n"]);
        assert_eq!((r.capacity(), r.initialized()), (14, 14));
        assert_eq!(r.bytes(), b"VALUE key 42\r\n");
        assert!(r.is_unique());
        let empty = Region::concat(&[]);
        assert_eq!((empty.capacity(), empty.initialized()), (0, 0));
    }

    #[test]
    fn a_zero_capacity_region() {
        let mut r = Region::new(0);
        assert_eq!(r.capacity(), 0);
        assert!(r.bytes().is_empty());
        let mut m = r.get_mut().expect("unique");
        m.init_zeroed(0);
        m.write(0, &[]);
        assert!(m.bytes_mut().is_empty());
        let c = r.clone();
        assert!(c.bytes().is_empty() && r.get_mut().is_none());
        drop(c);
        assert!(r.get_mut().is_some());
        let b = IOBuf::with_capacity(0);
        assert_eq!((b.len(), b.headroom(), b.tailroom()), (0, 0, 0));
        assert!(b.is_unique());
    }

    #[test]
    fn from_vec_adopts_the_buffer_without_copying() {
        let mut v = Vec::with_capacity(32);
        v.extend_from_slice(b"hello");
        let ptr = v.as_ptr();
        let mut r = Region::from_vec(v);
        assert_eq!((r.capacity(), r.initialized()), (32, 5));
        assert_eq!(r.bytes().as_ptr(), ptr);
        assert_eq!(r.bytes(), b"hello");
        let mut m = r.get_mut().expect("unique");
        m.write(5, b" world");
        m.init_zeroed(32);
        assert_eq!(&r.bytes()[..11], b"hello world");
        assert_eq!(r.bytes().as_ptr(), ptr);
        // The adopted buffer goes back to its allocator with the last handle.
        let c = r.clone();
        drop(r);
        assert_eq!(c.bytes().as_ptr(), ptr);

        // And through an IOBuf: the view is the Vec's bytes, its spare capacity tailroom.
        let mut v = vec![7u8; 100];
        v.reserve_exact(28);
        let (ptr, cap) = (v.as_ptr(), v.capacity());
        let buf = IOBuf::from_vec(v);
        assert_eq!(buf.as_slice().as_ptr(), ptr);
        assert_eq!((buf.len(), buf.tailroom()), (100, cap - 100));
        let split = buf.clone().split_off(40).expect("in range");
        assert_eq!(split.as_ptr(), ptr.wrapping_add(40));
    }

    #[test]
    fn an_empty_vec_is_adopted_too() {
        let mut r = Region::from_vec(Vec::new());
        assert_eq!((r.capacity(), r.initialized()), (0, 0));
        assert!(r.bytes().is_empty());
        assert!(r.get_mut().is_some());
        let b = IOBuf::from_vec(Vec::new());
        assert!(b.is_unique() && b.is_empty() && b.tailroom() == 0);
    }
}
