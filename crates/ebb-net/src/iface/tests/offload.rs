//! Per-frame checksum offload (`ebb_net_driver::FrameChecksum`): received frames the device vouched
//! for skip the TCP/UDP checksum and nothing else; under `tx_partial` the interface
//! writes only the pseudo-header sum, which completed as a device would parses valid.

use super::*;
use crate::transport::TcpSegment;
use crate::wire::{TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket};
use ebb_net_driver::{ChecksumOffload, FrameChecksum, RxFrame, complete_checksum};

fn header(src_port: u16, dst_port: u16) -> TcpRepr<'static> {
    TcpRepr {
        src_port,
        dst_port,
        control: TcpControl::None,
        push: true,
        seq_number: TcpSeqNumber(1000),
        ack_number: Some(TcpSeqNumber(2000)),
        window_len: 512,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 4],
        timestamp: None,
        payload: &[],
    }
}

/// A TCP segment from the peer with `data` and a wrong checksum.
fn bad_segment(data: &[u8]) -> Vec<u8> {
    let mut repr = header(40000, 80);
    repr.payload = data;
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut b[..]),
        PEER_IP,
        OUR_IP,
        &wire::ChecksumCapabilities::default(),
    );
    b[16] ^= 0x40;
    b
}

fn receive(iface: &mut Interface, tcp: &mut TcpRecorder, frame: IOBuf, checksum: FrameChecksum) {
    let mut frames = vec![RxFrame {
        buf: frame,
        checksum,
    }];
    iface.receive_batch(t(1), &mut frames, tcp);
    assert!(frames.is_empty());
}

#[test]
fn wrong_tcp_checksum_is_dropped_unless_the_device_vouched_for_it() {
    for fast_path in [true, false] {
        let mut iface = iface();
        iface.set_fast_path(fast_path);
        let mut tcp = TcpRecorder::default();
        let segment = bad_segment(b"data");
        let frame = || from_peer(IpProtocol::Tcp, &segment);
        receive(&mut iface, &mut tcp, frame(), FrameChecksum::Complete);
        assert!(tcp.received.is_empty());
        assert_eq!(iface.counters().rx_dropped.tcp_bad_checksum, 1);
        receive(&mut iface, &mut tcp, frame(), FrameChecksum::Verified);
        // A local sender's partial checksum (virtio NEEDS_CSUM on receive) is trusted too.
        let partial = FrameChecksum::Partial {
            start: 34,
            offset: 16,
        };
        receive(&mut iface, &mut tcp, frame(), partial);
        assert_eq!(tcp.received.len(), 2, "fast path {fast_path}");
        assert_eq!(iface.counters().rx_dropped.tcp_bad_checksum, 1);
        assert_eq!(iface.counters().rx_checksum_trusted, 2);
        // The plain entry point trusts nothing.
        iface.receive_frame(t(1), frame(), &mut tcp);
        assert_eq!(iface.counters().rx_dropped.tcp_bad_checksum, 2);
    }
}

#[test]
fn a_verified_frame_still_has_its_ipv4_header_checked() {
    let mut iface = iface();
    let mut tcp = TcpRecorder::default();
    let mut bytes = from_peer(IpProtocol::Tcp, &bad_segment(b"data")).to_vec();
    bytes[14 + 10] ^= 0x01; // the IPv4 header checksum
    receive(
        &mut iface,
        &mut tcp,
        IOBuf::from_vec(bytes),
        FrameChecksum::Verified,
    );
    assert!(tcp.received.is_empty());
    assert_eq!(iface.counters().rx_dropped.ipv4_bad_checksum, 1);
}

#[test]
fn wrong_udp_checksum_is_dropped_unless_verified() {
    let mut iface = iface();
    let mut tcp = TcpRecorder::default();
    let socket = iface.udp_bind(5000).unwrap();
    let mut datagram = udp(PEER_IP, OUR_IP, 6000, 5000, b"ping");
    datagram[6] ^= 0x10;
    let frame = || from_peer(IpProtocol::Udp, &datagram);
    receive(&mut iface, &mut tcp, frame(), FrameChecksum::Complete);
    assert!(iface.udp_recv(socket).unwrap().is_none());
    assert_eq!(iface.counters().rx_dropped.udp_bad_checksum, 1);
    receive(&mut iface, &mut tcp, frame(), FrameChecksum::Verified);
    let got = iface.udp_recv(socket).unwrap().unwrap();
    assert_eq!(got.payload.as_slice(), b"ping");
}

/// An interface on a device that completes partial TCP/UDP checksums.
fn partial_iface() -> Interface {
    let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
    let config = InterfaceConfig::new_static(OUR_MAC, cidr, None).with_seed(0);
    let mut caps = DeviceCapabilities::ETHERNET;
    caps.checksum.tcp = ChecksumOffload::PARTIAL;
    caps.checksum.udp = ChecksumOffload::PARTIAL;
    let mut iface = Interface::new(config, caps);
    iface.transmit_queue().clear();
    iface
}

/// Completes `frame`'s partial checksum as a device would, at the place
/// `FrameChecksum::partial_of` finds.
fn complete(mut frame: Vec<u8>) -> Vec<u8> {
    let Some(FrameChecksum::Partial { start, offset }) = FrameChecksum::partial_of(&frame) else {
        panic!("not a TCP/UDP frame");
    };
    assert!(complete_checksum(&mut frame, start, offset));
    frame
}

#[test]
fn partial_tcp_checksum_completed_by_the_device_parses_valid() {
    let mut iface = partial_iface();
    learn_peer(&mut iface, t(0));
    // Odd-length pieces: the device sums the chain as one run of bytes.
    let payload: IOBufChain = [&b"abc"[..], b"defgh", b"i", &[0xa5; 301]]
        .into_iter()
        .map(IOBuf::copy_from_slice)
        .collect();
    let segment = TcpSegment {
        src: OUR_IP,
        dst: PEER_IP,
        header: header(80, 40000),
        payload,
    };
    iface.output().send_tcp(segment).unwrap();
    let frame = flat(&iface.transmit_queue().pop_front().unwrap().chain);
    let l4 = &frame[34..];
    assert!(
        !TcpPacket::new_checked(l4)
            .unwrap()
            .verify_checksum(OUR_IP, PEER_IP)
    );
    let sum = checksum::pseudo_header(OUR_IP, PEER_IP, 6, l4.len() as u16);
    assert_eq!(TcpPacket::new_checked(l4).unwrap().checksum(), sum);
    let frame = complete(frame);
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    assert!(ip.verify_checksum(), "the IPv4 header is always complete");
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(tcp.verify_checksum(OUR_IP, PEER_IP));
    TcpRepr::parse(&tcp, OUR_IP, PEER_IP, &Default::default()).unwrap();
}

#[test]
fn partial_udp_checksum_completed_by_the_device_parses_valid() {
    let mut iface = partial_iface();
    learn_peer(&mut iface, t(0));
    let socket = iface.udp_bind(5000).unwrap();
    for data in [&b"odd"[..], b"even", &[0xff; 64]] {
        let dst = core::net::SocketAddrV4::new(PEER_IP, 6000);
        let payload = IOBufChain::from(IOBuf::copy_from_slice(data));
        iface.udp_send_to(t(1), socket, dst, payload).unwrap();
        let frame = complete(flat(&iface.transmit_queue().pop_front().unwrap().chain));
        let udp = UdpPacket::new_checked(&frame[34..]).unwrap();
        assert_ne!(udp.checksum(), 0);
        assert!(udp.verify_checksum(OUR_IP, PEER_IP));
    }
}
