//! [`IpOutput`]: the sending half of the interface — our addresses, routing, the
//! IPv4 header, ARP (see [`super::arp`]) and the bounded transmit queue — and the
//! [`TcpOutput`] TCP sends through.
//!
//! Every packet leaves as one [`IOBufChain`]: a single header buffer holding the
//! Ethernet, IPv4 and transport headers, followed by the payload buffers the sender
//! gave, never copied. Checksums over such a chain are computed piece by piece
//! ([`chain_sum`]).
//!
//! Header buffers are recycled ([`HeaderPool`]): the pool keeps a clone of each header it
//! hands out, oldest first, and reuses the oldest once nobody else holds it any more (the
//! device sent or copied the frame). A buffer is written only while unique, so a frame
//! still queued, in flight or held by a receiver is never touched.
//!
//! Invariants: the transmit queue never holds more than
//! [`Limits::tx_queue_frames`](super::Limits::tx_queue_frames) frames; every packet that
//! is not queued (or parked in ARP's wait queue) is counted in
//! [`InterfaceCounters::tx_dropped`] exactly once, where the failure is found.

use alloc::collections::VecDeque;
use alloc::vec;
use core::net::Ipv4Addr;

use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net_driver::{FrameChecksum, TxFrame};

use super::arp_cache::ArpCache;
use super::config::{ArpConfig, Ipv4Cidr, Limits};
use super::counters::{InterfaceCounters, TxDropReason, bump};
use crate::transport::{OutputError, TcpOutput, TcpSegment};
use crate::wire::tcp::{HEADER_LEN as TCP_HEADER_LEN, PlainHeader as TcpPlainHeader};
use crate::wire::{
    self, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Packet,
    Ipv4Repr, TcpPacket, checksum,
};

/// Ethernet II header length.
pub(super) const ETH_LEN: usize = 14;
/// IPv4 header length as we emit it (no options).
pub(super) const IPV4_LEN: usize = 20;
/// Ethernet + IPv4 headers.
pub(super) const ETH_IPV4_LEN: usize = ETH_LEN + IPV4_LEN;
/// TTL of every packet we originate.
pub(super) const DEFAULT_TTL: u8 = 64;

/// Where a frame goes on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NextHop {
    /// To every station (`ff:ff:ff:ff:ff:ff`).
    Broadcast,
    /// To the station with this IPv4 address, resolved by ARP.
    Unicast(Ipv4Addr),
}

/// The addresses and next hop of one outgoing IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Route {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub next_hop: NextHop,
}

/// Room in each pooled header buffer: Ethernet + IPv4 + the largest TCP header (60).
const HEADER_CAPACITY: usize = 128;

/// Recycles header buffers (see the module docs). Holds at most `limit` buffers of at
/// least [`HEADER_CAPACITY`] bytes, allocated only as they are first needed.
#[derive(Debug)]
pub(super) struct HeaderPool {
    /// Clones of the header buffers of frames queued for the device, oldest first:
    /// frames leave in order, so the oldest is the first to become unique again.
    recent: VecDeque<IOBuf>,
    limit: usize,
}

impl HeaderPool {
    fn new(limit: usize) -> Self {
        Self {
            recent: VecDeque::new(),
            limit,
        }
    }

    /// A unique buffer whose view is `len` zeroed bytes at the start of its region: the
    /// oldest pooled buffer if nobody else holds it any more, else a new one.
    fn take(&mut self, len: usize) -> IOBuf {
        if len <= HEADER_CAPACITY
            && self.recent.front().is_some_and(IOBuf::is_unique)
            && let Some(mut buf) = self.recent.pop_front()
        {
            // The steady state: the view already is the region's first `len` bytes
            // (the previous frame's header had the same length); zero it in place.
            if buf.headroom() == 0
                && buf.len() == len
                && let Ok(bytes) = buf.as_mut_slice()
            {
                // A plain TCP segment's headers, the usual length, zeroed with inline
                // stores: `fill` on a slice of unknown length is a `memset` call.
                match <&mut [u8; ETH_IPV4_LEN + TCP_HEADER_LEN]>::try_from(&mut *bytes) {
                    Ok(plain) => *plain = [0; ETH_IPV4_LEN + TCP_HEADER_LEN],
                    Err(_) => bytes.fill(0),
                }
                return buf;
            }
            // Back to an empty view at the region's start, then `len` zeroed bytes.
            let view = buf.len();
            if buf.trim_back(view).is_ok() && buf.headroom() == 0 && buf.append(len).is_ok() {
                return buf;
            }
        }
        Self::fresh(len)
    }

