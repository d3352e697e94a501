//! UDP: delivery to bound sockets (zero copy, bounded queue), closed ports (ICMP port
//! unreachable, rate limited), sending with a chained payload, ports and handles.

use core::net::SocketAddrV4;

use super::*;

fn receive(iface: &mut Interface, now: Instant, frame: IOBuf) {
    iface.receive_frame(now, frame, &mut TcpRecorder::default());
}

fn datagram_to(port: u16, data: &[u8]) -> IOBuf {
    from_peer(IpProtocol::Udp, &udp(PEER_IP, OUR_IP, 5353, port, data))
}

#[test]
fn datagrams_reach_their_socket_zero_copy() {
    let mut iface = iface();
    let sock = iface.udp_bind(7000).unwrap();
    let frame = datagram_to(7000, b"hello udp");
    let keep = frame.clone();
    receive(&mut iface, t(1), frame);
    let d = iface.udp_recv(sock).unwrap().unwrap();
    assert_eq!(d.src, SocketAddrV4::new(PEER_IP, 5353));
    assert_eq!(d.dst, OUR_IP);
    assert_eq!(d.payload.as_slice(), b"hello udp");
    assert!(d.payload.shares_storage_with(&keep));
    assert_eq!(iface.udp_recv(sock).unwrap(), None);
    assert_eq!(iface.counters().rx_udp, 1);
    // Broadcasts reach sockets too.
    let bcast = eth(
        EthernetAddress::BROADCAST,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            PEER_IP,
            Ipv4Addr::BROADCAST,
            IpProtocol::Udp,
            &udp(PEER_IP, Ipv4Addr::BROADCAST, 5353, 7000, b"all"),
        ),
    );
    receive(&mut iface, t(1), IOBuf::from_vec(bcast));
    assert_eq!(
        iface.udp_recv(sock).unwrap().unwrap().dst,
        Ipv4Addr::BROADCAST
    );
}

#[test]
fn receive_queue_is_bounded() {
    let mut iface = iface_with(|c| {
        c.with_limits(Limits {
            udp_receive_queue: 2,
            ..Default::default()
        })
    });
    let sock = iface.udp_bind(7000).unwrap();
    for i in 0..5u8 {
        receive(&mut iface, t(1), datagram_to(7000, &[i]));
    }
    assert_eq!(iface.counters().rx_dropped.udp_queue_full, 3);
    assert_eq!(iface.udp_dropped(sock), Ok(3));
    assert_eq!(
        iface.udp_recv(sock).unwrap().unwrap().payload.as_slice(),
        &[0]
    );
    assert_eq!(
        iface.udp_recv(sock).unwrap().unwrap().payload.as_slice(),
        &[1]
    );
    assert_eq!(iface.udp_recv(sock).unwrap(), None);
}

#[test]
fn bad_datagrams_are_counted() {
    let mut iface = iface();
    iface.udp_bind(7000).unwrap();
    let mut bad = udp(PEER_IP, OUR_IP, 5353, 7000, b"data");
    bad[6] ^= 0x10; // checksum
    receive(&mut iface, t(1), from_peer(IpProtocol::Udp, &bad));
    let mut long = udp(PEER_IP, OUR_IP, 5353, 7000, b"data");
    long[5] = 0x40; // length past the packet
    receive(&mut iface, t(1), from_peer(IpProtocol::Udp, &long));
    let drops = iface.counters().rx_dropped;
    assert_eq!((drops.udp_bad_checksum, drops.udp_malformed), (1, 1));
    // A zero checksum means "none": accepted.
    let mut none = udp(PEER_IP, OUR_IP, 5353, 7000, b"data");
    none[6..8].copy_from_slice(&[0, 0]);
    receive(&mut iface, t(1), from_peer(IpProtocol::Udp, &none));
    assert_eq!(iface.counters().rx_udp, 1);
}

