//! Remote Ebb calls, as the distributed objects see them.
//!
//! A distributed object is written against [`Caller`] — "call this Ebb on that node with
//! these bytes" — and serves its own calls with a [`Served`] function. The Messenger
//! implements `Caller` between nodes; an object's logic never sees a connection, so the
//! same code runs over TCP, over shared memory, or inside one node.
//!
//! Payloads are postcard-encoded values of the object's own request and reply types
//! ([`encode`], [`decode`]): fixed by those types, never by a compiler's type hash.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use core::future::Future;
use core::pin::Pin;

use ebb::{EbbId, IOBuf, IOBufChain};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::node::NodeId;

/// Why a remote call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The node is gone (its connection closed, it was freed, it stopped answering).
    #[error("{0} is gone")]
    PeerLost(NodeId),
    /// The node answered with a failure: no such Ebb or kind there, or the Ebb refused.
    #[error("{node} refused the call: {reason}")]
    Refused {
        /// Who refused.
        node: NodeId,
        /// Their reason.
        reason: String,
    },
    /// No answer in time.
    #[error("no answer from {0} in time")]
    TimedOut(NodeId),
    /// A request or reply did not decode as its type.
    #[error("bad payload: {0}")]
    BadPayload(String),
    /// The call could not be sent (the connection's queue is full, no memory).
    #[error("cannot send to {node}: {reason}")]
    NotSent {
        /// The destination.
        node: NodeId,
        /// Why.
        reason: String,
    },
}

/// The future a remote call returns.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<IOBufChain, RemoteError>>>>;

/// Makes remote calls: `call(node, ebb, kind, request)` runs the handler `ebb` registered
/// for `kind` on `node` and resolves to its reply.
pub trait Caller {
    /// The node this caller runs on.
    fn this_node(&self) -> NodeId;
    /// Calls `ebb` on `node`.
    fn call(&self, node: NodeId, ebb: EbbId, kind: u16, request: IOBufChain) -> CallFuture;
}

/// What an object's call handler returns: the reply, or a refusal's reason.
pub type Served = Result<IOBufChain, String>;

/// Encodes `value` as a payload.
pub fn encode<T: Serialize>(value: &T) -> Result<IOBufChain, RemoteError> {
    let bytes = postcard::to_allocvec(value).map_err(|e| RemoteError::BadPayload(e.to_string()))?;
    Ok(IOBufChain::from(IOBuf::from_vec(bytes)))
}

/// Decodes a payload as a `T` (a payload is hostile input: a bad one is an error).
pub fn decode<T: DeserializeOwned>(payload: &IOBufChain) -> Result<T, RemoteError> {
    let parse = |bytes: &[u8]| {
        postcard::from_bytes(bytes).map_err(|e| RemoteError::BadPayload(e.to_string()))
    };
    match payload.segment_count() {
        0 => parse(&[]),
        1 => parse(payload.front().map_or(&[][..], IOBuf::as_slice)),
        _ => parse(&payload.to_vec()),
    }
}
