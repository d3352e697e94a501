use super::*;
use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const DST: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

/// A Linux SYN, 10.0.2.15:43210 -> 93.184.216.34:80, options in Linux's order: MSS 1460,
/// SACK-permitted, timestamps, NOP, window scale 7. Checksum 0x3505 computed
/// independently.
const SYN: [u8; 40] = [
    0xa8, 0xca, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0,
    0x35, 0x05, 0x00, 0x00, // fixed header
    0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x0b, 0xc4, 0x4e, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x03, 0x03, 0x07, // options
];

fn syn_repr() -> Repr<'static> {
    Repr {
        src_port: 43210,
        dst_port: 80,
        control: Control::Syn,
        push: false,
        seq_number: SeqNumber(0x1234_5678),
        ack_number: None,
        window_len: 64240,
        window_scale: Some(7),
        max_seg_size: Some(1460),
        sack_permitted: true,
        sack_ranges: [None; 4],
        timestamp: Some(Timestamp {
            tsval: 0x000b_c44e,
            tsecr: 0,
        }),
        payload: &[],
    }
}

fn caps() -> ChecksumCapabilities {
    ChecksumCapabilities::default()
}

#[test]
fn syn_view_fields() {
    let p = Packet::new_checked(&SYN[..]).unwrap();
    assert_eq!((p.src_port(), p.dst_port()), (43210, 80));
    assert_eq!(p.seq_number(), SeqNumber(0x1234_5678));
    assert_eq!(p.ack_number(), SeqNumber(0));
    assert_eq!(p.header_len(), 40);
    assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh());
    assert!(!p.urg() && !p.ece() && !p.cwr());
    assert_eq!(p.window_len(), 64240);
    assert_eq!(p.checksum(), 0x3505);
    assert_eq!(p.urgent_at(), 0);
    assert_eq!(p.options().len(), 20);
    assert!(p.payload().is_empty());
    assert_eq!(p.segment_len(), 1);
    assert!(p.verify_checksum(SRC, DST));
}

#[test]
fn syn_options_iterate() {
    let p = Packet::new_checked(&SYN[..]).unwrap();
    let options: Vec<_> = Options::new(p.options()).collect::<Result<_>>().unwrap();
    assert_eq!(
        options,
        [
            TcpOption::MaxSegmentSize(1460),
            TcpOption::SackPermitted,
            TcpOption::Timestamp {
                tsval: 0x000b_c44e,
                tsecr: 0
            },
            TcpOption::NoOperation,
            TcpOption::WindowScale(7),
        ]
    );
}

#[test]
fn syn_parse_and_emit() {
    let p = Packet::new_checked(&SYN[..]).unwrap();
    let repr = Repr::parse(&p, SRC, DST, &caps()).unwrap();
    assert_eq!(repr, syn_repr());
    assert_eq!(repr.segment_len(), 1);
    // Our layout differs from Linux's (no NOP, padding at the end) but means the same.
    let mut out = vec![0u8; repr.buffer_len()];
    assert_eq!(out.len(), 40);
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), SRC, DST, &caps());
    assert_eq!(
        &out[20..],
        &[
            0x02, 0x04, 0x05, 0xb4, 0x03, 0x03, 0x07, 0x04, 0x02, 0x08, 0x0a, 0x00, 0x0b, 0xc4,
            0x4e, 0x00, 0x00, 0x00, 0x00, 0x00,
        ]
    );
    let q = Packet::new_checked(&out[..]).unwrap();
    assert!(q.verify_checksum(SRC, DST));
    assert_eq!(Repr::parse(&q, SRC, DST, &caps()), Ok(syn_repr()));
}

#[test]
fn data_segment_with_sack() {
    let payload = b"hello";
    let repr = Repr {
        src_port: 80,
        dst_port: 43210,
        control: Control::None,
        push: true,
        seq_number: SeqNumber(1000),
        ack_number: Some(SeqNumber(0xffff_fff0)),
        window_len: 512,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [
            Some((SeqNumber(10), SeqNumber(20))),
            Some((SeqNumber(30), SeqNumber(40))),
            None,
            None,
        ],
        timestamp: Some(Timestamp { tsval: 5, tsecr: 6 }),
        payload,
    };
    assert_eq!(repr.header_len(), 20 + 28);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), DST, SRC, &caps());
    let p = Packet::new_checked(&out[..]).unwrap();
    assert!(p.ack() && p.psh());
    assert_eq!(p.payload(), payload);
    assert_eq!(p.segment_len(), 5);
    assert_eq!(Repr::parse(&p, DST, SRC, &caps()), Ok(repr));
}

