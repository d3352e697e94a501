//! ARP: check, read every field, parse, emit, and compare bytes and reprs.
#![no_main]

use ebb_net::wire::arp::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.hardware_type(),
        packet.protocol_type(),
        packet.operation(),
    );
    let _ = (packet.source_hardware_addr(), packet.source_protocol_addr());
    let _ = (packet.target_hardware_addr(), packet.target_protocol_addr());
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
    // An Ethernet/IPv4 ARP packet is fully described by its repr.
    assert_eq!(&buf[..], &data[..buf.len()]);
    let again = Repr::parse(&Packet::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(again, repr);
});
