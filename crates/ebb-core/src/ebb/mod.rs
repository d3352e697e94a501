//! Elastic Building Blocks: the object model every part of Ebbflow is written in.
//!
//! An Ebb is a system-wide object named by an [`EbbId`]. Each core reaches it through its
//! own *representative* (rep): [`EbbRef::rep`] looks the id up in the calling core's
//! translation table ([`crate::percore`]); on the first call from a core the slot is empty,
//! and the Ebb's [`Ebb::miss`] handler builds or fetches that core's rep, which is installed
//! so every later call takes the fast path — one load, one well-predicted branch.
//!
//! Two common shapes come ready-made: [`SharedEbb`] (one rep for every core, for
//! read-mostly or internally synchronized objects) and [`MulticoreEbb`] (one rep per core,
//! built lazily, for per-core state such as allocators, counters and connection tables).
//! Miss handlers find their per-node data in the [`LocalIdMap`].
//!
//! ## Invariants
//!
//! * An id is bound to exactly one Ebb type for the life of the node: the per-core table
//!   stores untyped pointers and `EbbRef<T>` reinterprets them as `T::Rep`. Safe code can
//!   only create an `EbbRef` through a constructor that allocates a fresh id or checks the
//!   type bound in the [`LocalIdMap`]; [`EbbRef::from_id_unchecked`] is `unsafe` for this reason.
//! * Ids are never reused: a stale rep pointer in some core's table must never be read as
//!   a different type.
//! * Representatives live as long as the node (`&'static`), as in EbbRT.

mod id;
mod local_id_map;
#[allow(unsafe_code)] // listed in the crate root
mod multicore;
#[allow(unsafe_code)] // listed in the crate root
mod reference;
#[allow(unsafe_code)] // listed in the crate root
mod shared;

pub use crate::MAX_CORES;
pub use crate::percore::MAX_EBBS;
pub use id::{EbbId, EbbIdAllocator, FIRST_DYNAMIC_ID, FIRST_GLOBAL_ID};
pub use local_id_map::{LocalIdMap, local_id_map};
pub use multicore::MulticoreEbb;
pub use reference::{Ebb, EbbRef};
pub use shared::SharedEbb;

use core::fmt;

/// Why an Ebb could not be created or resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EbbError {
    /// Every dynamic id of this node is in use.
    IdsExhausted,
    /// The id was never bound to an object in the [`LocalIdMap`].
    Unbound(EbbId),
    /// The id is bound to an object of another type.
    WrongType(EbbId),
    /// The id is already bound (binding a static id twice).
    AlreadyBound(EbbId),
    /// The id is outside the static range (for [`EbbId::new_static`]-style binding).
    NotStatic(EbbId),
    /// The id is outside the global range (for binding a distributed Ebb's local rep).
    NotGlobal(EbbId),
    /// A per-core rep was requested on a thread that is not an Ebbflow core.
    NotOnCore,
    /// The core index is beyond what a multicore Ebb supports.
    CoreOutOfRange,
}

impl fmt::Display for EbbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EbbError::IdsExhausted => write!(f, "no free Ebb ids left on this node"),
            EbbError::Unbound(id) => write!(f, "{id} is not bound to any object"),
            EbbError::WrongType(id) => write!(f, "{id} is bound to an object of another type"),
            EbbError::AlreadyBound(id) => write!(f, "{id} is already bound"),
            EbbError::NotStatic(id) => write!(f, "{id} is not in the static id range"),
            EbbError::NotGlobal(id) => write!(f, "{id} is not in the global id range"),
            EbbError::NotOnCore => write!(f, "not running on an Ebbflow core"),
            EbbError::CoreOutOfRange => write!(f, "core index beyond the multicore Ebb limit"),
        }
    }
}

impl core::error::Error for EbbError {}
