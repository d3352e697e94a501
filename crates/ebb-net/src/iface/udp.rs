//! UDP sockets: a port bound to a handle, and a bounded queue of received datagrams per
//! socket.
//!
//! Unlike TCP, UDP has no window with which the application could hold the sender
//! back, so each socket queues what arrives until the application takes it — at most
//! [`Limits::udp_receive_queue`](super::Limits::udp_receive_queue) datagrams; one more
//! is dropped and counted (on the socket and as [`RxDropReason::UdpQueueFull`]).
//! Datagrams are zero copy: each payload is a slice of the received frame's `IOBuf`.
//!
//! A datagram for a port nobody bound is counted ([`RxDropReason::UdpNoSocket`]) and
//! answered with an ICMP port unreachable, rate limited (see
//! [`Limits::icmp_errors_per_second`](super::Limits::icmp_errors_per_second)); never for
//! a datagram sent to a broadcast address.
//!
//! [`RxDropReason::UdpQueueFull`]: super::RxDropReason::UdpQueueFull
//! [`RxDropReason::UdpNoSocket`]: super::RxDropReason::UdpNoSocket

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;
use core::net::{Ipv4Addr, SocketAddrV4};

use ebb_core::IOBuf;

use crate::transport::OutputError;

/// First port of the ephemeral range (RFC 6335).
const EPHEMERAL_FIRST: u16 = 49152;

/// Names a bound UDP socket. Handles of closed sockets are refused, even if their
/// slot is reused (a generation number tells them apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    index: usize,
    generation: u32,
}

/// One received datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpDatagram {
    /// Who sent it.
    pub src: SocketAddrV4,
    /// The address it was sent to (ours, or a broadcast).
    pub dst: Ipv4Addr,
    /// The data: a slice of the received frame, not a copy.
    pub payload: IOBuf,
}

/// Why a UDP operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpError {
    /// Another socket has the port.
    PortInUse,
    /// Every ephemeral port is taken.
    NoFreePort,
    /// The handle names no open socket.
    BadHandle,
    /// Sending failed (see [`OutputError`]); counted in the interface's counters.
    Output(OutputError),
}

impl fmt::Display for UdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UdpError::PortInUse => f.write_str("UDP port in use"),
            UdpError::NoFreePort => f.write_str("no free ephemeral UDP port"),
            UdpError::BadHandle => f.write_str("no such UDP socket"),
            UdpError::Output(e) => write!(f, "UDP datagram not sent: {e:?}"),
        }
    }
}

impl core::error::Error for UdpError {}

#[derive(Debug)]
struct Socket {
    port: u16,
    received: VecDeque<UdpDatagram>,
    dropped: u64,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    socket: Option<Socket>,
}

/// The interface's UDP sockets.
#[derive(Debug)]
pub(super) struct UdpSockets {
    slots: Vec<Slot>,
    next_ephemeral: u16,
    queue_limit: usize,
}

/// What became of a datagram handed to [`UdpSockets::deliver`].
pub(super) enum Delivery {
    Queued,
    QueueFull,
    NoSocket,
}

impl UdpSockets {
    pub(super) fn new(queue_limit: usize, seed: u64) -> Self {
        let span = u64::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        Self {
            slots: Vec::new(),
            next_ephemeral: EPHEMERAL_FIRST + (seed % span) as u16,
            queue_limit,
        }
    }

    fn find_port(&self, port: u16) -> Option<&Socket> {
        self.slots
            .iter()
            .filter_map(|s| s.socket.as_ref())
            .find(|s| s.port == port)
    }

    fn socket_mut(&mut self, handle: UdpHandle) -> Result<&mut Socket, UdpError> {
        match self.slots.get_mut(handle.index) {
            Some(slot) if slot.generation == handle.generation => {
                slot.socket.as_mut().ok_or(UdpError::BadHandle)
            }
            _ => Err(UdpError::BadHandle),
        }
    }

    pub(super) fn bind(&mut self, port: u16) -> Result<UdpHandle, UdpError> {
        let port = if port == 0 {
            self.ephemeral_port()?
        } else if self.find_port(port).is_some() {
            return Err(UdpError::PortInUse);
        } else {
            port
        };
        let socket = Socket {
            port,
            received: VecDeque::new(),
            dropped: 0,
        };
        if let Some(index) = self.slots.iter().position(|s| s.socket.is_none()) {
            let slot = &mut self.slots[index];
            slot.generation = slot.generation.wrapping_add(1);
            slot.socket = Some(socket);
            Ok(UdpHandle {
                index,
                generation: slot.generation,
            })
        } else {
            self.slots.push(Slot {
                generation: 0,
                socket: Some(socket),
            });
            Ok(UdpHandle {
                index: self.slots.len() - 1,
                generation: 0,
            })
        }
    }

    fn ephemeral_port(&mut self) -> Result<u16, UdpError> {
        for _ in EPHEMERAL_FIRST..=u16::MAX {
            let port = self.next_ephemeral;
            self.next_ephemeral = if port == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                port + 1
            };
            if self.find_port(port).is_none() {
                return Ok(port);
            }
        }
        Err(UdpError::NoFreePort)
    }

    pub(super) fn close(&mut self, handle: UdpHandle) -> Result<(), UdpError> {
        self.socket_mut(handle)?;
        self.slots[handle.index].socket = None;
        Ok(())
    }

    pub(super) fn local_port(&mut self, handle: UdpHandle) -> Result<u16, UdpError> {
        Ok(self.socket_mut(handle)?.port)
    }

    pub(super) fn recv(&mut self, handle: UdpHandle) -> Result<Option<UdpDatagram>, UdpError> {
        Ok(self.socket_mut(handle)?.received.pop_front())
    }

    pub(super) fn dropped(&mut self, handle: UdpHandle) -> Result<u64, UdpError> {
        Ok(self.socket_mut(handle)?.dropped)
    }

    /// Queues a datagram on the socket bound to `port`.
    pub(super) fn deliver(&mut self, port: u16, datagram: UdpDatagram) -> Delivery {
        let limit = self.queue_limit;
        let Some(socket) = self
            .slots
            .iter_mut()
            .filter_map(|s| s.socket.as_mut())
            .find(|s| s.port == port)
        else {
            return Delivery::NoSocket;
        };
        if socket.received.len() >= limit {
            socket.dropped = socket.dropped.saturating_add(1);
            return Delivery::QueueFull;
        }
        socket.received.push_back(datagram);
        Delivery::Queued
    }
}
