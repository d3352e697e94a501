//! Slabs and one core's cache of them, for one object size. All raw access to slab memory
//! is in this module.
//!
//! A slab is one page block of `2^slab_order` pages, aligned to its size, so the header of
//! the slab holding any object is found by masking the object's address. Layout:
//!
//! ```text
//! | SlabHeader | pad to align | obj 0 | obj 1 | ... | obj cap-1 | (unused tail) |
//! ```
//!
//! Invariants:
//!
//! 1. A slab belongs to one core slot (`owner`, written once before any object is handed
//!    out) and one size class. Only the owner touches the header's other fields and the
//!    slab's free list; other cores only read `owner` and push freed objects onto the
//!    owner's remote list, which the owner drains into the slabs.
//! 2. `inuse` counts the objects handed out and not yet returned *to the slab* (an object
//!    on a remote list is still in use). Objects are either handed out, on the slab's free
//!    list, or at/after `bump` (never handed out yet).
//! 3. State: `CURRENT` — the cache allocates from it (`ClassCache::current`); `PARTIAL` —
//!    on the cache's partial list, with free objects and `inuse > 0`; `FULL` — no free
//!    objects, on no list; `EMPTY` — on the cache's empty list, all objects free.
//! 4. Every object is aligned to the class alignment and at least 8 bytes, so a free
//!    object can hold a `FreeObj` link.

use super::provider::PageProvider;
use crate::error::AllocError;
use crate::page::PAGE_SIZE;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// A free object: a link in a slab's free list or a core's remote-free list.
#[repr(C)]
pub(crate) struct FreeObj {
    next: *mut FreeObj,
}

const CURRENT: u8 = 1;
const PARTIAL: u8 = 2;
const FULL: u8 = 3;
const EMPTY: u8 = 4;

/// The start of every slab.
#[repr(C)]
pub(crate) struct SlabHeader {
    owner: u32,
    class: u16,
    state: u8,
    inuse: u32,
    free: *mut FreeObj,
    bump: *mut u8,
    end: *mut u8,
    next: *mut SlabHeader,
    prev: *mut SlabHeader,
}

/// Slabs never align objects beyond this; larger alignments go to the page allocator.
pub(crate) const MAX_SLAB_ALIGN: usize = 64;
/// A slab is made large enough to hold at least this many objects.
const MIN_OBJECTS: usize = 8;
/// Empty slabs a core keeps per class before giving slabs back to the page allocator.
const KEEP_EMPTY: u32 = 4;

/// The fixed shape of one size class.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClassParams {
    pub(crate) size: usize,
    pub(crate) align: usize,
    pub(crate) slab_order: usize,
    /// Offset of the first object from the slab start.
    pub(crate) first: usize,
    pub(crate) capacity: usize,
    pub(crate) index: u16,
}

impl ClassParams {
    /// The shape of class `index` for objects of `size` bytes (a multiple of 8, at least 8).
    /// Alignment is the largest power of two dividing `size`, at most [`MAX_SLAB_ALIGN`].
    pub(crate) const fn new(size: usize, index: u16) -> Self {
        assert!(size >= 8 && size.is_multiple_of(8));
        let low_bit = size & size.wrapping_neg();
        let align = if low_bit < MAX_SLAB_ALIGN {
            low_bit
        } else {
            MAX_SLAB_ALIGN
        };
        let first = size_of::<SlabHeader>().next_multiple_of(align);
        let mut slab_order = 0;
        while slab_order < crate::page::MAX_ORDER
            && ((PAGE_SIZE << slab_order) - first) / size < MIN_OBJECTS
        {
            slab_order += 1;
        }
        let capacity = ((PAGE_SIZE << slab_order) - first) / size;
        assert!(capacity >= 1);
        ClassParams {
            size,
            align,
            slab_order,
            first,
            capacity,
            index,
        }
    }

    pub(crate) const fn slab_bytes(&self) -> usize {
        PAGE_SIZE << self.slab_order
    }

