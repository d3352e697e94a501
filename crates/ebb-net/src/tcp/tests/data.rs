//! The data path: reassembly and SACK, window scaling, the receive-window switch,
//! send/try_send back-pressure, fast retransmit and NewReno recovery, Nagle, and the
//! callback discipline.

use super::*;
use crate::tcp::State;
use core::cell::Cell;
use ebb_core::iobuf::IOBufChain;
use ebb_core::net::SendError;

const fn pattern<const N: usize>() -> [u8; N] {
    let mut a = [0u8; N];
    let mut i = 0;
    while i < N {
        a[i] = (i * 7 + i / 251) as u8;
        i += 1;
    }
    a
}

static DATA: [u8; 3000] = pattern::<3000>();

fn chain(n: usize) -> IOBufChain {
    IOBufChain::from(IOBuf::from_vec(alloc::vec![9u8; n]))
}

#[test]
fn out_of_order_segments_are_reassembled_with_sack_and_zero_copy() {
    let mut h = Harness::quick_acks();
    let received: Rc<RefCell<Vec<IOBuf>>> = Rc::default();
    let sink = received.clone();
    let iss = {
        h.layer
            .listen(SocketAddrV4::new(US, US_PORT), 8, move |conn| {
                let sink = sink.clone();
                let mut handler = FnHandler::new();
                handler.on_receive = Box::new(move |_, buf| sink.borrow_mut().push(buf));
                conn.set_handler(handler);
            })
            .expect("listen");
        h.input(peer_syn());
        let iss = h.take_one().header.seq_number.0;
        h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
        iss
    };
    let base = PEER_ISS + 1;
    let second = bytes_of(&peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::None,
        &DATA[1000..2000],
    ));
    h.input_buf(second.clone());
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(base), 0);
    assert_eq!(
        ack.header.sack_ranges,
        [
            Some((SeqNumber(base + 1000), SeqNumber(base + 2000))),
            None,
            None,
            None
        ]
    );
    h.input(peer_seg(
        base + 2000,
        Some(iss + 1),
        Control::None,
        &DATA[2000..3000],
    ));
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(base), 0);
    assert_eq!(
        ack.header.sack_ranges[0],
        Some((SeqNumber(base + 1000), SeqNumber(base + 3000))),
        "adjacent blocks merge"
    );
    assert!(received.borrow().is_empty(), "nothing in order yet");
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(base + 3000), 0);
    assert_eq!(ack.header.sack_ranges, [None; 4], "no holes left");
    let got: Vec<u8> = received
        .borrow()
        .iter()
        .flat_map(|b| b.as_slice().to_vec())
        .collect();
    assert_eq!(got, DATA);
    assert!(
        received.borrow()[1].shares_storage_with(&second),
        "delivered data is a slice of the received frame"
    );
}

#[test]
fn out_of_order_bound_drops_and_counts() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        max_out_of_order_bytes: 1000,
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    let base = PEER_ISS + 1;
    h.input(peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::None,
        &DATA[1000..2000],
    ));
    h.take_one();
    h.input(peer_seg(
        base + 2000,
        Some(iss + 1),
        Control::None,
        &DATA[2000..3000],
    ));
    let ack = h.take_one();
    assert_eq!(
        ack.header.sack_ranges[0],
        Some((SeqNumber(base + 1000), SeqNumber(base + 2000))),
        "the third segment was not kept"
    );
    assert_eq!(h.layer.counters().dropped_out_of_order_bound, 1);
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    check(&h.take_one(), Control::None, iss + 1, Some(base + 2000), 0);
}

#[test]
fn out_of_order_fin_completes_when_the_hole_fills() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let base = PEER_ISS + 1;
    h.input(peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::Fin,
        &DATA[1000..2000],
    ));
    h.take_one();
    assert_eq!(h.conn().state(), State::Established);
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    check(&h.take_one(), Control::None, iss + 1, Some(base + 2001), 0);
    assert_eq!(h.conn().state(), State::CloseWait);
    let events = h.events();
    assert_eq!(events.last(), Some(&Ev::PeerClosed));
    assert_eq!(events.len(), 3);
}

