//! A fragmented key-value map: shards on several nodes, used as one object.
//!
//! Every key lives on exactly one shard, the node the [`HashRing`] of the shard nodes
//! names. A [`MapClient`] routes each operation to that node; a [`MapShard`] holds and
//! serves its part. [`MapClient::add_shard`] puts a node on the ring and moves to it the
//! keys it now owns — about 1/N of them — by asking every old shard to hand over what no
//! longer belongs to it ([`MapRequest::TakeMoved`]), then storing those on the new one.
//!
//! Rebalancing is run by one client (the front end) while the others hold still: a
//! key written to its old shard during a move could be left behind. Shards bound what
//! they hold ([`MapShard::new`]'s limit); a set beyond it is refused, not an allocation
//! failure.

use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::RefCell;

use ebb::EbbId;
use serde::{Deserialize, Serialize};

use crate::fallible::{self, Bytes};
use crate::hash_ring::HashRing;
use crate::node::NodeId;
use crate::remote::{Caller, RemoteError, Served, decode, encode};

/// The message kind a shard registers.
pub const SHARD_KIND: u16 = 2;

/// Entries as they travel: keys and values that decode fallibly ([`Bytes`]).
type Entries = Vec<(Bytes, Bytes)>;

/// A call to a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapRequest {
    /// The value of a key.
    Get(#[serde(deserialize_with = "fallible::bytes")] Vec<u8>),
    /// Store a value; answered with the old one.
    Set(
        #[serde(deserialize_with = "fallible::bytes")] Vec<u8>,
        #[serde(deserialize_with = "fallible::bytes")] Vec<u8>,
    ),
    /// Remove a key; answered with the old value.
    Delete(#[serde(deserialize_with = "fallible::bytes")] Vec<u8>),
    /// Remove and return every entry the ring of these nodes does not place on `me`.
    TakeMoved {
        /// The shard nodes after the change.
        #[serde(deserialize_with = "fallible::seq")]
        nodes: Vec<u32>,
        /// The shard asked.
        me: u32,
    },
    /// Store these entries (a move's second half).
    Put(#[serde(deserialize_with = "fallible::seq")] Entries),
    /// How many entries the shard holds.
    Count,
}

/// A shard's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapReply {
    /// A value, or none.
    Value(#[serde(deserialize_with = "fallible::option_bytes")] Option<Vec<u8>>),
    /// Entries handed over.
    Entries(#[serde(deserialize_with = "fallible::seq")] Entries),
    /// A count.
    Count(u64),
    /// Done.
    Stored,
}

/// One node's part of the map. Shared by the cores that serve calls, behind a spin lock
/// held for one operation.
#[derive(Debug)]
pub struct MapShard {
    state: spin::Mutex<ShardState>,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct ShardState {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Bytes of keys and values held.
    bytes: usize,
}

impl MapShard {
    /// An empty shard holding at most `max_bytes` of keys and values.
    pub fn new(max_bytes: usize) -> MapShard {
        MapShard {
            state: spin::Mutex::new(ShardState::default()),
            max_bytes,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.state.lock().entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answers one call (register this for [`SHARD_KIND`]).
    pub fn serve(&self, request: &ebb::IOBufChain) -> Served {
        let request: MapRequest = decode(request).map_err(|e| e.to_string())?;
        let reply = self.apply(request)?;
        encode(&reply).map_err(|e| e.to_string())
    }

    fn apply(&self, request: MapRequest) -> Result<MapReply, String> {
        let mut state = self.state.lock();
        let ShardState { entries, bytes } = &mut *state;
        Ok(match request {
            MapRequest::Get(k) => MapReply::Value(entries.get(&k).cloned()),
            MapRequest::Set(k, v) => {
                let old_len = entries.get(&k).map_or(0, |old| k.len() + old.len());
                let held = *bytes - old_len + k.len() + v.len();
                if held > self.max_bytes {
                    return Err(alloc::format!(
                        "shard full: {held} bytes would exceed its {} byte limit",
                        self.max_bytes
                    ));
                }
                *bytes = held;
                MapReply::Value(entries.insert(k, v))
            }
            MapRequest::Delete(k) => {
                let old = entries.remove(&k);
                if let Some(v) = &old {
                    *bytes = *bytes - k.len() - v.len();
                }
                MapReply::Value(old)
            }
            MapRequest::TakeMoved { nodes, me } => {
                let ring = HashRing::new(nodes.into_iter().map(NodeId));
                let me = Some(NodeId(me));
                let moving: Vec<Vec<u8>> = entries
                    .keys()
                    .filter(|k| ring.node_for(k) != me)
                    .cloned()
                    .collect();
                let mut out = Vec::with_capacity(moving.len());
                for k in moving {
                    if let Some(v) = entries.remove(&k) {
                        *bytes = *bytes - k.len() - v.len();
                        out.push((Bytes(k), Bytes(v)));
                    }
                }
                MapReply::Entries(out)
            }
            MapRequest::Put(batch) => {
                let added: usize = batch.iter().map(|(k, v)| k.0.len() + v.0.len()).sum();
                if *bytes + added > self.max_bytes {
                    return Err("shard full: cannot take the moved entries".to_string());
                }
                for (Bytes(k), Bytes(v)) in batch {
                    let (kl, vl) = (k.len(), v.len());
                    if let Some(old) = entries.insert(k, v) {
                        *bytes = *bytes - kl - old.len();
                    }
                    *bytes = *bytes + kl + vl;
                }
                MapReply::Stored
            }
            MapRequest::Count => MapReply::Count(entries.len() as u64),
        })
    }
}

/// A node's handle on the whole map.
pub struct MapClient {
    caller: Rc<dyn Caller>,
    ebb: EbbId,
    ring: RefCell<HashRing>,
}

impl core::fmt::Debug for MapClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MapClient")
            .field("ebb", &self.ebb)
            .field("shards", &self.ring.borrow().nodes())
            .finish()
    }
}

impl MapClient {
    /// The map `ebb`, sharded over `shards`.
    pub fn new(caller: Rc<dyn Caller>, ebb: EbbId, shards: &[NodeId]) -> MapClient {
        MapClient {
            caller,
            ebb,
            ring: RefCell::new(HashRing::new(shards.iter().copied())),
        }
    }

    /// The shard nodes.
    pub fn shards(&self) -> Vec<NodeId> {
        self.ring.borrow().nodes()
    }

    /// The node holding `key`.
    pub fn shard_of(&self, key: &[u8]) -> Option<NodeId> {
        self.ring.borrow().node_for(key)
    }

    /// The value of `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        self.value(key, MapRequest::Get(key.to_vec())).await
    }

    /// Stores `value` under `key`; the old value.
    pub async fn set(&self, key: &[u8], value: Vec<u8>) -> Result<Option<Vec<u8>>, RemoteError> {
        self.value(key, MapRequest::Set(key.to_vec(), value)).await
    }

    /// Removes `key`; the old value.
    pub async fn delete(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        self.value(key, MapRequest::Delete(key.to_vec())).await
    }

    /// Entries per shard.
    pub async fn counts(&self) -> Result<Vec<(NodeId, u64)>, RemoteError> {
        let mut out = Vec::new();
        for node in self.shards() {
            match self.call(node, &MapRequest::Count).await? {
                MapReply::Count(n) => out.push((node, n)),
                other => return Err(unexpected(node, &other)),
            }
        }
        Ok(out)
    }

    /// Puts `node` (already serving an empty shard) on the ring and moves to it the keys
    /// it now owns; how many moved.
    pub async fn add_shard(&self, node: NodeId) -> Result<usize, RemoteError> {
        let old = self.shards();
        let mut ring = self.ring.borrow().clone();
        ring.add(node);
        let nodes: Vec<u32> = ring.nodes().iter().map(|n| n.0).collect();
        let mut moved = 0;
        for shard in old {
            let taken = self
                .call(
                    shard,
                    &MapRequest::TakeMoved {
                        nodes: nodes.clone(),
                        me: shard.0,
                    },
                )
                .await?;
            let MapReply::Entries(entries) = taken else {
                return Err(unexpected(shard, &taken));
            };
            moved += entries.len();
            if !entries.is_empty() {
                // The new ring places every moved key on the new node.
                self.call(node, &MapRequest::Put(entries)).await?;
            }
        }
        *self.ring.borrow_mut() = ring;
        Ok(moved)
    }

    async fn value(&self, key: &[u8], request: MapRequest) -> Result<Option<Vec<u8>>, RemoteError> {
        let node = self.shard_of(key).ok_or(RemoteError::NoShards)?;
        match self.call(node, &request).await? {
            MapReply::Value(v) => Ok(v),
            other => Err(unexpected(node, &other)),
        }
    }

    async fn call(&self, node: NodeId, request: &MapRequest) -> Result<MapReply, RemoteError> {
        let reply = self
            .caller
            .call(node, self.ebb, SHARD_KIND, encode(request)?)
            .await?;
        decode(&reply)
    }
}

fn unexpected(node: NodeId, reply: &MapReply) -> RemoteError {
    RemoteError::BadPayload(alloc::format!("{node} answered {reply:?}"))
}
