//! Header prediction and the send template change nothing: two layers, one with the fast
//! path and one without (`TcpLayer::set_fast_path(false)`), are fed the same segments,
//! clock and application calls, and must send the same segments, deliver the same
//! events, count the same counters and reach the same state after every step. The
//! steps mix segments built to be predicted (at `rcv_nxt`, acknowledging part of what is
//! in flight, the window as last advertised) with near misses and arbitrary segments.

use super::*;
use alloc::format;
use alloc::string::String;
use ebb_core::iobuf::IOBufChain;
use proptest::prelude::*;

/// One step, applied to both layers.
#[derive(Debug, Clone)]
enum Step {
    /// A segment relative to the connection's own numbers: `seq_skew` 0 is `rcv_nxt`,
    /// `ack_part` in 0..=4 acknowledges that many quarters of what is in flight (4:
    /// all), `window_change` 0 keeps the window the peer last advertised.
    Near {
        len: usize,
        seq_skew: i32,
        ack_part: u32,
        ack_skew: i32,
        window_change: i32,
        flags: u8,
        sack: bool,
    },
    /// An arbitrary segment (as in the fuzz test).
    Wild {
        flags: u8,
        seq_offset: i32,
        ack_offset: i32,
        window: u16,
        len: usize,
    },
    Advance(u64),
    AppSend(usize),
    WindowOpen(bool),
    AppClose,
}

fn step() -> impl Strategy<Value = Step> {
    let near = (
        prop_oneof![3 => Just(0usize), 3 => 1usize..200, 1 => 1000usize..3000],
        prop_oneof![8 => Just(0i32), 1 => -3000i32..3000],
        0u32..=4,
        prop_oneof![8 => Just(0i32), 1 => -100i32..100],
        prop_oneof![8 => Just(0i32), 1 => -100i32..100],
        prop_oneof![6 => Just(0u8), 1 => 0u8..16],
        prop_oneof![6 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(len, seq_skew, ack_part, ack_skew, window_change, flags, sack)| Step::Near {
                len,
                seq_skew,
                ack_part,
                ack_skew,
                window_change,
                flags,
                sack,
            },
        );
    let wild = (
        0u8..16,
        -70_000i32..70_000,
        -70_000i32..70_000,
        any::<u16>(),
        0usize..3000,
    )
        .prop_map(|(flags, seq_offset, ack_offset, window, len)| Step::Wild {
            flags,
            seq_offset,
            ack_offset,
            window,
            len,
        });
    prop_oneof![
        10 => near,
        1 => wild,
        2 => prop_oneof![Just(0u64), 1u64..300, Just(40), 300u64..3000].prop_map(Step::Advance),
        3 => prop_oneof![1usize..100, 100usize..20_000].prop_map(Step::AppSend),
        1 => any::<bool>().prop_map(Step::WindowOpen),
        1 => Just(Step::AppClose),
    ]
}

static BYTES: [u8; 3000] = {
    let mut b = [0u8; 3000];
    let mut i = 0;
    while i < b.len() {
        b[i] = (i * 7 + 3) as u8;
        i += 1;
    }
    b
};

/// The segment a step describes, from the layer's current numbers.
fn segment_for(h: &Harness, iss: u32, step: &Step) -> Option<Repr<'static>> {
    let control_of = |flags: u8| match flags & 0b11 {
        0 => Control::None,
        1 => Control::Syn,
        2 => Control::Fin,
        _ => Control::Rst,
    };
    match *step {
        Step::Near {
            len,
            seq_skew,
            ack_part,
            ack_skew,
            window_change,
            flags,
            sack,
        } => {
            let conn = h.conns.borrow().last().cloned()?;
            let tcb = conn.0.tcb.borrow();
            let in_flight = (tcb.snd_max - tcb.snd_una).max(0) as u32;
            let ack = (tcb.snd_una + in_flight * ack_part / 4)
                .0
                .wrapping_add_signed(ack_skew);
            let window =
                ((tcb.snd_wnd >> tcb.snd_shift) as u16).wrapping_add_signed(window_change as i16);
            let seq = tcb.rcv_nxt.0.wrapping_add_signed(seq_skew);
            let mut sack_ranges = [None; 4];
            if sack {
                sack_ranges[0] = Some((
                    SeqNumber(ack.wrapping_add(10)),
                    SeqNumber(ack.wrapping_add(500)),
                ));
            }
            Some(Repr {
                window_len: window,
                sack_ranges,
                push: flags & 0b1000 != 0 || len > 0,
                ..peer_seg(
                    seq,
                    (flags & 0b100 == 0).then_some(ack),
                    control_of(flags),
                    &BYTES[..len],
                )
            })
        }
        Step::Wild {
            flags,
            seq_offset,
            ack_offset,
            window,
            len,
        } => Some(Repr {
            window_len: window,
            push: flags & 0b1000 != 0,
            ..peer_seg(
                (PEER_ISS + 1).wrapping_add_signed(seq_offset),
                (flags & 0b100 != 0).then(|| (iss + 1).wrapping_add_signed(ack_offset)),
                control_of(flags),
                &BYTES[..len],
            )
        }),
        _ => None,
    }
}

