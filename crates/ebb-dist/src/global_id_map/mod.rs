//! The GlobalIdMap: application-wide names, `EbbId → bytes`.
//!
//! A distributed Ebb publishes what another node needs to build its own representative —
//! the owner node, a shard list, a configuration — under its global id; a node that
//! meets the id for the first time reads the entry (the seed's miss handler, made
//! asynchronous) and caches it. Watchers hear of every later change.
//!
//! [`GlobalIdMap`] is the interface; its backends:
//!
//! * the **embedded** one: the front end keeps the [`IdMapTable`] in memory (the
//!   single-machine default, nothing to install) and serves it to its nodes;
//! * **etcd**, for several front ends or hosts (node membership as leases) — described in
//!   `docs/13-distributed.md`.
//!
//! What crosses the network between a node and the backend are [`IdMapRequest`]s and
//! [`IdMapReply`]s encoded with postcard: small, `no_std`, and fixed by the types here
//! rather than by a compiler.
//!
//! ## Invariants
//!
//! * Every entry has a version, starting at 1 and growing by one per `set` that changes
//!   its bytes (writing what is there is a no-op, so a retried write is harmless); a
//!   watcher sees versions in increasing order and misses none made after it was added.
//! * Entries and values are bounded ([`MAX_VALUE_LEN`], [`MAX_ENTRIES`]): a node cannot
//!   make the front end hold unbounded memory.

mod access;
mod table;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;

use ebb::EbbId;
use serde::{Deserialize, Serialize};

pub use access::{
    EmbeddedIdMap, GLOBAL_ID_MAP_EBB, GlobalEbb, ID_MAP_CHANGED_KIND, ID_MAP_KIND, NodeWatches,
    RemoteIdMap, ResolveError, resolve,
};
pub use table::{IdMapTable, WatchId};

/// The largest value an entry may hold.
pub const MAX_VALUE_LEN: usize = 64 << 10;
/// The most entries a map holds (the global id range is smaller still).
pub const MAX_ENTRIES: usize = 4096;

/// A future a map's operations return, run on the calling core.
pub type MapFuture<T> = Pin<Box<dyn Future<Output = Result<T, IdMapError>>>>;

/// Why a GlobalIdMap operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdMapError {
    /// The value is longer than [`MAX_VALUE_LEN`].
    #[error("value of {0} bytes exceeds the GlobalIdMap's limit of {MAX_VALUE_LEN}")]
    ValueTooLong(usize),
    /// The map is full.
    #[error("the GlobalIdMap holds its maximum of {MAX_ENTRIES} entries")]
    Full,
    /// The id is not a global id.
    #[error("{0} is not a global Ebb id")]
    NotGlobal(EbbId),
    /// The backend could not be reached or answered nonsense.
    #[error("GlobalIdMap backend: {0}")]
    Backend(alloc::string::String),
}

/// An entry as read: its version and bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    /// 1 for the first `set`, one more for each after.
    pub version: u64,
    /// The bytes.
    #[serde(deserialize_with = "crate::fallible::bytes")]
    pub value: Vec<u8>,
}

/// What a watcher is called with: the id and its new entry. `Send`: the embedded table is
/// shared by the cores that serve nodes' requests, and calls it on the core of the `set`.
pub type Watcher = Box<dyn FnMut(EbbId, &Versioned) + Send>;

/// Application-wide names. Implemented by each backend; used the same way on every node.
pub trait GlobalIdMap {
    /// The entry for `id`, if any.
    fn get(&self, id: EbbId) -> MapFuture<Option<Versioned>>;
    /// Sets `id`'s bytes; the new version.
    fn set(&self, id: EbbId, value: Vec<u8>) -> MapFuture<u64>;
    /// Calls `on_change` on this core for every later change of `id`.
    fn watch(&self, id: EbbId, on_change: Watcher) -> MapFuture<WatchId>;
    /// Stops a watch.
    fn unwatch(&self, watch: WatchId);
}

/// A node's request to the map's server (postcard-encoded; ids as numbers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdMapRequest {
    /// Read an entry.
    Get(u32),
    /// Write an entry.
    Set(
        u32,
        #[serde(deserialize_with = "crate::fallible::bytes")] Vec<u8>,
    ),
    /// Send a [`IdMapReply::Changed`] message on every later change.
    Watch(u32),
    /// Stop those messages.
    Unwatch(u32),
}

/// The server's answer, and its change notices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdMapReply {
    /// The entry read (`None`: no entry).
    Entry(Option<Versioned>),
    /// The version a `Set` made.
    Version(u64),
    /// A watch or unwatch took effect.
    Done,
    /// The request failed; the reason.
    Refused(#[serde(deserialize_with = "crate::fallible::string")] alloc::string::String),
    /// An entry changed (sent to watchers, unasked).
    Changed(u32, Versioned),
}

/// Checks that `n` names a global id.
pub fn global_id(n: u32) -> Result<EbbId, IdMapError> {
    match EbbId::from_u32(n) {
        Some(id) if id.is_global() => Ok(id),
        Some(id) => Err(IdMapError::NotGlobal(id)),
        None => Err(IdMapError::Backend(alloc::format!("{n} is not an Ebb id"))),
    }
}

#[cfg(test)]
mod tests;