    /// A new header buffer (the pool had none free): pooled size if `len` fits.
    #[cold]
    #[inline(never)]
    fn fresh(len: usize) -> IOBuf {
        if len > HEADER_CAPACITY {
            return IOBuf::from_vec(vec![0; len]);
        }
        let mut buf = IOBuf::with_capacity(HEADER_CAPACITY);
        if buf.append(len).is_err() {
            // Unreachable: the buffer is unique and `len` fits; stay correct anyway.
            buf = IOBuf::from_vec(vec![0; len]);
        }
        buf
    }

    /// Keeps a clone of `header` (a frame's first segment, about to be queued) to reuse
    /// once the frame is gone — if it is a buffer [`take`](Self::take) can reuse.
    fn remember(&mut self, header: &IOBuf) {
        let reusable = header.headroom() == 0
            && header.len() + header.tailroom() >= HEADER_CAPACITY
            && header.is_unique();
        if !reusable || self.limit == 0 {
            return;
        }
        if self.recent.len() >= self.limit {
            self.recent.pop_front();
        }
        self.recent.push_back(header.clone());
    }
}

/// Spaces out ICMP error messages: at most `per_second` in any one-second window.
#[derive(Debug)]
pub(super) struct IcmpRateLimiter {
    window_start: Instant,
    sent_in_window: u32,
}

impl IcmpRateLimiter {
    fn new() -> Self {
        Self {
            window_start: Instant::ZERO,
            sent_in_window: 0,
        }
    }

    /// Whether one more error may be sent at `now`; counts it if so.
    pub(super) fn allow(&mut self, now: Instant, per_second: u32) -> bool {
        if now.saturating_duration_since(self.window_start).as_secs() >= 1 {
            self.window_start = now;
            self.sent_in_window = 0;
        }
        if self.sent_in_window < per_second {
            self.sent_in_window += 1;
            true
        } else {
            false
        }
    }
}

/// The sending half of the interface (see the module docs).
#[derive(Debug)]
pub struct IpOutput {
    pub(super) mac: EthernetAddress,
    pub(super) cidr: Option<Ipv4Cidr>,
    pub(super) gateway: Option<Ipv4Addr>,
    pub(super) mtu: usize,
    /// The largest IPv4 packet a TCP frame may carry: the MTU, or more when the device
    /// segments (TCP segmentation offload; see `Interface::new`).
    pub(super) tcp_max_packet: usize,
    pub(super) caps: wire::ChecksumCapabilities,
    pub(super) limits: Limits,
    pub(super) arp_config: ArpConfig,
    pub(super) arp: ArpCache,
    pub(super) icmp_limiter: IcmpRateLimiter,
    pub(super) counters: InterfaceCounters,
    /// Frames for the device, each with the state of its TCP/UDP checksum.
    pub(super) tx: VecDeque<TxFrame>,
    headers: HeaderPool,
    /// The time of the latest call into the interface: `send_tcp` is not given one, and
    /// ARP timers started from it need it.
    pub(super) now: Instant,
    ident: u16,
}

impl IpOutput {
    pub(super) fn new(
        mac: EthernetAddress,
        mtu: usize,
        caps: wire::ChecksumCapabilities,
        limits: Limits,
        arp_config: ArpConfig,
        seed: u64,
    ) -> Self {
        Self {
            mac,
            cidr: None,
            gateway: None,
            mtu,
            tcp_max_packet: mtu,
            caps,
            limits,
            arp_config,
            arp: ArpCache::default(),
            icmp_limiter: IcmpRateLimiter::new(),
            counters: InterfaceCounters::default(),
            tx: VecDeque::with_capacity(limits.tx_queue_frames.min(1024)),
            // As many as the transmit queue holds, so a full queue's worth recycles.
            headers: HeaderPool::new(limits.tx_queue_frames.min(4096)),
            now: Instant::ZERO,
            ident: seed as u16,
        }
    }

    /// Our IPv4 address, if we have one.
    pub fn address(&self) -> Option<Ipv4Addr> {
        self.cidr.map(|c| c.address())
    }

    /// Whether `addr` is a broadcast we accept: the limited broadcast, or our subnet's.
    pub(super) fn is_broadcast(&self, addr: Ipv4Addr) -> bool {
        addr.is_broadcast() || self.cidr.and_then(|c| c.broadcast()) == Some(addr)
    }