/// What a layer showed after a step: every segment (header and payload bytes), the
/// events, the counters and the connection's state and numbers.
fn observe(h: &mut Harness) -> String {
    let segments: Vec<_> = h
        .take()
        .iter()
        .map(|s| (s.src, s.dst, s.header, s.payload.to_vec()))
        .collect();
    let conn = h.conns.borrow().last().cloned();
    let numbers = conn.map(|c| {
        let t = c.0.tcb.borrow();
        (
            t.state,
            t.snd_una,
            t.snd_nxt,
            t.snd_max,
            t.snd_wnd,
            t.rcv_nxt,
            t.rcv_adv,
            t.cc.cwnd,
            t.timers.next(),
        )
    });
    format!(
        "{segments:?}\n{:?}\n{:?}\n{numbers:?}\n{:?}",
        h.events(),
        h.layer.counters(),
        h.layer.poll_at()
    )
}

fn run(steps: &[Step], delayed_ack: bool, sack: bool) -> Result<u64, TestCaseError> {
    let config = TcpConfig {
        delayed_ack: delayed_ack.then(|| Duration::from_millis(40)),
        ..TcpConfig::default()
    };
    let mut fast = Harness::new(config.clone());
    let mut slow = Harness::new(config);
    slow.layer.set_fast_path(false);
    let mut isses = [0u32; 2];
    for (h, iss) in [&mut fast, &mut slow].into_iter().zip(isses.iter_mut()) {
        h.listen(8);
        let syn = Repr {
            sack_permitted: sack,
            ..peer_syn()
        };
        h.input(syn);
        *iss = h.take_one().header.seq_number.0;
        h.input(peer_seg(PEER_ISS + 1, Some(*iss + 1), Control::None, &[]));
    }
    prop_assert_eq!(isses[0], isses[1]);
    prop_assert_eq!(observe(&mut fast), observe(&mut slow));
    for step in steps {
        let repr = segment_for(&fast, isses[0], step);
        prop_assert_eq!(&repr, &segment_for(&slow, isses[1], step));
        for h in [&mut fast, &mut slow] {
            match (step, &repr) {
                (_, Some(repr)) => h.input(*repr),
                (Step::Advance(ms_step), _) => h.advance(Duration::from_millis(*ms_step)),
                (Step::AppSend(n), _) => {
                    if let Some(conn) = h.conns.borrow().last() {
                        let data = IOBufChain::from(IOBuf::from_vec(
                            BYTES[..(*n).min(3000)].repeat(n.div_ceil(3000)),
                        ));
                        let _ = conn.send(data);
                    }
                    h.poll();
                }
                (Step::WindowOpen(open), _) => {
                    if let Some(conn) = h.conns.borrow().last() {
                        conn.set_receive_window_open(*open);
                    }
                    h.poll();
                }
                (Step::AppClose, _) => {
                    if let Some(conn) = h.conns.borrow().last() {
                        conn.close();
                    }
                    h.poll();
                }
                _ => {}
            }
        }
        prop_assert_eq!(observe(&mut fast), observe(&mut slow), "after {:?}", step);
    }
    Ok(fast.layer.0.predicted.get())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fast_path_is_equivalent_to_general_path(
        steps in proptest::collection::vec(step(), 1..80),
        delayed_ack in any::<bool>(),
        sack in any::<bool>(),
    ) {
        run(&steps, delayed_ack, sack)?;
    }
}

/// The property above is not vacuous: a plain exchange is predicted, segment after
/// segment, and still matches the general path.
#[test]
fn exchange_takes_the_fast_path() {
    let mut steps = Vec::new();
    for round in 0..50 {
        steps.push(Step::AppSend(64 + round));
        steps.push(Step::Near {
            len: 64,
            seq_skew: 0,
            ack_part: 4,
            ack_skew: 0,
            window_change: 0,
            flags: 0,
            sack: false,
        });
        steps.push(Step::Advance(1));
    }
    let predicted = run(&steps, true, true).expect("equivalent");
    assert_eq!(predicted, 50, "every data segment predicted");
}

proptest! {
    /// Slicing the send queue (with its first-buffer shortcut) gives exactly the bytes
    /// asked for, and consecutive slices through one cursor agree with fresh ones.
    #[test]
    fn queue_slices_are_exact(
        lens in proptest::collection::vec(0usize..200, 1..6),
        cuts in proptest::collection::vec((0usize..600, 1usize..300), 1..8),
    ) {
        use crate::tcp::send_queue::{QueueCursor, slice_chain, slice_chain_from};
        let mut chain = IOBufChain::new();
        let mut all = Vec::new();
        for (i, len) in lens.iter().enumerate() {
            let bytes: Vec<u8> = (0..*len).map(|j| (i * 31 + j) as u8).collect();
            all.extend_from_slice(&bytes);
            chain.push_back(IOBuf::from_vec(bytes));
        }
        let mut cursor = QueueCursor::default();
        let mut at = 0;
        for (skip, len) in cuts {
            let offset = (at + skip % 50).min(all.len());
            let len = len.min(all.len() - offset);
            let expect = &all[offset..offset + len];
            prop_assert_eq!(slice_chain(&chain, offset, len).to_vec(), expect);
            prop_assert_eq!(
                slice_chain_from(&chain, &mut cursor, offset, len).to_vec(),
                expect
            );
            at = offset + len;
        }
    }
}
