//! The native backend (`target_os = "none"`, x86_64, no `std`): the table and the core
//! context live in the vCPU's per-core block at its GS base, reached with `gs:`-relative
//! loads and stores.
//!
//! Contract with the platform (ebb-native and the monitor set it up before any ebb-core
//! code runs on a vCPU): the GS base points at this vCPU's own per-core block, at least
//! [`gs_layout::END`] bytes, 8-byte aligned, mapped read-write for the whole run, written by
//! no other vCPU, and all zero from [`gs_layout::BASE`] on at boot. Bytes below
//! [`gs_layout::BASE`] belong to the platform and are never touched here.

use super::MAX_EBBS;
use crate::CoreId;
use core::arch::asm;
use core::ptr;

/// Reads this core's representative pointer for Ebb slot `index` (null if none yet): one
/// `gs:`-relative load.
///
/// `index` must be below [`MAX_EBBS`]; `EbbId` guarantees it.
#[inline(always)]
pub(crate) fn rep_slot(index: usize) -> *const () {
    debug_assert!(index < MAX_EBBS);
    const _: () = assert!(MAX_EBBS.is_power_of_two());
    load_slot(index & (MAX_EBBS - 1))
}

/// Installs `rep` as this core's representative for Ebb slot `index`.
pub(crate) fn install_rep(index: usize, rep: *const ()) {
    assert!(index < MAX_EBBS, "Ebb slot {index} out of range");
    store_slot(index, rep);
}

/// Clears every slot of this core's table (a core leaving a runtime).
pub(crate) fn clear_reps() {
    (0..MAX_EBBS).for_each(|index| store_slot(index, ptr::null()));
}

/// The core the calling vCPU runs as, or `None` outside any Ebbflow core.
#[inline]
pub fn current_core() -> Option<CoreId> {
    // Stored as id + 1 so that the all-zero block the monitor hands over means "no core".
    load_core_plus_one().checked_sub(1).map(CoreId)
}

/// Declares that the calling vCPU is `core` (or no core). Used by runtimes when a vCPU
/// starts or stops acting as a core.
pub fn set_current_core(core: Option<CoreId>) {
    store_core_plus_one(core.map_or(0, |c| c.0.wrapping_add(1)));
}

/// The opaque event-loop context pointer of this core (null outside a core).
#[inline(always)]
pub(crate) fn context_ptr() -> *const () {
    load_context()
}

pub(crate) fn set_context_ptr(ctx: *const ()) {
    store_context(ctx);
}

/// Byte offsets of ebb-core's data from the GS base.
pub mod gs_layout {
    use super::super::MAX_EBBS;

    /// Bytes below this belong to the platform (ebb-native's `PerCore` header).
    pub const BASE: usize = 256;
    /// `u32`: this vCPU's core id plus one; 0 while it runs no core.
    pub const CORE_ID: usize = BASE;
    /// `*const ()`: the running event loop's context (null outside a core).
    pub const CONTEXT: usize = BASE + 8;
    /// The Ebb translation table: [`MAX_EBBS`] pointers (page-aligned).
    pub const TABLE: usize = 4096;
    /// End of ebb-core's data: the per-core block must be at least this long.
    pub const END: usize = TABLE + MAX_EBBS * 8;

    const _: () = assert!(CONTEXT + 8 <= TABLE && TABLE.is_multiple_of(8));
}

#[inline(always)]
fn load_slot(index: usize) -> *const () {
    let rep: *const ();
    // Soundness: by the module contract GS points at this vCPU's block and
    // `TABLE + index * 8` lies inside it (callers mask `index` below MAX_EBBS). A plain
    // read of memory only this vCPU writes; `pure, readonly` lets the compiler merge
    // repeated lookups, and the writers below are not `readonly`, so none is skipped.
    // SAFETY: by the argument just above.
    unsafe {
        asm!(
            "mov {rep}, qword ptr gs:[{index} * 8 + {table}]",
            rep = out(reg) rep,
            index = in(reg) index,
            table = const gs_layout::TABLE,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    rep
}

fn store_slot(index: usize, rep: *const ()) {
    debug_assert!(index < super::MAX_EBBS);
    // SAFETY: as in `load_slot`; callers check `index < MAX_EBBS`, so the store stays in
    // this vCPU's table, which no one else reads or writes.
    unsafe {
        asm!(
            "mov qword ptr gs:[{index} * 8 + {table}], {rep}",
            rep = in(reg) rep,
            index = in(reg) index,
            table = const gs_layout::TABLE,
            options(nostack, preserves_flags),
        );
    }
}

#[inline(always)]
fn load_core_plus_one() -> u32 {
    let raw: u32;
    // SAFETY: a 4-byte read inside this vCPU's block (module contract).
    unsafe {
        asm!(
            "mov {raw:e}, dword ptr gs:[{off}]",
            raw = out(reg) raw,
            off = const gs_layout::CORE_ID,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    raw
}

fn store_core_plus_one(raw: u32) {
    // SAFETY: a 4-byte write inside this vCPU's block (module contract).
    unsafe {
        asm!(
            "mov dword ptr gs:[{off}], {raw:e}",
            raw = in(reg) raw,
            off = const gs_layout::CORE_ID,
            options(nostack, preserves_flags),
        );
    }
}

#[inline(always)]
fn load_context() -> *const () {
    let ctx: *const ();
    // SAFETY: an 8-byte read inside this vCPU's block (module contract).
    unsafe {
        asm!(
            "mov {ctx}, qword ptr gs:[{off}]",
            ctx = out(reg) ctx,
            off = const gs_layout::CONTEXT,
            options(nostack, preserves_flags, readonly, pure),
        );
    }
    ctx
}

fn store_context(ctx: *const ()) {
    // SAFETY: an 8-byte write inside this vCPU's block (module contract).
    unsafe {
        asm!(
            "mov qword ptr gs:[{off}], {ctx}",
            ctx = in(reg) ctx,
            off = const gs_layout::CONTEXT,
            options(nostack, preserves_flags),
        );
    }
}
