//! UDP: the first eight input bytes are the IPv4 source and destination, the rest the
//! datagram. Check, read every field, parse (checksum ignored), emit with a checksum,
//! re-parse with it verified, compare.
#![no_main]

use core::net::Ipv4Addr;

use ebb_net::wire::ChecksumCapabilities;
use ebb_net::wire::udp::{Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((addrs, data)) = data.split_first_chunk::<8>() else {
        return;
    };
    let src = Ipv4Addr::new(addrs[0], addrs[1], addrs[2], addrs[3]);
    let dst = Ipv4Addr::new(addrs[4], addrs[5], addrs[6], addrs[7]);
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.src_port(),
        packet.dst_port(),
        packet.len(),
        packet.is_empty(),
    );
    let _ = (
        packet.checksum(),
        packet.payload(),
        packet.verify_checksum(src, dst),
    );
    let Ok(repr) = Repr::parse(&packet, src, dst, &ChecksumCapabilities::ALL) else {
        return;
    };
    // The repr agrees with the view.
    assert_eq!(
        (repr.src_port, repr.dst_port),
        (packet.src_port(), packet.dst_port())
    );
    assert_eq!(repr.payload, packet.payload());
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &caps);
    let reparsed = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&reparsed, src, dst, &caps), Ok(repr));
});