#[test]
fn window_scaling_both_ways() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    // The peer offered shift 7: a window field of 10 means 1280 bytes.
    h.input(Repr {
        window_len: 10,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    assert_eq!(conn.send_window(), 1280);
    // Our 1 MiB window with our shift 7: a field of 8192.
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, b"x"));
    let ack = h.take_one();
    assert_eq!(ack.header.window_len, ((1024 * 1024) >> 7) as u16);
}

#[test]
fn no_window_scale_without_the_peers_option() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(Repr {
        window_len: 5000,
        ..peer_seg(PEER_ISS, None, Control::Syn, &[])
    });
    let iss = h.take_one().header.seq_number.0;
    h.input(Repr {
        window_len: 5000,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    let conn = h.conn();
    assert_eq!(conn.send_window(), 5000, "min(5000 window, 10 x 536 cwnd)");
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, b"x"));
    assert_eq!(
        h.take_one().header.window_len,
        65535,
        "unscaled: capped at 64 KiB - 1"
    );
}

/// A connection whose application closed its receive window at once (3000-byte windows,
/// ACKs not delayed, the rest of `config`): the harness, the connection, our ISS and the
/// sequence number of the peer's first data byte.
fn closed_window(config: TcpConfig) -> (Harness, TcpConn, u32, u32) {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        receive_window: 3000,
        max_receive_window: 3000,
        ..config
    });
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.set_receive_window_open(false);
    (h, conn, iss, PEER_ISS + 1)
}

#[test]
fn receive_window_close_holds_data_and_reopen_sends_an_update() {
    let (mut h, conn, iss, base) = closed_window(TcpConfig::default());
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(base + 1000), 0);
    assert_eq!(
        ack.header.window_len, 2000,
        "the right edge stays; nothing new opens"
    );
    h.input(peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::None,
        &DATA[1000..3000],
    ));
    assert_eq!(h.take_one().header.window_len, 0, "closed");
    assert!(h.events().is_empty(), "no receive calls while closed");
    // Beyond the window: not accepted.
    h.input(peer_seg(base + 3000, Some(iss + 1), Control::None, b"more"));
    check(&h.take_one(), Control::None, iss + 1, Some(base + 3000), 0);
    conn.set_receive_window_open(true);
    assert!(h.layer.needs_poll());
    h.poll();
    let update = h.take_one();
    check(&update, Control::None, iss + 1, Some(base + 3000), 0);
    assert_eq!(update.header.window_len, 3000, "window update on reopening");
    assert_eq!(received(&h).0, DATA);
}

/// The data the application was handed (`Ev::Receive` events only) and in how many calls.
fn received(h: &Harness) -> (Vec<u8>, usize) {
    let mut got = Vec::new();
    let mut calls = 0;
    for e in h.events() {
        match e {
            Ev::Receive(d) => {
                got.extend_from_slice(&d);
                calls += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (got, calls)
}

#[test]
fn data_held_for_closed_windows_is_bounded_over_the_layer() {
    let (mut h, conn, iss, base) = closed_window(TcpConfig {
        max_held_bytes: 1500,
        ..TcpConfig::default()
    });
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    check(&h.take_one(), Control::None, iss + 1, Some(base + 1000), 0);
    assert_eq!(h.layer.held_bytes(), 1000);
    // Inside the advertised window, but past what the layer holds: not acknowledged.
    h.input(peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::None,
        &DATA[1000..2000],
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(base + 1000), 0);
    assert_eq!(h.layer.counters().dropped_held_bound, 1);
    assert_eq!(h.layer.held_bytes(), 1000);
    conn.set_receive_window_open(true);
    h.poll();
    h.take();
    assert_eq!(h.layer.held_bytes(), 0, "delivered");
    // The peer sends it again; now it is taken at once.
    h.input(peer_seg(
        base + 1000,
        Some(iss + 1),
        Control::None,
        &DATA[1000..2000],
    ));
    let (got, _) = received(&h);
    assert_eq!(got, DATA[..2000]);
    assert_eq!(h.layer.held_bytes(), 0);
}

/// A segment of `DATA[at..at + len]` from the peer, in a receive buffer of `capacity`.
fn in_buffer(iss: u32, at: u32, len: usize, capacity: usize) -> IOBuf {
    let segment = bytes_of(&peer_seg(
        PEER_ISS + 1 + at,
        Some(iss + 1),
        Control::None,
        &DATA[at as usize..at as usize + len],
    ));
    let mut frame = IOBuf::with_capacity(capacity);
    frame.extend_from_slice(segment.as_slice()).unwrap();
    frame
}

#[test]
fn out_of_order_data_counts_against_the_layer_bound_by_its_buffers() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        max_held_bytes: 2000,
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    // Two 800-byte pieces out of order, each filling most of a 1,100-byte buffer: the
    // first keeps its buffer, the second would pass the bound and is dropped.
    for (at, counted) in [(100u32, 1100), (1000, 1100)] {
        h.input_buf(in_buffer(iss, at, 800, 1100));
        h.take();
        assert_eq!(h.layer.held_bytes(), counted);
    }
    assert_eq!(h.layer.counters().dropped_held_bound, 1);
    // The hole fills: the held piece is delivered and nothing stays counted.
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        &DATA[..100],
    ));
    let (got, _) = received(&h);
    assert_eq!(got, DATA[..900]);
    assert_eq!(h.layer.held_bytes(), 0);
}

