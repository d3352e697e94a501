//! The seam between the IP layer ([`crate::iface`]) and TCP ([`crate::tcp`]).
//!
//! The interface owns the device, ARP and IPv4; TCP owns connections. Neither names the
//! other's types: the interface hands each TCP segment it receives (and each ICMP error
//! about a segment of ours, as a [`TcpIcmpError`]) to a [`TcpInput`], and
//! TCP hands each segment it wants sent to a [`TcpOutput`]. Both directions are zero copy:
//! a received segment is a slice of the frame's `IOBuf`; a sent segment is a header (a
//! [`tcp::Repr`] with an empty payload) plus the payload as an `IOBufChain` of the
//! application's own buffers, and the interface writes Ethernet + IPv4 + TCP headers into
//! one small buffer in front of them.

use core::net::{Ipv4Addr, SocketAddrV4};
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

/// What an ICMP Destination Unreachable said about a segment we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpErrorKind {
    /// No route to the peer's network (code 0).
    NetUnreachable,
    /// The peer's host is unreachable (code 1).
    HostUnreachable,
    /// The peer's host does not speak TCP (code 2).
    ProtocolUnreachable,
    /// Nothing listens on the peer's port (code 3; Linux does not send it for TCP, but
    /// routers and firewalls do).
    PortUnreachable,
    /// A router on the path cannot forward the segment without fragmenting it, and we
    /// set Don't Fragment (code 4): the path MTU is `next_hop_mtu` (0 if the router did
    /// not say, RFC 1191 §5).
    FragmentationNeeded {
        /// The MTU of the hop that refused the segment.
        next_hop_mtu: u16,
    },
}

/// An ICMP error about a TCP segment we sent (RFC 1122 §4.2.3.9), as the interface
/// read it from the IPv4 header and first eight TCP bytes the message quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpIcmpError {
    /// Our address and port: the quoted segment's source.
    pub local: SocketAddrV4,
    /// The peer's: the quoted segment's destination.
    pub remote: SocketAddrV4,
    /// The quoted segment's sequence number (RFC 5927 §4.1: TCP ignores errors whose
    /// segment it cannot have sent recently).
    pub seq: tcp::SeqNumber,
    /// What went wrong.
    pub kind: IcmpErrorKind,
}

impl TcpIcmpError {
    /// Reads the quoted datagram of an ICMP error (`quoted`: its IPv4 header, options
    /// included, and at least the first 8 bytes of its payload). `None` unless it is a
    /// TCP segment (non-fragment, version 4, sane header length).
    pub fn from_quoted(kind: IcmpErrorKind, quoted: &[u8]) -> Option<TcpIcmpError> {
        let first = *quoted.first()?;
        let header_len = usize::from(first & 0x0f) * 4;
        if first >> 4 != 4 || header_len < 20 || quoted.len() < header_len + 8 {
            return None;
        }
        let fragment_offset = u16::from_be_bytes([quoted[6], quoted[7]]) & 0x1fff;
        if quoted[9] != 6 || fragment_offset != 0 {
            return None;
        }
        let address =
            |at: usize| Ipv4Addr::new(quoted[at], quoted[at + 1], quoted[at + 2], quoted[at + 3]);
        let tcp = &quoted[header_len..header_len + 8];
        let port = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
        Some(TcpIcmpError {
            local: SocketAddrV4::new(address(12), port(0)),
            remote: SocketAddrV4::new(address(16), port(2)),
            seq: tcp::SeqNumber(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])),
            kind,
        })
    }
}

/// Where TCP sends segments: implemented by the interface.
pub trait TcpOutput {
    /// Queues one segment for transmission.
    fn send_tcp(&mut self, segment: TcpSegment) -> Result<(), OutputError>;

    /// Queues one segment whose header is a [`tcp::PlainHeader`] (no options): the
    /// common segment of an established connection, which TCP fills from a
    /// per-connection template instead of building a [`tcp::Repr`]. Must behave exactly
    /// like `send_tcp` with [`tcp::PlainHeader::to_repr`] (the default does just that;
    /// the interface writes the 20 bytes directly).
    fn send_tcp_plain(
        &mut self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        header: tcp::PlainHeader,
        payload: IOBufChain,
    ) -> Result<(), OutputError> {
        self.send_tcp(TcpSegment {
            src,
            dst,
            header: header.to_repr(),
            payload,
        })
    }

    /// The largest TCP payload a segment to `dst` may carry without options (the IP MTU
    /// minus 40): the MSS TCP advertises and the cap on what it sends.
    fn max_segment_size(&self, dst: Ipv4Addr) -> usize;

    /// The largest TCP payload (without options) one frame to `dst` may carry when the
    /// device cuts it into segments itself (TCP segmentation offload); at most
    /// [`max_segment_size`](Self::max_segment_size) when it does not (the default).
    ///
    /// The device cuts a longer frame into segments of `max_segment_size` less the
    /// frame's TCP options (see [`ebb_net_driver::Segmentation`]), so TCP
    /// sends such frames only on a connection whose MSS is exactly that.
    fn max_offload_payload(&self, dst: Ipv4Addr) -> usize {
        self.max_segment_size(dst)
    }

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

    /// An ICMP Destination Unreachable quoting a segment of ours arrived (addressed to
    /// us, checksum verified). Default: ignored.
    fn icmp_error(&mut self, _now: Instant, _error: TcpIcmpError, _out: &mut dyn TcpOutput) {}
}
