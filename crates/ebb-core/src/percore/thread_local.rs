//! The hosted backend (feature `std`): a core is a pinned thread, so the table and the core
//! context live in thread-locals. With a `const` initializer and no destructor,
//! `thread_local!` compiles to a plain `fs:`-relative access, so a table lookup is a single
//! load.

use super::MAX_EBBS;
use crate::CoreId;
use core::cell::Cell;
use core::ptr;

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
