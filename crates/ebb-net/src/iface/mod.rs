//! The IP layer: one [`Interface`] per device queue — Ethernet, ARP, IPv4, ICMP echo,
//! UDP sockets and the DHCPv4 client — feeding TCP through [`crate::transport`].
//!
//! # Design
//!
//! * **Sans-IO.** The interface never touches a device or a clock. Received frames come
//!   in through [`Interface::receive_frame`] with the time; frames to send collect in a
//!   bounded queue ([`Interface::transmit_queue`]) that the driver
//!   ([`crate::stack::Stack`]) hands to the device; timers (ARP retries and expiry,
//!   DHCP) run in [`Interface::poll`], due at [`Interface::poll_at`].
//! * **Zero copy.** A TCP segment is handed to TCP as a slice of the frame's `IOBuf`
//!   (the same storage, trimmed); a UDP datagram reaches its socket the same way. On the
//!   way out, Ethernet + IPv4 + transport headers go into one fresh buffer and the
//!   payload buffers are chained behind it; checksums are summed over the chain.
//! * **Two halves.** [`IpOutput`] — addresses, routing, ARP, the transmit queue — is
//!   what TCP sends through ([`TcpOutput`](crate::transport::TcpOutput)). The interface
//!   lends it to TCP while it hands TCP a segment, which is why receiving and sending
//!   state are split.
//! * **Everything bounded and counted.** Queues and tables have limits ([`Limits`]);
//!   every received frame is delivered or counted under one [`RxDropReason`], every
//!   packet not sent under one [`TxDropReason`] ([`InterfaceCounters`]).
//!
//! # Receive path
//!
//! Ethernet: our MAC or broadcast, else dropped. ARP: see the `arp` module. IPv4: the
//! header is checked (version, lengths, checksum unless the device verified it);
//! fragments are dropped (no reassembly); the destination must be our address, or a
//! broadcast (for UDP only), or — while DHCP has no address yet — anything for UDP port
//! 68. IP options are skipped; TTL is not checked for packets addressed to us (RFC 1122
//! §3.2.1.7). ICMP echo requests to our address are answered, echo replies are kept for
//! [`Interface::next_echo_reply`], other ICMP is counted. UDP goes to the
//! DHCP client (port 68) or a bound socket, else an ICMP port unreachable is sent (at
//! most [`Limits::icmp_errors_per_second`], never for broadcasts). TCP is checked
//! (length, checksum unless offloaded) and handed to [`TcpInput::receive`].
//!
//! # Invariants
//!
//! * No input panics the interface: every length is checked by the `wire` views before
//!   it is used (property-tested with arbitrary and mutated frames), and no `unsafe`
//!   code is used.
//! * Outgoing packets carry TTL 64, DF set and a per-interface identification counter;
//!   nothing is fragmented (a packet over the MTU fails with `TooLarge`).

mod arp;
mod arp_cache;
mod config;
mod counters;
mod dhcp;
mod output;
mod udp;

#[cfg(test)]
mod tests;

use alloc::collections::VecDeque;
use core::net::{Ipv4Addr, SocketAddrV4};

use ebb_core::{IOBuf, IOBufChain, Instant};

pub use config::{ArpConfig, InterfaceConfig, Ipv4Cidr, Ipv4Config, Limits};
pub use counters::{InterfaceCounters, RxDropReason, RxDrops, TxDropReason, TxDrops};
pub use dhcp::{DhcpEvent, DhcpLease, DhcpState};
pub use output::IpOutput;
pub use udp::{UdpDatagram, UdpError, UdpHandle};

use counters::bump;
use dhcp::{Change, Destination, DhcpClient};
use output::{ETH_IPV4_LEN, ETH_LEN, IPV4_LEN, NextHop, Route, chain_sum};
use udp::{Delivery, UdpSockets};

use crate::transport::{IcmpErrorKind, OutputError, TcpIcmpError, TcpInput};
use crate::wire::{
    self, DhcpPacket, DhcpRepr, EtherType, EthernetFrame, EthernetRepr, Icmpv4Packet, Icmpv4Repr,
    IpProtocol, Ipv4Packet, Ipv4Repr, TcpPacket, UdpPacket, UdpRepr, WireError, checksum, icmpv4,
};
use ebb_net_driver::{DeviceCapabilities, RxFrame, TxFrame};

