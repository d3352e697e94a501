use super::*;
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

const MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);

/// The fixed part of a DHCPDISCOVER as a client sends it, bytes 0..12 and the cookie.
const DISCOVER_START: [u8; 12] = [
    0x01, 0x01, 0x06, 0x00, // op, htype, hlen, hops
    0x3d, 0x1d, 0x5c, 0x0a, // xid
    0x00, 0x00, 0x80, 0x00, // secs, flags (broadcast)
];

/// Its options: message type discover, client id, parameter request list (subnet mask,
/// router, DNS, domain name), max size 1500, end.
const DISCOVER_OPTIONS: [u8; 25] = [
    0x35, 0x01, 0x01, // message type
    0x3d, 0x07, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // client id
    0x37, 0x04, 0x01, 0x03, 0x06, 0x0f, // parameter request list
    0x39, 0x02, 0x05, 0xdc, // max message size
    0xff, 0x00, 0x00, // end, pad
];

fn discover_bytes() -> Vec<u8> {
    let mut b = vec![0u8; 240];
    b[..12].copy_from_slice(&DISCOVER_START);
    b[28..34].copy_from_slice(&MAC.0);
    b[236..240].copy_from_slice(&[0x63, 0x82, 0x53, 0x63]);
    b.extend_from_slice(&DISCOVER_OPTIONS);
    b
}

fn discover_repr() -> Repr<'static> {
    Repr {
        message_type: MessageType::Discover,
        transaction_id: 0x3d1d_5c0a,
        secs: 0,
        broadcast: true,
        client_hardware_address: MAC,
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: Ipv4Addr::UNSPECIFIED,
        server_ip: Ipv4Addr::UNSPECIFIED,
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        requested_ip: None,
        server_identifier: None,
        lease_duration: None,
        renew_duration: None,
        rebind_duration: None,
        subnet_mask: None,
        router: None,
        dns_servers: [None; 3],
        parameter_request_list: Some(&[1, 3, 6, 15]),
        client_identifier: Some(&[0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
        max_size: Some(1500),
    }
}

/// A server's DHCPACK with a full lease.
fn ack_repr() -> Repr<'static> {
    Repr {
        message_type: MessageType::Ack,
        transaction_id: 0x3d1d_5c0a,
        secs: 0,
        broadcast: false,
        client_hardware_address: MAC,
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: Ipv4Addr::new(192, 168, 1, 100),
        server_ip: Ipv4Addr::new(192, 168, 1, 1),
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        requested_ip: None,
        server_identifier: Some(Ipv4Addr::new(192, 168, 1, 1)),
        lease_duration: Some(86400),
        renew_duration: Some(43200),
        rebind_duration: Some(75600),
        subnet_mask: Some(Ipv4Addr::new(255, 255, 255, 0)),
        router: Some(Ipv4Addr::new(192, 168, 1, 1)),
        dns_servers: [
            Some(Ipv4Addr::new(8, 8, 8, 8)),
            Some(Ipv4Addr::new(1, 1, 1, 1)),
            None,
        ],
        parameter_request_list: None,
        client_identifier: None,
        max_size: None,
    }
}