    /// The header of the slab holding `obj` (with `obj`'s provenance).
    fn header_of(&self, obj: NonNull<u8>) -> *mut SlabHeader {
        let mask = !(self.slab_bytes() - 1);
        obj.as_ptr().map_addr(|a| a & mask).cast()
    }

    /// Which core slot owns the slab holding `obj`.
    ///
    /// # Safety
    ///
    /// `obj` was allocated from a slab of this class and not yet freed.
    pub(crate) unsafe fn owner_of(&self, obj: NonNull<u8>) -> usize {
        let slab = self.header_of(obj);
        // SAFETY: `obj` is live (caller), so its slab is live and its `owner` was written
        // before the object was handed out and is never written again (invariant 1); the
        // happens-before edge comes with however `obj` reached this thread.
        unsafe { (*slab).owner as usize }
    }
}

/// Pushes a freed object onto a core's remote-free list (a Treiber stack; the owner takes
/// the whole list at once with a swap, so there is no ABA problem).
///
/// # Safety
///
/// `obj` is a live object of the class whose remote list `remote` is, in a slab owned by
/// the core slot that owns `remote`; the caller gives it up.
pub(crate) unsafe fn push_remote(remote: &AtomicPtr<FreeObj>, obj: NonNull<u8>) {
    let node = obj.as_ptr().cast::<FreeObj>();
    let mut head = remote.load(Ordering::Relaxed);
    loop {
        // SAFETY: the object is ours to overwrite (caller) and holds a `FreeObj`
        // (invariant 4).
        unsafe { (*node).next = head };
        match remote.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

/// What a cache needs besides itself: its class, its core's remote list for the class,
/// the count of live slabs of the class, and where pages come from.
pub(crate) struct ClassCtx<'a, P> {
    pub(crate) params: &'a ClassParams,
    pub(crate) owner: u32,
    pub(crate) remote: &'a AtomicPtr<FreeObj>,
    pub(crate) slabs: &'a AtomicUsize,
    pub(crate) pages: &'a P,
}

/// One core's slabs of one class. Only the owning core touches it.
pub(crate) struct ClassCache {
    current: *mut SlabHeader,
    partial: *mut SlabHeader,
    empty: *mut SlabHeader,
    n_empty: u32,
}

impl ClassCache {
    pub(crate) const NEW: ClassCache = ClassCache {
        current: ptr::null_mut(),
        partial: ptr::null_mut(),
        empty: ptr::null_mut(),
        n_empty: 0,
    };

    /// Allocates one object: first drains the remote-free list if anything is on it, then
    /// takes from the current slab, then from a partial, empty or new slab.
    #[inline]
    pub(crate) fn alloc<P: PageProvider>(
        &mut self,
        ctx: &ClassCtx<'_, P>,
    ) -> Result<NonNull<u8>, AllocError> {
        if !ctx.remote.load(Ordering::Relaxed).is_null() {
            self.drain_remote(ctx);
        }
        if !self.current.is_null() {
            if let Some(obj) = self.pop(self.current, ctx.params) {
                return Ok(obj);
            }
            // SAFETY: `current` is a live slab of this cache (invariant 3).
            unsafe { (*self.current).state = FULL };
            self.current = ptr::null_mut();
        }
        self.alloc_slow(ctx)
    }

    #[cold]
    fn alloc_slow<P: PageProvider>(
        &mut self,
        ctx: &ClassCtx<'_, P>,
    ) -> Result<NonNull<u8>, AllocError> {
        let slab = if !self.partial.is_null() {
            let slab = self.partial;
            self.unlink_partial(slab);
            slab
        } else if !self.empty.is_null() {
            let slab = self.empty;
            // SAFETY: slabs on the empty list are live slabs of this cache.
            self.empty = unsafe { (*slab).next };
            self.n_empty -= 1;
            slab
        } else {
            self.new_slab(ctx)?
        };
        // SAFETY: `slab` is a live slab of this cache, now on no list.
        unsafe { (*slab).state = CURRENT };
        self.current = slab;
        // A partial, empty or new slab has a free object.
        self.pop(slab, ctx.params)
            .ok_or(AllocError::OutOfPages { order: 0 })
    }

    fn new_slab<P: PageProvider>(
        &mut self,
        ctx: &ClassCtx<'_, P>,
    ) -> Result<*mut SlabHeader, AllocError> {
        let p = ctx.params;
        let block = ctx.pages.alloc_pages(p.slab_order)?.as_ptr();
        let slab = block.cast::<SlabHeader>();
        // SAFETY: the block is fresh from the page allocator, ours, `slab_bytes` long and
        // page aligned, so the header fits at its start and the objects after it.
        unsafe {
            slab.write(SlabHeader {
                owner: ctx.owner,
                class: p.index,
                state: CURRENT,
                inuse: 0,
                free: ptr::null_mut(),
                bump: block.add(p.first),
                end: block.add(p.first + p.capacity * p.size),
                next: ptr::null_mut(),
                prev: ptr::null_mut(),
            });
        }
        ctx.slabs.fetch_add(1, Ordering::Relaxed);
        Ok(slab)
    }

    /// Takes one free object from `slab`, if it has one.
    #[inline(always)]
    fn pop(&mut self, slab: *mut SlabHeader, p: &ClassParams) -> Option<NonNull<u8>> {
        // SAFETY: `slab` is a live slab of this cache; its free list holds free objects of
        // the slab and `bump..end` is never-used object space (invariant 2).
        unsafe {
            let obj = (*slab).free;
            let obj = if !obj.is_null() {
                (*slab).free = (*obj).next;
                obj.cast::<u8>()
            } else if (*slab).bump < (*slab).end {
                let obj = (*slab).bump;
                (*slab).bump = obj.add(p.size);
                obj
            } else {
                return None;
            };
            (*slab).inuse += 1;
            NonNull::new(obj)
        }
    }

    /// Pops an object from the current slab, if there is one with a free object.
    #[inline(always)]
    pub(crate) fn pop_current(&mut self, p: &ClassParams) -> Option<NonNull<u8>> {
        if self.current.is_null() {
            return None;
        }
        self.pop(self.current, p)
    }

    /// Frees an object of a slab this cache owns when that changes no slab's state (the
    /// common case); returns false, having done nothing, otherwise.
    ///
    /// # Safety
    ///
    /// As [`free_local`](Self::free_local).
    #[inline(always)]
    pub(crate) unsafe fn free_fast(&mut self, p: &ClassParams, obj: NonNull<u8>) -> bool {
        let slab = p.header_of(obj);
        let node = obj.as_ptr().cast::<FreeObj>();
        // SAFETY: the slab is live (it holds `obj`) and ours; the object is free now and
        // holds a `FreeObj` (invariant 4). A current slab, or a partial one that keeps a
        // live object, stays where it is.
        unsafe {
            let state = (*slab).state;
            if state == CURRENT || (state == PARTIAL && (*slab).inuse > 1) {
                (*node).next = (*slab).free;
                (*slab).free = node;
                (*slab).inuse -= 1;
                return true;
            }
        }
        false
    }

    /// Frees an object of a slab this cache owns.
    ///
    /// # Safety
    ///
    /// `obj` was allocated from this class in a slab owned by this cache, is live, and the
    /// caller gives it up.
    #[inline]
    pub(crate) unsafe fn free_local<P: PageProvider>(
        &mut self,
        ctx: &ClassCtx<'_, P>,
        obj: NonNull<u8>,
    ) {
        let slab = ctx.params.header_of(obj);
        let node = obj.as_ptr().cast::<FreeObj>();
        // SAFETY: the slab is live (it holds `obj`) and ours; the object is free now and
        // holds a `FreeObj` (invariant 4).
        let (state, inuse) = unsafe {
            debug_assert_eq!((*slab).owner, ctx.owner);
            debug_assert_eq!((*slab).class, ctx.params.index);
            (*node).next = (*slab).free;
            (*slab).free = node;
            (*slab).inuse -= 1;
            ((*slab).state, (*slab).inuse)
        };
        match state {
            FULL => {
                // SAFETY: as above.
                unsafe { (*slab).state = PARTIAL };
                if inuse == 0 {
                    self.retire(ctx, slab);
                } else {
                    self.link_partial(slab);
                }
            }
            PARTIAL if inuse == 0 => {
                self.unlink_partial(slab);
                self.retire(ctx, slab);
            }
            _ => {}
        }
    }

    /// Returns every object on the remote-free list to its slab.
    pub(crate) fn drain_remote<P: PageProvider>(&mut self, ctx: &ClassCtx<'_, P>) {
        let mut node = ctx.remote.swap(ptr::null_mut(), Ordering::Acquire);
        while let Some(obj) = NonNull::new(node) {
            // SAFETY: objects on our remote list were pushed by `push_remote`, whose
            // contract makes them live objects of our slabs that nobody uses any more; the
            // Acquire swap pairs with the pushes' Release.
            unsafe {
                node = (*node).next;
                self.free_local(ctx, obj.cast());
            }
        }
    }

    /// Keeps an emptied slab on the empty list, or gives it back to the page allocator.
    fn retire<P: PageProvider>(&mut self, ctx: &ClassCtx<'_, P>, slab: *mut SlabHeader) {
        if self.n_empty < KEEP_EMPTY {
            // SAFETY: `slab` is a live slab of this cache with no object in use; resetting
            // its free list and bump pointer makes every object never-used again.
            unsafe {
                (*slab).state = EMPTY;
                (*slab).free = ptr::null_mut();
                (*slab).bump = slab.cast::<u8>().add(ctx.params.first);
                (*slab).next = self.empty;
            }
            self.empty = slab;
            self.n_empty += 1;
        } else {
            Self::release(ctx, slab);
        }
    }

    fn release<P: PageProvider>(ctx: &ClassCtx<'_, P>, slab: *mut SlabHeader) {
        ctx.slabs.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the slab has no live object and is on no list: nothing refers to its
        // memory any more, so the block goes back whole.
        unsafe {
            ctx.pages
                .free_pages(NonNull::new_unchecked(slab.cast()), ctx.params.slab_order)
        };
    }

    /// Drains the remote list and gives every slab with no live object back to the page
    /// allocator (the empty list, and the current slab if it is unused).
    pub(crate) fn trim<P: PageProvider>(&mut self, ctx: &ClassCtx<'_, P>) {
        self.drain_remote(ctx);
        while !self.empty.is_null() {
            let slab = self.empty;
            // SAFETY: slabs on the empty list are live slabs of this cache.
            self.empty = unsafe { (*slab).next };
            Self::release(ctx, slab);
        }
        self.n_empty = 0;
        // SAFETY: `current`, if set, is a live slab of this cache.
        if !self.current.is_null() && unsafe { (*self.current).inuse } == 0 {
            Self::release(ctx, self.current);
            self.current = ptr::null_mut();
        }
    }

    fn link_partial(&mut self, slab: *mut SlabHeader) {
        // SAFETY: `slab` and the partial list's head are live slabs of this cache.
        unsafe {
            (*slab).prev = ptr::null_mut();
            (*slab).next = self.partial;
            if !self.partial.is_null() {
                (*self.partial).prev = slab;
            }
        }
        self.partial = slab;
    }

    fn unlink_partial(&mut self, slab: *mut SlabHeader) {
        // SAFETY: `slab` is on the partial list, so it and its neighbours are live slabs
        // of this cache.
        unsafe {
            let (next, prev) = ((*slab).next, (*slab).prev);
            if prev.is_null() {
                self.partial = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
        }
    }
}
