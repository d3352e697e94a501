//! TCP across the seam: segments handed to TCP zero copy, and segments sent through
//! [`TcpOutput`] as one header buffer plus the payload chain.

use super::*;
use crate::transport::TcpSegment;
use crate::wire::{TcpControl, TcpPacket, TcpRepr, TcpSeqNumber};

fn tcp_header(src_port: u16, dst_port: u16) -> TcpRepr<'static> {
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

/// A TCP segment from the peer with `data`, checksum filled.
fn segment_bytes(data: &[u8]) -> Vec<u8> {
    let mut repr = tcp_header(40000, 80);
    repr.payload = data;
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut b[..]),
        PEER_IP,
        OUR_IP,
        &wire::ChecksumCapabilities::default(),
    );
    b
}

#[test]
fn segment_is_handed_to_tcp_as_a_slice_of_the_frame() {
    let mut iface = iface();
    let mut tcp = TcpRecorder::default();
    let segment = segment_bytes(b"hello, tcp");
    // Ethernet pads short frames: the padding must not reach TCP.
    let mut bytes = eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(PEER_IP, OUR_IP, IpProtocol::Tcp, &segment),
    );
    bytes.extend_from_slice(&[0xee; 6]);
    let frame = IOBuf::from_vec(bytes);
    let keep = frame.clone();
    iface.receive_frame(t(1), frame, &mut tcp);
    assert_eq!(tcp.received.len(), 1);
    let (src, dst, got) = &tcp.received[0];
    assert_eq!((*src, *dst), (PEER_IP, OUR_IP));
    assert_eq!(got.as_slice(), &segment[..]);
    assert!(
        got.shares_storage_with(&keep),
        "zero copy: same storage as the frame"
    );
    assert_eq!(iface.counters().rx_tcp, 1);
}

#[test]
fn bad_tcp_segments_are_counted() {
    let mut iface = iface();
    let mut tcp = TcpRecorder::default();
    let mut segment = segment_bytes(b"data");
    segment[16] ^= 0x40; // checksum
    iface.receive_frame(t(1), from_peer(IpProtocol::Tcp, &segment), &mut tcp);
    iface.receive_frame(t(1), from_peer(IpProtocol::Tcp, &segment[..10]), &mut tcp);
    let broadcast = eth(
        EthernetAddress::BROADCAST,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            PEER_IP,
            Ipv4Addr::BROADCAST,
            IpProtocol::Tcp,
            &segment_bytes(b"x"),
        ),
    );
    iface.receive_frame(t(1), IOBuf::from_vec(broadcast), &mut tcp);
    assert!(tcp.received.is_empty());
    let drops = iface.counters().rx_dropped;
    assert_eq!(drops.tcp_bad_checksum, 1);
    assert_eq!(drops.tcp_malformed, 2);
}

#[test]
fn sent_segment_is_one_header_buffer_plus_the_payload_chain() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    // Odd-length pieces exercise the checksum across piece boundaries.
    let pieces = [
        IOBuf::copy_from_slice(b"abc"),
        IOBuf::copy_from_slice(b"defgh"),
        IOBuf::copy_from_slice(b"i"),
        IOBuf::copy_from_slice(&[0xa5; 301]),
    ];
    let payload: IOBufChain = pieces.iter().cloned().collect();
    let mut header = tcp_header(80, 40000);
    header.max_seg_size = Some(1460);
    let segment = TcpSegment {
        src: OUR_IP,
        dst: PEER_IP,
        header,
        payload,
    };
    iface.output().send_tcp(segment).unwrap();
    let frame = iface.transmit_queue().pop_front().unwrap().chain;
    assert_eq!(frame.segment_count(), 1 + pieces.len());
    for (sent_piece, original) in frame.iter().skip(1).zip(&pieces) {
        assert!(
            sent_piece.shares_storage_with(original),
            "payload not copied"
        );
    }
    let bytes = flat(&frame);
    let eth = EthernetFrame::new_checked(&bytes[..]).unwrap();
    assert_eq!(eth.dst_addr(), PEER_MAC);
    assert_eq!(eth.src_addr(), OUR_MAC);
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert!(ip.dont_frag());
    assert_eq!(ip.ttl(), 64);
    assert_eq!(ip.ident(), 1);
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(
        tcp.verify_checksum(OUR_IP, PEER_IP),
        "checksum over the chain"
    );
    let repr = TcpRepr::parse(&tcp, OUR_IP, PEER_IP, &Default::default()).unwrap();
    assert_eq!(repr.max_seg_size, Some(1460));
    assert_eq!(repr.payload.len(), 3 + 5 + 1 + 301);

    // The identification counter moves on.
    let again = TcpSegment {
        src: OUR_IP,
        dst: PEER_IP,
        header: tcp_header(80, 40000),
        payload: IOBufChain::new(),
    };
    iface.output().send_tcp(again).unwrap();
    let bytes = flat(&iface.transmit_queue().pop_front().unwrap().chain);
    assert_eq!(Ipv4Packet::new_checked(&bytes[14..]).unwrap().ident(), 2);
}

