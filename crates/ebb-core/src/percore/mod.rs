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
//! block at its GS base instead (see `gs_layout`, present in that build).
//!
//! The two backends are `thread_local.rs` and `gs.rs`; one switch below picks one, and
//! both define the same names (`rep_slot`, `install_rep`, `clear_reps`, `current_core`,
//! `set_current_core`, `context_ptr`, `set_context_ptr`). Nothing outside this module
//! changes with the backend.
//!
//! Invariant: every slot of the table is either null or a pointer installed by
//! [`install_rep`] for exactly one Rust type, chosen by the Ebb that owns the id.

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

// The one backend switch: the same names from either file.
#[cfg_attr(feature = "std", path = "thread_local.rs")]
#[cfg_attr(not(feature = "std"), path = "gs.rs")]
mod backend;

pub use backend::*;