#[test]
fn tiny_out_of_order_pieces_do_not_keep_their_buffers() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    // 500 one-byte pieces, every other byte, each in a 2 KiB buffer: a megabyte of
    // buffers if kept, 500 bytes once copied out.
    for i in 0..500u32 {
        h.input_buf(in_buffer(iss, 1 + 2 * i, 1, 2048));
    }
    h.take();
    assert_eq!(h.layer.held_bytes(), 500);
    assert_eq!(h.layer.counters().dropped_held_bound, 0);
}

#[test]
fn tiny_segments_held_for_a_closed_window_are_compacted() {
    let (mut h, conn, iss, _) = closed_window(TcpConfig::default());
    // 500 one-byte segments, each in a 2 KiB receive buffer of its own.
    for i in 0..500u32 {
        h.input_buf(in_buffer(iss, i, 1, 2048));
    }
    h.take();
    assert_eq!(h.layer.held_bytes(), 500);
    conn.set_receive_window_open(true);
    h.poll();
    let (got, calls) = received(&h);
    assert_eq!(got, DATA[..500]);
    assert_eq!(calls, 1, "held as one 2 KiB piece, not 500 receive buffers");
    assert_eq!(h.layer.held_bytes(), 0);
}

/// A passive open from a peer without options (MSS 536) and a window of two segments.
fn accept_small_window(h: &mut Harness) -> u32 {
    h.listen(8);
    h.input(Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS, None, Control::Syn, &[])
    });
    let iss = h.take_one().header.seq_number.0;
    h.input(Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    iss
}

fn peer_ack(ack: u32) -> Repr<'static> {
    Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS + 1, Some(ack), Control::None, &[])
    }
}

#[test]
fn a_closed_receive_window_does_not_hold_back_send_window_increased() {
    // An echo under back-pressure: it queued more than the window took, closed its
    // receive window, and waits for `send_window_increased` to reopen it. Data that
    // arrives meanwhile is held; the window news must still come.
    let mut h = Harness::quick_acks();
    let iss = accept_small_window(&mut h);
    let conn = h.conn();
    conn.send(chain(3000)).expect("send queues");
    conn.set_receive_window_open(false);
    h.poll();
    assert_eq!(
        h.take().iter().map(|s| s.payload.len()).sum::<usize>(),
        1072
    );
    // Held: the receive window is closed.
    h.input(Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, b"held")
    });
    let _ = h.take();
    let early = h.events();
    assert!(
        early.is_empty(),
        "data waits while the window is closed: {early:?}"
    );
    // The peer acknowledges everything sent and the queue drains into the window.
    h.input(Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS + 5, Some(iss + 1073), Control::None, &[])
    });
    let _ = h.take();
    h.input(Repr {
        window_len: 1072,
        ..peer_seg(PEER_ISS + 5, Some(iss + 2145), Control::None, &[])
    });
    let _ = h.take();
    assert_eq!(
        h.events(),
        [Ev::WindowIncreased],
        "told although data is held in front of it"
    );
    conn.set_receive_window_open(true);
    h.poll();
    assert_eq!(h.events(), [Ev::Receive(b"held".to_vec())], "then the data");
}