#[test]
fn discover_view_fields() {
    let b = discover_bytes();
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.opcode(), 1);
    assert_eq!((p.hardware_type(), p.hardware_len(), p.hops()), (1, 6, 0));
    assert_eq!(p.transaction_id(), 0x3d1d_5c0a);
    assert_eq!(p.secs(), 0);
    assert!(p.broadcast());
    assert_eq!(p.flags(), 0x8000);
    assert_eq!(p.client_ip(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(p.your_ip(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(p.server_ip(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(p.relay_agent_ip(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(p.client_hardware_address(), MAC);
    assert_eq!(&p.client_hardware()[6..], &[0; 10]);
    assert!(p.server_name().iter().all(|&c| c == 0));
    assert_eq!(p.boot_file().len(), 128);
    assert_eq!(p.magic_number(), MAGIC_COOKIE);
    let options: Vec<_> = Options::new(p.options()).collect::<Result<_>>().unwrap();
    assert_eq!(options.len(), 4);
    assert_eq!(
        options[0],
        DhcpOption {
            kind: option::MESSAGE_TYPE,
            data: &[1]
        }
    );
}

#[test]
fn discover_parse_emit_round_trip() {
    let b = discover_bytes();
    let p = Packet::new_checked(&b[..]).unwrap();
    let repr = Repr::parse(&p).unwrap();
    assert_eq!(repr, discover_repr());
    // We write the same options in our order, then pad to 300 bytes.
    let mut out = vec![0xeeu8; repr.buffer_len()];
    assert_eq!(out.len(), MIN_MESSAGE_LEN);
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..240], &b[..240]);
    assert_eq!(
        &out[240..263],
        &[
            0x35, 0x01, 0x01, 0x3d, 0x07, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x37, 0x04,
            0x01, 0x03, 0x06, 0x0f, 0x39, 0x02, 0x05, 0xdc, 0xff
        ]
    );
    assert!(out[263..].iter().all(|&c| c == 0));
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
}

#[test]
fn ack_round_trip() {
    let repr = ack_repr();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let p = Packet::new_checked(&out[..]).unwrap();
    assert_eq!(p.opcode(), 2);
    assert!(!p.broadcast());
    assert_eq!(Repr::parse(&p), Ok(repr));
}

#[test]
fn renew_request_round_trip() {
    let repr = Repr {
        message_type: MessageType::Request,
        client_ip: Ipv4Addr::new(192, 168, 1, 100),
        broadcast: false,
        requested_ip: None,
        ..discover_repr()
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
}

#[test]
fn extra_routers_and_dns_servers() {
    let mut b = discover_bytes();
    b.truncate(240 + 3);
    b.extend_from_slice(&[3, 8, 10, 0, 0, 1, 10, 0, 0, 2]); // two routers
    b.extend_from_slice(&[6, 16, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]);
    // No end option: the area simply ends.
    let repr = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
    assert_eq!(repr.router, Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(
        repr.dns_servers,
        [
            Some(Ipv4Addr::new(1, 1, 1, 1)),
            Some(Ipv4Addr::new(2, 2, 2, 2)),
            Some(Ipv4Addr::new(3, 3, 3, 3)),
        ]
    );
}

#[test]
fn options_after_end_are_ignored() {
    let mut b = discover_bytes();
    b.extend_from_slice(&[0x35, 0x01, 0x05, 0x33, 0xff]); // after the end: ignored
    let repr = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
    assert_eq!(repr.message_type, MessageType::Discover);
}

#[test]
fn header_errors() {
    let b = discover_bytes();
    for len in 0..HEADER_LEN {
        assert_eq!(
            Packet::new_checked(&b[..len]).err(),
            Some(WireError::Truncated)
        );
    }
    let mut bad = b.clone();
    bad[0] = 3;
    assert_eq!(
        Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
        Err(WireError::Malformed)
    );
    let mut bad = b.clone();
    bad[1] = 6; // IEEE 802 token ring
    assert_eq!(
        Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
        Err(WireError::Unsupported)
    );
    let mut bad = b.clone();
    bad[2] = 16;
    assert_eq!(
        Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
        Err(WireError::Unsupported)
    );
    let mut bad = b.clone();
    bad[239] = 0x64;
    assert_eq!(
        Repr::parse(&Packet::new_checked(&bad[..]).unwrap()),
        Err(WireError::Malformed)
    );
    // Plain BOOTP: no message type.
    let mut bootp = b[..240].to_vec();
    bootp.push(0xff);
    assert_eq!(
        Repr::parse(&Packet::new_checked(&bootp[..]).unwrap()),
        Err(WireError::Unsupported)
    );
}

#[test]
fn option_errors() {
    let cases: &[&[u8]] = &[
        &[0x35, 0x02, 0x01, 0x00],                // message type, wrong length
        &[0x35, 0x01, 0x01, 0x32, 0x03, 1, 2, 3], // requested IP, 3 bytes
        &[0x35, 0x01, 0x01, 0x36, 0x05, 1, 2, 3, 4, 5], // server id, 5 bytes
        &[0x35, 0x01, 0x01, 0x33, 0x02, 0, 1],    // lease time, 2 bytes
        &[0x35, 0x01, 0x01, 0x03, 0x00],          // router, empty
        &[0x35, 0x01, 0x01, 0x06, 0x06, 1, 1, 1, 1, 2, 2], // DNS, not a multiple of 4
        &[0x35, 0x01, 0x01, 0x37, 0x00],          // parameter list, empty
        &[0x35, 0x01, 0x01, 0x3d, 0x00],          // client id, empty
        &[0x35, 0x01, 0x01, 0x39, 0x01, 5],       // max size, 1 byte
        &[0x35, 0x01, 0x01, 0x0c, 0x09, b'h', b'o'], // runs past the area
        &[0x35, 0x01, 0x01, 0x0c],                // no length byte
    ];
    for (i, options) in cases.iter().enumerate() {
        let mut b = discover_bytes();
        b.truncate(240);
        b.extend_from_slice(options);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(WireError::Malformed), "case {i}");
    }
}

#[test]
fn option_iterator_stops_after_error() {
    let area = [0x0c, 0x09, b'h', 0x35, 0x01, 0x01];
    let results: Vec<_> = Options::new(&area).collect();
    assert_eq!(results, [Err(WireError::Malformed)]);
    let area = [0, 0, 0x0c, 0x01, b'h', 0, 0xff, 0x35];
    let results: Vec<_> = Options::new(&area).collect();
    assert_eq!(
        results,
        [Ok(DhcpOption {
            kind: 12,
            data: b"h"
        })]
    );
}

#[test]
fn message_types() {
    for (t, op) in [
        (MessageType::Discover, 1),
        (MessageType::Offer, 2),
        (MessageType::Request, 1),
        (MessageType::Decline, 1),
        (MessageType::Ack, 2),
        (MessageType::Nak, 2),
        (MessageType::Release, 1),
        (MessageType::Inform, 1),
        (MessageType::Unknown(42), 1),
    ] {
        assert_eq!(t.opcode(), op, "{t:?}");
    }
}

#[test]
fn long_option_data_is_cut() {
    let long = [7u8; 300];
    let o = DhcpOption {
        kind: 99,
        data: &long,
    };
    let mut buf = [0u8; 300];
    assert_eq!(o.buffer_len(), 257);
    assert_eq!(o.emit(&mut buf), 257);
    assert_eq!(buf[1], 255);
}

fn arb_addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

static BYTES: [u8; 300] = [0x42; 300];

fn arb_repr() -> impl Strategy<Value = Repr<'static>> {
    let header = (
        any::<u8>(),
        any::<u32>(),
        any::<u16>(),
        any::<bool>(),
        any::<[u8; 6]>(),
        [arb_addr(), arb_addr(), arb_addr(), arb_addr()],
    );
    let options = (
        proptest::option::of(arb_addr()),
        proptest::option::of(arb_addr()),
        [
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u32>()),
        ],
        proptest::option::of(arb_addr()),
        proptest::option::of(arb_addr()),
        proptest::collection::vec(arb_addr(), 0..=3),
        proptest::option::of(1usize..=255),
        proptest::option::of(1usize..=255),
        proptest::option::of(any::<u16>()),
    );
    (header, options).prop_map(|(h, o)| {
        let mut dns = [None; 3];
        for (slot, a) in dns.iter_mut().zip(o.5) {
            *slot = Some(a);
        }
        Repr {
            message_type: MessageType::from(h.0),
            transaction_id: h.1,
            secs: h.2,
            broadcast: h.3,
            client_hardware_address: EthernetAddress(h.4),
            client_ip: h.5[0],
            your_ip: h.5[1],
            server_ip: h.5[2],
            relay_agent_ip: h.5[3],
            requested_ip: o.0,
            server_identifier: o.1,
            lease_duration: o.2[0],
            renew_duration: o.2[1],
            rebind_duration: o.2[2],
            subnet_mask: o.3,
            router: o.4,
            dns_servers: dns,
            parameter_request_list: o.6.map(|n| &BYTES[..n]),
            client_identifier: o.7.map(|n| &BYTES[..n]),
            max_size: o.8,
        }
    })
}

proptest! {
    #[test]
    fn repr_round_trip(repr in arb_repr()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let p = Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Repr::parse(&p), Ok(repr));
    }

    #[test]
    fn checked_view_never_panics(
        options in proptest::collection::vec(any::<u8>(), 0..80),
        header in proptest::collection::vec(any::<u8>(), 240),
        plausible in any::<bool>(),
    ) {
        let mut bytes = header;
        if plausible {
            bytes[..12].copy_from_slice(&DISCOVER_START);
            bytes[236..240].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        }
        bytes.extend_from_slice(&options);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let _ = (p.opcode(), p.hardware_type(), p.hardware_len(), p.hops());
        let _ = (p.transaction_id(), p.secs(), p.flags(), p.broadcast());
        let _ = (p.client_ip(), p.your_ip(), p.server_ip(), p.relay_agent_ip());
        let _ = (p.client_hardware(), p.client_hardware_address(), p.server_name());
        let _ = (p.boot_file(), p.magic_number(), p.options());
        let mut errors = 0;
        for option in Options::new(p.options()) {
            errors += usize::from(option.is_err());
        }
        prop_assert!(errors <= 1);
        let _ = Repr::parse(&p);
    }
}
