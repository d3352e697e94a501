//! Slab allocation: fixed-size objects from per-core caches, after Linux's SLQB.
//!
//! Each core has its own cache per object size — a *current* slab it allocates from, a
//! list of partial slabs and a few empty ones — reached without locks or atomics, because
//! a core runs one event at a time and only that core touches its cache. Slabs come whole
//! from the [`PageAllocator`]. Freeing an object on the core that owns its slab (the
//! owner is in the slab header, found by masking the address) is a push onto the slab's
//! free list. Freeing it on another core pushes it onto the owner's lock-free *remote-free
//! list*; the owner takes the whole list with one atomic swap on its next allocation and
//! returns each object to its slab. So no slab state is ever shared between cores.
//!
//! Threads that are not Ebbflow cores (`percore::current_core()` is `None`, e.g. a test
//! harness thread or a hosted helper thread) share one extra cache slot behind a spin
//! lock.
//!
//! The per-core caches are a fixed array indexed by core, not a `MulticoreEbb`: the
//! general-purpose allocator is built on the same machinery and is the global allocator,
//! so it cannot use an Ebb whose miss handler allocates.

mod provider;
mod raw;

pub(crate) use provider::PageProvider;

pub(crate) use raw::{ClassParams, MAX_SLAB_ALIGN};

use crate::error::AllocError;
use crate::page::{PAGE_SIZE, PageAllocator};
use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use ebb_core::ebb::MAX_CORES;
use raw::{ClassCache, ClassCtx, FreeObj};

/// Slot used by every thread that is not an Ebbflow core.
pub(crate) const OFF_CORE: usize = MAX_CORES;
const SLOTS: usize = MAX_CORES + 1;

/// The calling thread's cache slot.
#[inline]
pub(crate) fn current_slot() -> usize {
    match ebb_core::percore::current_core() {
        Some(core) if core.index() < MAX_CORES => core.index(),
        _ => OFF_CORE,
    }
}

/// Remote-free lists of one core, one per class, on their own cache lines: other cores
/// write them, the owner only reads them on allocation.
#[repr(C, align(64))]
struct RemoteLists<const N: usize>([AtomicPtr<FreeObj>; N]);

/// One core's caches for `N` classes.
#[repr(C, align(64))]
struct CoreSlot<const N: usize> {
    caches: UnsafeCell<[ClassCache; N]>,
    remote: RemoteLists<N>,
}

/// Per-core caches for `N` size classes: the engine of both [`SlabAllocator`] (one class)
/// and the general-purpose allocator (all classes).
pub(crate) struct CoreSlots<const N: usize> {
    slots: [CoreSlot<N>; SLOTS],
    off_core_lock: spin::Mutex<()>,
    slabs: [AtomicUsize; N],
}

// SAFETY: a slot's caches are touched only by the thread running as that core (ebb-core's
// invariant: one thread per core id at a time), or under `off_core_lock` for the off-core
// slot; the raw slab pointers inside refer to memory owned by this allocator. Everything
// else is atomic.
unsafe impl<const N: usize> Sync for CoreSlots<N> {}
// SAFETY: the caches own their slabs; moving the whole structure moves that ownership.
unsafe impl<const N: usize> Send for CoreSlots<N> {}

impl<const N: usize> CoreSlots<N> {
    pub(crate) const fn new() -> Self {
        CoreSlots {
            slots: [const {
                CoreSlot {
                    caches: UnsafeCell::new([const { ClassCache::NEW }; N]),
                    remote: RemoteLists([const { AtomicPtr::new(core::ptr::null_mut()) }; N]),
                }
            }; SLOTS],
            off_core_lock: spin::Mutex::new(()),
            slabs: [const { AtomicUsize::new(0) }; N],
        }
    }

