//! The seam between the IP layer ([`crate::iface`]) and TCP ([`crate::tcp`]).
//!
//! The interface owns the device, ARP and IPv4; TCP owns connections. Neither names the
//! other's types: the interface hands each TCP segment it receives to a [`TcpInput`], and
//! TCP hands each segment it wants sent to a [`TcpOutput`]. Both directions are zero copy:
//! a received segment is a slice of the frame's `IOBuf`; a sent segment is a header (a
//! [`tcp::Repr`] with an empty payload) plus the payload as an `IOBufChain` of the
//! application's own buffers, and the interface writes Ethernet + IPv4 + TCP headers into
//! one small buffer in front of them.

use core::net::Ipv4Addr;
use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};

use crate::wire::tcp;

/// One TCP segment for the interface to send.
#[derive(Debug, Clone)]
pub struct TcpSegment {
    /// Our address (the connection's local address).
    pub src: Ipv4Addr,
    /// The peer's address.
    pub dst: Ipv4Addr,
    /// Ports, flags, numbers and options. `header.payload` is empty: the data is
    /// [`payload`](Self::payload).
    pub header: tcp::Repr<'static>,
    /// The data, zero copy.
    pub payload: IOBufChain,
}

/// Why the interface did not send a segment. TCP treats `Busy` as back-pressure (it
/// checks [`TcpOutput::transmit_room`] first, stops, and resumes on the next poll) and
/// every other case as a lost segment (its retransmission timer covers it); the
/// interface counts each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputError {
    /// No route to the destination (not on the subnet and no gateway).
    Unreachable,
    /// The next hop's link address is being resolved and its wait queue is full.
    Pending,
    /// The device's transmit queue is full.
    Busy,
    /// The segment does not fit the link MTU.
    TooLarge,
}

/// Where TCP sends segments: implemented by the interface.
pub trait TcpOutput {
    /// Queues one segment for transmission.
    fn send_tcp(&mut self, segment: TcpSegment) -> Result<(), OutputError>;

    /// The largest TCP payload a segment to `dst` may carry without options (the IP MTU
    /// minus 40): the MSS TCP advertises and the cap on what it sends.
    fn max_segment_size(&self, dst: Ipv4Addr) -> usize;

    /// How many more frames the transmit queue takes now. TCP stops emitting at zero
    /// (back-pressure, not loss) and reports [`TcpInput::transmit_blocked`] until a later
    /// poll finds room. The default is unbounded (an output that never refuses `Busy`).
    fn transmit_room(&self) -> usize {
        usize::MAX
    }
}

/// What the interface calls TCP with: implemented by TCP.
pub trait TcpInput {
    /// A TCP segment arrived for one of our addresses. `segment` is the whole TCP header
    /// and payload, IPv4 already checked (and the TCP checksum, if the device did not).
    /// Responses (ACKs, RSTs, data) go to `out` — except that TCP may hold the ACK of
    /// in-order data it delivered to the application until the `poll` the driver runs
    /// after a batch of segments, so that the application's answer carries it.
    fn receive(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        segment: IOBuf,
        out: &mut dyn TcpOutput,
    );

    /// Timers and pending output: called when `poll_at` is due, after `receive`, and after
    /// the application acted on a connection.
    fn poll(&mut self, now: Instant, out: &mut dyn TcpOutput);

    /// When `poll` next has something to do (`None`: only on new input).
    fn poll_at(&self) -> Option<Instant>;

    /// Whether output stopped because [`TcpOutput::transmit_room`] was zero: the driver
    /// calls `poll` again once the transmit queue has room (not a timer, so it does not
    /// move `poll_at`). Default: never.
    fn transmit_blocked(&self) -> bool {
        false
    }
}
