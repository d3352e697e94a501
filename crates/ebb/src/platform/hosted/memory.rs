//! What `ebb::mem` holds hosted: the allocator and its rounding, and the page source that
//! grows the allocator from Linux, for an app that installs it as the process's
//! `#[global_allocator]` (natively `ebb-native` always does, over the VM's memory).

pub use ebb_mem::{GeneralPurposeAllocator, MmapSource, allocation_size};

/// The general-purpose allocator over Linux memory, ready for `#[global_allocator]`:
/// `HostedAllocator::new(MmapSource::new())`.
pub type HostedAllocator = GeneralPurposeAllocator<MmapSource>;