    /// Counts a packet not sent for `error`, and returns it. Cold, like every failure.
    #[cold]
    #[inline(never)]
    pub(super) fn fail(&mut self, error: OutputError) -> OutputError {
        let reason = match error {
            OutputError::Unreachable => TxDropReason::Unreachable,
            OutputError::Pending => TxDropReason::ArpQueueFull,
            OutputError::Busy => TxDropReason::TxQueueFull,
            OutputError::TooLarge => TxDropReason::TooLarge,
        };
        self.counters.tx_dropped.record(reason);
        error
    }

    /// The route from our address to `dst`: straight to it on our subnet (or as a
    /// broadcast), else through the gateway. Counts the failure if there is none.
    pub(super) fn route_to(&mut self, dst: Ipv4Addr) -> Result<Route, OutputError> {
        let Some(cidr) = self.cidr else {
            return Err(self.fail(OutputError::Unreachable));
        };
        let next_hop = if self.is_broadcast(dst) {
            NextHop::Broadcast
        } else if dst == cidr.address() || dst.is_unspecified() || dst.is_multicast() {
            // No loopback, no multicast routing.
            return Err(self.fail(OutputError::Unreachable));
        } else if cidr.contains(dst) {
            NextHop::Unicast(dst)
        } else if let Some(gateway) = self.gateway {
            NextHop::Unicast(gateway)
        } else {
            return Err(self.fail(OutputError::Unreachable));
        };
        Ok(Route {
            src: cidr.address(),
            dst,
            next_hop,
        })
    }

    /// Sends one IPv4 packet: the headers, `l4_len` bytes of transport header that
    /// `fill` writes (it sees them and the payload, to compute a checksum), then
    /// `payload` chained behind without a copy.
    pub(super) fn send_datagram(
        &mut self,
        route: Route,
        protocol: IpProtocol,
        l4_len: usize,
        mut payload: IOBufChain,
        fill: impl FnOnce(&mut [u8], &IOBufChain),
    ) -> Result<(), OutputError> {
        let ip_payload_len = l4_len.saturating_add(payload.len());
        let packet_len = IPV4_LEN.saturating_add(ip_payload_len);
        let limit = if protocol == IpProtocol::Tcp {
            self.tcp_max_packet
        } else {
            self.mtu
        };
        if packet_len > limit.min(usize::from(u16::MAX)) {
            return Err(self.fail(OutputError::TooLarge));
        }
        if packet_len > self.mtu {
            bump(&mut self.counters.tx_tcp_segmentation);
        }
        let mut head = self.headers.take(ETH_IPV4_LEN + l4_len);
        let Ok(bytes) = head.as_mut_slice() else {
            // Unreachable: `take` returns a unique heap buffer.
            return Err(self.fail(OutputError::TooLarge));
        };
        self.write_eth_ipv4(bytes, route.src, route.dst, protocol, ip_payload_len);
        fill(&mut bytes[ETH_IPV4_LEN..], &payload);
        // The common case, a known neighbour: its address goes straight into the header
        // while we still hold it, and the frame to the queue.
        let known = match route.next_hop {
            NextHop::Unicast(ip) => self.arp.lookup(ip),
            NextHop::Broadcast => None,
        };
        if let Some(mac) = known {
            bytes[..6].copy_from_slice(&mac.0);
        }
        // The header goes in front of the payload's own segments (no new chain).
        payload.push_front(head);
        if known.is_some() {
            // The checksum's state follows from what was just written, without parsing
            // the headers back (`checksum_state`).
            let checksum = self.written_checksum_state(protocol);
            return self.enqueue_tx_as(payload, checksum);
        }
        self.send_to_next_hop(route.next_hop, payload)
    }

