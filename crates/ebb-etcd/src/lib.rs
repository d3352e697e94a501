//! # ebb-etcd — the GlobalIdMap on etcd
//!
//! The embedded GlobalIdMap (`ebb_dist::global_id_map::EmbeddedIdMap`) lives in one front
//! end; an application with several front ends, or nodes on several hosts, keeps its
//! names in etcd instead — a store that already solves consensus, rather than one of our
//! own. [`EtcdIdMap`] implements `ebb_dist::global_id_map::GlobalIdMap` on etcd's v3 API
//! (the `etcd-client` crate), and adds node membership:
//!
//! * every front end holds one etcd **lease**, kept alive while it runs; the names it sets
//!   and the nodes it registers are keys under that lease, so when a front end dies its
//!   lease expires (after [`EtcdConfig::lease_ttl`]) and its nodes and names vanish with
//!   it — for every other front end, at once;
//! * entry versions are etcd's per-key versions (1 when created, one more per write), so
//!   they mean what the embedded backend's mean;
//! * a watch is etcd's watch on the key; its changes are delivered as events on the core
//!   that asked for the watch.
//!
//! What it promises and what not (see docs/13-distributed.md): with a majority of the
//! etcd members up, every acknowledged `set` survives the loss of a minority; a front end
//! cut off from etcd for longer than the lease's TTL loses its names although it still
//! runs (etcd cannot tell a dead front end from a partitioned one); values are last-write-
//! wins, no compare-and-set is offered through the trait.
//!
//! ## The layout of the keys
//!
//! [`id_key`] and [`node_key`] under a per-application prefix: `{prefix}/ids/{id}` holds an
//! Ebb's bytes, `{prefix}/nodes/{node}` a node's registration.
//!
//! ## Building
//!
//! `etcd-client` needs `protoc` at build time, so the backend is the cargo feature `etcd`
//! (off by default: `cargo test --workspace` passes on a machine without protoc). CI
//! installs `protobuf-compiler` and `etcd-server` and runs `cargo test -p ebb-etcd
//! --features etcd`.
//!
//! ## Invariants
//!
//! * etcd's client is asynchronous on tokio; it runs on one thread of its own (the
//!   *bridge*), never on an Ebbflow core, and the cores talk to it through a bounded
//!   queue: a full queue is an error, not a wait and not an unbounded buffer.
//! * No `unsafe`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "etcd")]
mod backend;
#[cfg(feature = "etcd")]
pub use backend::{EtcdConfig, EtcdError, EtcdIdMap};

use ebb::EbbId;
use ebb_dist::node::NodeId;

/// The key of Ebb `id`'s entry under `prefix`.
pub fn id_key(prefix: &str, id: EbbId) -> String {
    format!("{prefix}/ids/{}", id.as_u32())
}

/// The key of `node`'s registration under `prefix`.
pub fn node_key(prefix: &str, node: NodeId) -> String {
    format!("{prefix}/nodes/{}", node.0)
}

/// The prefix of every node registration under `prefix`.
pub fn nodes_prefix(prefix: &str) -> String {
    format!("{prefix}/nodes/")
}

/// The node a registration key names, if it is one.
pub fn node_of_key(prefix: &str, key: &[u8]) -> Option<NodeId> {
    let key = core::str::from_utf8(key).ok()?;
    key.strip_prefix(&nodes_prefix(prefix))?
        .parse()
        .ok()
        .map(NodeId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let id = EbbId::from_u32(ebb::FIRST_GLOBAL_ID + 3).unwrap();
        assert_eq!(id_key("/ebbflow/app", id), "/ebbflow/app/ids/2051");
        let k = node_key("/ebbflow/app", NodeId(7));
        assert_eq!(node_of_key("/ebbflow/app", k.as_bytes()), Some(NodeId(7)));
        assert_eq!(node_of_key("/ebbflow/app", b"/ebbflow/app/nodes/x"), None);
        assert_eq!(node_of_key("/ebbflow/other", k.as_bytes()), None);
    }
}
