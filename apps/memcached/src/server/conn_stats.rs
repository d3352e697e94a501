//! [`ConnectionStats`]: the server's connection counters, shared by every core.

use core::sync::atomic::AtomicU64;

/// Connection counters (memcached's `stats` names).
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Open connections.
    pub curr: AtomicU64,
    /// Connections accepted since start.
    pub total: AtomicU64,
    /// Connections refused for `-c`.
    pub rejected: AtomicU64,
    /// Bytes received from clients.
    pub bytes_read: AtomicU64,
    /// Bytes of replies handed to the network.
    pub bytes_written: AtomicU64,
    /// Memory held by all connections' unparsed input (each segment's whole buffer).
    pub read_buf_bytes: AtomicU64,
    /// Connections refused because that memory was over [`Server::input_limit`](super::Server::input_limit)
    /// (memcached's `read_buf_oom`).
    pub read_buf_oom: AtomicU64,
}
