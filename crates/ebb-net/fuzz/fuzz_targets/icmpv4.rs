//! ICMPv4: check, read every field, parse (checksum ignored), emit with a checksum,
//! re-parse with it verified, compare.
#![no_main]

use ebb_net::wire::ChecksumCapabilities;
use ebb_net::wire::icmpv4::{Message, Packet, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (packet.msg_type(), packet.msg_code(), packet.checksum());
    let _ = (
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.next_hop_mtu(),
    );
    let _ = (packet.data(), packet.verify_checksum());
    let Ok(repr) = Repr::parse(&packet, &ChecksumCapabilities::ALL) else {
        return;
    };
    // The repr agrees with the view.
    match repr {
        Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }
        | Repr::EchoReply {
            ident,
            seq_no,
            data,
        } => {
            assert_eq!((ident, seq_no), (packet.echo_ident(), packet.echo_seq_no()));
            assert_eq!(data, packet.data());
            let request = matches!(repr, Repr::EchoRequest { .. });
            assert_eq!(request, packet.msg_type() == Message::EchoRequest);
        }
        Repr::DstUnreachable { reason, data, .. } => {
            assert_eq!(packet.msg_type(), Message::DstUnreachable);
            assert_eq!((u8::from(reason), data), (packet.msg_code(), packet.data()));
        }
        Repr::TimeExceeded { reason, data } => {
            assert_eq!(packet.msg_type(), Message::TimeExceeded);
            assert_eq!((u8::from(reason), data), (packet.msg_code(), packet.data()));
        }
        _ => {}
    }
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &caps);
    let reparsed = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&reparsed, &caps), Ok(repr));
});
