//! # ebb — the Ebbflow facade
//!
//! What an application depends on. It re-exports the object model, event loop, futures,
//! IOBufs and RCU from `ebb-core`, and picks the runtime the application runs on **by
//! target**: built for Linux it links the hosted runtime (`ebb-hosted`: a process, one
//! pinned event loop per core); built for `x86_64-unknown-none` it links the native runtime
//! (`ebb-native`: a ring-3 image booted by `ebb-vmm`, one event loop per vCPU). Cargo
//! resolves the two dependency sets per target, so neither build sees the other's.
//!
//! ## Writing an app once
//!
//! An app that should build both ways uses only what this crate offers in both worlds —
//! the entry macro [`main!`], [`println!`]/[`print!`], [`args`] and everything re-exported
//! from `ebb-core` (`spawn_on`, `run_on`, `sleep`, `timeout`, `core_id`, `num_cores`, Ebbs,
//! RCU, ...) — and opens with the only target-specific lines it needs:
//!
//! ```ignore
//! #![cfg_attr(target_os = "none", no_std, no_main)]
//! extern crate alloc;
//!
//! async fn app_main() -> i32 {
//!     ebb::println!("hello from core {} of {}", ebb::core_id().0, ebb::num_cores());
//!     0
//! }
//!
//! ebb::main!(app_main);
//! ```
//!
//! `cargo build -p APP` gives a Linux executable; `cargo build -p APP --target
//! x86_64-unknown-none` (from the repository root, whose `.cargo/config.toml` adds the
//! linker script) gives a native image for `ebb-vmm`. The `ebb` command (`crates/ebb-cli`)
//! does both and picks one to run.
//!
//! Networking is [`net`]: one API over Linux sockets, ebb-net on a TAP device (hosted)
//! and ebb-net on virtio-net (native), the backend chosen once when the app starts its
//! network. The hosted-only [`run`] with a [`Config`] stays for programs that set up the
//! hosted runtime themselves.
//!
//! Memory is [`mem`]: the general-purpose allocator a native image always runs on, which a
//! hosted app may install as its global allocator, and its rounding (`allocation_size`).
//!
//! ## Invariants
//!
//! * Exactly one runtime is linked: `ebb-hosted` when `target_os != "none"`, `ebb-native`
//!   when `target_os = "none"`. The crate is `no_std` + `alloc` in the second case.
//! * Everything that differs between the two is in `platform/hosted/` or
//!   `platform/native/`, which define the same names; one `cfg` picks one (below) and the
//!   rest of the crate is written once.
//! * [`main!`] runs the app's `async fn() -> i32` as core 0's first task on every core's
//!   event loop, and the process (hosted) or VM (native) exits with its result.
//! * No `unsafe` here.

#![cfg_attr(target_os = "none", no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

// The one platform switch (Hubris' `arch` module): `platform/hosted/` and
// `platform/native/` define the same names — `args`, `print`, `eprint`, `memory_total`,
// `memory_free`, `unix_time`, the `__entry!` macro, and the modules `network` (what `net`
// needs) and `memory` (what `mem` adds) — and the hosted side adds its runtime's options
// and `run`. Everything outside `platform/` is written once.
#[cfg_attr(not(target_os = "none"), path = "platform/hosted/mod.rs")]
#[cfg_attr(target_os = "none", path = "platform/native/mod.rs")]
mod platform;

mod cmdline;
pub mod mem;
pub mod net;
pub mod shm;

pub use platform::*;

pub use ebb_core::ebb::{
    EbbError, EbbId, FIRST_GLOBAL_ID, LocalIdMap, MAX_EBBS, MulticoreEbb, SharedEbb, local_id_map,
};
pub use ebb_core::event::{
    Elapsed, Handle, IdleId, IdleStatus, JoinHandle, SpawnError, add_idle_handler, at_core_exit,
    core_id, now, num_cores, remove_idle_handler, run_on, shutdown, sleep, sleep_until,
    spawn_local, spawn_local_on, spawn_on, timeout, yield_now,
};
pub use ebb_core::iobuf::{self, Cursor, IOBuf, IOBufChain};
pub use ebb_core::{CoreId, Ebb, EbbRef, Instant, future, rcu};

/// What the macros expand to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::platform::entry::*;
    pub use crate::platform::{eprint, print};
    pub use alloc::string::String;
}

/// Declares the app's entry point: `ebb::main!(app_main);` with `async fn app_main() -> i32`
/// (any `fn() -> impl Future<Output = i32> + 'static` will do; it must not be called `main`).
///
/// * Hosted, it defines `fn main()`: the hosted runtime starts with one pinned event loop
///   per core — [`CPUS_ENV`] (`EBB_CPUS`) cores if that variable is set, else every CPU the
///   process may run on — each polling for [`IDLE_POLL_ENV`] (`EBB_IDLE_POLL_US`, default
///   10) microseconds when idle before it sleeps; `app_main` runs as core 0's first task, and the process exits
///   with its result once it completes (every loop stops). A bad `EBB_CPUS` exits with 2,
///   a panic on a core with 101 (the monitor's code for a guest panic), another runtime
///   failure with 1.
/// * Native, it is `ebb_native::runtime_entry!(app_main)`: an event loop on every vCPU,
///   `app_main` as core 0's first task, the VM's exit code is its result.
///
/// `ebb::main!(app_main, cores = requested)` with `fn requested(args: &[String]) ->
/// Option<usize>`: an app whose own flag sets its core count (memcached's `-t N`).
/// Hosted, the runtime starts with `requested(&ebb::args())` cores when that is `Some`
/// (an `EBB_CPUS` that says otherwise is refused, exit 2: [`hosted_cores_for`]);
/// natively the vCPUs decide and `requested` is not called (`ebb run` reads the flag
/// instead when no `--cpus` is given; see ebb-cli).
#[macro_export]
macro_rules! main {
    ($main:path) => {
        $crate::__entry!($main);
    };
    ($main:path, cores = $cores:path) => {
        $crate::__entry!($main, cores = $cores);
    };
}

/// Prints to standard output (hosted) or this core's console ring (native).
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::__private::print(::core::format_args!($($arg)*))
    };
}

/// Prints a line to standard output (hosted) or this core's console ring (native).
#[macro_export]
macro_rules! println {
    () => {
        $crate::print!("\n")
    };
    ($($arg:tt)*) => {
        $crate::__private::print(::core::format_args!(
            "{}\n",
            ::core::format_args!($($arg)*)
        ))
    };
}

/// Prints a line to standard error (hosted) or this core's console ring (native).
#[macro_export]
macro_rules! eprintln {
    ($($arg:tt)*) => {
        $crate::__private::eprint(::core::format_args!(
            "{}\n",
            ::core::format_args!($($arg)*)
        ))
    };
}
