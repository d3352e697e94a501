//! Memory: ebb-mem's general-purpose allocator (per-core slabs over a buddy page
//! allocator), which a native image always runs on (`ebb-native` installs it) and a
//! hosted app may install as its `#[global_allocator]` ([`HostedAllocator`], hosted only),
//! and the allocator's rounding ([`allocation_size`]), for an app that accounts its
//! memory by what the allocator really takes.

pub use crate::platform::memory::*;
