//! # ebb-core — the machine-independent heart of Ebbflow
//!
//! Everything an Ebbflow application is built from, independent of where it runs:
//!
//! * [`ebb`] — Elastic Building Blocks: system-wide [`EbbId`]s, [`EbbRef`]s that resolve to
//!   the calling core's *representative* through a per-core table, miss handlers, and the
//!   [`LocalIdMap`](ebb::LocalIdMap) where they find per-node data.
//! * [`event`] — one non-preemptive event loop per core: device events, synthetic events,
//!   idle handlers, timers, and an executor for `async` tasks that never leave their core.
//! * [`future`] — what EbbRT's futures gave and `core` lacks: a one-shot promise usable
//!   across cores, and the usual combinators.
//! * [`iobuf`] — zero-copy buffers and chains with headroom, and a cursor over chains.
//! * [`rcu`] — read-copy-update with the end of an event-loop iteration as the quiescent
//!   state, and a hash map whose reads take no locks.
//! * [`net`] — the application-facing TCP interface that every network backend implements.
//! * [`platform`] — the small seam a runtime (hosted Linux, native ring-3 guest, or a test
//!   double) fills in: waking a core, waiting for events, reading the clock.
//!
//! ## Invariants
//!
//! * A core runs one event at a time, to completion. Nothing here is preempted, so per-core
//!   state needs no locks: it is reached only from its own core (see [`percore`]).
//! * Time is passed in. No code in this crate reads a clock except through the platform,
//!   which is what makes the event-loop and timer tests deterministic.
//! * `unsafe` is confined to a few small modules, each block with a `// SAFETY:` comment,
//!   and denied everywhere else: `ebb::{multicore, reference, shared}` (representatives
//!   reached through type-erased pointers), `event::{runtime, task}` (the current runtime
//!   and a task's future cell), `iobuf::region` (the shared byte regions), `percore`
//!   (the per-core slots, through GS on native) and `rcu::hashmap` (lock-free readers,
//!   nodes freed after their grace period).
//!
//! The crate is `no_std` + `alloc`. The `std` feature selects the thread-local per-core
//! backend used by hosted runtimes and host-side tests.

#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod ebb;
pub mod event;
pub mod future;
pub mod iobuf;
pub mod net;
#[allow(unsafe_code)] // listed in the crate root
pub mod percore;
pub mod platform;
pub mod rcu;
#[cfg(feature = "std")]
pub mod testing;

pub use ebb::{Ebb, EbbId, EbbRef};
pub use iobuf::{IOBuf, IOBufChain};
pub use platform::{Instant, Platform};

/// The most cores a node (and so a multicore Ebb) may have.
pub const MAX_CORES: usize = 256;

/// Index of a core (an event loop) within one node, `0..num_cores`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreId(pub u32);

impl CoreId {
    /// The core's index, for addressing per-core arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl core::fmt::Display for CoreId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "core {}", self.0)
    }
}