/// A peer with a window far larger than the send buffer (a hostile one that stops
/// acknowledging, or just a fast one): the application is offered the send buffer, no
/// more, and room again as the peer acknowledges.
#[test]
fn the_send_buffer_bounds_what_the_application_is_offered() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        send_buffer: 4000,
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    let conn = h.conn();
    // The peer's window (64 KiB with shift 7) and the first congestion window (10 full
    // segments) are both larger.
    h.input(Repr {
        window_len: 512,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    assert_eq!(conn.send_window(), 4000);
    let rest = conn.try_send(chain(10_000)).expect("open");
    assert_eq!(
        rest.len(),
        6000,
        "what the send buffer did not take comes back"
    );
    assert_eq!(conn.send_window(), 0);
    h.poll();
    let sent: usize = h.take().iter().map(|s| s.payload.len()).sum();
    assert_eq!(sent, 4000, "all of it in flight at once");
    // Nothing acknowledged: no room, however large the windows.
    assert_eq!(conn.try_send(rest).expect("open").len(), 6000);
    h.events();
    // 1000 bytes acknowledged: room for 1000, and the application hears of it.
    h.input(Repr {
        window_len: 512,
        ..peer_ack(iss + 1001)
    });
    assert_eq!(conn.send_window(), 1000);
    assert_eq!(h.events(), [Ev::WindowIncreased]);
    // Per connection: a larger buffer set while the application waits for room tells
    // it at once; a smaller one than what is queued offers nothing.
    assert_eq!(conn.try_send(chain(5000)).expect("open").len(), 4000);
    h.poll();
    h.take();
    conn.set_send_buffer(8000);
    h.poll();
    assert_eq!(conn.send_window(), 4000);
    assert_eq!(h.events(), [Ev::WindowIncreased]);
    conn.set_send_buffer(100);
    assert_eq!(conn.send_window(), 0);
}

#[test]
fn try_send_takes_the_window_and_send_queues_the_rest() {
    let mut h = Harness::quick_acks();
    let iss = accept_small_window(&mut h);
    let conn = h.conn();
    assert_eq!(conn.send_window(), 1072);
    let rest = conn.try_send(chain(3000)).expect("open");
    assert_eq!(rest.len(), 1928, "what the window did not take comes back");
    assert_eq!((conn.send_window(), conn.queued_bytes()), (0, 1072));
    h.poll();
    let segments = h.take();
    assert_eq!(segments.len(), 2);
    check(
        &segments[0],
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        536,
    );
    check(
        &segments[1],
        Control::None,
        iss + 537,
        Some(PEER_ISS + 1),
        536,
    );
    assert_eq!(conn.queued_bytes(), 0);
    // `send` never refuses: it queues.
    conn.send(rest).expect("send");
    assert_eq!((conn.send_window(), conn.queued_bytes()), (0, 1928));
    h.poll();
    assert!(h.take().is_empty());
    h.input(peer_ack(iss + 1073));
    assert_eq!(
        h.take().iter().map(|s| s.payload.len()).sum::<usize>(),
        1072
    );
    assert!(
        h.events().is_empty(),
        "no room yet: the queue fills the window"
    );
    h.input(peer_ack(iss + 2145));
    assert_eq!(h.take().iter().map(|s| s.payload.len()).sum::<usize>(), 856);
    assert_eq!(
        h.events(),
        [Ev::WindowIncreased],
        "the queue drained and room opened"
    );
    assert_eq!(conn.send_window(), 1072 - 856);
    h.input(peer_ack(iss + 3001));
    assert!(h.events().is_empty(), "told once per back-pressure episode");
    assert_eq!(conn.send_window(), 1072);
}

#[test]
fn send_from_queues_the_callers_chain_in_order_and_leaves_it_empty() {
    let mut h = Harness::quick_acks();
    let iss = accept_small_window(&mut h);
    let conn = h.conn();
    // A chain of two segments, sent from where the caller keeps it, then refilled.
    let mut out = IOBufChain::new();
    out.push_back(IOBuf::copy_from_slice(&DATA[..300]));
    out.push_back(IOBuf::copy_from_slice(&DATA[300..500]));
    conn.send_from(&mut out).expect("open");
    assert!(out.is_empty(), "its buffers went to the send queue");
    out.push_back(IOBuf::copy_from_slice(&DATA[500..900]));
    conn.send_from(&mut out).expect("open");
    assert!(out.is_empty());
    assert_eq!(conn.queued_bytes(), 900);
    h.poll();
    let segments = h.take();
    let sent: Vec<u8> = segments.iter().flat_map(|s| s.payload.to_vec()).collect();
    assert_eq!(sent, DATA[..900], "in order, nothing lost");
    check(
        &segments[0],
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        536,
    );
    // After `close`, refused like `send` — and the chain is emptied all the same.
    conn.close();
    out.push_back(IOBuf::copy_from_slice(b"late"));
    assert_eq!(conn.send_from(&mut out), Err(SendError::Closed));
    assert!(out.is_empty());
}

#[test]
fn fast_retransmit_and_newreno_partial_acks() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    let m = MSS as u32;
    conn.send(chain(10 * MSS)).expect("send");
    h.poll();
    assert_eq!(h.take().len(), 10, "initial window: 10 segments");
    let a = iss + 1;
    h.input(peer_seg(PEER_ISS + 1, Some(a + m), Control::None, &[]));
    assert!(h.take().is_empty());
    for _ in 0..2 {
        h.input(peer_seg(PEER_ISS + 1, Some(a + m), Control::None, &[]));
        assert!(h.take().is_empty(), "fewer than three duplicates");
    }
    h.input(peer_seg(PEER_ISS + 1, Some(a + m), Control::None, &[]));
    check(&h.take_one(), Control::None, a + m, Some(PEER_ISS + 1), MSS);
    assert_eq!(h.layer.counters().fast_retransmits, 1);
    // A partial ACK: the next hole is resent at once, no new duplicates needed.
    h.input(peer_seg(PEER_ISS + 1, Some(a + 4 * m), Control::None, &[]));
    check(
        &h.take_one(),
        Control::None,
        a + 4 * m,
        Some(PEER_ISS + 1),
        MSS,
    );
    // The full ACK ends recovery; no further retransmission.
    h.input(peer_seg(PEER_ISS + 1, Some(a + 10 * m), Control::None, &[]));
    assert!(h.take().is_empty());
    assert_eq!(h.layer.counters().retransmissions, 2);
    assert_eq!(h.layer.poll_at(), None);
}

