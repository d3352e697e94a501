//! The Messenger's errors: why a send, a call or a join failed, and why a peer was lost.

use alloc::string::String;
use core::time::Duration;

use ebb::net::{CloseReason, TcpErrorKind};

use crate::node::{MAX_NODES, NodeId};
use crate::wire::{FrameClass, WireError};

/// Why a peer's connection ended. Every call waiting on the peer fails with it, and later
/// sends to the peer fail fast with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LossReason {
    /// The TCP connection ended (closed, reset, timed out, or aborted by this node).
    #[error("connection {0}")]
    Connection(CloseReason),
    /// The peer finished sending (FIN): it can answer nothing more.
    #[error("the peer closed its side of the connection")]
    PeerFinished,
    /// The peer sent something that is not the Messenger protocol; the connection was
    /// aborted.
    #[error("protocol error: {0}")]
    Protocol(ProtocolError),
    /// This node disconnected it ([`Messenger::disconnect`](super::Messenger::disconnect)
    /// or [`Messenger::shutdown`](super::Messenger::shutdown)).
    #[error("disconnected by this node")]
    Disconnected,
    /// Nothing came from the peer (not even a heartbeat) for this long; the connection
    /// was aborted.
    #[error("nothing heard from the peer for {0:?}")]
    Silent(Duration),
    /// The join handshake did not finish in time; the connection was aborted.
    #[error("no join handshake within {0:?}")]
    HandshakeTimeout(Duration),
    /// The front end refused the join (unknown token, bad Hello, no node ids left).
    #[error("join refused: {0}")]
    Refused(String),
}

/// What was wrong with a peer's bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The bytes are not a frame ([`crate::wire`]).
    #[error(transparent)]
    Wire(#[from] WireError),
    /// A frame names another source node than the one the connection belongs to.
    #[error("frame claims to come from {claimed}, but the connection is {expected}'s")]
    WrongSource {
        /// The header's source.
        claimed: NodeId,
        /// The peer the connection was joined as.
        expected: NodeId,
    },
    /// A control payload that does not decode.
    #[error("bad control message: {0}")]
    BadControl(String),
    /// The connection ended in the middle of a frame.
    #[error("the connection ended inside a frame ({buffered} bytes of it received)")]
    Truncated {
        /// Bytes of the unfinished frame that had arrived.
        buffered: usize,
    },
    /// A frame that makes no sense at this point of the conversation.
    #[error("unexpected {class:?} frame {when}")]
    Unexpected {
        /// Its class.
        class: FrameClass,
        /// When it came.
        when: &'static str,
    },
}

/// Why a message could not be queued for a peer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No connection to this node was ever made.
    #[error("{0} is not a peer of this node")]
    UnknownPeer(NodeId),
    /// The peer's connection is gone.
    #[error("{node} is lost: {reason}")]
    PeerLost {
        /// The peer.
        node: NodeId,
        /// Why.
        reason: LossReason,
    },
    /// The peer's queue holds as much as it may
    /// ([`MessengerConfig::queue_limit`](super::MessengerConfig::queue_limit)): wait
    /// with [`Messenger::room`](super::Messenger::room), or use
    /// [`Messenger::send_when_ready`](super::Messenger::send_when_ready).
    #[error("{queued} bytes already queued for {node} (limit {limit}); wait for room")]
    Full {
        /// The peer.
        node: NodeId,
        /// Bytes queued for it now.
        queued: usize,
        /// The bound.
        limit: usize,
    },
    /// The payload is longer than a frame may carry.
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// This Messenger has not joined an application yet (it has no node id).
    #[error("this Messenger has not joined yet")]
    NotJoined,
    /// Memory for a frame header could not be had.
    #[error("no memory for a frame header")]
    OutOfMemory,
}

impl SendError {
    pub(super) fn from_wire(e: WireError, len: usize) -> SendError {
        match e {
            WireError::TooLong { max, .. } => SendError::TooLong { len, max },
            _ => SendError::OutOfMemory,
        }
    }
}

/// Why a remote call has no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request could not be sent (unknown peer, payload too long, not joined).
    #[error("cannot send the request: {0}")]
    Send(SendError),
    /// The peer was lost before it answered (or before the request could go out).
    #[error("{node} is lost: {reason}")]
    PeerLost {
        /// The peer.
        node: NodeId,
        /// Why.
        reason: LossReason,
    },
    /// The peer answered with a failure: no handler for the Ebb and kind, too many calls
    /// in flight, or the handler's own error.
    #[error("{node} failed the call: {reason}")]
    Failed {
        /// The peer.
        node: NodeId,
        /// Its reason (UTF-8, lossily decoded, at most
        /// [`MAX_FAILURE_REASON`](super::MAX_FAILURE_REASON) bytes).
        reason: String,
    },
    /// No answer within the time given to [`Messenger::call_timeout`](super::Messenger::call_timeout).
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl From<SendError> for CallError {
    fn from(e: SendError) -> CallError {
        match e {
            SendError::PeerLost { node, reason } => CallError::PeerLost { node, reason },
            other => CallError::Send(other),
        }
    }
}

/// Why a node could not join, or a front end could not admit one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// The front end could not be reached.
    #[error("cannot connect to the front end: {0}")]
    Connect(TcpErrorKind),
    /// The front end could not listen.
    #[error("cannot listen for nodes: {0}")]
    Listen(TcpErrorKind),
    /// The front end refused the join, saying why.
    #[error("the front end refused the join: {0}")]
    Refused(String),
    /// The connection ended during the handshake.
    #[error("lost the connection during the join: {0}")]
    Lost(LossReason),
    /// No answer within the time allowed.
    #[error("no join within {0:?}")]
    TimedOut(Duration),
    /// The front end already expects a node with this token.
    #[error("token {0:#x} is already expected")]
    TokenInUse(u64),
    /// This Messenger has not joined an application yet.
    #[error("this Messenger has not joined yet")]
    NotJoined,
    /// This Messenger already joined (or is joining).
    #[error("this Messenger has already joined or is joining")]
    AlreadyJoined,
    /// Every node id is taken.
    #[error("every node id is in use (at most {MAX_NODES} nodes)")]
    NodesExhausted,
    /// The front end stopped before the node joined.
    #[error("the front end stopped")]
    FrontEndStopped,
}