#[test]
fn closed_port_gets_port_unreachable_rate_limited() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let datagram = udp(PEER_IP, OUR_IP, 5353, 9999, b"anyone?");
    let original = ipv4(PEER_IP, OUR_IP, IpProtocol::Udp, &datagram);
    for _ in 0..15 {
        receive(&mut iface, t(1), from_peer(IpProtocol::Udp, &datagram));
    }
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 10, "ten per second");
    let icmp = &frames[0][34..];
    assert_eq!(
        &icmp[..2],
        &[3, 3],
        "destination unreachable, port unreachable"
    );
    assert_eq!(checksum::data(icmp), 0xffff);
    // It quotes the IP header and the first 8 bytes (the UDP header).
    assert_eq!(&icmp[8..], &original[..28]);
    let c = iface.counters();
    assert_eq!(c.rx_dropped.udp_no_socket, 15);
    assert_eq!(c.tx_icmp_port_unreachable, 10);
    assert_eq!(c.icmp_errors_rate_limited, 5);
    // A second later the budget is back.
    receive(&mut iface, t(2), from_peer(IpProtocol::Udp, &datagram));
    assert_eq!(sent(&mut iface).len(), 1);
    // Never for broadcasts.
    let bcast = eth(
        EthernetAddress::BROADCAST,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            PEER_IP,
            Ipv4Addr::new(10, 0, 0, 255),
            IpProtocol::Udp,
            &udp(PEER_IP, Ipv4Addr::new(10, 0, 0, 255), 5353, 9999, b"x"),
        ),
    );
    receive(&mut iface, t(3), IOBuf::from_vec(bcast));
    assert!(sent(&mut iface).is_empty());
}

#[test]
fn send_to_chains_the_payload_and_fills_the_checksum() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let sock = iface.udp_bind(7000).unwrap();
    let pieces = [
        IOBuf::copy_from_slice(b"odd"),
        IOBuf::copy_from_slice(b"pieces!"),
    ];
    let payload: IOBufChain = pieces.iter().cloned().collect();
    iface
        .udp_send_to(t(1), sock, SocketAddrV4::new(PEER_IP, 5353), payload)
        .unwrap();
    let frame = iface.transmit_queue().pop_front().unwrap().chain;
    assert_eq!(frame.segment_count(), 3);
    assert!(frame.iter().nth(1).unwrap().shares_storage_with(&pieces[0]));
    let bytes = flat(&frame);
    let ip = Ipv4Packet::new_checked(&bytes[14..]).unwrap();
    assert_eq!(ip.protocol(), IpProtocol::Udp);
    let packet = wire::UdpPacket::new_checked(ip.payload()).unwrap();
    assert!(packet.verify_checksum(OUR_IP, PEER_IP));
    assert_ne!(packet.checksum(), 0);
    assert_eq!((packet.src_port(), packet.dst_port()), (7000, 5353));
    assert_eq!(packet.payload(), b"oddpieces!");
}

#[test]
fn ports_and_handles() {
    let mut iface = iface();
    let a = iface.udp_bind(7000).unwrap();
    assert_eq!(iface.udp_bind(7000), Err(UdpError::PortInUse));
    let e1 = iface.udp_bind(0).unwrap();
    let e2 = iface.udp_bind(0).unwrap();
    let (p1, p2) = (
        iface.udp_local_port(e1).unwrap(),
        iface.udp_local_port(e2).unwrap(),
    );
    assert!(p1 >= 49152 && p2 >= 49152 && p1 != p2);
    iface.udp_close(a).unwrap();
    assert_eq!(iface.udp_recv(a), Err(UdpError::BadHandle));
    let b = iface.udp_bind(7000).unwrap();
    assert_ne!(a, b, "a reused slot gets a new generation");
    assert_eq!(iface.udp_close(a), Err(UdpError::BadHandle));
    // No route: the error says so.
    let far = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 53);
    assert_eq!(
        iface.udp_send_to(t(1), b, far, IOBufChain::new()),
        Err(UdpError::Output(OutputError::Unreachable))
    );
}
