//! The parts of an app that differ between the runtimes, behind one set of names: starting
//! the runtime ([`run_main`], what `ebb::main!` expands to), printing ([`print`]) and the
//! app's arguments ([`args`]).
//!
//! Hosted, the arguments are the process's; native, they are the command line the monitor
//! passed (`ebb-vmm IMAGE -- ARGS` joins `ARGS` with spaces), split on spaces. An argument
//! that contains a space therefore arrives natively as several: apps that must run both ways
//! should not rely on one.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
#[cfg(not(target_os = "none"))]
use core::future::Future;

/// The app's arguments, without the program name: hosted `std::env::args().skip(1)`
/// (arguments that are not valid Unicode are replaced lossily), native the boot command
/// line split on spaces (empty pieces dropped).
pub fn args() -> Vec<String> {
    #[cfg(not(target_os = "none"))]
    {
        std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }
    #[cfg(target_os = "none")]
    {
        split_cmdline(ebb_native::cmdline())
    }
}

/// Splits a native command line into arguments (on spaces; empty pieces dropped).
#[cfg_attr(not(target_os = "none"), allow(dead_code))]
fn split_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split(' ')
        .filter(|a| !a.is_empty())
        .map(ToString::to_string)
        .collect()
}

/// Writes formatted text: hosted to standard output (an error such as a closed pipe is
/// ignored: printing never takes an app down), native into this core's console ring.
pub fn print(args: fmt::Arguments<'_>) {
    #[cfg(not(target_os = "none"))]
    {
        use std::io::Write;
        let _ = std::io::stdout().lock().write_fmt(args);
    }
    #[cfg(target_os = "none")]
    {
        ebb_native::print!("{}", args);
    }
}

/// Bytes of memory this node's allocator manages: natively, the guest memory the monitor
/// handed it (what `ebb run --mem` sizes, less the image and the runtime's own blocks),
/// so an application can refuse a configuration that cannot fit; hosted `None` — the
/// host's memory is not the application's to size itself by.
pub fn memory_total() -> Option<usize> {
    #[cfg(not(target_os = "none"))]
    {
        None
    }
    #[cfg(target_os = "none")]
    {
        let pages = ebb_native::heap::report().pages.total_pages;
        Some(pages * 4096) // ebb-mem's pages
    }
}

/// Bytes of this node's memory free in whole pages right now: natively the page
/// allocator's free pages (memory cached in slabs for small objects is not counted), so
/// an application can keep part of its heap for what it cannot refuse to allocate;
/// hosted `None` — the process's heap grows on demand.
pub fn memory_free() -> Option<usize> {
    #[cfg(not(target_os = "none"))]
    {
        None
    }
    #[cfg(target_os = "none")]
    {
        Some(ebb_native::heap::free_page_bytes())
    }
}

/// The wall-clock time as a duration since the Unix epoch, or `None` where the platform
/// does not know it (natively under a standard hypervisor's PVH boot, which has no
/// clock source for it). Hosted it is the system clock; natively the monitor's realtime
/// clock read once (one CLOCK hypercall, the first time) and advanced by
/// [`ebb_core::event::now`] since — cheap after the first call, and it never jumps.
pub fn unix_time() -> Option<core::time::Duration> {
    #[cfg(not(target_os = "none"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
    }
    #[cfg(target_os = "none")]
    {
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
}

/// Writes formatted text for errors: hosted to standard error, native into this core's
/// console ring (a VM has one console).
pub fn eprint(args: fmt::Arguments<'_>) {
    #[cfg(not(target_os = "none"))]
    {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_fmt(args);
    }
    #[cfg(target_os = "none")]
    {
        ebb_native::print!("{}", args);
    }
}

/// The environment variable that sets a hosted app's core count.
#[cfg(not(target_os = "none"))]
pub const CPUS_ENV: &str = "EBB_CPUS";

