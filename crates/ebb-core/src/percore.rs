//! The per-core seam: where the calling core finds its own state.
//!
//! Two things are per core and must be reachable without arguments:
//!
//! * the **Ebb translation table**, indexed by [`EbbId`](crate::EbbId), holding a pointer
//!   to this core's representative (null until the miss handler installs one);
//! * the **core context**: which core this is and a pointer to its event loop state.
//!
//! On a hosted platform (feature `std`) a core is a pinned thread, so both live in
//! thread-locals: with a `const` initializer and no destructor, `thread_local!` compiles to
//! a plain `fs:`-relative access, so a table lookup is a single load. A native ring-3 guest
//! (`target_os = "none"`, x86_64, no `std`) places the same data in the vCPU's per-core
//! block at its GS base instead (see `gs_layout`, present in that build); only this
//! module changes.
//!
//! Invariant: every slot of the table is either null or a pointer installed by
//! [`install_rep`] for exactly one Rust type, chosen by the Ebb that owns the id.

use crate::CoreId;
#[cfg(feature = "std")]
use core::cell::Cell;
use core::ptr;

/// Number of Ebb ids with a slot in the per-core translation table.
///
/// Ids are allocated below this bound (see [`crate::ebb::EbbIdAllocator`]), which is what
/// lets the fast path index the table without a bounds check. 4096 slots cost 32 KiB per core.
pub const MAX_EBBS: usize = 4096;

#[cfg(not(any(feature = "std", all(target_os = "none", target_arch = "x86_64"))))]
compile_error!(
    "ebb-core needs a per-core backend: enable feature `std` (hosted), build for \
     x86_64-unknown-none (native, GS-based), or add one for this target"
);

#[cfg(not(feature = "std"))]
pub use gs::layout as gs_layout;

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
#[cfg(feature = "std")]
#[inline(always)]
pub(crate) fn rep_slot(index: usize) -> *const () {
    debug_assert!(index < MAX_EBBS);
    // `EbbId`s are below MAX_EBBS (a power of two), so the mask changes nothing; it lets the
    // compiler drop the bounds check and keep the fast path at one load and one branch.
    const _: () = assert!(MAX_EBBS.is_power_of_two());
    EBB_TABLE.with(|table| table[index & (MAX_EBBS - 1)].get())
}

/// Installs `rep` as this core's representative for Ebb slot `index`.
#[cfg(feature = "std")]
pub(crate) fn install_rep(index: usize, rep: *const ()) {
    EBB_TABLE.with(|table| table[index].set(rep));
}

/// Clears every slot of this core's table (a core leaving a runtime).
#[cfg(feature = "std")]
pub(crate) fn clear_reps() {
    EBB_TABLE.with(|table| table.iter().for_each(|slot| slot.set(ptr::null())));
}

/// The core the calling thread runs as, or `None` outside any Ebbflow core.
#[cfg(feature = "std")]
#[inline]
pub fn current_core() -> Option<CoreId> {
    let raw = CORE_ID.with(Cell::get);
    (raw != u32::MAX).then_some(CoreId(raw))
}

/// Declares that the calling thread is `core` (or no core). Used by runtimes and test
/// platforms when a thread starts or stops acting as a core.
#[cfg(feature = "std")]
pub fn set_current_core(core: Option<CoreId>) {
    CORE_ID.with(|c| c.set(core.map_or(u32::MAX, |c| c.0)));
}

/// The opaque event-loop context pointer of this core (null outside a core).
#[cfg(feature = "std")]
#[inline(always)]
pub(crate) fn context_ptr() -> *const () {
    CORE_CONTEXT.with(Cell::get)
}

#[cfg(feature = "std")]
pub(crate) fn set_context_ptr(ctx: *const ()) {
    CORE_CONTEXT.with(|c| c.set(ctx));
}

// ---------------------------------------------------------------------------------------
// Native backend: the per-core block at the GS base.
// ---------------------------------------------------------------------------------------

/// Reads this core's representative pointer for Ebb slot `index` (null if none yet): one
/// `gs:`-relative load.
///
/// `index` must be below [`MAX_EBBS`]; `EbbId` guarantees it.
#[cfg(not(feature = "std"))]
#[inline(always)]
pub(crate) fn rep_slot(index: usize) -> *const () {
    debug_assert!(index < MAX_EBBS);
    const _: () = assert!(MAX_EBBS.is_power_of_two());
    gs::load_slot(index & (MAX_EBBS - 1))
}

