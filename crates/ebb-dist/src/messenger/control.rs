//! What the join says and what the front end keeps while it admits nodes: the control
//! messages ([`Control`]) both sides speak, and the front end's table of expected tokens
//! ([`FrontShared`]). Apart from `join` (which starts front ends and nodes) and `link`
//! (which runs each connection's handshake), so neither names the other.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use core::sync::atomic::{AtomicU32, Ordering};

use ebb::future::Promise;
use ebb::net::SocketAddrV4;
use serde::{Deserialize, Serialize};

use super::error::JoinError;
use crate::node::{MAX_NODES, NodeId, RuntimeInfo, global_ids_of};

/// The join protocol's version; a Hello of another is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// The Messenger's control messages (the payload of [`FrameClass::Control`] frames,
/// postcard-encoded).
///
/// [`FrameClass::Control`]: crate::wire::FrameClass::Control
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Node → front end, the first frame: who I am (the token I was given).
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// The token the front end expects ([`FrontEnd::expect`]).
        token: u64,
    },
    /// Front end → node: admitted, with its id, global ids and the front end's address,
    /// and the application's peer key (what a node presents to another node it connects
    /// to directly).
    Welcome {
        /// Who the node is.
        info: RuntimeInfo,
        /// The application's peer key.
        peer_key: u64,
    },
    /// Front end → node: not admitted, and why; the front end closes the connection.
    Refused(#[serde(deserialize_with = "crate::fallible::string")] String),
    /// Either way, after the join: still here (see
    /// [`MessengerConfig::silence_limit`](super::MessengerConfig::silence_limit)).
    Heartbeat,
    /// Node → node, the first frame of a direct connection
    /// ([`Messenger::connect_peer`]): who I am, and the application's peer key.
    PeerHello {
        /// [`PROTOCOL_VERSION`].
        version: u32,
        /// The connecting node.
        node: NodeId,
        /// The peer key its Welcome carried.
        key: u64,
    },
    /// Node → node: admitted; the answering node's id.
    PeerWelcome {
        /// The node that listened.
        node: NodeId,
    },
}

/// The front end's side of the join: the tokens it expects and the node ids it gave.
pub(crate) struct FrontShared {
    pub(super) expected: spin::Mutex<BTreeMap<u64, Expected>>,
    pub(super) next_node: AtomicU32,
    /// Where nodes reach the front end unless an expectation says otherwise.
    pub(super) default_address: SocketAddrV4,
}

pub(super) struct Expected {
    pub(super) promise: Promise<Result<RuntimeInfo, JoinError>>,
    pub(super) reachable_at: SocketAddrV4,
}

/// A node being admitted: its `RuntimeInfo`, and the promise to fulfil once its Welcome
/// is queued.
pub(crate) struct Admission {
    pub(crate) info: RuntimeInfo,
    promise: Promise<Result<RuntimeInfo, JoinError>>,
}

impl Admission {
    pub(crate) fn admitted(self) {
        let _ = self.promise.set(Ok(self.info));
    }
}

impl FrontShared {
    /// Admits the node with `token`, or says why not.
    pub(crate) fn admit(&self, token: u64) -> Result<Admission, String> {
        let mut expected = self.expected.lock();
        if !expected.contains_key(&token) {
            return Err(format!("unknown join token {token:#x}"));
        }
        let node = NodeId(self.next_node.load(Ordering::Relaxed));
        let Some(global_ids) = global_ids_of(node) else {
            // Whoever expects this node hears why it never comes.
            if let Some(expected) = expected.remove(&token) {
                let _ = expected.promise.set(Err(JoinError::NodesExhausted));
            }
            return Err(format!("no node ids left (at most {MAX_NODES} nodes)"));
        };
        self.next_node.store(node.0 + 1, Ordering::Relaxed);
        let Some(Expected {
            promise,
            reachable_at,
        }) = expected.remove(&token)
        else {
            return Err(format!("unknown join token {token:#x}"));
        };
        Ok(Admission {
            info: RuntimeInfo {
                node,
                global_ids,
                front_end: reachable_at,
            },
            promise,
        })
    }
}
