//! The server: one [`Server`] shared by every core (the store, the settings, the
//! connection counters), and one [`McConnection`] handler per TCP connection, which
//! parses what arrives ([`crate::protocol::Parser`]), executes it against the store and
//! sends the replies.
//!
//! # Invariants
//!
//! * A connection and its handler stay on the core that accepted it; the store is the
//!   only state the cores share (lock-free reads, per-shard writes).
//! * Replies go out in request order, one `send` per batch of requests that arrived
//!   together (pipelined requests are answered together); a `get` hit sends the stored
//!   value's buffers themselves.
//! * Memory per connection is bounded: when a `send` had to queue (the one case in which
//!   every backend promises `send_window_increased`) and more than [`MAX_QUEUED_REPLY`]
//!   bytes wait, the connection stops reading and stops executing what it already
//!   received until the window opens again.
//! * Nothing a client sends can panic the server: the parser refuses bad input with
//!   memcached's replies, and every store error is answered.
//! * Memory held for unparsed input is bounded server-wide, not just per connection
//!   (see `McConnection::account_input`): a partial request's buffers are compacted
//!   when they are mostly waste, their footprint is charged to one count, and past
//!   [`Server::input_limit`] a connection holding more than [`INPUT_ALLOWANCE`] is
//!   refused as memcached refuses one whose read buffer cannot grow. Without it, 200
//!   connections each sending most of a 1 MB value, and never the rest, made a 128 MiB
//!   native guest run out of memory.
//!
//! # Layout
//!
//! * this module — [`Server`]: the store, the settings in force, the counters;
//! * `connection` — [`McConnection`], the per-connection handler (batching, pausing,
//!   `get` in pieces, input accounting);
//! * `execute` — one function per command, run against the store;
//! * `input` — measuring and compacting a connection's unparsed input;
//! * `stats` — the `stats` command's groups;
//! * `conn_stats` — [`ConnectionStats`], and [`ConnRegistry`] for `stats conns`;
//! * `settings` — [`Settings`] and the memory they imply ([`memory_needed`]).

mod conn_stats;
mod connection;
mod execute;
mod input;
mod settings;
mod stats;

use alloc::sync::Arc;

pub use conn_stats::{ConnEntry, ConnRegistry, ConnectionStats, Registration};
pub use connection::{MAX_QUEUED_REPLY, McConnection};
pub use input::{INPUT_ALLOWANCE, OUT_OF_MEMORY_READING};
pub use settings::{NETWORK_RESERVE_PER_CORE, Settings, describe, memory_needed};

use crate::store::{Ctx, FailingMemory, HeapMemory, ItemMemory, Store, UnixTime};
use settings::{input_limit, value_reserve};

/// The version the server reports (`version`, `stats`): memcached's protocol level, and
/// what it is.
pub const VERSION: &str = "1.6.18-ebbflow";

/// memcached's answer to a connection over `-c` before it closes it.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// The server, shared by every core.
pub struct Server {
    /// The items.
    pub store: Store,
    /// The settings in force.
    pub settings: Settings,
    /// Connection counters.
    pub connections: ConnectionStats,
    /// The open connections and the listening address (`stats conns`).
    pub conns: ConnRegistry,
    /// The most memory all connections' unparsed input may hold before connections
    /// holding more than [`INPUT_ALLOWANCE`] are refused: a quarter of `-m`, at least
    /// 4 MiB — beside the items, which `-m` bounds, what partial requests (a large
    /// value on its way) may pin.
    pub input_limit: usize,
    /// Unix time at start (seconds), for `uptime`.
    pub(super) started: UnixTime,
    /// Where values and compacted input get memory that may be refused.
    pub(super) memory: Arc<dyn ItemMemory>,
    /// Free memory values leave alone (natively).
    pub(super) reserve: usize,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("settings", &self.settings)
            .finish()
    }
}

/// The current Unix time in seconds: the wall clock where the platform has one, else the
/// seconds since the runtime started counted from a fixed date (2001-09-09, Unix time
/// 10^9), so relative expiry works everywhere and absolute times compare sensibly.
pub fn now_unix() -> UnixTime {
    match ebb::unix_time() {
        Some(t) => u32::try_from(t.as_secs()).unwrap_or(u32::MAX),
        None => 1_000_000_000u32.saturating_add((ebb::now().as_nanos() / 1_000_000_000) as u32),
    }
}

pub(super) fn core_index() -> usize {
    ebb::core_id().0 as usize
}

impl Server {
    /// A server with `settings` and a store over the runtime's RCU domain (on a core).
    pub fn new(settings: Settings) -> Option<Server> {
        let domain = ebb::Handle::current()?.rcu().clone();
        let config = crate::store::StoreConfig {
            memory_limit: settings.memory_limit,
            item_size_max: settings.item_size_max,
            evict: settings.evict,
            cores: ebb::num_cores(),
            ..Default::default()
        };
        // Natively, values leave alone the memory `memory_needed` sets aside beside
        // `-m`: what requests on their way and the network may take, which they cannot
        // be refused.
        let reserve = value_reserve(&settings);
        let heap = HeapMemory { reserve };
        let memory: Arc<dyn ItemMemory> = match settings.fail_value_memory {
            0 => Arc::new(heap),
            ppm => Arc::new(FailingMemory::new(heap, ppm, 0x2101)),
        };
        Some(Server {
            store: Store::with_memory(config, domain, memory.clone()),
            memory,
            reserve,
            input_limit: input_limit(&settings),
            settings,
            connections: ConnectionStats::default(),
            conns: ConnRegistry::default(),
            started: now_unix(),
        })
    }

    /// The idle-time work of a core: removes up to `budget` expired items; how many.
    pub fn sweep(&self, budget: usize) -> usize {
        self.store.sweep(Ctx::new(now_unix(), core_index()), budget)
    }
}
