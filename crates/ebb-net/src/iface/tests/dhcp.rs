//! The DHCP client against a scripted server: the full exchange, retransmission with
//! backoff, NAK, renew (unicast), rebind (broadcast) and expiry.

use super::*;
use crate::wire::{DhcpMessageType, DhcpPacket, DhcpRepr, UdpPacket};

const SERVER_IP: Ipv4Addr = GW_IP;
const SERVER_MAC: EthernetAddress = GW_MAC;
const LEASED: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);

/// What the client sent, read back from the frame.
#[derive(Debug)]
struct Seen {
    eth_dst: EthernetAddress,
    ip_src: Ipv4Addr,
    ip_dst: Ipv4Addr,
    kind: DhcpMessageType,
    xid: u32,
    requested_ip: Option<Ipv4Addr>,
    server_id: Option<Ipv4Addr>,
    ciaddr: Ipv4Addr,
}

/// The DHCP messages among the frames sent (ARP frames are returned apart).
fn dhcp_sent(iface: &mut Interface) -> (Vec<Seen>, Vec<ArpRepr>) {
    let (mut dhcp, mut arp) = (Vec::new(), Vec::new());
    for frame in sent(iface) {
        let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
        if eth.ethertype() == EtherType::Arp {
            arp.push(ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap());
            continue;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert!(udp.verify_checksum(ip.src_addr(), ip.dst_addr()));
        assert_eq!((udp.src_port(), udp.dst_port()), (68, 67));
        let msg = DhcpRepr::parse(&DhcpPacket::new_checked(udp.payload()).unwrap()).unwrap();
        assert_eq!(msg.client_hardware_address, OUR_MAC);
        dhcp.push(Seen {
            eth_dst: eth.dst_addr(),
            ip_src: ip.src_addr(),
            ip_dst: ip.dst_addr(),
            kind: msg.message_type,
            xid: msg.transaction_id,
            requested_ip: msg.requested_ip,
            server_id: msg.server_identifier,
            ciaddr: msg.client_ip,
        });
    }
    (dhcp, arp)
}

/// The one DHCP message sent, which must be of `kind`.
fn one(iface: &mut Interface, kind: DhcpMessageType) -> Seen {
    let (mut dhcp, _) = dhcp_sent(iface);
    assert_eq!(dhcp.len(), 1, "{dhcp:?}");
    let seen = dhcp.remove(0);
    assert_eq!(seen.kind, kind);
    seen
}

/// A server message to the client, broadcast; `lease` is (lease, T1, T2) in seconds.
fn server(
    kind: DhcpMessageType,
    xid: u32,
    lease: Option<(u32, Option<u32>, Option<u32>)>,
) -> IOBuf {
    let repr = DhcpRepr {
        message_type: kind,
        transaction_id: xid,
        secs: 0,
        broadcast: true,
        client_hardware_address: OUR_MAC,
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: if kind == DhcpMessageType::Nak {
            Ipv4Addr::UNSPECIFIED
        } else {
            LEASED
        },
        server_ip: SERVER_IP,
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        requested_ip: None,
        server_identifier: Some(SERVER_IP),
        lease_duration: lease.map(|l| l.0),
        renew_duration: lease.and_then(|l| l.1),
        rebind_duration: lease.and_then(|l| l.2),
        subnet_mask: Some(Ipv4Addr::new(255, 255, 255, 0)),
        router: Some(SERVER_IP),
        dns_servers: [Some(SERVER_IP), None, None],
        parameter_request_list: None,
        client_identifier: None,
        max_size: None,
    };
    let mut body = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DhcpPacket::new_unchecked(&mut body[..]));
    let datagram = udp(SERVER_IP, Ipv4Addr::BROADCAST, 67, 68, &body);
    IOBuf::from_vec(eth(
        EthernetAddress::BROADCAST,
        SERVER_MAC,
        EtherType::Ipv4,
        &ipv4(SERVER_IP, Ipv4Addr::BROADCAST, IpProtocol::Udp, &datagram),
    ))
}

/// The DHCP client's own deadline (the interface's also has ARP's).
fn dhcp_poll_at(iface: &Interface) -> Option<Instant> {
    iface.dhcp.as_ref().and_then(|c| c.poll_at())
}

fn receive(iface: &mut Interface, now: Instant, frame: IOBuf) {
    iface.receive_frame(now, frame, &mut TcpRecorder::default());
}

fn dhcp_iface() -> Interface {
    Interface::new(
        InterfaceConfig::new_dhcp(OUR_MAC).with_seed(42),
        DeviceCapabilities::ETHERNET,
    )
}

/// Runs DISCOVER/OFFER/REQUEST/ACK at `now` with a lease of (lease, T1, T2) seconds.
fn bind(iface: &mut Interface, now: Instant, lease: (u32, Option<u32>, Option<u32>)) -> u32 {
    iface.poll(now);
    let discover = one(iface, DhcpMessageType::Discover);
    receive(
        iface,
        now,
        server(DhcpMessageType::Offer, discover.xid, Some(lease)),
    );
    let request = one(iface, DhcpMessageType::Request);
    receive(
        iface,
        now,
        server(DhcpMessageType::Ack, request.xid, Some(lease)),
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Bound));
    let (dhcp, _gratuitous) = dhcp_sent(iface);
    assert!(dhcp.is_empty());
    request.xid
}