    /// Runs `f` on slot `slot`'s cache of `params`' class, with the lock if off core.
    #[inline(always)]
    fn with_cache<P: PageProvider, R>(
        &self,
        slot: usize,
        params: &ClassParams,
        pages: &P,
        f: impl FnOnce(&mut ClassCache, &ClassCtx<'_, P>) -> R,
    ) -> R {
        let class = params.index as usize;
        let s = &self.slots[slot];
        let ctx = ClassCtx {
            params,
            owner: slot as u32,
            remote: &s.remote.0[class],
            slabs: &self.slabs[class],
            pages,
        };
        let _guard = (slot == OFF_CORE).then(|| self.off_core_lock.lock());
        // Soundness: `slot` is the calling thread's own slot (every caller passes
        // `current_slot()`, or has `&mut self`), so no other thread touches these caches
        // concurrently, and for the shared off-core slot we hold its lock. Nothing inside
        // `f` re-enters the allocator (pages come from the page allocator, which does not
        // allocate), so this is the only reference.
        // SAFETY: by the argument just above.
        let cache = unsafe { &mut (*s.caches.get())[class] };
        f(cache, &ctx)
    }

    /// The fast path, inlined into callers: on a core, with nothing on the remote list,
    /// pop from the current slab. Everything else goes through [`Self::alloc_slow`].
    #[inline(always)]
    pub(crate) fn alloc<P: PageProvider>(
        &self,
        params: &ClassParams,
        pages: &P,
    ) -> Result<NonNull<u8>, AllocError> {
        let slot = current_slot();
        if slot != OFF_CORE {
            let (s, class) = (&self.slots[slot], params.index as usize);
            if s.remote.0[class].load(Ordering::Relaxed).is_null() {
                // SAFETY: `slot` is the calling core's own slot (not the shared off-core
                // one), so only this thread touches its caches, and nothing else borrows
                // them during this call.
                let cache = unsafe { &mut (*s.caches.get())[class] };
                if let Some(obj) = cache.pop_current(params) {
                    return Ok(obj);
                }
            }
        }
        self.alloc_slow(slot, params, pages)
    }

    #[inline(never)]
    fn alloc_slow<P: PageProvider>(
        &self,
        slot: usize,
        params: &ClassParams,
        pages: &P,
    ) -> Result<NonNull<u8>, AllocError> {
        self.with_cache(slot, params, pages, |cache, ctx| cache.alloc(ctx))
    }

    /// # Safety
    ///
    /// `obj` was allocated by `alloc` with the same `params` (and page provider) from this
    /// structure, and the caller gives it up.
    #[inline]
    pub(crate) unsafe fn free<P: PageProvider>(
        &self,
        params: &ClassParams,
        pages: &P,
        obj: NonNull<u8>,
    ) {
        // SAFETY: `obj` is a live object of this class (caller).
        let owner = unsafe { params.owner_of(obj) };
        let me = current_slot();
        if owner == me && me != OFF_CORE {
            let s = &self.slots[me];
            // SAFETY: `me` is the calling core's own slot, as in `alloc`.
            let cache = unsafe { &mut (*s.caches.get())[params.index as usize] };
            // SAFETY: the object is ours (same slot), live, and given up by the caller.
            if unsafe { cache.free_fast(params, obj) } {
                return;
            }
        }
        if owner == me {
            self.with_cache(me, params, pages, |cache, ctx| {
                // SAFETY: the object is ours (same slot), live, and given up by the caller.
                unsafe { cache.free_local(ctx, obj) }
            });
        } else {
            let remote = &self.slots[owner].remote.0[params.index as usize];
            // SAFETY: the remote list is the owner's for this class; the object is live,
            // of this class, in a slab of that owner, and given up by the caller.
            unsafe { raw::push_remote(remote, obj) };
        }
    }

    /// Releases the calling core's unused slabs of the class to the page allocator.
    pub(crate) fn trim<P: PageProvider>(&self, params: &ClassParams, pages: &P) {
        self.with_cache(current_slot(), params, pages, |cache, ctx| cache.trim(ctx));
    }

    /// Releases every slot's unused slabs (exclusive access: no core is allocating).
    pub(crate) fn trim_all<P: PageProvider>(&mut self, params: &ClassParams, pages: &P) {
        for slot in 0..SLOTS {
            self.with_cache(slot, params, pages, |cache, ctx| cache.trim(ctx));
        }
    }

    /// Slabs of the class currently taken from the page allocator.
    pub(crate) fn live_slabs(&self, class: usize) -> usize {
        self.slabs[class].load(Ordering::Relaxed)
    }
}

/// A slab allocator for objects of one layout, with per-core caches and remote-free lists,
/// taking slabs from a [`PageAllocator`].
///
/// Create one per object type that is allocated often (EbbRT gives each a slab Ebb). The
/// general-purpose allocator uses the same engine for each of its size classes.
pub struct SlabAllocator<'p> {
    params: ClassParams,
    pages: &'p PageAllocator,
    cores: CoreSlots<1>,
}

