//! The receive path: Ethernet and IPv4 checks, fragments, ICMP echo, drop counters.

use super::*;
use ebb_net_driver::ChecksumCapabilities as DeviceChecksums;

/// Echo request 10.0.0.2 -> 10.0.0.1, ident 0x1234, seq 1, data "ebbflow!", IP ident
/// 0xbeef (checksums computed independently with a Python script).
const ECHO_REQUEST: [u8; 50] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, // eth
    0x45, 0x00, 0x00, 0x24, 0xbe, 0xef, 0x40, 0x00, 0x40, 0x01, 0x67, 0xe7, // ip
    0x0a, 0x00, 0x00, 0x02, 0x0a, 0x00, 0x00, 0x01, // ip addresses
    0x08, 0x00, 0x3a, 0x71, 0x12, 0x34, 0x00, 0x01, // icmp
    0x65, 0x62, 0x62, 0x66, 0x6c, 0x6f, 0x77, 0x21, // "ebbflow!"
];

/// The reply we must send: IP ident 1 (seed 0), DF, TTL 64.
const ECHO_REPLY: [u8; 50] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, // eth
    0x45, 0x00, 0x00, 0x24, 0x00, 0x01, 0x40, 0x00, 0x40, 0x01, 0x26, 0xd6, // ip
    0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, // ip addresses
    0x00, 0x00, 0x42, 0x71, 0x12, 0x34, 0x00, 0x01, // icmp
    0x65, 0x62, 0x62, 0x66, 0x6c, 0x6f, 0x77, 0x21, // "ebbflow!"
];

fn receive(iface: &mut Interface, frame: IOBuf) {
    iface.receive_frame(t(1), frame, &mut TcpRecorder::default());
}

#[test]
fn echo_request_gets_the_exact_echo_reply() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    receive(&mut iface, IOBuf::copy_from_slice(&ECHO_REQUEST));
    assert_eq!(sent(&mut iface), vec![ECHO_REPLY.to_vec()]);
    let c = iface.counters();
    assert_eq!(c.rx_icmp_echo_requests, 1);
    assert_eq!(c.tx_icmp_echo_replies, 1);
    assert_eq!(c.rx_dropped.total(), 0);
}

#[test]
fn echo_reply_waits_for_arp_when_the_peer_is_unknown() {
    let mut iface = iface();
    receive(&mut iface, IOBuf::copy_from_slice(&ECHO_REQUEST));
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 1, "only an ARP request goes out first");
    assert_eq!(&frames[0][12..14], &[0x08, 0x06]);
    receive(&mut iface, arp_reply_from(PEER_MAC, PEER_IP));
    assert_eq!(sent(&mut iface), vec![ECHO_REPLY.to_vec()]);
}

#[test]
fn broadcast_pings_are_not_answered() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let mut icmp = ECHO_REQUEST[34..].to_vec();
    let frame = eth(
        EthernetAddress::BROADCAST,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            PEER_IP,
            Ipv4Addr::new(10, 0, 0, 255),
            IpProtocol::Icmp,
            &icmp,
        ),
    );
    receive(&mut iface, IOBuf::from_vec(frame));
    assert!(sent(&mut iface).is_empty());
    assert_eq!(iface.counters().rx_icmp_echo_requests, 1);
    // A corrupted ICMP checksum is counted.
    icmp[2] ^= 0xff;
    receive(&mut iface, from_peer(IpProtocol::Icmp, &icmp));
    assert_eq!(iface.counters().rx_dropped.icmp_bad_checksum, 1);
    assert!(sent(&mut iface).is_empty());
}

#[test]
fn other_icmp_is_counted_not_answered() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    // Time exceeded, with a checksum over the 8 header bytes.
    let mut msg = vec![11, 0, 0, 0, 0, 0, 0, 0];
    let c = !checksum::data(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    receive(&mut iface, from_peer(IpProtocol::Icmp, &msg));
    assert_eq!(iface.counters().rx_icmp_other, 1);
    assert!(sent(&mut iface).is_empty());
}

#[test]
fn fragments_are_dropped_and_counted() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    for (more, offset) in [(true, 0u16), (false, 185)] {
        let mut frame = ECHO_REQUEST.to_vec();
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..]);
            ip.set_dont_frag(false);
            ip.set_more_frags(more);
            ip.set_frag_offset(offset * 8);
            ip.fill_checksum();
        }
        receive(&mut iface, IOBuf::from_vec(frame));
    }
    assert_eq!(iface.counters().rx_dropped.ipv4_fragment, 2);
    assert!(sent(&mut iface).is_empty());
}

#[test]
fn ipv4_header_checks_and_checksum_offload() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let mut bad = ECHO_REQUEST;
    bad[24] ^= 0x01; // IP checksum
    receive(&mut iface, IOBuf::copy_from_slice(&bad));
    assert_eq!(iface.counters().rx_dropped.ipv4_bad_checksum, 1);

    let mut v6 = ECHO_REQUEST;
    v6[14] = 0x65;
    receive(&mut iface, IOBuf::copy_from_slice(&v6));
    let mut long = ECHO_REQUEST;
    long[17] = 0xff; // total length past the frame
    receive(&mut iface, IOBuf::copy_from_slice(&long));
    receive(&mut iface, IOBuf::copy_from_slice(&ECHO_REQUEST[..30]));
    assert_eq!(iface.counters().rx_dropped.ipv4_malformed, 3);
    assert!(sent(&mut iface).is_empty());

    // A device that verified the checksum: the stack does not look at it.
    let mut caps = DeviceCapabilities::ETHERNET;
    caps.checksum = DeviceChecksums::ALL;
    let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
    let config = InterfaceConfig::new_static(OUR_MAC, cidr, None).with_seed(0);
    let mut offloaded = Interface::new(config, caps);
    learn_peer(&mut offloaded, t(0));
    receive(&mut offloaded, IOBuf::copy_from_slice(&bad));
    assert_eq!(offloaded.counters().rx_dropped.total(), 0);
    let reply = sent(&mut offloaded);
    assert_eq!(reply.len(), 1);
    // ...and leaves the checksums it fills to the device.
    assert_eq!(&reply[0][24..26], &[0, 0]);
}