#[test]
fn nagle_when_asked_for() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.set_nodelay(false);
    conn.send(chain(100)).expect("send");
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    conn.send(chain(100)).expect("send");
    conn.send(chain(100)).expect("send");
    h.poll();
    assert!(
        h.take().is_empty(),
        "a small segment is in flight: coalesce"
    );
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 101), Control::None, &[]));
    check(
        &h.take_one(),
        Control::None,
        iss + 101,
        Some(PEER_ISS + 1),
        200,
    );
    // The default: no delay.
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.send(chain(100)).expect("send");
    h.poll();
    conn.send(chain(100)).expect("send");
    h.poll();
    let segments = h.take();
    assert_eq!(segments.len(), 2);
    check(
        &segments[1],
        Control::None,
        iss + 101,
        Some(PEER_ISS + 1),
        100,
    );
}

#[test]
fn refused_output_is_a_loss() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    h.out.refuse = true;
    h.conn().send(chain(10)).expect("send");
    h.poll();
    assert_eq!(h.layer.counters().output_errors, 1);
    h.out.refuse = false;
    let due = h.layer.poll_at().expect("retransmission timer");
    h.advance_to(due);
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        10,
    );
}

#[test]
fn callbacks_are_not_reentrant_and_methods_work_inside_them() {
    let mut h = Harness::quick_acks();
    let order: Rc<RefCell<Vec<&'static str>>> = Rc::default();
    let inside = Rc::new(Cell::new(false));
    let (o1, o2, i1, i2) = (order.clone(), order.clone(), inside.clone(), inside.clone());
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 8, move |conn| {
            let (o1, o2, i1, i2) = (o1.clone(), o2.clone(), i1.clone(), i2.clone());
            let mut handler = FnHandler::new();
            handler.on_receive = Box::new(move |conn, data| {
                assert!(!i1.replace(true), "receive entered re-entrantly");
                o1.borrow_mut().push("receive");
                // Every method is callable here, and none calls back into us.
                conn.send(IOBufChain::from(data)).expect("echo");
                let _ = conn.send_window();
                let _ = conn.queued_bytes();
                conn.set_receive_window_open(false);
                conn.set_receive_window_open(true);
                conn.abort();
                assert_eq!(
                    conn.send(IOBufChain::new()),
                    Err(SendError::Failed(CloseReason::Aborted))
                );
                o1.borrow_mut().push("receive returns");
                i1.set(false);
            });
            handler.on_closed = Box::new(move |reason| {
                assert!(!i2.get(), "closed delivered inside another callback");
                assert_eq!(reason, CloseReason::Aborted);
                o2.borrow_mut().push("closed");
            });
            conn.set_handler(handler);
        })
        .expect("listen");
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, b"hi"));
    assert_eq!(*order.borrow(), ["receive", "receive returns", "closed"]);
    // The abort came before the data was acknowledged: the poll after the segment
    // sends only the RST.
    check(&h.take_one(), Control::Rst, iss + 1, Some(PEER_ISS + 3), 0);
}

