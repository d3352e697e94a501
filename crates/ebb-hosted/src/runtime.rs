//! Starting a hosted node: threads, pinning, and the main task.

use crate::{HostedPlatform, reactor};
use ebb_core::CoreId;
use ebb_core::event::{RunError, Runtime, run_on_threads};
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// The default idle-poll window: 10 µs, about what a sleep in `epoll_wait` costs a core
/// here — 5–6 µs of CPU to sleep and be woken, 13–19 µs before the woken core runs
/// (`wake-cost` in ebb-bench). Spinning about as long as a sleep costs, then sleeping, is
/// never more than twice the better choice in hindsight (the ski-rental rule; the native
/// runtime's 150 µs follows a vCPU's 80–110 µs wake the same way). It was 50 µs: at a
/// paced 32k requests/s (gaps of 31 µs on average) memcached's core then spun through
/// most gaps, 1.12–1.21× memcached 1.6's CPU per request; at 10 µs, parity (0.96–1.04×,
/// docs/benchmarks.md, "The hosted idle-poll window").
pub const DEFAULT_IDLE_POLL: std::time::Duration = std::time::Duration::from_micros(10);

/// How to run a hosted node.
#[derive(Clone, Debug)]
pub struct Config {
    /// Number of cores (event loops). Default: every CPU this process may run on.
    pub cores: usize,
    /// Pin core `i` to the `i`-th CPU the process may run on (so `taskset` composes).
    pub pin: bool,
    /// How long an idle core keeps polling its sockets before sleeping in `epoll_wait`
    /// (adaptive polling). Zero: sleep at once. Default: [`DEFAULT_IDLE_POLL`].
    pub idle_poll: std::time::Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cores: allowed_cpus().len().max(1),
            pin: true,
            idle_poll: DEFAULT_IDLE_POLL,
        }
    }
}

impl Config {
    /// The default configuration with `cores` cores.
    pub fn with_cores(cores: usize) -> Config {
        Config {
            cores,
            ..Config::default()
        }
    }
}

/// Why a hosted node could not start or finish.
#[derive(Debug)]
pub enum ConfigError {
    /// Creating epoll instances or eventfds failed.
    Platform(std::io::Error),
    /// The runtime refused the configuration, or a core failed while running.
    Run(RunError),
    /// The core count is zero or too large.
    BadCoreCount(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Platform(e) => write!(f, "cannot set up the hosted platform: {e}"),
            ConfigError::Run(e) => write!(f, "{e}"),
            ConfigError::BadCoreCount(n) => write!(f, "cannot run with {n} cores"),
        }
    }
}

impl std::error::Error for ConfigError {}

fn allowed_cpus() -> Vec<usize> {
    let set = sched_getaffinity(None).unwrap_or_default();
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect();
    if cpus.is_empty() { vec![0] } else { cpus }
}

/// Runs a hosted node: `config.cores` pinned event loops, with `main()` as the first task
/// on core 0. Returns `main`'s output once it completes (every core then stops).
pub fn run<T, F>(config: Config, main: impl FnOnce() -> F + Send) -> Result<T, ConfigError>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let platform = Arc::new(HostedPlatform::new(config.cores).map_err(ConfigError::Platform)?);
    let runtime = Runtime::with_idle_poll(platform.clone(), config.cores, config.idle_poll)
        .map_err(|_| ConfigError::BadCoreCount(config.cores))?;
    let cpus = allowed_cpus();
    let enter_core = |core: CoreId| {
        if config.pin {
            let mut set = CpuSet::new();
            set.set(cpus[core.index() % cpus.len()]);
            if let Err(e) = sched_setaffinity(None, &set) {
                log::warn!(
                    "{core}: cannot pin to CPU {}: {e}",
                    cpus[core.index() % cpus.len()]
                );
            }
        }
        if let Err(e) = reactor::enter(platform.epoll(core)) {
            panic!("{core}: cannot attach to its epoll instance: {e}");
        }
        // Sockets and their handlers are dropped on the core, while it is still one.
        ebb_core::event::at_core_exit(reactor::leave);
    };

    run_on_threads(runtime, enter_core, main).map_err(ConfigError::Run)
}
