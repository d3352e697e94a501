//! What the front end and the nodes say to each other: the application's Ebbs (global
//! ids from the front end's slice, so every node names them alike), their message kinds,
//! and the payload types (postcard, through `ebb_dist::remote`).

use alloc::string::String;
use alloc::vec::Vec;

use ebb::EbbId;
use serde::{Deserialize, Serialize};

/// The k-th global id of the front end's slice.
const fn front_end_global(k: u32) -> EbbId {
    match EbbId::from_u32(ebb::FIRST_GLOBAL_ID + k) {
        Some(id) => id,
        None => panic!("the front end's slice holds 64 ids"),
    }
}

/// The fragmented key-value map: a shard on every node.
pub const MAP: EbbId = front_end_global(0);
/// The replicated counter; its home is the front end.
pub const COUNTER: EbbId = front_end_global(1);
/// The front end's file server: nodes read host files through it (EbbRT's file offload).
pub const FILES: EbbId = front_end_global(2);
/// What the front end asks of a node (increment the counter, read a file, hold a call).
pub const NODE: EbbId = front_end_global(3);

/// [`FILES`]: read part of a file.
pub const READ_KIND: u16 = 1;
/// [`NODE`]: add to the counter.
pub const INCREMENT_KIND: u16 = 1;
/// [`NODE`]: read a file through the front end and say what it held.
pub const OFFLOAD_KIND: u16 = 2;
/// [`NODE`]: a call that is answered only after a minute (the fault test's pending call).
pub const HOLD_KIND: u16 = 3;

/// [`NODE`]: answer with the request (the call round trip, `--bench`).
pub const ECHO_KIND: u16 = 4;
/// [`NODE`]: a one-way message the node answers with one of its own ([`PONG_KIND`]).
pub const PING_KIND: u16 = 5;
/// [`NODE`] on the front end: the node's answer to a [`PING_KIND`].
pub const PONG_KIND: u16 = 6;
/// [`NODE`]: one-way messages the node counts; after `SINK_TOTAL`-announcing message it
/// answers [`PONG_KIND`] once that many bytes arrived (the throughput run).
pub const SINK_KIND: u16 = 7;
/// [`NODE`]: announces how many bytes of [`SINK_KIND`] messages follow.
pub const SINK_TOTAL_KIND: u16 = 8;

/// [`NODE`]: connect directly to another node and call it ([`PeerLink`]), answering
/// with a [`PeerReport`].
pub const PEER_KIND: u16 = 9;

/// The guest port on which every node listens for direct connections from other nodes.
pub const PEER_PORT: u16 = 7200;

/// The Messenger's silence limit on every node and the front end: a peer quiet this long
/// is lost. Not the default 1 s: heartbeats go every quarter of the limit, and CI runs
/// the nodes' vCPUs under nested KVM on two loaded CPUs, where a stall of most of a
/// second would declare a healthy node lost. A killed node is seen at once regardless
/// (its window marked reset with a doorbell, or its network closing the connection):
/// the limit only bounds how long a node that hangs without closing goes unnoticed.
pub const SILENCE_LIMIT: core::time::Duration = core::time::Duration::from_secs(5);

/// Connect to `node` at `addr` (as this node reaches it) and make `calls` echo calls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLink {
    /// The other node.
    pub node: u32,
    /// Its address as this node reaches it: IPv4 octets and port.
    pub ip: [u8; 4],
    /// Its port.
    pub port: u16,
    /// Echo calls to make.
    pub calls: u32,
}

/// What the calls over a direct node-to-node connection gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerReport {
    /// Calls made, each answered with its own bytes.
    pub calls: u32,
    /// Round trips: median and 99th percentile, in ns.
    pub median_ns: u64,
    /// The 99th percentile.
    pub p99_ns: u64,
}

/// The largest piece of a file one read returns.
pub const READ_CHUNK: u32 = 256 << 10;

/// A read of `len` bytes of `path` from `offset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// A path the front end offers.
    pub path: String,
    /// Where to start.
    pub offset: u64,
    /// At most this many bytes (at most [`READ_CHUNK`]).
    pub len: u32,
}

/// Add `times` ones to the counter, in `merged` mode or one call each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Increment {
    /// How many increments.
    pub times: u32,
    /// Merge locally and flush once (true), or call the home for each (false).
    pub merged: bool,
}

/// What the front end publishes in the GlobalIdMap under [`FILES`]: where the file
/// server is and what it offers. A node builds its representative of [`FILES`] from it
/// on first use (a global miss, resolved through the front end).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileServerEntry {
    /// The node serving the files.
    pub owner: u32,
    /// The paths it offers.
    pub offered: Vec<String>,
}

/// What a node read through the front end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offloaded {
    /// Bytes read.
    pub len: u64,
    /// Their SHA-256.
    pub sha256: Vec<u8>,
    /// Reads it took.
    pub reads: u32,
    /// Whether the file server's Ebb was already bound on the node (`false`: this call
    /// missed and resolved it through the front end's GlobalIdMap).
    pub server_was_bound: bool,
}