    /// Writes an Ethernet header (destination left zero for [`send_to_next_hop`](Self::send_to_next_hop)
    /// to fill) and an IPv4 header into the first [`ETH_IPV4_LEN`] bytes of `buf`.
    fn write_eth_ipv4(
        &mut self,
        buf: &mut [u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: IpProtocol,
        payload_len: usize,
    ) {
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: EthernetAddress([0; 6]),
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut buf[..ETH_LEN]));
        self.ident = self.ident.wrapping_add(1);
        Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            protocol,
            payload_len,
            ttl: DEFAULT_TTL,
            ident: self.ident,
            dont_frag: true,
        }
        .emit(
            &mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..ETH_IPV4_LEN]),
            &self.caps,
        );
    }

    /// Sends a frame whose Ethernet destination is still to be filled: broadcast at
    /// once, unicast once ARP knows the next hop (waiting in ARP's queue until then).
    pub(super) fn send_to_next_hop(
        &mut self,
        next_hop: NextHop,
        mut frame: IOBufChain,
    ) -> Result<(), OutputError> {
        match next_hop {
            NextHop::Broadcast => {
                set_dst_mac(&mut frame, EthernetAddress::BROADCAST);
                self.enqueue_tx(frame)
            }
            NextHop::Unicast(ip) => self.resolve_and_send(ip, frame),
        }
    }

    /// Queues a finished frame for the device, or counts it dropped if the queue is full.
    pub(super) fn enqueue_tx(&mut self, frame: IOBufChain) -> Result<(), OutputError> {
        let checksum = self.checksum_state(&frame);
        self.enqueue_tx_as(frame, checksum)
    }

    /// [`enqueue_tx`](Self::enqueue_tx) of a frame whose checksum state the caller knows.
    fn enqueue_tx_as(
        &mut self,
        frame: IOBufChain,
        checksum: FrameChecksum,
    ) -> Result<(), OutputError> {
        if self.tx.len() >= self.limits.tx_queue_frames {
            return Err(self.fail(OutputError::Busy));
        }
        bump(&mut self.counters.tx_frames);
        if let Some(header) = frame.front() {
            self.headers.remember(header);
        }
        if checksum != FrameChecksum::Complete {
            bump(&mut self.counters.tx_checksum_partial);
        }
        self.tx.push_back(TxFrame {
            chain: frame,
            checksum,
        });
        Ok(())
    }

    /// [`checksum_state`](Self::checksum_state) of a frame `send_datagram` just built for
    /// `protocol`: its transport header right behind a 20-byte IPv4 header, not a
    /// fragment — what `checksum_state` would find parsing it
    /// ([`FrameChecksum::partial_of`]: the TCP field 16 bytes in, UDP's 6).
    fn written_checksum_state(&self, protocol: IpProtocol) -> FrameChecksum {
        let (partial, offset) = match protocol {
            IpProtocol::Tcp => (self.caps.tcp.software_leaves_partial(), 16),
            IpProtocol::Udp => (self.caps.udp.software_leaves_partial(), 6),
            _ => (false, 0),
        };
        if partial {
            FrameChecksum::Partial {
                start: ETH_IPV4_LEN as u16,
                offset,
            }
        } else {
            FrameChecksum::Complete
        }
    }

    /// The [`FrameChecksum`] of a finished frame: where its checksum lies if it is TCP or
    /// UDP and this interface leaves that protocol's checksum partial (it writes no other
    /// kind then), else `Complete`. The headers are all in the chain's first segment
    /// (`send_datagram`).
    fn checksum_state(&self, frame: &IOBufChain) -> FrameChecksum {
        let (tcp, udp) = (
            self.caps.tcp.software_leaves_partial(),
            self.caps.udp.software_leaves_partial(),
        );
        if !tcp && !udp {
            return FrameChecksum::Complete;
        }
        let Some(head) = frame.segments().next() else {
            return FrameChecksum::Complete;
        };
        let wanted = match head.get(23) {
            Some(6) => tcp,
            Some(17) => udp,
            _ => false,
        };
        if !wanted {
            return FrameChecksum::Complete;
        }
        FrameChecksum::partial_of(head).unwrap_or(FrameChecksum::Complete)
    }
}

/// Writes `mac` as the Ethernet destination of `frame` (its first segment holds the
/// header). The header buffer is ours and unshared, so this normally writes in place;
/// should it be shared after all, the header is copied first.
pub(super) fn set_dst_mac(frame: &mut IOBufChain, mac: EthernetAddress) {
    let Some(mut head) = frame.front_mut() else {
        return;
    };
    if head.len() < ETH_LEN {
        return;
    }
    if let Ok(bytes) = head.as_mut_slice() {
        bytes[..6].copy_from_slice(&mac.0);
    } else {
        let mut copy = head.to_vec();
        copy[..6].copy_from_slice(&mac.0);
        *head = IOBuf::from_vec(copy);
    }
}