#[test]
fn full_exchange_binds_and_configures() {
    let mut iface = dhcp_iface();
    assert!(sent(&mut iface).is_empty(), "no address, no gratuitous ARP");
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Init));
    assert_eq!(iface.ipv4_address(), None);
    iface.poll(t(0));
    let discover = one(&mut iface, DhcpMessageType::Discover);
    assert_eq!(discover.eth_dst, EthernetAddress::BROADCAST);
    assert_eq!(
        (discover.ip_src, discover.ip_dst),
        (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST)
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Selecting));

    // An offer for another exchange is ignored.
    receive(
        &mut iface,
        t(1),
        server(
            DhcpMessageType::Offer,
            discover.xid ^ 1,
            Some((3600, None, None)),
        ),
    );
    assert_eq!(iface.counters().rx_dropped.dhcp_ignored, 1);
    assert!(sent(&mut iface).is_empty());

    receive(
        &mut iface,
        t(1),
        server(
            DhcpMessageType::Offer,
            discover.xid,
            Some((3600, None, None)),
        ),
    );
    let request = one(&mut iface, DhcpMessageType::Request);
    assert_eq!(request.xid, discover.xid);
    assert_eq!(request.requested_ip, Some(LEASED));
    assert_eq!(request.server_id, Some(SERVER_IP));
    assert_eq!(request.ip_dst, Ipv4Addr::BROADCAST);
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Requesting));

    receive(
        &mut iface,
        t(2),
        server(DhcpMessageType::Ack, request.xid, Some((3600, None, None))),
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Bound));
    assert_eq!(iface.ipv4_cidr(), Ipv4Cidr::new(LEASED, 24));
    assert_eq!(iface.gateway(), Some(SERVER_IP));
    let (dhcp, arp) = dhcp_sent(&mut iface);
    assert!(dhcp.is_empty());
    assert_eq!(arp.len(), 1, "gratuitous ARP after binding");
    assert_eq!(arp[0].source_protocol_addr, LEASED);
    assert_eq!(arp[0].target_protocol_addr, LEASED);
    let Some(DhcpEvent::Bound(lease)) = iface.next_dhcp_event() else {
        panic!("a Bound event");
    };
    assert_eq!(lease.renew_at, t(2 + 1800));
    assert_eq!(lease.rebind_at, t(2 + 3150));
    assert_eq!(lease.expires_at, t(2 + 3600));
    assert_eq!(lease.dns_servers[0], Some(SERVER_IP));
    assert_eq!(iface.dhcp_lease(), Some(&lease));
    assert_eq!(iface.poll_at(), Some(lease.renew_at));
    assert_eq!(iface.counters().rx_dhcp, 2);
    // Port 68 is the client's.
    assert_eq!(iface.udp_bind(68), Err(UdpError::PortInUse));
}

#[test]
fn discover_and_request_are_retransmitted_with_backoff() {
    let mut iface = dhcp_iface();
    iface.poll(t(0));
    let first = one(&mut iface, DhcpMessageType::Discover);
    for (at, expect) in [
        (3, false),
        (4, true),
        (11, false),
        (12, true),
        (28, true),
        (60, true),
        (124, true),
        (188, true),
    ] {
        iface.poll(t(at));
        let (dhcp, _) = dhcp_sent(&mut iface);
        assert_eq!(dhcp.len(), usize::from(expect), "at {at} s");
        if let Some(d) = dhcp.first() {
            assert_eq!((d.kind, d.xid), (DhcpMessageType::Discover, first.xid));
        }
    }
    assert_eq!(iface.poll_at(), Some(t(252)), "capped at 64 s");

    // Requests: at the offer, then 4, 8, 16 s later; then discovery starts over.
    receive(
        &mut iface,
        t(200),
        server(DhcpMessageType::Offer, first.xid, Some((3600, None, None))),
    );
    one(&mut iface, DhcpMessageType::Request);
    for at in [204, 212, 228] {
        iface.poll(t(at));
        one(&mut iface, DhcpMessageType::Request);
    }
    iface.poll(t(259));
    assert!(dhcp_sent(&mut iface).0.is_empty());
    iface.poll(t(260));
    let again = one(&mut iface, DhcpMessageType::Discover);
    assert_ne!(again.xid, first.xid, "a new exchange");
}

#[test]
fn nak_while_requesting_restarts_discovery() {
    let mut iface = dhcp_iface();
    iface.poll(t(0));
    let discover = one(&mut iface, DhcpMessageType::Discover);
    receive(
        &mut iface,
        t(0),
        server(
            DhcpMessageType::Offer,
            discover.xid,
            Some((3600, None, None)),
        ),
    );
    let request = one(&mut iface, DhcpMessageType::Request);
    receive(
        &mut iface,
        t(1),
        server(DhcpMessageType::Nak, request.xid, None),
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Init));
    assert_eq!(iface.ipv4_address(), None);
    iface.poll(t(1));
    let again = one(&mut iface, DhcpMessageType::Discover);
    assert_ne!(again.xid, discover.xid);
}

