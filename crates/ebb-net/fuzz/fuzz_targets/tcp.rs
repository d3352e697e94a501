//! TCP: the first eight input bytes are the IPv4 source and destination, the rest the
//! segment. Check, read every field and option, parse (checksum ignored), emit with a
//! checksum, re-parse with it verified, compare.
#![no_main]

use core::net::Ipv4Addr;

use ebb_net::wire::ChecksumCapabilities;
use ebb_net::wire::tcp::{Control, Options, Packet, Repr, TcpOption, Timestamp};
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
    let _ = (packet.src_port(), packet.dst_port(), packet.seq_number());
    let _ = (
        packet.ack_number(),
        packet.header_len(),
        packet.window_len(),
    );
    let _ = (packet.checksum(), packet.urgent_at(), packet.segment_len());
    let _ = (
        packet.fin(),
        packet.syn(),
        packet.rst(),
        packet.psh(),
        packet.ack(),
    );
    let _ = (packet.urg(), packet.ece(), packet.cwr(), packet.payload());
    let _ = packet.verify_checksum(src, dst);
    let mut errors = 0;
    for option in Options::new(packet.options()) {
        errors += usize::from(option.is_err());
    }
    assert!(errors <= 1);
    let Ok(repr) = Repr::parse(&packet, src, dst, &ChecksumCapabilities::ALL) else {
        return;
    };
    // The repr agrees with the view and with the options as the iterator reads them
    // (the last of a repeated option wins).
    assert_eq!(
        (repr.src_port, repr.dst_port),
        (packet.src_port(), packet.dst_port())
    );
    assert_eq!(repr.seq_number, packet.seq_number());
    assert_eq!(repr.ack_number, packet.ack().then(|| packet.ack_number()));
    assert_eq!(
        (repr.window_len, repr.push),
        (packet.window_len(), packet.psh())
    );
    assert_eq!(repr.payload, packet.payload());
    assert_eq!(repr.segment_len(), packet.segment_len());
    let control = match (packet.syn(), packet.fin(), packet.rst()) {
        (true, _, _) => Control::Syn,
        (_, true, _) => Control::Fin,
        (_, _, true) => Control::Rst,
        _ => Control::None,
    };
    assert_eq!(repr.control, control);
    let (mut mss, mut ws, mut sack_permitted, mut ts, mut sack) =
        (None, None, false, None, [None; 4]);
    for option in Options::new(packet.options()) {
        match option.unwrap() {
            TcpOption::MaxSegmentSize(v) => mss = Some(v),
            TcpOption::WindowScale(v) => ws = Some(v),
            TcpOption::SackPermitted => sack_permitted = true,
            TcpOption::Timestamp { tsval, tsecr } => ts = Some(Timestamp { tsval, tsecr }),
            TcpOption::SackRange(blocks) => sack = blocks,
            _ => {}
        }
    }
    assert_eq!((repr.max_seg_size, repr.window_scale), (mss, ws));
    assert_eq!((repr.sack_permitted, repr.timestamp), (sack_permitted, ts));
    assert_eq!(repr.sack_ranges, sack);
    assert!(repr.header_len() <= 60);
    let caps = ChecksumCapabilities::default();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &caps);
    let reparsed = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!(Repr::parse(&reparsed, src, dst, &caps), Ok(repr));
});