/// The folded one's-complement sum of a chain's bytes, as if they were contiguous and
/// started at an odd offset when `starts_odd`. A piece that starts at an odd offset
/// contributes its own sum byte-swapped (RFC 1071 §2(B)), so nothing is copied.
pub(super) fn chain_sum(starts_odd: bool, chain: &IOBufChain) -> u16 {
    let mut acc: u64 = 0;
    let mut odd = starts_odd;
    for piece in chain.segments() {
        let sum = checksum::data(piece);
        acc += u64::from(if odd { sum.swap_bytes() } else { sum });
        if piece.len() % 2 == 1 {
            odd = !odd;
        }
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// For emitting a header whose checksum we fill ourselves afterwards: as if the device
/// filled every checksum.
const NO_CHECKSUMS: wire::ChecksumCapabilities = wire::ChecksumCapabilities::ALL;

impl TcpOutput for IpOutput {
    fn send_tcp(&mut self, segment: TcpSegment) -> Result<(), OutputError> {
        let route = self.route_to(segment.dst)?;
        if route.src != segment.src {
            // A connection bound to an address we no longer have (a DHCP change).
            return Err(self.fail(OutputError::Unreachable));
        }
        // Borrowed in place (the segment is ours), not copied out.
        let header = &segment.header;
        // `header.payload` is normally empty; if TCP put bytes there, they go inline.
        let l4_len = header.buffer_len();
        let fill_checksum = self.caps.tcp.software_fills();
        let partial = self.caps.tcp.software_leaves_partial();
        let (src, dst) = (route.src, route.dst);
        self.send_datagram(
            route,
            IpProtocol::Tcp,
            l4_len,
            segment.payload,
            |l4, payload| {
                let mut packet = TcpPacket::new_unchecked(&mut l4[..]);
                header.emit(&mut packet, src, dst, &NO_CHECKSUMS);
                if fill_checksum {
                    let len = (l4_len + payload.len()) as u16;
                    let sum = checksum::combine(&[
                        checksum::pseudo_header(src, dst, IpProtocol::Tcp.into(), len),
                        checksum::data(l4),
                        chain_sum(l4_len % 2 == 1, payload),
                    ]);
                    TcpPacket::new_unchecked(&mut l4[..]).set_checksum(!sum);
                } else if partial {
                    // The device completes it (see `ebb_net_driver::FrameChecksum::Partial`).
                    let len = (l4_len + payload.len()) as u16;
                    let sum = checksum::pseudo_header(src, dst, IpProtocol::Tcp.into(), len);
                    TcpPacket::new_unchecked(&mut l4[..]).set_checksum(sum);
                }
            },
        )
    }

    fn send_tcp_plain(
        &mut self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        header: TcpPlainHeader,
        payload: IOBufChain,
    ) -> Result<(), OutputError> {
        let route = self.route_to(dst)?;
        if route.src != src {
            return Err(self.fail(OutputError::Unreachable));
        }
        let fill_checksum = self.caps.tcp.software_fills();
        let partial = self.caps.tcp.software_leaves_partial();
        let (src, dst) = (route.src, route.dst);
        self.send_datagram(
            route,
            IpProtocol::Tcp,
            TCP_HEADER_LEN,
            payload,
            |l4, payload| {
                let Some(bytes) = l4.first_chunk_mut::<TCP_HEADER_LEN>() else {
                    return; // Unreachable: `send_datagram` gives exactly 20 bytes.
                };
                header.emit(bytes);
                if fill_checksum {
                    let len = (TCP_HEADER_LEN + payload.len()) as u16;
                    let sum = checksum::combine(&[
                        checksum::pseudo_header(src, dst, IpProtocol::Tcp.into(), len),
                        checksum::data(&bytes[..]),
                        chain_sum(false, payload),
                    ]);
                    bytes[16..18].copy_from_slice(&(!sum).to_be_bytes());
                } else if partial {
                    let len = (TCP_HEADER_LEN + payload.len()) as u16;
                    let sum = checksum::pseudo_header(src, dst, IpProtocol::Tcp.into(), len);
                    bytes[16..18].copy_from_slice(&sum.to_be_bytes());
                }
            },
        )
    }

    fn max_segment_size(&self, _dst: Ipv4Addr) -> usize {
        self.mtu.saturating_sub(IPV4_LEN + 20)
    }

    fn max_offload_payload(&self, _dst: Ipv4Addr) -> usize {
        self.tcp_max_packet
            .min(usize::from(u16::MAX))
            .saturating_sub(IPV4_LEN + 20)
    }

    fn transmit_room(&self) -> usize {
        self.limits.tx_queue_frames.saturating_sub(self.tx.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::{PlainHeader, SeqNumber};
    use alloc::vec::Vec;

    fn output(caps: wire::ChecksumCapabilities) -> IpOutput {
        let mut out = IpOutput::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            1500,
            caps,
            Limits::default(),
            ArpConfig::default(),
            7,
        );
        out.cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 24);
        out
    }

    /// A recycled header buffer comes back zeroed, whether its old view had the length
    /// asked for (zeroed in place) or another (trimmed and regrown), and it is the
    /// pooled buffer, not a new one.
    #[test]
    fn recycled_headers_are_zeroed() {
        let mut pool = HeaderPool::new(4);
        let mut previous_len = 54;
        let mut header = pool.take(previous_len);
        for len in [54, 54, 40, 40, 54] {
            header.as_mut_slice().expect("unique").fill(0xaa);
            pool.remember(&header);
            let region = header.as_slice().as_ptr();
            drop(header);
            header = pool.take(len);
            assert_eq!(
                header.as_slice(),
                &vec![0u8; len][..],
                "after {previous_len}"
            );
            assert_eq!(header.as_slice().as_ptr(), region, "reused");
            previous_len = len;
        }
    }

    /// A frame sent to a resolved neighbour is queued with the checksum state it was
    /// built with (`written_checksum_state`); parsing the frame (`checksum_state`, what
    /// every other frame is queued with) finds the same, for TCP, UDP and ICMP, under
    /// each kind of checksum offload.
    #[test]
    fn written_checksum_state_is_the_parsed_one() {
        use super::super::arp_cache::Entry;
        use ebb_net_driver::ChecksumOffload;
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let mixed = wire::ChecksumCapabilities {
            tcp: ChecksumOffload::PARTIAL,
            udp: ChecksumOffload::NONE,
            ..wire::ChecksumCapabilities::NONE
        };
        let partial = wire::ChecksumCapabilities {
            tcp: ChecksumOffload::PARTIAL,
            udp: ChecksumOffload::PARTIAL,
            ..wire::ChecksumCapabilities::NONE
        };
        for caps in [
            wire::ChecksumCapabilities::NONE,
            wire::ChecksumCapabilities::ALL,
            mixed,
            partial,
        ] {
            let mut out = output(caps);
            out.arp.entries_mut().insert(
                dst,
                Entry::Resolved {
                    mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
                    expires_at: Instant::from_nanos(u64::MAX),
                },
            );
            for (protocol, l4_len) in [
                (IpProtocol::Tcp, TCP_HEADER_LEN),
                (IpProtocol::Udp, 8),
                (IpProtocol::Icmp, 8),
            ] {
                let route = out.route_to(dst).expect("route");
                let payload = IOBufChain::from(IOBuf::from_vec(vec![7; 33]));
                out.send_datagram(route, protocol, l4_len, payload, |_, _| {})
                    .expect("sent");
                let frame = out.tx.pop_front().expect("queued");
                assert_eq!(
                    frame.checksum,
                    out.checksum_state(&frame.chain),
                    "{protocol:?} under {caps:?}"
                );
            }
        }
    }

    /// The template path writes the same frame bytes as the `Repr` path, with and
    /// without the TCP checksum, for even and odd payloads split over buffers.
    #[test]
    fn plain_header_frames_match_repr_frames() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        // The subnet broadcast: no ARP needed, the frame is queued at once.
        let dst = Ipv4Addr::new(10, 0, 0, 255);
        for caps in [
            wire::ChecksumCapabilities::default(),
            wire::ChecksumCapabilities::ALL,
        ] {
            for (len, flags) in [(0, 0x10), (1, 0x18), (64, 0x18), (1459, 0x11), (7, 0x19)] {
                let header = PlainHeader {
                    src_port: 80,
                    dst_port: 40000,
                    seq_number: SeqNumber(0xfedc_ba98),
                    ack_number: SeqNumber(0x0123_4567),
                    window_len: 0x1234,
                    flags,
                };
                let data: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
                let payload = || {
                    let mut chain = IOBufChain::new();
                    let (a, b) = data.split_at(len / 3);
                    chain.push_back(IOBuf::from_vec(a.to_vec()));
                    chain.push_back(IOBuf::from_vec(b.to_vec()));
                    chain
                };
                let mut fast = output(caps);
                let mut general = output(caps);
                fast.send_tcp_plain(src, dst, header, payload())
                    .expect("sent");
                general
                    .send_tcp(TcpSegment {
                        src,
                        dst,
                        header: header.to_repr(),
                        payload: payload(),
                    })
                    .expect("sent");
                let frame = |o: &mut IpOutput| o.tx.pop_front().expect("queued").chain.to_vec();
                assert_eq!(
                    frame(&mut fast),
                    frame(&mut general),
                    "len {len} flags {flags:#x}"
                );
            }
        }
    }
}
