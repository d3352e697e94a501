//! The hosted platform: the app is a Linux process on `ebb-hosted`, one pinned event loop
//! per core.
//!
//! Defines the same names as `platform/native/` (see the crate root's "one switch"):
//! [`args`], [`print`], [`eprint`], [`memory_total`], [`memory_free`], [`unix_time`], the
//! `__entry!` macro `ebb::main!` expands to, and the modules `network` (what `ebb::net`
//! needs of the platform) and `memory` (what `ebb::mem` adds). Hosted only, on top: the
//! runtime's options ([`CPUS_ENV`], [`IDLE_POLL_ENV`], [`hosted_cores`], in `options`) and
//! `ebb-hosted`'s own [`run`] with a [`Config`], for programs that set the runtime up
//! themselves.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

pub(crate) mod memory;
pub(crate) mod network;
mod options;
pub(crate) mod shm;

pub use ebb_hosted::{Config, ConfigError as RunError, run};
pub use options::{CPUS_ENV, CoresError, IDLE_POLL_ENV, hosted_cores, hosted_cores_for};

/// The app's arguments, without the program name: `std::env::args().skip(1)` (arguments
/// that are not valid Unicode are replaced lossily).
pub fn args() -> Vec<String> {
    std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Writes formatted text to standard output (an error such as a closed pipe is ignored:
/// printing never takes an app down).
pub fn print(args: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_fmt(args);
}

/// Writes formatted text for errors to standard error.
pub fn eprint(args: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Bytes of memory this node's allocator manages: `None` hosted — the host's memory is not
/// the application's to size itself by.
pub fn memory_total() -> Option<usize> {
    None
}

/// Bytes of this node's memory free in whole pages right now: `None` hosted — the
/// process's heap grows on demand.
pub fn memory_free() -> Option<usize> {
    None
}

/// The wall-clock time as a duration since the Unix epoch: the system clock (`None` if it
/// is set before 1970).
pub fn unix_time() -> Option<core::time::Duration> {
    // `clock_gettime` itself: `SystemTime::now().duration_since(UNIX_EPOCH)` adds a
    // checked `timespec` subtraction, about 70 instructions — once a request in a server
    // that stamps each batch of requests (memcached's expiry clock).
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let secs = u64::try_from(now.tv_sec).ok()?;
    let nanos = u32::try_from(now.tv_nsec).ok()?;
    Some(core::time::Duration::new(secs, nanos))
}

/// What `ebb::main!` expands to; not part of the API.
pub(crate) mod entry;

/// Hosted, `ebb::main!(app_main)` defines `fn main()`, which runs `app_main` on the hosted
/// runtime ([`run_main`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __entry {
    ($main:path) => {
        fn main() {
            $crate::__private::run_main($main)
        }
    };
    ($main:path, cores = $cores:path) => {
        fn main() {
            $crate::__private::run_main_with_cores($main, $cores)
        }
    };
}