#[test]
fn four_sack_blocks_and_overflow() {
    let block = |n: u32| Some((SeqNumber(n), SeqNumber(n + 1)));
    let mut repr = syn_repr();
    repr.control = Control::None;
    repr.max_seg_size = None;
    repr.window_scale = None;
    repr.sack_permitted = false;
    repr.timestamp = None;
    repr.sack_ranges = [block(1), block(3), block(5), block(7)];
    assert_eq!(repr.header_len(), 20 + 36);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), SRC, DST, &caps());
    let p = Packet::new_checked(&out[..]).unwrap();
    assert_eq!(Repr::parse(&p, SRC, DST, &caps()), Ok(repr));

    // With timestamps only three blocks fit in 40 bytes; the fourth is left out.
    repr.timestamp = Some(Timestamp { tsval: 1, tsecr: 2 });
    assert_eq!(repr.header_len(), 20 + 36);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), SRC, DST, &caps());
    let p = Packet::new_checked(&out[..]).unwrap();
    let parsed = Repr::parse(&p, SRC, DST, &caps()).unwrap();
    assert_eq!(parsed.sack_ranges, [block(1), block(3), block(5), None]);
}

#[test]
fn length_errors() {
    for len in 0..SYN.len() {
        assert_eq!(
            Packet::new_checked(&SYN[..len]).err(),
            Some(WireError::Truncated),
            "len {len}"
        );
    }
    for offset in 0..5u8 {
        let mut b = SYN;
        b[12] = offset << 4;
        assert_eq!(
            Packet::new_checked(&b[..]).err(),
            Some(WireError::Malformed)
        );
    }
    let mut b = SYN;
    b[12] = 0xf0;
    assert_eq!(
        Packet::new_checked(&b[..]).err(),
        Some(WireError::Truncated)
    );
}

#[test]
fn semantic_errors() {
    let mut b = SYN;
    b[39] = 8; // window scale changed, checksum stale
    let p = Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        Repr::parse(&p, SRC, DST, &caps()),
        Err(WireError::BadChecksum)
    );
    let ignored = ChecksumCapabilities::ALL;
    assert!(Repr::parse(&p, SRC, DST, &ignored).is_ok());

    for flags in [0x03, 0x06, 0x05, 0x07] {
        let mut b = SYN;
        b[13] = flags; // SYN+FIN, SYN+RST, FIN+RST, all three
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, SRC, DST, &ignored),
            Err(WireError::Malformed)
        );
    }
    for port_at in [0, 2] {
        let mut b = SYN;
        b[port_at] = 0;
        b[port_at + 1] = 0;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, SRC, DST, &ignored),
            Err(WireError::Malformed)
        );
    }
}

/// A segment with the given options area (padded by the caller to a multiple of 4).
fn with_options(options: &[u8]) -> Vec<u8> {
    let mut b = SYN[..20].to_vec();
    b[12] = (((20 + options.len()) / 4) as u8) << 4;
    b.extend_from_slice(options);
    b
}

#[test]
fn option_garbage_is_an_error() {
    let ignored = ChecksumCapabilities::ALL;
    let cases: &[&[u8]] = &[
        &[2, 0, 0, 0],             // zero length
        &[2, 1, 0, 0],             // length one
        &[2, 8, 0, 0],             // runs past the area
        &[2, 3, 0, 0],             // MSS with the wrong length
        &[3, 4, 0, 0],             // window scale with the wrong length
        &[4, 3, 0, 0],             // SACK-permitted with the wrong length
        &[8, 4, 0, 0],             // timestamps with the wrong length
        &[5, 2, 0, 0],             // SACK with no blocks
        &[5, 6, 0, 0, 0, 0, 0, 0], // SACK with half a block
        &[1, 1, 1, 0xfe],          // kind with no length byte at the end of the area
    ];
    for (i, options) in cases.iter().enumerate() {
        let b = with_options(options);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, SRC, DST, &ignored),
            Err(WireError::Malformed),
            "case {i}"
        );
        // The iterator yields the error once and stops.
        let results: Vec<_> = Options::new(p.options()).collect();
        assert_eq!(results.last(), Some(&Err(WireError::Malformed)), "case {i}");
        assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    }
}