/// Data is delivered before it is acknowledged, within the same `receive`: what the
/// application sends from its callback carries the ACK (one segment, not a pure ACK and
/// then the data).
#[test]
fn echo_from_inside_receive_carries_the_ack() {
    let mut h = Harness::quick_acks();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 8, |conn| {
            let mut handler = FnHandler::new();
            handler.on_receive = Box::new(|conn, data| {
                conn.send(IOBufChain::from(data)).expect("echo");
            });
            conn.set_handler(handler);
        })
        .expect("listen");
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"ping",
    ));
    let echo = h.take_one();
    check(&echo, Control::None, iss + 1, Some(PEER_ISS + 5), 4);
    assert_eq!(echo.payload.to_vec(), b"ping");
    h.poll();
    assert!(
        h.take().is_empty(),
        "nothing more: the ACK rode on the echo"
    );
}

/// Without a handler the data waits, and the ACK goes out at once.
#[test]
fn data_for_no_handler_is_acknowledged_at_once() {
    let mut h = Harness::quick_acks();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 8, |_conn| {})
        .expect("listen");
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"ping",
    ));
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(PEER_ISS + 5), 0);
}

#[test]
fn limited_transmit_and_sack_guided_recovery() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection(); // The peer offered SACK.
    let conn = h.conn();
    let m = MSS as u32;
    let a = iss + 1;
    conn.send(chain(12 * MSS)).expect("send");
    h.poll();
    assert_eq!(h.take().len(), 10, "initial window");
    // Segments 0 and 3 are lost; the peer reports what it holds.
    let dup = |blocks: &[(u32, u32)]| {
        let mut sack = [None; 4];
        for (slot, &(l, r)) in sack.iter_mut().zip(blocks) {
            *slot = Some((SeqNumber(a + l * m), SeqNumber(a + r * m)));
        }
        Repr {
            sack_ranges: sack,
            ..peer_seg(PEER_ISS + 1, Some(a), Control::None, &[])
        }
    };
    h.input(dup(&[(1, 2)]));
    check(
        &h.take_one(),
        Control::None,
        a + 10 * m,
        Some(PEER_ISS + 1),
        MSS,
    );
    h.input(dup(&[(1, 3)]));
    check(
        &h.take_one(),
        Control::None,
        a + 11 * m,
        Some(PEER_ISS + 1),
        MSS,
    );
    // The third duplicate: fast retransmit of the first hole.
    h.input(dup(&[(1, 3), (4, 5)]));
    check(&h.take_one(), Control::None, a, Some(PEER_ISS + 1), MSS);
    // The next duplicate goes to the next hole SACK revealed, not to new data.
    h.input(dup(&[(1, 3), (4, 6)]));
    check(
        &h.take_one(),
        Control::None,
        a + 3 * m,
        Some(PEER_ISS + 1),
        MSS,
    );
    h.input(dup(&[(1, 3), (4, 7)]));
    assert!(h.take().is_empty(), "no holes left below the SACKed data");
    h.input(peer_seg(PEER_ISS + 1, Some(a + 12 * m), Control::None, &[]));
    assert!(h.take().is_empty());
    let c = h.layer.counters();
    assert_eq!(
        (c.fast_retransmits, c.retransmissions, c.timeouts),
        (1, 2, 0)
    );
}