/// The environment variable that sets how long a hosted app's idle core keeps polling
/// before it sleeps, in microseconds (0: sleep at once, like tokio; default 50).
#[cfg(not(target_os = "none"))]
pub const IDLE_POLL_ENV: &str = "EBB_IDLE_POLL_US";

/// `EBB_CPUS` is set but is not a core count.
#[cfg(not(target_os = "none"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoresError {
    /// The variable's value.
    pub value: String,
}

#[cfg(not(target_os = "none"))]
impl fmt::Display for CoresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{CPUS_ENV}={:?} is not a core count (a whole number from 1)",
            self.value
        )
    }
}

#[cfg(not(target_os = "none"))]
impl std::error::Error for CoresError {}

/// How many cores a hosted app runs on: `EBB_CPUS` if set, else every CPU the process may
/// run on (the hosted runtime's default).
#[cfg(not(target_os = "none"))]
pub fn hosted_cores() -> Result<usize, CoresError> {
    match std::env::var_os(CPUS_ENV) {
        None => Ok(ebb_hosted::Config::default().cores),
        Some(value) => parse_cores(&value.to_string_lossy()),
    }
}

/// The runtime's settings for `cores` cores, with `EBB_IDLE_POLL_US` applied (a value
/// that is not a whole number is reported and ignored).
#[cfg(not(target_os = "none"))]
fn hosted_config(cores: usize) -> ebb_hosted::Config {
    let mut config = ebb_hosted::Config::with_cores(cores);
    if let Some(value) = std::env::var_os(IDLE_POLL_ENV) {
        match value.to_string_lossy().trim().parse::<u64>() {
            Ok(us) => config.idle_poll = std::time::Duration::from_micros(us),
            Err(_) => eprintln!("ebb: ignoring {IDLE_POLL_ENV}={value:?}: not microseconds"),
        }
    }
    config
}

#[cfg(not(target_os = "none"))]
fn parse_cores(value: &str) -> Result<usize, CoresError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(CoresError {
            value: value.to_string(),
        }),
    }
}

/// Hosted exit code when `EBB_CPUS` is malformed.
#[cfg(not(target_os = "none"))]
const EXIT_BAD_CPUS: i32 = 2;
/// Hosted exit code when a core panicked (the same as the monitor's for a guest panic).
#[cfg(not(target_os = "none"))]
const EXIT_PANIC: i32 = 101;
/// Hosted exit code when the runtime could not start or failed otherwise.
#[cfg(not(target_os = "none"))]
const EXIT_RUNTIME: i32 = 1;

/// Hosted: runs `main` on the hosted runtime ([`hosted_cores`] cores, pinned) and exits
/// the process with its result.
#[cfg(not(target_os = "none"))]
pub fn run_main<F, Fut>(main: F) -> !
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = i32> + 'static,
{
    use std::io::Write;
    let code = match hosted_cores() {
        Err(e) => {
            eprintln!("ebb: {e}");
            EXIT_BAD_CPUS
        }
        Ok(cores) => match ebb_hosted::run(hosted_config(cores), main) {
            Ok(code) => code,
            Err(ebb_hosted::ConfigError::Run(
                e @ ebb_core::event::RunError::CorePanicked { .. },
            )) => {
                eprintln!("ebb: {e}");
                EXIT_PANIC
            }
            Err(e) => {
                eprintln!("ebb: cannot run the hosted runtime with {cores} cores: {e}");
                EXIT_RUNTIME
            }
        },
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_splits_on_spaces() {
        assert_eq!(split_cmdline(""), Vec::<String>::new());
        assert_eq!(split_cmdline("a  b c "), ["a", "b", "c"]);
    }

    #[test]
    fn cores_parse() {
        assert_eq!(parse_cores("2"), Ok(2));
        assert_eq!(parse_cores(" 3\n"), Ok(3));
        assert!(parse_cores("0").is_err());
        assert!(parse_cores("two").is_err());
        let message = parse_cores("x").unwrap_err().to_string();
        assert!(message.contains("EBB_CPUS"), "{message}");
    }
}
