//! The application-facing TCP interface, shared by every network backend.
//!
//! EbbRT's network interface, not BSD sockets: an application installs a
//! [`TcpHandler`] on each connection and the stack *calls* it with [`IOBuf`]s as data
//! arrives — there is no `read`, and the stack keeps no receive buffer of its own. Sending
//! takes [`IOBufChain`]s and reports back-pressure instead of blocking or dropping.
//!
//! The hosted runtime implements this over Linux sockets and ebb-net natively; both offer
//! connections with the same methods, so an application is written once. The types here
//! are free of any OS type: addresses are `core::net` addresses.

use crate::iobuf::{IOBuf, IOBufChain};
use core::fmt;

pub use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// The events of one connection, delivered on the core that owns it.
///
/// Callbacks never run re-entrantly: while one runs, the connection's methods may be
/// called freely, and any event they cause is delivered after the callback returns.
pub trait TcpHandler: 'static {
    /// Data arrived, in order. The buffer is the application's now (zero copy where the
    /// backend allows). Close the receive window to stop further calls.
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf);

    /// Room opened in the send window after the application met a full one.
    ///
    /// Both backends follow one rule: it fires once after a [`TcpConnection::send`] that
    /// had to queue data, or a [`TcpConnection::try_send`] that handed back a non-empty
    /// rest, as soon as the connection can take more (ebb-net: an ACK or window update
    /// made [`TcpConnection::send_window`] non-zero; hosted: the socket became writable
    /// again, or queued data drained into it). It does not fire when nothing was refused.
    /// Offer the rest again here; if that is refused too, it fires again later.
    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        let _ = conn;
    }

    /// The peer finished sending (FIN): no more `receive` calls. The default closes our
    /// side too, once queued data is sent.
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        conn.close();
    }

    /// The connection is gone; no further callbacks follow.
    fn closed(&mut self, reason: CloseReason);
}

/// What applications can do with a connection. Backends implement it for their connection
/// type; handlers receive it as `&dyn TcpConnection`.
pub trait TcpConnection {
    /// Sends `data`, queueing on the connection whatever the send window does not take now.
    /// Queued bytes go out, in order, as the window opens. Never drops data.
    fn send(&self, data: IOBufChain) -> Result<(), SendError>;

    /// [`send`](Self::send) of what `data` holds, leaving `data` empty (also on an
    /// error, as `send` consumes its chain): for a caller that keeps one chain and
    /// refills it. A backend that queues the buffers itself (ebb-net) takes them
    /// without moving the chain, a move and a new empty chain fewer per send.
    fn send_from(&self, data: &mut IOBufChain) -> Result<(), SendError> {
        self.send(core::mem::take(data))
    }

    /// Sends what the send window takes now and hands back the rest, which the caller may
    /// keep and offer again after [`TcpHandler::send_window_increased`].
    fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError>;

    /// Bytes the send window would take now without queueing.
    fn send_window(&self) -> usize;

    /// Bytes accepted by [`send`](Self::send) but not yet handed to the network.
    fn queued_bytes(&self) -> usize;

    /// Opens (`true`) or closes (`false`) the receive window: while closed, no `receive`
    /// calls happen and the peer is flow-controlled.
    fn set_receive_window_open(&self, open: bool);

    /// Closes gracefully: queued data is sent, then FIN.
    fn close(&self);

    /// Aborts: queued data is dropped and the peer gets a reset.
    fn abort(&self);

    /// The peer's address.
    fn peer_addr(&self) -> SocketAddr;

    /// Our address.
    fn local_addr(&self) -> SocketAddr;
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides closed gracefully.
    Normal,
    /// The peer reset the connection.
    Reset,
    /// We aborted it.
    Aborted,
    /// The peer stopped answering (retransmissions or keepalives timed out).
    TimedOut,
    /// Some other error, identified by the backend.
    Error(TcpErrorKind),
}

/// Why a send was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The connection is closed or closing for writing.
    Closed,
    /// The connection failed with this reason.
    Failed(CloseReason),
}

/// Errors of listening and connecting, independent of the backend's OS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpErrorKind {
    /// Nobody listens at the address.
    ConnectionRefused,
    /// The peer reset the connection.
    ConnectionReset,
    /// The address is already in use.
    AddressInUse,
    /// The address is not valid here.
    AddressNotAvailable,
    /// The operation timed out.
    TimedOut,
    /// The network or host is unreachable.
    Unreachable,
    /// Out of connections, buffers or descriptors.
    OutOfResources,
    /// The backend reported an error with this code (an errno when hosted).
    Other(i32),
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Normal => f.write_str("closed"),
            CloseReason::Reset => f.write_str("reset by peer"),
            CloseReason::Aborted => f.write_str("aborted"),
            CloseReason::TimedOut => f.write_str("timed out"),
            CloseReason::Error(kind) => write!(f, "failed: {kind}"),
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Closed => f.write_str("connection closed for sending"),
            SendError::Failed(reason) => write!(f, "connection {reason}"),
        }
    }
}

impl fmt::Display for TcpErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpErrorKind::ConnectionRefused => f.write_str("connection refused"),
            TcpErrorKind::ConnectionReset => f.write_str("connection reset"),
            TcpErrorKind::AddressInUse => f.write_str("address in use"),
            TcpErrorKind::AddressNotAvailable => f.write_str("address not available"),
            TcpErrorKind::TimedOut => f.write_str("timed out"),
            TcpErrorKind::Unreachable => f.write_str("unreachable"),
            TcpErrorKind::OutOfResources => f.write_str("out of resources"),
            TcpErrorKind::Other(code) => write!(f, "error {code}"),
        }
    }
}

impl core::error::Error for SendError {}
impl core::error::Error for TcpErrorKind {}
