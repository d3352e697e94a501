//! Tests of the interface with byte fixtures and injected time: one file per concern,
//! sharing the fixtures and builders here. Peer frames are built either as literal
//! bytes (where the exact bytes matter) or with the `wire` reprs.

mod arp;
mod dhcp;
mod fast_path;
mod offload;
mod robustness;
mod rx;
mod tcp;
mod udp;

use alloc::vec;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::time::Duration;

use ebb_core::{IOBuf, IOBufChain, Instant};

use super::*;
use crate::transport::{TcpInput, TcpOutput};
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet,
    Ipv4Repr,
};
use ebb_net_driver::DeviceCapabilities;

pub(super) const OUR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
pub(super) const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
pub(super) const GW_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xfe]);
pub(super) const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub(super) const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);

/// `secs` seconds after the epoch.
pub(super) fn t(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

/// `ms` milliseconds after the epoch.
pub(super) fn t_ms(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

/// A static 10.0.0.1/24 interface with no gateway, seed 0 (the first IP ident is 1),
/// and its start-up gratuitous ARP already taken off the queue.
pub(super) fn iface() -> Interface {
    iface_with(|c| c)
}

/// Like [`iface`], with the configuration adjusted by `f`.
pub(super) fn iface_with(f: impl FnOnce(InterfaceConfig) -> InterfaceConfig) -> Interface {
    let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
    let config = f(InterfaceConfig::new_static(OUR_MAC, cidr, None).with_seed(0));
    let mut iface = Interface::new(config, DeviceCapabilities::ETHERNET);
    iface.transmit_queue().clear();
    iface
}

/// The frames the interface queued, each made contiguous, and the queue emptied.
pub(super) fn sent(iface: &mut Interface) -> Vec<Vec<u8>> {
    iface
        .transmit_queue()
        .drain(..)
        .map(|f| f.chain.to_vec())
        .collect()
}

/// An Ethernet frame.
pub(super) fn eth(
    dst: EthernetAddress,
    src: EthernetAddress,
    ethertype: EtherType,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; 14 + payload.len()];
    EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut b[..14]));
    b[14..].copy_from_slice(payload);
    b
}

/// An IPv4 packet (checksum filled, DF, TTL 64).
pub(super) fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + payload.len()];
    Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol,
        payload_len: payload.len(),
        ttl: 64,
        ident: 7,
        dont_frag: true,
    }
    .emit(
        &mut Ipv4Packet::new_unchecked(&mut b[..]),
        &wire::ChecksumCapabilities::default(),
    );
    b[20..].copy_from_slice(payload);
    b
}

/// A frame from the peer to us carrying an IPv4 packet.
pub(super) fn from_peer(protocol: IpProtocol, payload: &[u8]) -> IOBuf {
    IOBuf::from_vec(eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(PEER_IP, OUR_IP, protocol, payload),
    ))
}

/// An ARP frame.
pub(super) fn arp_frame(dst: EthernetAddress, repr: ArpRepr) -> IOBuf {
    let mut b = vec![0u8; 28];
    repr.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
    IOBuf::from_vec(eth(dst, repr.source_hardware_addr, EtherType::Arp, &b))
}

/// An ARP reply from `mac`/`ip` to us.
pub(super) fn arp_reply_from(mac: EthernetAddress, ip: Ipv4Addr) -> IOBuf {
    arp_frame(
        OUR_MAC,
        ArpRepr {
            operation: ArpOperation::Reply,
            source_hardware_addr: mac,
            source_protocol_addr: ip,
            target_hardware_addr: OUR_MAC,
            target_protocol_addr: OUR_IP,
        },
    )
}

/// A UDP datagram (checksum filled).
pub(super) fn udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let repr = wire::UdpRepr {
        src_port: sport,
        dst_port: dport,
        payload: data,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut wire::UdpPacket::new_unchecked(&mut b[..]),
        src,
        dst,
        &wire::ChecksumCapabilities::default(),
    );
    b
}

/// A TCP double: records the segments it is given, and when `reply` is set answers
/// each with that segment through the interface's output.
#[derive(Default)]
pub(super) struct TcpRecorder {
    pub received: Vec<(Ipv4Addr, Ipv4Addr, IOBuf)>,
    pub reply: Option<crate::transport::TcpSegment>,
    pub reply_results: Vec<Result<(), OutputError>>,
    pub polls: usize,
    pub icmp_errors: Vec<crate::transport::TcpIcmpError>,
}

impl TcpInput for TcpRecorder {
    fn receive(
        &mut self,
        _now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        segment: IOBuf,
        out: &mut dyn TcpOutput,
    ) {
        self.received.push((src, dst, segment));
        if let Some(reply) = self.reply.clone() {
            self.reply_results.push(out.send_tcp(reply));
        }
    }

    fn poll(&mut self, _now: Instant, _out: &mut dyn TcpOutput) {
        self.polls += 1;
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }

    fn icmp_error(
        &mut self,
        _now: Instant,
        error: crate::transport::TcpIcmpError,
        _out: &mut dyn TcpOutput,
    ) {
        self.icmp_errors.push(error);
    }
}

/// Teaches the interface the peer's MAC (an ARP reply) and clears what it sent.
pub(super) fn learn_peer(iface: &mut Interface, now: Instant) {
    iface.receive_frame(
        now,
        arp_reply_from(PEER_MAC, PEER_IP),
        &mut TcpRecorder::default(),
    );
    iface.transmit_queue().clear();
}

/// A contiguous copy of a chain.
pub(super) fn flat(chain: &IOBufChain) -> Vec<u8> {
    chain.to_vec()
}