#[test]
fn frames_not_for_us_are_counted() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    let mut other_mac = ECHO_REQUEST;
    other_mac[5] = 0x77;
    receive(&mut iface, IOBuf::copy_from_slice(&other_mac));
    let mut multicast = ECHO_REQUEST;
    multicast[0] = 0x01;
    receive(&mut iface, IOBuf::copy_from_slice(&multicast));
    assert_eq!(iface.counters().rx_dropped.ethernet_not_for_us, 2);

    let other_ip = eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            PEER_IP,
            Ipv4Addr::new(10, 0, 0, 9),
            IpProtocol::Icmp,
            &ECHO_REQUEST[34..],
        ),
    );
    receive(&mut iface, IOBuf::from_vec(other_ip));
    assert_eq!(iface.counters().rx_dropped.ipv4_not_for_us, 1);

    let ipv6 = eth(OUR_MAC, PEER_MAC, EtherType::Ipv6, &[0u8; 40]);
    receive(&mut iface, IOBuf::from_vec(ipv6));
    assert_eq!(iface.counters().rx_dropped.ethernet_unknown_type, 1);

    receive(&mut iface, IOBuf::copy_from_slice(&ECHO_REQUEST[..10]));
    assert_eq!(iface.counters().rx_dropped.ethernet_malformed, 1);

    let sctp = from_peer(IpProtocol::Unknown(132), &[0u8; 12]);
    receive(&mut iface, sctp);
    assert_eq!(iface.counters().rx_dropped.ipv4_unknown_protocol, 1);

    let bad_source = eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(
            Ipv4Addr::BROADCAST,
            OUR_IP,
            IpProtocol::Icmp,
            &ECHO_REQUEST[34..],
        ),
    );
    receive(&mut iface, IOBuf::from_vec(bad_source));
    assert_eq!(iface.counters().rx_dropped.ipv4_bad_source, 1);

    assert_eq!(iface.counters().rx_dropped.total(), 7);
    assert_eq!(iface.counters().rx_frames, 8); // 7 + the ARP reply that taught the peer
    assert!(sent(&mut iface).is_empty());
}

#[test]
fn ping_out_and_the_reply_is_reported() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    iface
        .send_ping(t(1), PEER_IP, 0x1234, 1, b"ebbflow!")
        .unwrap();
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][34..36], &[8, 0]);
    // The peer's answer: our request with addresses swapped and type 0.
    let mut icmp = frames[0][34..].to_vec();
    icmp[0] = 0;
    icmp[2..4].copy_from_slice(&[0, 0]);
    let c = !checksum::data(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    receive(&mut iface, from_peer(IpProtocol::Icmp, &icmp));
    let reply = iface.next_echo_reply().unwrap();
    assert_eq!(
        (reply.src, reply.ident, reply.seq_no, reply.data_len),
        (PEER_IP, 0x1234, 1, 8)
    );
    assert_eq!(iface.next_echo_reply(), None);
}

#[test]
fn a_managed_interface_takes_its_address_from_outside() {
    let mut iface = iface_with(|c| InterfaceConfig {
        ipv4: crate::iface::Ipv4Config::Managed,
        ..c
    });
    assert_eq!(iface.ipv4_cidr(), None, "no address until set");
    let mut tcp = TcpRecorder::default();
    let ping = || IOBuf::copy_from_slice(&ECHO_REQUEST);
    iface.receive_frame(t(0), ping(), &mut tcp);
    assert!(
        sent(&mut iface).is_empty(),
        "not answered without an address"
    );

    let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
    let gateway = Ipv4Addr::new(10, 0, 0, 254);
    assert!(iface.set_address(Some((cidr, Some(gateway)))));
    assert_eq!(
        (iface.ipv4_cidr(), iface.gateway()),
        (Some(cidr), Some(gateway))
    );
    learn_peer(&mut iface, t(1));
    iface.receive_frame(t(1), ping(), &mut tcp);
    assert_eq!(
        sent(&mut iface).len(),
        1,
        "answered once it has the address"
    );

    assert!(iface.set_address(None));
    assert_eq!((iface.ipv4_cidr(), iface.gateway()), (None, None));
    assert_eq!(
        iface.arp_lookup(PEER_IP),
        None,
        "neighbours forgotten with the subnet"
    );

    // A DHCP interface's address belongs to its client.
    let mut dhcp = iface_with(|c| InterfaceConfig {
        ipv4: crate::iface::Ipv4Config::Dhcp,
        ..c
    });
    assert!(!dhcp.set_address(Some((cidr, None))));
    assert_eq!(dhcp.ipv4_cidr(), None);
}
