//! What the command line set ([`Settings`]) and what follows from it: the memory a
//! server may come to use ([`memory_needed`]), the bound on input held
//! ([`Server::input_limit`](super::Server::input_limit)) and the start message.

use alloc::string::String;
use core::fmt::Write as _;

/// What the command line set (memcached's names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `-p`.
    pub port: u16,
    /// `-m`, in bytes.
    pub memory_limit: usize,
    /// `-c`.
    pub max_connections: u64,
    /// `-I`.
    pub item_size_max: usize,
    /// `-M` turns eviction off (errors instead).
    pub evict: bool,
    /// `-v` count.
    pub verbosity: u32,
    /// Cores serving.
    pub threads: usize,
    /// Fault injection for tests and soak runs (`--fail-value-memory PPM`): requests for
    /// value and input memory fail with this probability per million, as if the heap
    /// were exhausted. 0: off.
    pub fail_value_memory: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: 11211,
            memory_limit: 64 << 20,
            max_connections: 1024,
            item_size_max: 1 << 20,
            evict: true,
            verbosity: 0,
            threads: 1,
            fail_value_memory: 0,
        }
    }
}

/// Memory a core's network stack may use beside the application's: the data TCP holds
/// for paused connections (ebb-net's `max_held_bytes`, 8 MiB), out-of-order data, and
/// the driver's receive buffers.
pub const NETWORK_RESERVE_PER_CORE: usize = 16 << 20;

/// The memory a server with `settings` on `cores` cores may come to use: the items
/// (`-m`), the input it may hold ([`Server::input_limit`](super::Server::input_limit)) and the network's
/// [`NETWORK_RESERVE_PER_CORE`] on each core. A native node whose heap is smaller
/// refuses to start rather than fail an allocation under load.
pub fn memory_needed(settings: &Settings, cores: usize) -> usize {
    settings
        .memory_limit
        .saturating_add(input_limit(settings))
        .saturating_add(NETWORK_RESERVE_PER_CORE.saturating_mul(cores))
}

/// The free memory (in whole pages) a native node's values leave alone: as much as
/// [`Server::input_limit`](super::Server::input_limit) lets requests on their way hold, so that input arriving when
/// the items have filled `-m` still finds pages. The network's own buffers are pooled
/// and mostly in use from the start. Values are accounted at the allocator's sizes, so
/// `-m` is what they occupy, give or take small objects in partly used slabs (measured
/// up to a third of `-m` when large values follow small ones) — the reserve is what
/// keeps that from reaching the memory that cannot be refused; a larger one refused half
/// the stores of that workload on the main job's 128 MiB (docs/11-memcached.md).
pub(super) fn value_reserve(settings: &Settings) -> usize {
    input_limit(settings)
}

/// [`Server::input_limit`](super::Server::input_limit) for `settings`: a quarter of `-m`, at least 4 MiB.
pub(super) fn input_limit(settings: &Settings) -> usize {
    (settings.memory_limit / 4).max(4 << 20)
}

/// Formats the one-line start message.
pub fn describe(settings: &Settings) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "-m {} MB, -c {}, -I {} KB",
        settings.memory_limit >> 20,
        settings.max_connections,
        settings.item_size_max >> 10
    );
    s
}