/// UDP header length.
const UDP_LEN: usize = 8;

/// One network interface: see the module docs.
#[derive(Debug)]
pub struct Interface {
    out: IpOutput,
    udp: UdpSockets,
    dhcp: Option<DhcpClient>,
    echo_replies: VecDeque<EchoReply>,
    /// Whether [`Interface::receive_frame`] tries the TCP fast path first (see
    /// [`Interface::set_fast_path`]).
    fast_path: bool,
}

/// A TCP segment in an accepted IPv4 packet: its addresses, and where its bytes lie in
/// the frame (`start..end`, the IPv4 payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TcpInIp {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    start: usize,
    end: usize,
}

/// Echo replies kept for [`Interface::next_echo_reply`]; older ones are dropped.
const MAX_ECHO_REPLIES: usize = 16;

/// An ICMP echo reply received (an answer to [`Interface::send_ping`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoReply {
    /// Who answered.
    pub src: Ipv4Addr,
    /// The identifier echoed.
    pub ident: u16,
    /// The sequence number echoed.
    pub seq_no: u16,
    /// How many data bytes came back.
    pub data_len: usize,
}

/// Where an accepted IPv4 packet was addressed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Addressed {
    /// Our unicast address.
    Us,
    /// A broadcast.
    Broadcast,
    /// Any unicast address while we have none (DHCP offers and ACKs may come so).
    Unconfigured,
}

impl Interface {
    /// An interface for a device with `caps`. A static address is announced with a
    /// gratuitous ARP (queued now); a DHCP client starts discovering at the first
    /// [`poll`](Self::poll).
    pub fn new(config: InterfaceConfig, caps: DeviceCapabilities) -> Self {
        // A partial checksum is a TCP/UDP notion: the IPv4 header and ICMP are always
        // completed by the stack when the device does not fill them.
        let mut checksum = caps.checksum;
        checksum.ipv4.tx_partial = false;
        checksum.icmpv4.tx_partial = false;
        let mut out = IpOutput::new(
            config.mac,
            caps.mtu,
            checksum,
            config.limits,
            config.arp,
            config.seed,
        );
        // Segmentation offload needs the device to complete every segment's checksum.
        if checksum.tcp.software_leaves_partial() && caps.tso_max_len > caps.mtu {
            out.tcp_max_packet = caps.tso_max_len;
        }
        let dhcp = match config.ipv4 {
            Ipv4Config::Static { cidr, gateway } => {
                out.cidr = Some(cidr);
                out.gateway = gateway;
                out.send_gratuitous_arp();
                None
            }
            Ipv4Config::Dhcp => Some(DhcpClient::new(config.mac, config.seed)),
            Ipv4Config::Managed => None,
        };
        Self {
            udp: UdpSockets::new(config.limits.udp_receive_queue, config.seed >> 16),
            out,
            dhcp,
            echo_replies: VecDeque::new(),
            fast_path: true,
        }
    }

    /// Our link address.
    pub fn mac(&self) -> wire::EthernetAddress {
        self.out.mac
    }

    /// Our address and subnet, if we have one.
    pub fn ipv4_cidr(&self) -> Option<Ipv4Cidr> {
        self.out.cidr
    }

    /// Our IPv4 address, if we have one.
    pub fn ipv4_address(&self) -> Option<Ipv4Addr> {
        self.out.address()
    }

    /// The default gateway.
    pub fn gateway(&self) -> Option<Ipv4Addr> {
        self.out.gateway
    }

    /// What the interface has done so far.
    pub fn counters(&self) -> InterfaceCounters {
        self.out.counters
    }

    /// The resolved link address of `ip` in the ARP cache.
    pub fn arp_lookup(&self, ip: Ipv4Addr) -> Option<wire::EthernetAddress> {
        self.out.arp.lookup(ip)
    }

    /// ARP cache entries (resolved and pending) and packets waiting for resolution.
    pub fn arp_usage(&self) -> (usize, usize) {
        (self.out.arp.len(), self.out.arp.waiting())
    }

    /// The sending half, for TCP ([`TcpOutput`](crate::transport::TcpOutput)).
    pub fn output(&mut self) -> &mut IpOutput {
        &mut self.out
    }