#[test]
fn layer_calls_from_inside_callbacks() {
    let mut h = Harness::quick_acks();
    let layer = h.layer.clone();
    let outcome: Rc<RefCell<Vec<Result<(), TcpErrorKind>>>> = Rc::default();
    let record = outcome.clone();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 8, move |conn| {
            conn.set_handler(Logger(Log::default()));
            // Open a second connection and a second listener from inside the callback.
            let record = record.clone();
            layer
                .connect(
                    SocketAddrV4::new(US, 0),
                    SocketAddrV4::new(PEER, 9),
                    move |r| record.borrow_mut().push(r.map(|_| ())),
                )
                .expect("connect inside a callback");
            layer
                .listen(SocketAddrV4::new(US, 81), 1, |_| {})
                .expect("listen inside a callback");
        })
        .expect("listen");
    // The handshake's ACK runs the accept callback; the poll after it sends the SYN of
    // the connection opened there.
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    let syn = h.take_one();
    assert_eq!((syn.header.control, syn.header.dst_port), (Control::Syn, 9));
    assert!(outcome.borrow().is_empty(), "still connecting");
}

#[test]
fn early_retransmit_when_everything_after_the_hole_is_sacked() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let m = MSS as u32;
    let a = iss + 1;
    h.conn().send(chain(3 * MSS)).expect("send");
    h.poll();
    assert_eq!(h.take().len(), 3);
    // Segment 0 lost; 1 and 2 arrived: nothing more will come to make three duplicates.
    h.input(Repr {
        sack_ranges: [
            Some((SeqNumber(a + m), SeqNumber(a + 3 * m))),
            None,
            None,
            None,
        ],
        ..peer_seg(PEER_ISS + 1, Some(a), Control::None, &[])
    });
    check(&h.take_one(), Control::None, a, Some(PEER_ISS + 1), MSS);
    assert_eq!(h.layer.counters().fast_retransmits, 1);
}

#[test]
fn new_sack_information_makes_a_duplicate_even_if_the_window_moved() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let m = MSS as u32;
    let a = iss + 1;
    h.conn().send(chain(10 * MSS)).expect("send");
    h.poll();
    assert_eq!(h.take().len(), 10);
    for (i, window) in [(2u32, 600u16), (3, 601), (4, 602)] {
        h.input(Repr {
            window_len: window, // Linux moves its window as its application reads.
            sack_ranges: [
                Some((SeqNumber(a + m), SeqNumber(a + i * m))),
                None,
                None,
                None,
            ],
            ..peer_seg(PEER_ISS + 1, Some(a), Control::None, &[])
        });
    }
    check(&h.take_one(), Control::None, a, Some(PEER_ISS + 1), MSS);
    assert_eq!(h.layer.counters().fast_retransmits, 1);
}

#[test]
fn fast_retransmit_never_carries_bytes_not_sent_before() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    let tiny = |r: Repr<'static>| Repr {
        window_len: 100,
        ..r
    };
    h.input(tiny(peer_seg(PEER_ISS, None, Control::Syn, &[])));
    let iss = h.take_one().header.seq_number.0;
    h.input(tiny(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        &[],
    )));
    let conn = h.conn();
    conn.send(chain(100)).expect("send");
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    conn.send(chain(1000)).expect("send"); // Queued: the window is full.
    h.poll();
    assert!(h.take().is_empty());
    for _ in 0..3 {
        h.input(tiny(peer_seg(
            PEER_ISS + 1,
            Some(iss + 1),
            Control::None,
            &[],
        )));
    }
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
}