/// Installs `rep` as this core's representative for Ebb slot `index`.
#[cfg(not(feature = "std"))]
pub(crate) fn install_rep(index: usize, rep: *const ()) {
    assert!(index < MAX_EBBS, "Ebb slot {index} out of range");
    gs::store_slot(index, rep);
}

/// Clears every slot of this core's table (a core leaving a runtime).
#[cfg(not(feature = "std"))]
pub(crate) fn clear_reps() {
    (0..MAX_EBBS).for_each(|index| gs::store_slot(index, ptr::null()));
}

/// The core the calling vCPU runs as, or `None` outside any Ebbflow core.
#[cfg(not(feature = "std"))]
#[inline]
pub fn current_core() -> Option<CoreId> {
    // Stored as id + 1 so that the all-zero block the monitor hands over means "no core".
    gs::load_core_plus_one().checked_sub(1).map(CoreId)
}

/// Declares that the calling vCPU is `core` (or no core). Used by runtimes when a vCPU
/// starts or stops acting as a core.
#[cfg(not(feature = "std"))]
pub fn set_current_core(core: Option<CoreId>) {
    gs::store_core_plus_one(core.map_or(0, |c| c.0.wrapping_add(1)));
}

/// The opaque event-loop context pointer of this core (null outside a core).
#[cfg(not(feature = "std"))]
#[inline(always)]
pub(crate) fn context_ptr() -> *const () {
    gs::load_context()
}

#[cfg(not(feature = "std"))]
pub(crate) fn set_context_ptr(ctx: *const ()) {
    gs::store_context(ctx);
}

/// The GS-relative accesses of the native backend.
///
/// Contract with the platform (ebb-native and the monitor set it up before any ebb-core
/// code runs on a vCPU): the GS base points at this vCPU's own per-core block, at least
/// [`layout::END`] bytes, 8-byte aligned, mapped read-write for the whole run, written by
/// no other vCPU, and all zero from [`layout::BASE`] on at boot. Bytes below
/// [`layout::BASE`] belong to the platform and are never touched here.
#[cfg(not(feature = "std"))]
mod gs {
    use core::arch::asm;

    /// Byte offsets of ebb-core's data from the GS base.
    pub mod layout {
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
    pub(super) fn load_slot(index: usize) -> *const () {
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
                table = const layout::TABLE,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        rep
    }

    pub(super) fn store_slot(index: usize, rep: *const ()) {
        debug_assert!(index < super::MAX_EBBS);
        // SAFETY: as in `load_slot`; callers check `index < MAX_EBBS`, so the store stays in
        // this vCPU's table, which no one else reads or writes.
        unsafe {
            asm!(
                "mov qword ptr gs:[{index} * 8 + {table}], {rep}",
                rep = in(reg) rep,
                index = in(reg) index,
                table = const layout::TABLE,
                options(nostack, preserves_flags),
            );
        }
    }

    #[inline(always)]
    pub(super) fn load_core_plus_one() -> u32 {
        let raw: u32;
        // SAFETY: a 4-byte read inside this vCPU's block (module contract).
        unsafe {
            asm!(
                "mov {raw:e}, dword ptr gs:[{off}]",
                raw = out(reg) raw,
                off = const layout::CORE_ID,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        raw
    }

    pub(super) fn store_core_plus_one(raw: u32) {
        // SAFETY: a 4-byte write inside this vCPU's block (module contract).
        unsafe {
            asm!(
                "mov dword ptr gs:[{off}], {raw:e}",
                raw = in(reg) raw,
                off = const layout::CORE_ID,
                options(nostack, preserves_flags),
            );
        }
    }

    #[inline(always)]
    pub(super) fn load_context() -> *const () {
        let ctx: *const ();
        // SAFETY: an 8-byte read inside this vCPU's block (module contract).
        unsafe {
            asm!(
                "mov {ctx}, qword ptr gs:[{off}]",
                ctx = out(reg) ctx,
                off = const layout::CONTEXT,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        ctx
    }

    pub(super) fn store_context(ctx: *const ()) {
        // SAFETY: an 8-byte write inside this vCPU's block (module contract).
        unsafe {
            asm!(
                "mov qword ptr gs:[{off}], {ctx}",
                ctx = in(reg) ctx,
                off = const layout::CONTEXT,
                options(nostack, preserves_flags),
            );
        }
    }
}