#[test]
fn tcp_replies_from_inside_receive_reach_the_queue() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let mut tcp = TcpRecorder {
        reply: Some(TcpSegment {
            src: OUR_IP,
            dst: PEER_IP,
            header: tcp_header(80, 40000),
            payload: IOBufChain::from(IOBuf::copy_from_slice(b"pong")),
        }),
        ..Default::default()
    };
    iface.receive_frame(
        t(1),
        from_peer(IpProtocol::Tcp, &segment_bytes(b"ping")),
        &mut tcp,
    );
    assert_eq!(tcp.reply_results, vec![Ok(())]);
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][frames[0].len() - 4..], b"pong");
}

#[test]
fn routing_mss_and_output_errors() {
    let mut iface = iface();
    assert_eq!(iface.output().max_segment_size(PEER_IP), 1460);
    let seg = |dst: Ipv4Addr, len: usize| TcpSegment {
        src: OUR_IP,
        dst,
        header: tcp_header(80, 40000),
        payload: IOBufChain::from(IOBuf::from_vec(vec![0; len])),
    };
    // Off the subnet with no gateway.
    let far = Ipv4Addr::new(192, 0, 2, 1);
    assert_eq!(
        iface.output().send_tcp(seg(far, 10)),
        Err(OutputError::Unreachable)
    );
    // Over the MTU.
    learn_peer(&mut iface, t(0));
    assert_eq!(
        iface.output().send_tcp(seg(PEER_IP, 1461)),
        Err(OutputError::TooLarge)
    );
    assert!(iface.output().send_tcp(seg(PEER_IP, 1460)).is_ok());
    // From an address that is not ours.
    let mut foreign = seg(PEER_IP, 1);
    foreign.src = Ipv4Addr::new(10, 0, 0, 99);
    assert_eq!(
        iface.output().send_tcp(foreign),
        Err(OutputError::Unreachable)
    );
    let drops = iface.counters().tx_dropped;
    assert_eq!((drops.unreachable, drops.too_large), (2, 1));

    // With a gateway, far destinations go to the gateway's MAC.
    let mut routed = iface_with(|_| {
        let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
        InterfaceConfig::new_static(OUR_MAC, cidr, Some(GW_IP)).with_seed(0)
    });
    assert!(routed.output().send_tcp(seg(far, 10)).is_ok());
    let arp = sent(&mut routed);
    let request = ArpRepr::parse(&ArpPacket::new_checked(&arp[0][14..]).unwrap()).unwrap();
    assert_eq!(request.target_protocol_addr, GW_IP);
    routed.receive_frame(
        t(0),
        arp_reply_from(GW_MAC, GW_IP),
        &mut TcpRecorder::default(),
    );
    let frames = sent(&mut routed);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][..6], &GW_MAC.0);
    assert_eq!(&frames[0][30..34], &far.octets());
}

#[test]
fn full_transmit_queue_is_busy() {
    let mut iface = iface_with(|c| {
        c.with_limits(Limits {
            tx_queue_frames: 2,
            ..Default::default()
        })
    });
    learn_peer(&mut iface, t(0));
    let seg = || TcpSegment {
        src: OUR_IP,
        dst: PEER_IP,
        header: tcp_header(80, 40000),
        payload: IOBufChain::new(),
    };
    assert!(iface.output().send_tcp(seg()).is_ok());
    assert!(iface.output().send_tcp(seg()).is_ok());
    assert_eq!(iface.output().send_tcp(seg()), Err(OutputError::Busy));
    assert_eq!(iface.counters().tx_dropped.tx_queue_full, 1);
}

