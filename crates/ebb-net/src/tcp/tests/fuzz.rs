//! Arbitrary segments against a listener and an established connection: nothing panics,
//! the bounds hold, and the connection keeps working or ends with exactly one `closed`.

use super::*;
use ebb_core::iobuf::IOBufChain;
use proptest::prelude::*;

/// One step of the adversary: a segment relative to the connection's numbers, or time.
#[derive(Debug, Clone)]
enum Step {
    Segment {
        flags: u8,
        seq_offset: i32,
        ack_offset: i32,
        window: u16,
        len: usize,
        sack: Option<(i32, i32)>,
        port: u16,
    },
    Advance(u64),
    AppSend(usize),
    AppClose,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            0u8..16,
            -70_000i32..70_000,
            -70_000i32..70_000,
            any::<u16>(),
            0usize..3000,
            proptest::option::of((-5000i32..70_000, -5000i32..70_000)),
            prop_oneof![Just(PEER_PORT), 1u16..3],
        )
            .prop_map(|(flags, seq_offset, ack_offset, window, len, sack, port)| {
                Step::Segment { flags, seq_offset, ack_offset, window, len, sack, port }
            }),
        2 => (0u64..5000).prop_map(Step::Advance),
        1 => (0usize..100_000).prop_map(Step::AppSend),
        1 => Just(Step::AppClose),
    ]
}

static BYTES: [u8; 3000] = [0xab; 3000];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_segments_never_panic(steps in proptest::collection::vec(step(), 1..60)) {
        let mut h = Harness::new(TcpConfig {
            max_connections: 8,
            max_half_open_per_listener: 2,
            ..TcpConfig::default()
        });
        let iss = h.accept_connection();
        let conn = h.conn();
        for step in steps {
            match step {
                Step::Segment { flags, seq_offset, ack_offset, window, len, sack, port } => {
                    let control = match flags & 0b11 {
                        0 => Control::None,
                        1 => Control::Syn,
                        2 => Control::Fin,
                        _ => Control::Rst,
                    };
                    let seq = (PEER_ISS + 1).wrapping_add_signed(seq_offset);
                    let ack = (flags & 0b100 != 0)
                        .then(|| (iss + 1).wrapping_add_signed(ack_offset));
                    let mut sack_ranges = [None; 4];
                    if let Some((l, r)) = sack {
                        sack_ranges[0] = Some((
                            SeqNumber((iss + 1).wrapping_add_signed(l)),
                            SeqNumber((iss + 1).wrapping_add_signed(r)),
                        ));
                    }
                    h.input(Repr {
                        src_port: port,
                        window_len: window,
                        sack_ranges,
                        push: flags & 0b1000 != 0,
                        ..peer_seg(seq, ack, control, &BYTES[..len])
                    });
                }
                Step::Advance(ms_step) => {
                    let t = h.now + Duration::from_millis(ms_step);
                    h.advance_to(t);
                }
                Step::AppSend(n) => {
                    let _ = conn.send(IOBufChain::from(IOBuf::from_vec(alloc::vec![1u8; n])));
                }
                Step::AppClose => conn.close(),
            }
            h.poll();
            h.take();
            prop_assert!(h.layer.connection_count() <= 8);
        }
        // Run every timer out: the connection ends, and `closed` came at most once.
        h.advance_to(h.now + Duration::from_secs(3600));
        let closes = h
            .events()
            .iter()
            .filter(|e| matches!(e, Ev::Closed(_)))
            .count();
        prop_assert!(closes <= 1, "closed delivered {closes} times");
    }
}
