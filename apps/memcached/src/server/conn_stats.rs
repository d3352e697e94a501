//! [`ConnectionStats`]: the server's connection counters, shared by every core; and
//! [`ConnRegistry`]: the open connections, for `stats conns`.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::Server;

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

/// The open connections and the listening address, for `stats conns`: one entry per
/// connection, registered on accept and removed when its handler goes.
///
/// Only accepting, closing and `stats conns` take the lock; a request only stores the
/// time into its own entry (a relaxed store to a line its core owns).
#[derive(Debug, Default)]
pub struct ConnRegistry {
    /// Where the server listens, once it does.
    listener: spin::Mutex<Option<SocketAddr>>,
    /// The open connections, in no particular order.
    open: spin::Mutex<Vec<Arc<ConnEntry>>>,
    /// The next connection's number (memcached numbers them by file descriptor; ours
    /// count accepts, after the listener's 0).
    next_id: AtomicU64,
}

/// One open connection as `stats conns` shows it.
#[derive(Debug)]
pub struct ConnEntry {
    /// Its number in `stats conns` (`ID:addr`).
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
    /// Our address it reached.
    pub local: SocketAddr,
    /// Unix time of its last batch of requests.
    pub last_cmd: AtomicU32,
    /// Stopped reading while its replies wait (memcached's `conn_mwrite`).
    pub paused: AtomicBool,
    /// Its index in the registry's list (changed under the registry's lock), so that
    /// removing it is O(1) with 10,000 connections open.
    index: AtomicUsize,
}

/// A connection's place in the [`ConnRegistry`]; dropping it removes the entry.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Server>,
    /// The entry (shared with the registry's list).
    pub entry: Arc<ConnEntry>,
}

impl ConnRegistry {
    /// Records where the server listens.
    pub fn set_listener(&self, addr: SocketAddr) {
        *self.listener.lock() = Some(addr);
    }

    /// Where the server listens, if it does.
    pub fn listener(&self) -> Option<SocketAddr> {
        *self.listener.lock()
    }

    /// The open connections, by number.
    pub fn snapshot(&self) -> Vec<Arc<ConnEntry>> {
        let mut open = self.open.lock().clone();
        open.sort_by_key(|e| e.id);
        open
    }
}

impl Server {
    /// Registers a connection from `peer` to `local`, accepted at `now`.
    pub fn register(
        self: &Arc<Self>,
        peer: SocketAddr,
        local: SocketAddr,
        now: u32,
    ) -> Registration {
        let registry = &self.conns;
        let entry = Arc::new(ConnEntry {
            id: registry.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            peer,
            local,
            last_cmd: AtomicU32::new(now),
            paused: AtomicBool::new(false),
            index: AtomicUsize::new(0),
        });
        let mut open = registry.open.lock();
        entry.index.store(open.len(), Ordering::Relaxed);
        open.push(entry.clone());
        drop(open);
        Registration {
            registry: self.clone(),
            entry,
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut open = self.registry.conns.open.lock();
        let at = self.entry.index.load(Ordering::Relaxed);
        if open.get(at).is_some_and(|e| Arc::ptr_eq(e, &self.entry)) {
            open.swap_remove(at);
            if let Some(moved) = open.get(at) {
                moved.index.store(at, Ordering::Relaxed);
            }
        }
    }
}