#[test]
fn chain_checksum_matches_the_contiguous_one() {
    let data: Vec<u8> = (0..257u32).map(|i| (i * 7 + 3) as u8).collect();
    let whole = checksum::data(&data);
    for cut_a in [0, 1, 2, 3, 100, 255] {
        for cut_b in [cut_a, cut_a + 1, 256] {
            let chain: IOBufChain = [
                IOBuf::copy_from_slice(&data[..cut_a]),
                IOBuf::copy_from_slice(&data[cut_a..cut_b]),
                IOBuf::copy_from_slice(&data[cut_b..]),
            ]
            .into_iter()
            .collect();
            // One's-complement zero has two forms; compare modulo 0xffff.
            assert_eq!(
                output::chain_sum(false, &chain) % 0xffff,
                whole % 0xffff,
                "cuts {cut_a} {cut_b}"
            );
        }
    }
}

/// An ICMP Destination Unreachable from `router` quoting `quoted` (an IPv4 packet's
/// header and first bytes).
fn unreachable_from(
    router: Ipv4Addr,
    reason: wire::icmpv4::DstUnreachable,
    next_hop_mtu: u16,
    quoted: &[u8],
) -> IOBuf {
    let repr = wire::Icmpv4Repr::DstUnreachable {
        reason,
        next_hop_mtu,
        data: quoted,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut wire::Icmpv4Packet::new_unchecked(&mut b[..]),
        &wire::ChecksumCapabilities::default(),
    );
    IOBuf::from_vec(eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(router, OUR_IP, IpProtocol::Icmp, &b),
    ))
}

#[test]
fn icmp_unreachable_about_our_tcp_segment_reaches_tcp() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    // What a router quotes: our IPv4 header and the first 8 bytes of our segment.
    let mut ours = tcp_header(5000, 443);
    ours.seq_number = TcpSeqNumber(0x0102_0304);
    let mut segment = vec![0u8; ours.buffer_len()];
    ours.emit(
        &mut TcpPacket::new_unchecked(&mut segment[..]),
        OUR_IP,
        PEER_IP,
        &wire::ChecksumCapabilities::default(),
    );
    let packet = ipv4(OUR_IP, PEER_IP, IpProtocol::Tcp, &segment);
    let quoted = &packet[..28];
    let router = Ipv4Addr::new(10, 0, 0, 254);
    let mut tcp = TcpRecorder::default();
    for (reason, mtu) in [
        (wire::icmpv4::DstUnreachable::PortUnreachable, 0),
        (wire::icmpv4::DstUnreachable::FragRequired, 1280),
    ] {
        iface.receive_frame(
            t(1),
            unreachable_from(router, reason, mtu, quoted),
            &mut tcp,
        );
    }
    use crate::transport::IcmpErrorKind;
    let expected = |kind| crate::transport::TcpIcmpError {
        local: SocketAddrV4::new(OUR_IP, 5000),
        remote: SocketAddrV4::new(PEER_IP, 443),
        seq: TcpSeqNumber(0x0102_0304),
        kind,
    };
    assert_eq!(
        tcp.icmp_errors,
        [
            expected(IcmpErrorKind::PortUnreachable),
            expected(IcmpErrorKind::FragmentationNeeded { next_hop_mtu: 1280 }),
        ]
    );
    assert_eq!(iface.counters().rx_icmp_unreachable, 2);

    // Not from our address, not TCP, or too short to name the ports: counted only.
    let foreign = ipv4(PEER_IP, OUR_IP, IpProtocol::Tcp, &segment);
    let udp_packet = ipv4(
        OUR_IP,
        PEER_IP,
        IpProtocol::Udp,
        &udp(OUR_IP, PEER_IP, 1, 2, b"x"),
    );
    for quoted in [&foreign[..28], &udp_packet[..28], &packet[..27]] {
        let frame = unreachable_from(
            router,
            wire::icmpv4::DstUnreachable::PortUnreachable,
            0,
            quoted,
        );
        iface.receive_frame(t(2), frame, &mut tcp);
    }
    assert_eq!(tcp.icmp_errors.len(), 2, "nothing more reached TCP");
    assert_eq!(iface.counters().rx_icmp_other, 3);
    assert!(sent(&mut iface).is_empty(), "errors are never answered");
}
