//! IPv4: check, read every field, parse (checksums ignored so the fuzzer gets past
//! them), emit with checksums, re-parse with checksums verified, compare.
#![no_main]

use ebb_net::wire::ChecksumCapabilities;
use ebb_net::wire::ipv4::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.version(),
        packet.header_len(),
        packet.dscp(),
        packet.ecn(),
    );
    let _ = (
        packet.total_len(),
        packet.ident(),
        packet.dont_frag(),
        packet.more_frags(),
    );
    let _ = (
        packet.frag_offset(),
        packet.ttl(),
        packet.protocol(),
        packet.checksum(),
    );
    let _ = (
        packet.src_addr(),
        packet.dst_addr(),
        packet.options(),
        packet.is_fragment(),
    );
    let _ = packet.verify_checksum();
    let payload = packet.payload();
    let Ok(repr) = Repr::parse(&packet, &ChecksumCapabilities::ALL) else {
        return;
    };
    // The repr agrees with the view.
    assert_eq!(repr.payload_len, payload.len());
    assert_eq!(
        (repr.src_addr, repr.dst_addr),
        (packet.src_addr(), packet.dst_addr())
    );
    assert_eq!((repr.protocol, repr.ttl), (packet.protocol(), packet.ttl()));
    assert_eq!(
        (repr.ident, repr.dont_frag),
        (packet.ident(), packet.dont_frag())
    );
    assert!(!packet.is_fragment());
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut out = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut out, &caps);
    out.payload_mut().copy_from_slice(payload);
    let reparsed = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&reparsed, &caps), Ok(repr));
    assert_eq!(reparsed.payload(), payload);
});