#[test]
fn unknown_options_skipped_and_end_of_list_stops() {
    let ignored = ChecksumCapabilities::ALL;
    // Unknown kind 30 (MPTCP) with 4 data bytes, then MSS, then EOL and garbage.
    let b = with_options(&[30, 6, 9, 9, 9, 9, 2, 4, 0x05, 0xdc, 0, 0xff]);
    let p = Packet::new_checked(&b[..]).unwrap();
    let options: Vec<_> = Options::new(p.options()).collect::<Result<_>>().unwrap();
    assert_eq!(
        options,
        [
            TcpOption::Unknown {
                kind: 30,
                data: &[9, 9, 9, 9]
            },
            TcpOption::MaxSegmentSize(1500),
            TcpOption::EndOfList,
        ]
    );
    let repr = Repr::parse(&p, SRC, DST, &ignored).unwrap();
    assert_eq!(repr.max_seg_size, Some(1500));
}

#[test]
fn option_emit_round_trip() {
    let options = [
        TcpOption::EndOfList,
        TcpOption::NoOperation,
        TcpOption::MaxSegmentSize(536),
        TcpOption::WindowScale(14),
        TcpOption::SackPermitted,
        TcpOption::SackRange([Some((SeqNumber(1), SeqNumber(2))), None, None, None]),
        TcpOption::Timestamp { tsval: 1, tsecr: 2 },
        TcpOption::Unknown {
            kind: 99,
            data: &[1, 2, 3],
        },
    ];
    for option in options {
        let mut buf = [0u8; 40];
        let n = option.emit(&mut buf);
        assert_eq!(n, option.buffer_len());
        let parsed = Options::new(&buf[..n]).next().unwrap().unwrap();
        assert_eq!(parsed, option);
    }
}

#[test]
fn seq_number_wrapping() {
    let a = SeqNumber(u32::MAX - 5);
    let b = a + 10u32;
    assert_eq!(b, SeqNumber(4));
    assert!(a < b);
    assert!(b > a);
    assert_eq!(b - a, 10);
    assert_eq!(a - b, -10);
    assert_eq!(b - 10u32, a);
    assert_eq!(a.max(b), b);
    assert_eq!(a.min(b), a);
    assert_eq!(a + 10usize, b);
    let mut c = a;
    c += 6;
    assert_eq!(c, SeqNumber(0));
    assert!(SeqNumber(0) > SeqNumber(0x8000_0001));
    assert!(SeqNumber(0) < SeqNumber(0x7fff_ffff));
    assert!(SeqNumber(7) <= SeqNumber(7) && SeqNumber(7) >= SeqNumber(7));
}

#[test]
fn setters() {
    let mut b = SYN;
    let mut p = Packet::new_unchecked(&mut b[..]);
    p.set_urg(true);
    p.set_ece(true);
    p.set_cwr(true);
    p.set_urgent_at(9);
    assert!(p.urg() && p.ece() && p.cwr() && p.syn());
    p.set_syn(false);
    assert!(!p.syn() && p.urg());
    assert_eq!(p.urgent_at(), 9);
    p.clear_flags();
    assert!(!p.urg() && !p.ece());
    assert_eq!(p.into_inner().len(), 40);
}

fn arb_seq() -> impl Strategy<Value = SeqNumber> {
    any::<u32>().prop_map(SeqNumber)
}

prop_compose! {
    fn arb_repr(payload: &'static [u8])(
        ports in (1u16.., 1u16..),
        control in prop_oneof![
            Just(Control::None), Just(Control::Syn), Just(Control::Fin), Just(Control::Rst)
        ],
        push in any::<bool>(),
        seq in arb_seq(),
        ack in proptest::option::of(arb_seq()),
        window_len in any::<u16>(),
        window_scale in proptest::option::of(any::<u8>()),
        max_seg_size in proptest::option::of(any::<u16>()),
        sack_permitted in any::<bool>(),
        blocks in proptest::collection::vec((arb_seq(), arb_seq()), 0..=4),
        timestamp in proptest::option::of((any::<u32>(), any::<u32>())),
        len in 0..=payload.len(),
    ) -> Repr<'static> {
        let mut repr = Repr {
            src_port: ports.0,
            dst_port: ports.1,
            control,
            push,
            seq_number: seq,
            ack_number: ack,
            window_len,
            window_scale,
            max_seg_size,
            sack_permitted,
            sack_ranges: [None; 4],
            timestamp: timestamp.map(|(tsval, tsecr)| Timestamp { tsval, tsecr }),
            payload: &payload[..len],
        };
        // Keep only the blocks that fit, as emit would.
        for (slot, block) in repr.sack_ranges.iter_mut().zip(blocks) {
            *slot = Some(block);
        }
        let kept = repr.sack_blocks_emitted();
        for slot in &mut repr.sack_ranges[kept..] {
            *slot = None;
        }
        repr
    }
}

static PAYLOAD: [u8; 64] = [0xa5; 64];

