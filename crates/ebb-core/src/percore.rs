//! The per-core seam: where the calling core finds its own state.
//!
//! Two things are per core and must be reachable without arguments:
//!
//! * the **Ebb translation table**, indexed by [`EbbId`](crate::EbbId), holding a pointer
//!   to this core's representative (null until the miss handler installs one);
//! * the **core context**: which core this is and a pointer to its event loop state.
//!
//! On a hosted platform a core is a pinned thread, so both live in thread-locals: with a
//! `const` initializer and no destructor, `thread_local!` compiles to a plain `fs:`-relative
//! access, so a table lookup is a single load. A native (ring-3 guest) platform places the
//! same data at its GS base instead; only this module changes.
//!
//! Invariant: every slot of the table is either null or a pointer installed by
//! [`install_rep`] for exactly one Rust type, chosen by the Ebb that owns the id.

use crate::CoreId;
use core::cell::Cell;
use core::ptr;

/// Number of Ebb ids with a slot in the per-core translation table.
///
/// Ids are allocated below this bound (see [`crate::ebb::EbbIdAllocator`]), which is what
/// lets the fast path index the table without a bounds check. 4096 slots cost 32 KiB per core.
pub const MAX_EBBS: usize = 4096;

#[cfg(not(feature = "std"))]
compile_error!(
    "ebb-core needs a per-core backend: enable feature `std` (hosted) or add one for this target"
);

#[cfg(feature = "std")]
std::thread_local! {
    static EBB_TABLE: [Cell<*const ()>; MAX_EBBS] =
        const { [const { Cell::new(ptr::null()) }; MAX_EBBS] };
    static CORE_ID: Cell<u32> = const { Cell::new(u32::MAX) };
    static CORE_CONTEXT: Cell<*const ()> = const { Cell::new(ptr::null()) };
}

/// Reads this core's representative pointer for Ebb slot `index` (null if none yet).
///
/// `index` must be below [`MAX_EBBS`]; `EbbId` guarantees it.
#[inline(always)]
pub(crate) fn rep_slot(index: usize) -> *const () {
    debug_assert!(index < MAX_EBBS);
    // `EbbId`s are below MAX_EBBS (a power of two), so the mask changes nothing; it lets the
    // compiler drop the bounds check and keep the fast path at one load and one branch.
    const _: () = assert!(MAX_EBBS.is_power_of_two());
    EBB_TABLE.with(|table| table[index & (MAX_EBBS - 1)].get())
}

/// Installs `rep` as this core's representative for Ebb slot `index`.
pub(crate) fn install_rep(index: usize, rep: *const ()) {
    EBB_TABLE.with(|table| table[index].set(rep));
}

/// Clears every slot of this core's table (a core leaving a runtime).
pub(crate) fn clear_reps() {
    EBB_TABLE.with(|table| table.iter().for_each(|slot| slot.set(ptr::null())));
}

/// The core the calling thread runs as, or `None` outside any Ebbflow core.
#[inline]
pub fn current_core() -> Option<CoreId> {
    let raw = CORE_ID.with(Cell::get);
    (raw != u32::MAX).then_some(CoreId(raw))
}

/// Declares that the calling thread is `core` (or no core). Used by runtimes and test
/// platforms when a thread starts or stops acting as a core.
pub fn set_current_core(core: Option<CoreId>) {
    CORE_ID.with(|c| c.set(core.map_or(u32::MAX, |c| c.0)));
}

/// The opaque event-loop context pointer of this core (null outside a core).
#[inline(always)]
pub(crate) fn context_ptr() -> *const () {
    CORE_CONTEXT.with(Cell::get)
}

pub(crate) fn set_context_ptr(ctx: *const ()) {
    CORE_CONTEXT.with(|c| c.set(ctx));
}