#[test]
fn an_old_segment_still_delivers_a_new_ack() {
    // A peer that went back to resend (passt rewinds to the last ACK it saw) carries its
    // newest ACK only on data we already have, or on a pure ACK numbered from the rewound
    // point: the ACK must be taken, or a peer with nothing new to send leaves our data
    // unacknowledged for good (it ignores our retransmissions of what it has).
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let base = PEER_ISS + 1;
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..1000]));
    h.take();
    let conn = h.conn();
    conn.send(chain(500)).expect("send");
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(base + 1000),
        500,
    );
    // The peer resends its first 1000 bytes, now acknowledging ours.
    h.input(peer_seg(
        base,
        Some(iss + 501),
        Control::None,
        &DATA[..1000],
    ));
    check(
        &h.take_one(),
        Control::None,
        iss + 501,
        Some(base + 1000),
        0,
    );
    assert_eq!(h.layer.poll_at(), None, "all we sent is acknowledged");
    // The same from a pure ACK numbered before what we received.
    conn.send(chain(300)).expect("send");
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 501,
        Some(base + 1000),
        300,
    );
    h.input(peer_seg(base + 500, Some(iss + 801), Control::None, &[]));
    check(
        &h.take_one(),
        Control::None,
        iss + 801,
        Some(base + 1000),
        0,
    );
    assert_eq!(h.layer.poll_at(), None, "all we sent is acknowledged");
    // An old segment acknowledging nothing new, or data never sent, moves nothing.
    h.input(peer_seg(
        base,
        Some(iss + 801),
        Control::None,
        &DATA[..1000],
    ));
    h.input(peer_seg(
        base,
        Some(iss + 5000),
        Control::None,
        &DATA[..1000],
    ));
    assert_eq!(h.layer.poll_at(), None);
}

#[test]
fn an_ack_past_a_closed_window_is_still_taken() {
    // passt sends a segment past our window as it closes; from then on its segments,
    // pure ACKs too, start beyond `rcv_nxt` and outside the zero window. Their ACKs must
    // be taken (RFC 9293's allowance for a zero window), or our data stays
    // unacknowledged, an echo's queue never drains and the window never reopens.
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        receive_window: 3000,
        max_receive_window: 3000,
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    let conn = h.conn();
    let base = PEER_ISS + 1;
    conn.send(chain(500)).expect("send");
    h.poll();
    check(&h.take_one(), Control::None, iss + 1, Some(base), 500);
    conn.set_receive_window_open(false);
    h.input(peer_seg(base, Some(iss + 1), Control::None, &DATA[..3000]));
    assert_eq!(h.take_one().header.window_len, 0, "closed and full");
    // The peer's next segment starts 1096 bytes on (what it sent past the window is
    // lost) and acknowledges our 500 bytes.
    h.input(peer_seg(base + 4096, Some(iss + 501), Control::None, &[]));
    let answer = h.take_one();
    check(&answer, Control::None, iss + 501, Some(base + 3000), 0);
    assert_eq!(answer.header.window_len, 0, "still closed: no data taken");
    assert_eq!(h.layer.poll_at(), None, "all we sent is acknowledged");
    // Data past the closed window is still not taken.
    h.input(peer_seg(
        base + 4096,
        Some(iss + 501),
        Control::None,
        b"late",
    ));
    check(
        &h.take_one(),
        Control::None,
        iss + 501,
        Some(base + 3000),
        0,
    );
    // Far beyond any window we could have offered: ignored, ACK and all.
    conn.send(chain(100)).expect("send");
    h.poll();
    let _ = h.take();
    h.input(peer_seg(
        base + 4_000_000,
        Some(iss + 601),
        Control::None,
        &[],
    ));
    let _ = h.take();
    assert!(
        h.layer.poll_at().is_some(),
        "the 100 bytes are still in flight"
    );
    conn.set_receive_window_open(true);
    h.poll();
    let update = h.take_one();
    assert_eq!(update.header.window_len, 3000, "the window reopens");
}
