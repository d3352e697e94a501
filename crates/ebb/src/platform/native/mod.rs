//! The native platform: the app is a ring-3 image on `ebb-native`, booted by `ebb-vmm`
//! (or a standard hypervisor), one event loop per vCPU.
//!
//! Defines the same names as `platform/hosted/` (see the crate root's "one switch"):
//! [`args`], [`print`], [`eprint`], [`memory_total`], [`memory_free`], [`unix_time`], the
//! `__entry!` macro `ebb::main!` expands to, and the modules `network` (what `ebb::net`
//! needs of the platform) and `memory` (what `ebb::mem` adds).
//!
//! The arguments are the command line the monitor passed (`ebb-vmm IMAGE -- ARGS` joins
//! `ARGS` with spaces), split on spaces. An argument that contains a space therefore
//! arrives natively as several: apps that must run both ways should not rely on one.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

pub(crate) mod memory;
pub(crate) mod network;
pub(crate) mod shm;

/// The app's arguments, without the program name: the boot command line split on spaces
/// (empty pieces dropped).
pub fn args() -> Vec<String> {
    crate::cmdline::split_cmdline(ebb_native::cmdline())
}

/// Writes formatted text into this core's console ring.
pub fn print(args: fmt::Arguments<'_>) {
    ebb_native::print!("{}", args);
}

/// Writes formatted text for errors into this core's console ring (a VM has one console).
pub fn eprint(args: fmt::Arguments<'_>) {
    ebb_native::print!("{}", args);
}

/// Bytes of memory this node's allocator manages: the guest memory the monitor handed it
/// (what `ebb run --mem` sizes, less the image and the runtime's own blocks), so an
/// application can refuse a configuration that cannot fit.
pub fn memory_total() -> Option<usize> {
    let pages = ebb_native::heap::report().pages.total_pages;
    Some(pages * 4096) // ebb-mem's pages
}

/// Bytes of this node's memory free in whole pages right now: the page allocator's free
/// pages (memory cached in slabs for small objects is not counted), so an application can
/// keep part of its heap for what it cannot refuse to allocate.
pub fn memory_free() -> Option<usize> {
    Some(ebb_native::heap::free_page_bytes())
}

/// The wall-clock time as a duration since the Unix epoch, or `None` under a standard
/// hypervisor's PVH boot, which has no clock source for it: the monitor's realtime clock
/// read once (one CLOCK hypercall, the first time) and advanced by
/// [`ebb_core::event::now`] since — cheap after the first call, and it never jumps.
pub fn unix_time() -> Option<core::time::Duration> {
    // (realtime − monotonic) at the first call, in nanoseconds; 0: unknown.
    static OFFSET: spin::Once<u64> = spin::Once::new();
    let offset = *OFFSET.call_once(|| {
        let (realtime, monotonic) = ebb_native::hypercall::clock();
        realtime.saturating_sub(monotonic)
    });
    (offset != 0).then(|| {
        core::time::Duration::from_nanos(offset)
            + core::time::Duration::from_nanos(ebb_core::event::now().as_nanos())
    })
}

/// What `ebb::main!` expands to; not part of the API.
pub(crate) mod entry {
    pub use ebb_native;
}

/// Natively, `ebb::main!(app_main)` is `ebb_native::runtime_entry!(app_main)`: an event
/// loop on every vCPU, `app_main` as core 0's first task, the VM's exit code its result.
#[doc(hidden)]
#[macro_export]
macro_rules! __entry {
    ($main:path) => {
        $crate::__private::ebb_native::runtime_entry!($main);
    };
    // Natively the core count is the VM's vCPUs, fixed before the image runs (`ebb run
    // --cpus`, which reads the app's own flag when --cpus is not given): the function is
    // only type-checked.
    ($main:path, cores = $cores:path) => {
        const _: fn(&[$crate::__private::String]) -> ::core::option::Option<usize> = $cores;
        $crate::__private::ebb_native::runtime_entry!($main);
    };
}