    /// Frames waiting for the device, oldest first, each with the state of its checksum:
    /// the driver hands this queue to
    /// [`NetDevice::transmit`](ebb_net_driver::NetDevice::transmit), which takes what it can.
    pub fn transmit_queue(&mut self) -> &mut VecDeque<TxFrame> {
        &mut self.out.tx
    }

    // ---- timers ---------------------------------------------------------------------

    /// Runs the timers due at `now`: ARP retries, give-ups and expiries, and the DHCP
    /// client.
    pub fn poll(&mut self, now: Instant) {
        self.out.now = now;
        // The scan allocates; skip it when nothing is due (busy polling calls often).
        if self.out.arp.poll_at().is_some_and(|at| at <= now) {
            self.out.poll_arp();
        }
        if let Some(client) = self.dhcp.as_mut()
            && let Some(msg) = client.poll(now)
        {
            self.send_dhcp(msg);
        }
        self.apply_dhcp_change();
    }

    /// When [`poll`](Self::poll) next has something to do.
    pub fn poll_at(&self) -> Option<Instant> {
        let dhcp = self.dhcp.as_ref().and_then(|c| c.poll_at());
        match (self.out.arp.poll_at(), dhcp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- receive path ---------------------------------------------------------------

    /// Handles a batch of received frames (see [`receive_frame`](Self::receive_frame)),
    /// leaving `frames` empty for reuse. A frame the device marked verified or partial
    /// ([`FrameChecksum::l4_trusted`](ebb_net_driver::FrameChecksum::l4_trusted)) is not
    /// checked for its TCP or UDP checksum — everything else is.
    pub fn receive_batch(
        &mut self,
        now: Instant,
        frames: &mut alloc::vec::Vec<RxFrame>,
        tcp: &mut dyn TcpInput,
    ) {
        // In order, each taken out of its slot (leaving an empty buffer), then the slots
        // cleared: what `drain(..)` does, with less code on this per-frame path.
        for slot in frames.iter_mut() {
            let frame = core::mem::take(&mut slot.buf);
            let trusted = slot.checksum.l4_trusted();
            self.receive_frame_checked(now, frame, trusted, tcp);
        }
        frames.clear();
    }

    /// Turns the receive fast path for plain TCP segments off (`false`) or on (the
    /// default). Either way the interface behaves identically — the fast path only
    /// skips parsing the general path would do to the same end — and tests use this
    /// switch to check exactly that; it is not a tuning knob.
    #[doc(hidden)]
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Handles one received Ethernet frame: answers ARP and pings, queues UDP datagrams
    /// on their sockets, feeds DHCP, and hands TCP segments to `tcp` (zero copy).
    pub fn receive_frame(&mut self, now: Instant, frame: IOBuf, tcp: &mut dyn TcpInput) {
        self.receive_frame_checked(now, frame, false, tcp);
    }

    /// [`receive_frame`](Self::receive_frame); `l4_trusted`: the device vouched for the
    /// frame's TCP/UDP checksum (see [`ebb_net_driver::FrameChecksum`]), so it is not verified.
    pub fn receive_frame_checked(
        &mut self,
        now: Instant,
        frame: IOBuf,
        l4_trusted: bool,
        tcp: &mut dyn TcpInput,
    ) {
        self.out.now = now;
        bump(&mut self.out.counters.rx_frames);
        if l4_trusted {
            bump(&mut self.out.counters.rx_checksum_trusted);
        }
        if self.fast_path
            && let Some(ip) = self.plain_tcp_to_us(frame.as_slice())
        {
            self.receive_tcp(now, ip, frame, l4_trusted, tcp);
        } else {
            self.receive_frame_general(now, frame, l4_trusted, tcp);
        }
        self.apply_dhcp_change();
    }

    /// The common frame, recognised from its first 34 bytes without the general parse:
    /// Ethernet to our MAC carrying IPv4 with a 20-byte header (no options), a valid
    /// checksum (unless the device verified it), not a fragment, from a unicast source
    /// to our address, carrying TCP. For such a frame it returns what the general path
    /// ([`receive_frame_general`](Self::receive_frame_general)) would hand to
    /// [`receive_tcp`](Self::receive_tcp), and `None` for every other frame, which the
    /// general path then handles (and counts, if it drops it). Pinned against the
    /// general path by `tests::rx::fast_path_matches_general_path`.
    #[inline]
    fn plain_tcp_to_us(&self, frame: &[u8]) -> Option<TcpInIp> {
        let (header, _) = frame.split_first_chunk::<ETH_IPV4_LEN>()?;
        let (eth, ip) = header.split_at(ETH_LEN);
        let our_address = self.out.address()?;
        // Version 4 with IHL 5, TCP, to our MAC, as IPv4.
        if ip[0] != 0x45
            || ip[9] != u8::from(IpProtocol::Tcp)
            || eth[..6] != self.out.mac.0
            || eth[12..14] != u16::from(EtherType::Ipv4).to_be_bytes()
        {
            return None;
        }
        // Neither more fragments to come nor an offset (the DF bit may be either).
        if ip[6] & 0x3f != 0 || ip[7] != 0 {
            return None;
        }
        let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if total_len < IPV4_LEN || ETH_LEN + total_len > frame.len() {
            return None;
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        if dst != our_address || src.is_broadcast() || src.is_multicast() {
            return None;
        }
        if self.out.caps.ipv4.software_verifies() && checksum::data(ip) != 0xffff {
            return None;
        }
        Some(TcpInIp {
            src,
            dst,
            start: ETH_IPV4_LEN,
            end: ETH_LEN + total_len,
        })
    }

    /// Every frame [`plain_tcp_to_us`](Self::plain_tcp_to_us) does not take.
    fn receive_frame_general(
        &mut self,
        now: Instant,
        frame: IOBuf,
        l4_trusted: bool,
        tcp: &mut dyn TcpInput,
    ) {
        let eth = match EthernetFrame::new_checked(frame.as_slice())
            .and_then(|f| EthernetRepr::parse(&f))
        {
            Ok(eth) => eth,
            Err(_) => return self.drop_rx(RxDropReason::EthernetMalformed),
        };
        if eth.dst_addr != self.out.mac && !eth.dst_addr.is_broadcast() {
            return self.drop_rx(RxDropReason::EthernetNotForUs);
        }
        match eth.ethertype {
            EtherType::Arp => self.out.receive_arp(&frame[ETH_LEN..]),
            EtherType::Ipv4 => self.receive_ipv4(now, frame, l4_trusted, tcp),
            _ => self.drop_rx(RxDropReason::EthernetUnknownType),
        }
    }

    /// Counts a dropped frame. Cold: kept out of line so the receive path's common case
    /// stays dense in the instruction cache.
    #[cold]
    #[inline(never)]
    fn drop_rx(&mut self, reason: RxDropReason) {
        self.out.counters.rx_dropped.record(reason);
    }

    fn receive_ipv4(
        &mut self,
        now: Instant,
        frame: IOBuf,
        l4_trusted: bool,
        tcp: &mut dyn TcpInput,
    ) {
        let bytes = &frame[ETH_LEN..];
        let packet = match Ipv4Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(_) => return self.drop_rx(RxDropReason::Ipv4Malformed),
        };
        let ip = match Ipv4Repr::parse(&packet, &self.out.caps) {
            Ok(ip) => ip,
            Err(WireError::BadChecksum) => return self.drop_rx(RxDropReason::Ipv4BadChecksum),
            Err(WireError::Unsupported) => return self.drop_rx(RxDropReason::Ipv4Fragment),
            Err(_) => return self.drop_rx(RxDropReason::Ipv4Malformed),
        };
        if ip.src_addr.is_broadcast() || ip.src_addr.is_multicast() {
            return self.drop_rx(RxDropReason::Ipv4BadSource);
        }
        let addressed = if Some(ip.dst_addr) == self.out.address() {
            Addressed::Us
        } else if self.out.is_broadcast(ip.dst_addr) {
            Addressed::Broadcast
        } else if self.out.cidr.is_none() && !ip.dst_addr.is_multicast() {
            Addressed::Unconfigured
        } else {
            return self.drop_rx(RxDropReason::Ipv4NotForUs);
        };
        let header_len = usize::from(packet.header_len());
        let start = ETH_LEN + header_len;
        let end = start + ip.payload_len;
        match ip.protocol {
            IpProtocol::Udp => self.receive_udp(now, &ip, addressed, frame, start..end, l4_trusted),
            _ if addressed == Addressed::Unconfigured => self.drop_rx(RxDropReason::Ipv4NotForUs),
            IpProtocol::Icmp => self.receive_icmp(now, &ip, addressed, &frame[start..end], tcp),
            IpProtocol::Tcp if addressed == Addressed::Us => {
                let segment = TcpInIp {
                    src: ip.src_addr,
                    dst: ip.dst_addr,
                    start,
                    end,
                };
                self.receive_tcp(now, segment, frame, l4_trusted, tcp)
            }
            IpProtocol::Tcp => self.drop_rx(RxDropReason::TcpMalformed),
            _ => self.drop_rx(RxDropReason::Ipv4UnknownProtocol),
        }
    }

    fn receive_tcp(
        &mut self,
        now: Instant,
        ip: TcpInIp,
        mut frame: IOBuf,
        l4_trusted: bool,
        tcp: &mut dyn TcpInput,
    ) {
        let TcpInIp {
            src,
            dst,
            start,
            end,
        } = ip;
        let segment = &frame[start..end];
        let packet = match TcpPacket::new_checked(segment) {
            Ok(p) => p,
            Err(_) => return self.drop_rx(RxDropReason::TcpMalformed),
        };
        if packet.src_port() == 0 || packet.dst_port() == 0 {
            return self.drop_rx(RxDropReason::TcpMalformed);
        }
        if !l4_trusted && self.out.caps.tcp.software_verifies() && !packet.verify_checksum(src, dst)
        {
            return self.drop_rx(RxDropReason::TcpBadChecksum);
        }
        // Zero copy: the segment is the frame's own storage, trimmed to the TCP bytes.
        let tail = frame.len() - end;
        if frame.trim_back(tail).is_err() || frame.trim_front(start).is_err() {
            return self.drop_rx(RxDropReason::TcpMalformed);
        }
        bump(&mut self.out.counters.rx_tcp);
        tcp.receive(now, src, dst, frame, &mut self.out);
    }

    fn receive_udp(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        addressed: Addressed,
        mut frame: IOBuf,
        l4: core::ops::Range<usize>,
        l4_trusted: bool,
    ) {
        let (start, end) = (l4.start, l4.end);
        let packet = match UdpPacket::new_checked(&frame[start..end]) {
            Ok(p) => p,
            Err(_) => return self.drop_rx(RxDropReason::UdpMalformed),
        };
        let mut caps = self.out.caps;
        if l4_trusted {
            caps.udp.rx_verified = true;
        }
        let repr = match UdpRepr::parse(&packet, ip.src_addr, ip.dst_addr, &caps) {
            Ok(r) => r,
            Err(WireError::BadChecksum) => return self.drop_rx(RxDropReason::UdpBadChecksum),
            Err(_) => return self.drop_rx(RxDropReason::UdpMalformed),
        };
        let (src_port, dst_port) = (repr.src_port, repr.dst_port);
        let payload_len = repr.payload.len();
        if dst_port == dhcp::CLIENT_PORT && src_port == dhcp::SERVER_PORT && self.dhcp.is_some() {
            let from = start + UDP_LEN;
            return self.receive_dhcp(now, &frame[from..from + payload_len]);
        }
        if addressed == Addressed::Unconfigured {
            return self.drop_rx(RxDropReason::Ipv4NotForUs);
        }
        // Zero copy: the payload is the frame's storage, trimmed.
        let payload_start = start + UDP_LEN;
        let tail = frame.len() - (payload_start + payload_len);
        let original_end = (start + UDP_LEN).min(end);
        let original = &frame[ETH_LEN..original_end];
        let mut quoted = [0u8; 60 + UDP_LEN];
        let quoted_len = original.len().min(quoted.len());
        quoted[..quoted_len].copy_from_slice(&original[..quoted_len]);
        if frame.trim_back(tail).is_err() || frame.trim_front(payload_start).is_err() {
            return self.drop_rx(RxDropReason::UdpMalformed);
        }
        let datagram = UdpDatagram {
            src: SocketAddrV4::new(ip.src_addr, src_port),
            dst: ip.dst_addr,
            payload: frame,
        };
        match self.udp.deliver(dst_port, datagram) {
            Delivery::Queued => bump(&mut self.out.counters.rx_udp),
            Delivery::QueueFull => self.drop_rx(RxDropReason::UdpQueueFull),
            Delivery::NoSocket => {
                self.drop_rx(RxDropReason::UdpNoSocket);
                if addressed == Addressed::Us {
                    self.send_port_unreachable(ip.src_addr, &quoted[..quoted_len]);
                }
            }
        }
    }

    fn receive_icmp(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        addressed: Addressed,
        bytes: &[u8],
        tcp: &mut dyn TcpInput,
    ) {
        let packet = match Icmpv4Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(_) => return self.drop_rx(RxDropReason::IcmpMalformed),
        };
        match Icmpv4Repr::parse(&packet, &self.out.caps) {
            Ok(Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }) => {
                bump(&mut self.out.counters.rx_icmp_echo_requests);
                if addressed != Addressed::Us {
                    // No answers to broadcast pings (smurf amplification).
                    return;
                }
                let reply = Icmpv4Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                if self.send_icmp(ip.src_addr, &reply).is_ok() {
                    bump(&mut self.out.counters.tx_icmp_echo_replies);
                }
            }
            Ok(Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            }) => {
                bump(&mut self.out.counters.rx_icmp_echo_replies);
                if self.echo_replies.len() >= MAX_ECHO_REPLIES {
                    self.echo_replies.pop_front();
                }
                self.echo_replies.push_back(EchoReply {
                    src: ip.src_addr,
                    ident,
                    seq_no,
                    data_len: data.len(),
                });
            }
            Ok(Icmpv4Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                data,
            }) => {
                let kind = match reason {
                    icmpv4::DstUnreachable::NetUnreachable => Some(IcmpErrorKind::NetUnreachable),
                    icmpv4::DstUnreachable::HostUnreachable => Some(IcmpErrorKind::HostUnreachable),
                    icmpv4::DstUnreachable::ProtoUnreachable => {
                        Some(IcmpErrorKind::ProtocolUnreachable)
                    }
                    icmpv4::DstUnreachable::PortUnreachable => Some(IcmpErrorKind::PortUnreachable),
                    icmpv4::DstUnreachable::FragRequired => {
                        Some(IcmpErrorKind::FragmentationNeeded { next_hop_mtu })
                    }
                    _ => None,
                };
                // Only errors addressed to us, about a TCP segment from our address.
                let error = kind
                    .filter(|_| addressed == Addressed::Us)
                    .and_then(|kind| TcpIcmpError::from_quoted(kind, data))
                    .filter(|e| Some(*e.local.ip()) == self.out.address());
                match error {
                    Some(error) => {
                        bump(&mut self.out.counters.rx_icmp_unreachable);
                        self.out.now = now;
                        tcp.icmp_error(now, error, &mut self.out);
                    }
                    None => bump(&mut self.out.counters.rx_icmp_other),
                }
            }
            Ok(_) | Err(WireError::Unsupported) => bump(&mut self.out.counters.rx_icmp_other),
            Err(WireError::BadChecksum) => self.drop_rx(RxDropReason::IcmpBadChecksum),
            Err(_) => self.drop_rx(RxDropReason::IcmpMalformed),
        }
    }

    /// Sends an ICMP message, built in one buffer (echo data is copied: pings are small).
    fn send_icmp(&mut self, dst: Ipv4Addr, repr: &Icmpv4Repr<'_>) -> Result<(), OutputError> {
        let route = self.out.route_to(dst)?;
        let caps = self.out.caps;
        let len = repr.buffer_len();
        self.out
            .send_datagram(route, IpProtocol::Icmp, len, IOBufChain::new(), |l4, _| {
                repr.emit(&mut Icmpv4Packet::new_unchecked(l4), &caps)
            })
    }

    /// Answers a datagram for a closed port (`original`: its IP header and first 8
    /// bytes), within the rate limit.
    fn send_port_unreachable(&mut self, dst: Ipv4Addr, original: &[u8]) {
        let per_second = self.out.limits.icmp_errors_per_second;
        if !self.out.icmp_limiter.allow(self.out.now, per_second) {
            bump(&mut self.out.counters.icmp_errors_rate_limited);
            return;
        }
        let repr = Icmpv4Repr::DstUnreachable {
            reason: icmpv4::DstUnreachable::PortUnreachable,
            next_hop_mtu: 0,
            data: original,
        };
        if self.send_icmp(dst, &repr).is_ok() {
            bump(&mut self.out.counters.tx_icmp_port_unreachable);
        }
    }

    // ---- ping -----------------------------------------------------------------------

    /// Sends an ICMP echo request to `dst`; its reply shows up in
    /// [`next_echo_reply`](Self::next_echo_reply).
    pub fn send_ping(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> Result<(), OutputError> {
        self.out.now = now;
        self.send_icmp(
            dst,
            &Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            },
        )?;
        bump(&mut self.out.counters.tx_icmp_echo_requests);
        Ok(())
    }

    /// The oldest echo reply received and not yet read (the latest 16 are kept).
    pub fn next_echo_reply(&mut self) -> Option<EchoReply> {
        self.echo_replies.pop_front()
    }

    // ---- UDP ------------------------------------------------------------------------

    /// Binds a UDP socket to `port` (0: a free ephemeral port).
    pub fn udp_bind(&mut self, port: u16) -> Result<UdpHandle, UdpError> {
        if port == dhcp::CLIENT_PORT && self.dhcp.is_some() {
            return Err(UdpError::PortInUse);
        }
        self.udp.bind(port)
    }

    /// Closes a socket; what it had queued is dropped.
    pub fn udp_close(&mut self, handle: UdpHandle) -> Result<(), UdpError> {
        self.udp.close(handle)
    }

    /// The port a socket is bound to.
    pub fn udp_local_port(&mut self, handle: UdpHandle) -> Result<u16, UdpError> {
        self.udp.local_port(handle)
    }

    /// The oldest datagram queued on the socket, if any.
    pub fn udp_recv(&mut self, handle: UdpHandle) -> Result<Option<UdpDatagram>, UdpError> {
        self.udp.recv(handle)
    }

    /// Datagrams the socket dropped because its queue was full.
    pub fn udp_dropped(&mut self, handle: UdpHandle) -> Result<u64, UdpError> {
        self.udp.dropped(handle)
    }

    /// Sends `payload` to `dst` from the socket's port: the headers go in one buffer and
    /// the payload's buffers are chained behind it, not copied.
    pub fn udp_send_to(
        &mut self,
        now: Instant,
        handle: UdpHandle,
        dst: SocketAddrV4,
        payload: IOBufChain,
    ) -> Result<(), UdpError> {
        self.out.now = now;
        let src_port = self.udp.local_port(handle)?;
        let route = self.out.route_to(*dst.ip()).map_err(UdpError::Output)?;
        self.send_udp(route, src_port, dst.port(), payload)
            .map_err(UdpError::Output)
    }

    fn send_udp(
        &mut self,
        route: Route,
        src_port: u16,
        dst_port: u16,
        payload: IOBufChain,
    ) -> Result<(), OutputError> {
        let fill_checksum = self.out.caps.udp.software_fills();
        let partial = self.out.caps.udp.software_leaves_partial();
        let (src, dst) = (route.src, route.dst);
        self.out
            .send_datagram(route, IpProtocol::Udp, UDP_LEN, payload, |l4, payload| {
                let len = (UDP_LEN + payload.len()) as u16;
                let mut packet = UdpPacket::new_unchecked(&mut l4[..]);
                packet.set_src_port(src_port);
                packet.set_dst_port(dst_port);
                packet.set_len(len);
                packet.set_checksum(0);
                if fill_checksum {
                    let sum = checksum::combine(&[
                        checksum::pseudo_header(src, dst, IpProtocol::Udp.into(), len),
                        checksum::data(l4),
                        chain_sum(false, payload),
                    ]);
                    // Zero means "no checksum" in UDP; its other form is all ones.
                    let value = match !sum {
                        0 => 0xffff,
                        v => v,
                    };
                    UdpPacket::new_unchecked(&mut l4[..]).set_checksum(value);
                } else if partial {
                    // The device completes it (see `ebb_net_driver::FrameChecksum::Partial`).
                    let sum = checksum::pseudo_header(src, dst, IpProtocol::Udp.into(), len);
                    UdpPacket::new_unchecked(&mut l4[..]).set_checksum(sum);
                }
            })
    }

    // ---- DHCP -----------------------------------------------------------------------

    /// Where the DHCP client stands (`None` for a static configuration).
    pub fn dhcp_state(&self) -> Option<DhcpState> {
        self.dhcp.as_ref().map(|c| c.state())
    }

    /// The current DHCP lease.
    pub fn dhcp_lease(&self) -> Option<&DhcpLease> {
        self.dhcp.as_ref().and_then(|c| c.lease())
    }

    /// The oldest DHCP event the application has not read (at most 16 are kept).
    pub fn next_dhcp_event(&mut self) -> Option<DhcpEvent> {
        self.dhcp.as_mut().and_then(|c| c.next_event())
    }

    fn receive_dhcp(&mut self, now: Instant, bytes: &[u8]) {
        let Some(client) = self.dhcp.as_mut() else {
            return;
        };
        let answer = DhcpPacket::new_checked(bytes)
            .and_then(|p| DhcpRepr::parse(&p).map(|repr| client.receive(now, &repr)));
        match answer {
            Ok(Ok(reply)) => {
                bump(&mut self.out.counters.rx_dhcp);
                if let Some(msg) = reply {
                    self.send_dhcp(msg);
                }
            }
            Ok(Err(_)) | Err(_) => self.drop_rx(RxDropReason::DhcpIgnored),
        }
    }

    /// Sends a DHCP client message (copied into one buffer: it is small).
    fn send_dhcp(&mut self, msg: dhcp::Outgoing) {
        let route = match msg.destination {
            Destination::Broadcast { src } => Route {
                src,
                dst: Ipv4Addr::BROADCAST,
                next_hop: NextHop::Broadcast,
            },
            Destination::Unicast(server) => match self.out.route_to(server) {
                Ok(route) => route,
                Err(_) => return,
            },
        };
        let len = msg.repr.buffer_len();
        let mut body = alloc::vec![0u8; len];
        msg.repr.emit(&mut DhcpPacket::new_unchecked(&mut body[..]));
        let _ = self.send_udp(
            route,
            dhcp::CLIENT_PORT,
            dhcp::SERVER_PORT,
            IOBufChain::from(IOBuf::from_vec(body)),
        );
    }

    /// Sets (or, with `None`, removes) the address, subnet and gateway of an interface
    /// configured [`Ipv4Config::Managed`] (or `Static`): how a multi-core stack's other
    /// cores follow the home core's DHCP lease. Neighbours learnt on another subnet are
    /// forgotten. Refused (returns false, changes nothing) on a DHCP-configured
    /// interface, whose client owns its address.
    pub fn set_address(&mut self, address: Option<(Ipv4Cidr, Option<Ipv4Addr>)>) -> bool {
        if self.dhcp.is_some() {
            return false;
        }
        let cidr = address.map(|(cidr, _)| cidr);
        if self.out.cidr != cidr {
            self.out.flush_arp();
        }
        self.out.cidr = cidr;
        self.out.gateway = address.and_then(|(_, gateway)| gateway);
        true
    }

    /// Applies what the DHCP client decided: a new address (announced with a
    /// gratuitous ARP) or none. Runs after every frame and poll, so the common case, an
    /// interface without a DHCP client, is decided inline without a call.
    #[inline]
    fn apply_dhcp_change(&mut self) {
        if self.dhcp.is_some() {
            self.apply_dhcp_client_change();
        }
    }

    /// [`apply_dhcp_change`](Self::apply_dhcp_change) for an interface with a client.
    #[inline(never)]
    fn apply_dhcp_client_change(&mut self) {
        let Some(change) = self.dhcp.as_mut().and_then(|c| c.take_change()) else {
            return;
        };
        match change {
            Change::Configure(lease) => {
                if self.out.cidr != Some(lease.cidr) {
                    self.out.flush_arp();
                }
                self.out.cidr = Some(lease.cidr);
                self.out.gateway = lease.router;
                self.out.send_gratuitous_arp();
            }
            Change::Deconfigure => {
                self.out.cidr = None;
                self.out.gateway = None;
                self.out.flush_arp();
            }
        }
    }
}

/// Bytes of Ethernet + IPv4 headers in front of every packet this interface sends.
pub const FRAME_OVERHEAD: usize = ETH_IPV4_LEN;