proptest! {
    #[test]
    fn repr_round_trip(repr in arb_repr(&PAYLOAD), src in any::<u32>(), dst in any::<u32>()) {
        let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
        let mut buf = vec![0u8; repr.buffer_len()];
        prop_assert!(repr.header_len() <= MAX_HEADER_LEN);
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &caps());
        let p = Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Repr::parse(&p, src, dst, &caps()), Ok(repr));
    }

    #[test]
    fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut bytes = bytes;
        if bytes.len() >= 20 {
            // A plausible data offset most of the time.
            let max = (bytes.len() / 4).min(15) as u8;
            bytes[12] = (5 + bytes[12] % (max - 4)) << 4;
        }
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number());
            let _ = (p.header_len(), p.window_len(), p.checksum(), p.urgent_at());
            let _ = (p.fin(), p.syn(), p.rst(), p.psh(), p.ack(), p.urg(), p.ece(), p.cwr());
            let _ = (p.options(), p.payload(), p.segment_len(), p.verify_checksum(SRC, DST));
            for option in Options::new(p.options()) {
                let _ = option;
            }
            let _ = Repr::parse(&p, SRC, DST, &ChecksumCapabilities::ALL);
        }
    }

    #[test]
    fn options_iterator_never_panics(area in proptest::collection::vec(any::<u8>(), 0..48)) {
        let mut errors = 0;
        for option in Options::new(&area) {
            if option.is_err() {
                errors += 1;
            }
        }
        prop_assert!(errors <= 1);
    }
}

proptest! {
    /// `PlainHeader::parse` accepts a header exactly when it is an option-less ACK or
    /// ACK+PSH with nonzero ports, and then agrees with `Repr::parse` on every field.
    #[test]
    fn plain_header_parse_agrees_with_repr(
        mut header in proptest::collection::vec(any::<u8>(), 20..=24),
        plain_offset in any::<bool>(),
        flags in prop_oneof![Just(0x10u8), Just(0x18u8), any::<u8>()],
    ) {
        if plain_offset {
            header[12] = 0x50;
        }
        header[13] = flags;
        let plain = PlainHeader::parse(&header);
        let packet = Packet::new_unchecked(&header[..]);
        let repr = Repr::parse(&packet, SRC, DST, &ChecksumCapabilities::ALL);
        let expect_plain = header[12] == 0x50
            && (flags == 0x10 || flags == 0x18)
            && packet.src_port() != 0
            && packet.dst_port() != 0;
        prop_assert_eq!(plain.is_some(), expect_plain);
        if let Some(plain) = plain {
            let repr = repr.expect("a plain header parses as a Repr");
            prop_assert_eq!(repr.src_port, plain.src_port);
            prop_assert_eq!(repr.dst_port, plain.dst_port);
            prop_assert_eq!(repr.seq_number, plain.seq_number);
            prop_assert_eq!(repr.ack_number, Some(plain.ack_number));
            prop_assert_eq!(repr.window_len, plain.window_len);
            prop_assert_eq!(repr.push, plain.flags & PlainHeader::PSH != 0);
            prop_assert_eq!(repr.control, Control::None);
            prop_assert_eq!(
                (repr.window_scale, repr.max_seg_size, repr.sack_permitted, repr.timestamp),
                (None, None, false, None)
            );
            prop_assert!(repr.sack_ranges.iter().all(Option::is_none));
            prop_assert_eq!(repr.payload, &header[20..]);
        }
    }

    /// `PlainHeader::emit` writes the bytes `Repr::emit` writes for the same header.
    #[test]
    fn plain_header_emit_matches_repr(
        src_port in any::<u16>(),
        dst_port in any::<u16>(),
        seq in any::<u32>(),
        ack in any::<u32>(),
        window in any::<u16>(),
        push in any::<bool>(),
        fin in any::<bool>(),
    ) {
        let plain = PlainHeader {
            src_port,
            dst_port,
            seq_number: SeqNumber(seq),
            ack_number: SeqNumber(ack),
            window_len: window,
            flags: PlainHeader::ACK
                | if push { PlainHeader::PSH } else { 0 }
                | if fin { PlainHeader::FIN } else { 0 },
        };
        let mut fast = [0xeeu8; HEADER_LEN];
        plain.emit(&mut fast);
        let repr = plain.to_repr();
        prop_assert_eq!(repr.buffer_len(), HEADER_LEN);
        let mut general = [0xddu8; HEADER_LEN];
        repr.emit(
            &mut Packet::new_unchecked(&mut general[..]),
            SRC,
            DST,
            &ChecksumCapabilities::ALL,
        );
        prop_assert_eq!(fast, general);
    }
}