#[test]
fn renew_is_unicast_to_the_server() {
    let mut iface = dhcp_iface();
    bind(&mut iface, t(0), (1000, None, None));
    let _ = iface.next_dhcp_event();
    iface.poll(t(499));
    assert!(sent(&mut iface).is_empty());
    iface.poll(t(500));
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Renewing));
    // The server's MAC is not known yet: ARP first, the REQUEST waits.
    let (dhcp, arp) = dhcp_sent(&mut iface);
    assert!(dhcp.is_empty());
    assert_eq!(arp[0].target_protocol_addr, SERVER_IP);
    receive(
        &mut iface,
        t(500),
        arp_frame(
            OUR_MAC,
            ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: SERVER_MAC,
                source_protocol_addr: SERVER_IP,
                target_hardware_addr: OUR_MAC,
                target_protocol_addr: LEASED,
            },
        ),
    );
    let renew = one(&mut iface, DhcpMessageType::Request);
    assert_eq!(renew.eth_dst, SERVER_MAC);
    assert_eq!((renew.ip_src, renew.ip_dst), (LEASED, SERVER_IP));
    assert_eq!(renew.ciaddr, LEASED);
    assert_eq!((renew.requested_ip, renew.server_id), (None, None));
    // Unanswered: again after half the time to T2 (875 s).
    assert_eq!(dhcp_poll_at(&iface), Some(t_ms(687_500)));

    receive(
        &mut iface,
        t(600),
        server(DhcpMessageType::Ack, renew.xid, Some((1000, None, None))),
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Bound));
    let Some(DhcpEvent::Renewed(lease)) = iface.next_dhcp_event() else {
        panic!("a Renewed event");
    };
    assert_eq!(lease.renew_at, t(1100));
    assert_eq!(lease.expires_at, t(1600));
    assert_eq!(iface.ipv4_address(), Some(LEASED));
}

#[test]
fn rebind_is_broadcast_after_t2() {
    let mut iface = dhcp_iface();
    bind(&mut iface, t(0), (1000, Some(400), Some(800)));
    iface.poll(t(400));
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Renewing));
    sent(&mut iface);
    iface.poll(t(800));
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Rebinding));
    let rebind = one(&mut iface, DhcpMessageType::Request);
    assert_eq!(rebind.eth_dst, EthernetAddress::BROADCAST);
    assert_eq!(
        (rebind.ip_src, rebind.ip_dst),
        (LEASED, Ipv4Addr::BROADCAST)
    );
    assert_eq!(rebind.ciaddr, LEASED);
    assert_eq!(
        dhcp_poll_at(&iface),
        Some(t(900)),
        "half the time left, at least 60 s"
    );
    receive(
        &mut iface,
        t(850),
        server(DhcpMessageType::Ack, rebind.xid, Some((1000, None, None))),
    );
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Bound));
    assert_eq!(iface.dhcp_lease().unwrap().expires_at, t(1850));
}

#[test]
fn expiry_drops_the_address_and_starts_over() {
    let mut iface = dhcp_iface();
    bind(&mut iface, t(0), (100, None, None));
    assert!(matches!(iface.next_dhcp_event(), Some(DhcpEvent::Bound(_))));
    for at in [50, 87, 93, 99] {
        iface.poll(t(at));
    }
    sent(&mut iface);
    assert_eq!(iface.ipv4_address(), Some(LEASED));
    assert_eq!(iface.poll_at(), Some(t(100)));
    iface.poll(t(100));
    assert_eq!(iface.ipv4_address(), None);
    assert_eq!(iface.next_dhcp_event(), Some(DhcpEvent::Deconfigured));
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Selecting));
    one(&mut iface, DhcpMessageType::Discover);
    // Without an address nothing else can be sent.
    assert_eq!(
        iface.send_ping(t(100), SERVER_IP, 1, 1, b""),
        Err(OutputError::Unreachable)
    );
}

#[test]
fn nak_while_renewing_drops_the_address() {
    let mut iface = dhcp_iface();
    bind(&mut iface, t(0), (1000, None, None));
    let _ = iface.next_dhcp_event();
    learn_server_and_renew(&mut iface);
    let xid = iface.dhcp.as_ref().unwrap().xid_for_tests();
    receive(&mut iface, t(501), server(DhcpMessageType::Nak, xid, None));
    assert_eq!(iface.ipv4_address(), None);
    assert_eq!(iface.next_dhcp_event(), Some(DhcpEvent::Deconfigured));
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Init));
}

fn learn_server_and_renew(iface: &mut Interface) {
    iface.poll(t(500));
    sent(iface);
    assert_eq!(iface.dhcp_state(), Some(DhcpState::Renewing));
}
