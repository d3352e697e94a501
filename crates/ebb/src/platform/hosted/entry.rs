//! What `ebb::main!` expands to hosted: [`run_main`] starts the runtime and exits the
//! process with the app's result.

use core::future::Future;

use alloc::string::String;

use super::options::{hosted_config, hosted_cores, hosted_cores_for};

/// Hosted exit code when `EBB_CPUS` is malformed or conflicts with the command line.
const EXIT_BAD_CPUS: i32 = 2;
/// Hosted exit code when a core panicked (the same as the monitor's for a guest panic).
const EXIT_PANIC: i32 = 101;
/// Hosted exit code when the runtime could not start or failed otherwise.
const EXIT_RUNTIME: i32 = 1;

/// Runs `main` on the hosted runtime ([`hosted_cores`] cores, pinned) and exits the
/// process with its result.
pub fn run_main<F, Fut>(main: F) -> !
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = i32> + 'static,
{
    run_on_cores(hosted_cores(), main)
}

/// Runs `main` on the hosted runtime with as many cores as `requested` finds in the
/// app's arguments (`ebb::main!(app_main, cores = requested)`; `EBB_CPUS`, if set, must
/// agree: [`hosted_cores_for`]) and exits the process with its result.
pub fn run_main_with_cores<F, Fut>(main: F, requested: fn(&[String]) -> Option<usize>) -> !
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = i32> + 'static,
{
    run_on_cores(hosted_cores_for(requested(&super::args())), main)
}

fn run_on_cores<F, Fut>(cores: Result<usize, super::CoresError>, main: F) -> !
where
    F: FnOnce() -> Fut + Send,
    Fut: Future<Output = i32> + 'static,
{
    use std::io::Write;
    let code = match cores {
        Err(e) => {
            std::eprintln!("ebb: {e}");
            EXIT_BAD_CPUS
        }
        Ok(cores) => match ebb_hosted::run(hosted_config(cores), main) {
            Ok(code) => code,
            Err(ebb_hosted::ConfigError::Run(
                e @ ebb_core::event::RunError::CorePanicked { .. },
            )) => {
                std::eprintln!("ebb: {e}");
                EXIT_PANIC
            }
            Err(e) => {
                std::eprintln!("ebb: cannot run the hosted runtime with {cores} cores: {e}");
                EXIT_RUNTIME
            }
        },
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}
