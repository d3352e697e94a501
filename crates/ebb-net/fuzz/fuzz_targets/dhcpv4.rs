//! DHCPv4: check, read every field and option, parse, emit, re-parse, compare.
#![no_main]

use ebb_net::wire::dhcpv4::{Options, Packet, Repr, option};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.opcode(),
        packet.hardware_type(),
        packet.hardware_len(),
        packet.hops(),
    );
    let _ = (
        packet.transaction_id(),
        packet.secs(),
        packet.flags(),
        packet.broadcast(),
    );
    let _ = (packet.client_ip(), packet.your_ip(), packet.server_ip());
    let _ = (
        packet.relay_agent_ip(),
        packet.client_hardware(),
        packet.server_name(),
    );
    let _ = (
        packet.client_hardware_address(),
        packet.boot_file(),
        packet.magic_number(),
    );
    let mut errors = 0;
    for option in Options::new(packet.options()) {
        errors += usize::from(option.is_err());
    }
    assert!(errors <= 1);
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    // The repr agrees with the view and with the options as the iterator reads them.
    assert_eq!(
        (repr.transaction_id, repr.secs),
        (packet.transaction_id(), packet.secs())
    );
    assert_eq!(repr.broadcast, packet.broadcast());
    assert_eq!(
        repr.client_hardware_address,
        packet.client_hardware_address()
    );
    assert_eq!(
        (repr.client_ip, repr.your_ip),
        (packet.client_ip(), packet.your_ip())
    );
    assert_eq!(repr.server_ip, packet.server_ip());
    assert_eq!(repr.relay_agent_ip, packet.relay_agent_ip());
    let last = |kind: u8| {
        Options::new(packet.options())
            .map(|o| o.unwrap())
            .filter(|o| o.kind == kind)
            .last()
            .map(|o| o.data)
    };
    let addr = |kind| last(kind).map(|d: &[u8]| core::net::Ipv4Addr::new(d[0], d[1], d[2], d[3]));
    let secs = |kind| last(kind).map(|d: &[u8]| u32::from_be_bytes([d[0], d[1], d[2], d[3]]));
    assert_eq!(
        Some(&[u8::from(repr.message_type)][..]),
        last(option::MESSAGE_TYPE)
    );
    assert_eq!(repr.requested_ip, addr(option::REQUESTED_IP));
    assert_eq!(repr.server_identifier, addr(option::SERVER_IDENTIFIER));
    assert_eq!(repr.subnet_mask, addr(option::SUBNET_MASK));
    assert_eq!(repr.router, addr(option::ROUTER));
    assert_eq!(repr.dns_servers[0], addr(option::DNS_SERVER));
    assert_eq!(repr.lease_duration, secs(option::LEASE_TIME));
    assert_eq!(repr.renew_duration, secs(option::RENEWAL_TIME));
    assert_eq!(repr.rebind_duration, secs(option::REBINDING_TIME));
    assert_eq!(
        repr.parameter_request_list,
        last(option::PARAMETER_REQUEST_LIST)
    );
    assert_eq!(repr.client_identifier, last(option::CLIENT_IDENTIFIER));
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    let reparsed = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&reparsed), Ok(repr));
});
