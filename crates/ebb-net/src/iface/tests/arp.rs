//! ARP: replies, learning, resolution with retries and give-up, the bounded wait queue,
//! expiry and refresh, gratuitous announcements.

use super::*;
use crate::transport::TcpSegment;

/// Who has 10.0.0.1? Tell 10.0.0.2 (02:00:00:00:00:02), broadcast.
const REQUEST_FOR_US: [u8; 42] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x06, // eth
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // Ethernet/IPv4, request
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 10, 0, 0, 2, // sender
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 0, 1, // target
];

/// 10.0.0.1 is at 02:00:00:00:00:01, to the asker.
const REPLY_FROM_US: [u8; 42] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, // eth
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // Ethernet/IPv4, reply
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1, // sender
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 10, 0, 0, 2, // target
];

/// Gratuitous ARP: who has 10.0.0.1? Tell 10.0.0.1, broadcast.
const GRATUITOUS: [u8; 42] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, // eth
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // Ethernet/IPv4, request
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1, // sender
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 0, 1, // target
];

fn receive(iface: &mut Interface, now: Instant, frame: IOBuf) {
    iface.receive_frame(now, frame, &mut TcpRecorder::default());
}

/// A small TCP segment to `dst` (needs a resolution when `dst` is unknown).
fn send_to(iface: &mut Interface, dst: Ipv4Addr) -> Result<(), OutputError> {
    let header = crate::wire::TcpRepr {
        src_port: 80,
        dst_port: 40000,
        control: crate::wire::TcpControl::Rst,
        push: false,
        seq_number: crate::wire::TcpSeqNumber(0),
        ack_number: None,
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 4],
        timestamp: None,
        payload: &[],
    };
    iface.output().send_tcp(TcpSegment {
        src: OUR_IP,
        dst,
        header,
        payload: IOBufChain::new(),
    })
}

/// Parses the ARP packet of a sent frame.
fn arp_of(frame: &[u8]) -> ArpRepr {
    assert_eq!(&frame[12..14], &[0x08, 0x06], "an ARP frame");
    ArpRepr::parse(&ArpPacket::new_checked(&frame[14..]).unwrap()).unwrap()
}

#[test]
fn gratuitous_arp_at_start() {
    let cidr = Ipv4Cidr::new(OUR_IP, 24).unwrap();
    let config = InterfaceConfig::new_static(OUR_MAC, cidr, None);
    let mut iface = Interface::new(config, DeviceCapabilities::ETHERNET);
    assert_eq!(sent(&mut iface), vec![GRATUITOUS.to_vec()]);
    assert_eq!(iface.counters().tx_arp_gratuitous, 1);
    // Our own announcement coming back teaches nothing and is not answered.
    receive(&mut iface, t(0), IOBuf::copy_from_slice(&GRATUITOUS));
    assert!(sent(&mut iface).is_empty());
    assert_eq!(iface.arp_usage(), (0, 0));
}

#[test]
fn request_for_us_is_answered_and_the_asker_learnt() {
    let mut iface = iface();
    receive(&mut iface, t(0), IOBuf::copy_from_slice(&REQUEST_FOR_US));
    assert_eq!(sent(&mut iface), vec![REPLY_FROM_US.to_vec()]);
    assert_eq!(iface.arp_lookup(PEER_IP), Some(PEER_MAC));
    let c = iface.counters();
    assert_eq!((c.rx_arp, c.tx_arp_replies), (1, 1));
}

#[test]
fn requests_for_others_teach_only_known_senders() {
    let mut iface = iface();
    let for_other = |sender_mac: EthernetAddress| {
        arp_frame(
            EthernetAddress::BROADCAST,
            ArpRepr {
                operation: ArpOperation::Request,
                source_hardware_addr: sender_mac,
                source_protocol_addr: PEER_IP,
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: Ipv4Addr::new(10, 0, 0, 3),
            },
        )
    };
    receive(&mut iface, t(0), for_other(PEER_MAC));
    assert_eq!(iface.arp_lookup(PEER_IP), None, "unknown sender not learnt");
    assert!(sent(&mut iface).is_empty(), "not ours to answer");
    learn_peer(&mut iface, t(0));
    // A known sender's new MAC replaces the old one (RFC 826 merge).
    let moved = EthernetAddress([2, 0, 0, 0, 0, 0x22]);
    receive(&mut iface, t(1), for_other(moved));
    assert_eq!(iface.arp_lookup(PEER_IP), Some(moved));
}

#[test]
fn resolution_queues_packets_until_the_reply() {
    let mut iface = iface();
    send_to(&mut iface, PEER_IP).unwrap();
    send_to(&mut iface, PEER_IP).unwrap();
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 1, "one request, packets held");
    let request = arp_of(&frames[0]);
    assert_eq!(request.operation, ArpOperation::Request);
    assert_eq!(request.source_protocol_addr, OUR_IP);
    assert_eq!(request.target_protocol_addr, PEER_IP);
    assert_eq!(&frames[0][..6], &[0xff; 6]);
    assert_eq!(iface.arp_usage(), (1, 2));

    receive(&mut iface, t(0), arp_reply_from(PEER_MAC, PEER_IP));
    let frames = sent(&mut iface);
    assert_eq!(frames.len(), 2);
    for f in &frames {
        assert_eq!(&f[..6], &PEER_MAC.0);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
    }
    assert_eq!(iface.arp_usage(), (1, 0));
}