impl fmt::Debug for SlabAllocator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlabAllocator")
            .field("object_size", &self.params.size)
            .field("align", &self.params.align)
            .field("slab_order", &self.params.slab_order)
            .field("live_slabs", &self.live_slabs())
            .finish()
    }
}

impl<'p> SlabAllocator<'p> {
    /// A slab allocator for objects of `layout`, taking slabs from `pages`. The object size
    /// is rounded up to a multiple of 8 (and of the alignment). Fails with
    /// [`AllocError::TooLarge`] if the alignment exceeds 64 bytes or no slab of the largest
    /// order would hold an object.
    pub fn new(pages: &'p PageAllocator, layout: Layout) -> Result<Self, AllocError> {
        let align = layout.align();
        let size = layout.size().max(8).next_multiple_of(align.max(8));
        let biggest = crate::page::MAX_BLOCK - 2 * MAX_SLAB_ALIGN;
        if align > MAX_SLAB_ALIGN || size > biggest / 2 {
            return Err(AllocError::too_large(layout));
        }
        let params = ClassParams::new(size, 0);
        debug_assert!(params.align >= align);
        Ok(SlabAllocator {
            params,
            pages,
            cores: CoreSlots::new(),
        })
    }

    /// Allocates one object (uninitialized) on the calling core's cache.
    #[inline]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        self.cores.alloc(&self.params, self.pages)
    }

    /// Frees an object, from any core: locally if this core owns its slab, otherwise onto
    /// the owner's remote-free list.
    ///
    /// # Safety
    ///
    /// 1. `obj` came from [`alloc`](Self::alloc) of this allocator and was not freed since.
    /// 2. Nothing uses the object afterwards.
    #[inline]
    pub unsafe fn free(&self, obj: NonNull<u8>) {
        // SAFETY: the caller's duties are `CoreSlots::free`'s.
        unsafe { self.cores.free(&self.params, self.pages, obj) }
    }

    /// Gives the calling core's unused slabs back to the page allocator (after draining
    /// its remote-free list).
    pub fn trim(&self) {
        self.cores.trim(&self.params, self.pages);
    }

    /// Object size in bytes (the layout's size, rounded up).
    pub fn object_size(&self) -> usize {
        self.params.size
    }

    /// Objects per slab.
    pub fn objects_per_slab(&self) -> usize {
        self.params.capacity
    }

    /// Bytes per slab (a page block of this size).
    pub fn slab_bytes(&self) -> usize {
        self.params.slab_bytes()
    }

    /// Slabs currently taken from the page allocator.
    pub fn live_slabs(&self) -> usize {
        self.cores.live_slabs(0)
    }
}

impl Drop for SlabAllocator<'_> {
    /// Gives every slab with no live object back to the page allocator. Slabs that still
    /// hold live objects stay allocated (leaked) rather than freed under a user.
    fn drop(&mut self) {
        let (params, pages) = (self.params, self.pages);
        self.cores.trim_all(&params, pages);
    }
}

const _: () = assert!(PAGE_SIZE.is_power_of_two());

#[cfg(test)]
mod tests;
