//! Remote Ebb calls, as the distributed objects see them.
//!
//! A distributed object is written against [`Caller`] — "call this Ebb on that node with
//! these bytes" — and serves its own calls with a [`Served`] function. The
//! [`Messenger`] implements `Caller` between nodes; an object's logic never sees a
//! connection, so the same code runs over TCP, over shared memory, or inside one node.
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

use crate::messenger::{CallError, Messenger};
use crate::node::NodeId;

/// Why a distributed object's operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The call failed: the node is lost, refused it, or it could not be sent
    /// ([`CallError`] says which).
    #[error(transparent)]
    Call(#[from] CallError),
    /// A request or reply did not decode as its type.
    #[error("bad payload: {0}")]
    BadPayload(String),
    /// The object has no node to send the operation to.
    #[error("the object has no shards")]
    NoShards,
}

/// The future a remote call returns.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<IOBufChain, CallError>>>>;

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

/// Decodes a payload as a `T` (a payload is hostile input: a bad one is an error). A
/// multi-segment payload is copied into one buffer reserved fallibly; `T`'s own fields
/// allocate as their `Deserialize` does — the crate's request types use [`fallible`](crate::fallible).
pub fn decode<T: DeserializeOwned>(payload: &IOBufChain) -> Result<T, RemoteError> {
    let bytes = crate::fallible::contiguous(payload)
        .ok_or_else(|| RemoteError::BadPayload("out of memory for a peer's payload".into()))?;
    postcard::from_bytes(&bytes).map_err(|e| RemoteError::BadPayload(e.to_string()))
}

impl Caller for Messenger {
    /// The node this Messenger is (the front end until a join says otherwise).
    fn this_node(&self) -> NodeId {
        self.node().unwrap_or(NodeId::FRONT_END)
    }

    fn call(&self, node: NodeId, ebb: EbbId, kind: u16, request: IOBufChain) -> CallFuture {
        Box::pin(Messenger::call(self, node, ebb, kind, request))
    }
}