#[test]
fn requests_are_retried_then_given_up() {
    let mut iface = iface();
    assert_eq!(iface.poll_at(), None);
    send_to(&mut iface, PEER_IP).unwrap();
    send_to(&mut iface, PEER_IP).unwrap();
    assert_eq!(sent(&mut iface).len(), 1);
    assert_eq!(iface.poll_at(), Some(t(1)));
    iface.poll(t_ms(999));
    assert!(sent(&mut iface).is_empty(), "not yet");
    iface.poll(t(1));
    assert_eq!(arp_of(&sent(&mut iface)[0]).target_protocol_addr, PEER_IP);
    iface.poll(t(2));
    assert_eq!(sent(&mut iface).len(), 1);
    assert_eq!(iface.counters().tx_arp_requests, 3);
    iface.poll(t(3));
    assert!(sent(&mut iface).is_empty(), "gave up after three requests");
    let c = iface.counters();
    assert_eq!(c.arp_resolution_failures, 1);
    assert_eq!(c.tx_dropped.arp_failed, 2);
    assert_eq!(iface.arp_usage(), (0, 0));
    assert_eq!(iface.poll_at(), None);
    // A late reply is not for anything we know: not learnt.
    let late = arp_frame(
        OUR_MAC,
        ArpRepr {
            operation: ArpOperation::Reply,
            source_hardware_addr: PEER_MAC,
            source_protocol_addr: PEER_IP,
            target_hardware_addr: OUR_MAC,
            target_protocol_addr: Ipv4Addr::new(10, 0, 0, 50),
        },
    );
    receive(&mut iface, t(4), late);
    assert_eq!(iface.arp_lookup(PEER_IP), None);
}

#[test]
fn wait_queue_is_bounded_per_destination_and_in_total() {
    let mut iface = iface_with(|c| {
        c.with_limits(Limits {
            arp_pending_per_destination: 2,
            arp_pending_total: 3,
            ..Default::default()
        })
    });
    assert!(send_to(&mut iface, PEER_IP).is_ok());
    assert!(send_to(&mut iface, PEER_IP).is_ok());
    assert_eq!(send_to(&mut iface, PEER_IP), Err(OutputError::Pending));
    let other = Ipv4Addr::new(10, 0, 0, 3);
    assert!(send_to(&mut iface, other).is_ok());
    assert_eq!(
        send_to(&mut iface, other),
        Err(OutputError::Pending),
        "total full"
    );
    assert_eq!(
        send_to(&mut iface, Ipv4Addr::new(10, 0, 0, 4)),
        Err(OutputError::Pending)
    );
    assert_eq!(iface.counters().tx_dropped.arp_queue_full, 3);
    assert_eq!(iface.arp_usage(), (2, 3));
}

#[test]
fn cache_is_bounded_and_evicts_the_oldest_resolved_entry() {
    let mut iface = iface_with(|c| {
        c.with_limits(Limits {
            arp_cache_entries: 2,
            ..Default::default()
        })
    });
    let a = Ipv4Addr::new(10, 0, 0, 10);
    let b = Ipv4Addr::new(10, 0, 0, 11);
    receive(
        &mut iface,
        t(0),
        arp_reply_from(EthernetAddress([2, 0, 0, 0, 0, 10]), a),
    );
    receive(
        &mut iface,
        t(1),
        arp_reply_from(EthernetAddress([2, 0, 0, 0, 0, 11]), b),
    );
    assert!(send_to(&mut iface, PEER_IP).is_ok());
    assert_eq!(iface.arp_lookup(a), None, "a expired first, so it went");
    assert!(iface.arp_lookup(b).is_some());
    assert_eq!(iface.arp_usage(), (2, 1));
}

#[test]
fn entries_expire_unless_refreshed() {
    let mut iface = iface();
    learn_peer(&mut iface, t(0));
    assert_eq!(iface.poll_at(), Some(t(60)));
    // Refreshed at 50 s by any ARP from the peer: now good until 110 s.
    receive(&mut iface, t(50), arp_reply_from(PEER_MAC, PEER_IP));
    iface.poll(t(60));
    assert_eq!(iface.arp_lookup(PEER_IP), Some(PEER_MAC));
    assert_eq!(iface.poll_at(), Some(t(110)));
    iface.poll(t(110));
    assert_eq!(iface.arp_lookup(PEER_IP), None);
    assert_eq!(iface.counters().arp_expired, 1);
    // The next packet resolves again.
    send_to(&mut iface, PEER_IP).unwrap();
    assert_eq!(
        arp_of(&sent(&mut iface)[0]).operation,
        ArpOperation::Request
    );
}

#[test]
fn malformed_and_foreign_arp_is_counted() {
    let mut iface = iface();
    receive(
        &mut iface,
        t(0),
        IOBuf::copy_from_slice(&REQUEST_FOR_US[..30]),
    );
    let mut ipx = REQUEST_FOR_US;
    ipx[16] = 0x81; // protocol type 0x8137
    ipx[17] = 0x37;
    receive(&mut iface, t(0), IOBuf::copy_from_slice(&ipx));
    let c = iface.counters();
    assert_eq!(
        (c.rx_dropped.arp_malformed, c.rx_dropped.arp_unsupported),
        (1, 1)
    );
    assert!(sent(&mut iface).is_empty());
}
