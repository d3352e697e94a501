//! Handshakes, closes and resets: every RFC 9293 state transition.

use super::*;
use crate::tcp::State;
use ebb_core::iobuf::IOBufChain;

#[test]
fn passive_open_three_way_handshake() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_syn());
    let syn_ack = h.take_one();
    let iss = syn_ack.header.seq_number.0;
    check(&syn_ack, Control::Syn, iss, Some(PEER_ISS + 1), 0);
    assert_eq!(
        syn_ack.header.max_seg_size,
        Some(MSS as u16),
        "our MSS = the output's"
    );
    assert_eq!(
        syn_ack.header.window_scale,
        Some(7),
        "scale for a 4 MiB window"
    );
    assert!(syn_ack.header.sack_permitted);
    assert_eq!(
        syn_ack.header.window_len, 65535,
        "a SYN's window is never scaled"
    );
    assert!(
        h.conns.borrow().is_empty(),
        "not accepted before the handshake completes"
    );
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    assert!(h.take().is_empty());
    assert_eq!(h.conn().state(), State::Established);
    assert_eq!(h.layer.counters().connections_opened, 1);
}

#[test]
fn syn_ack_mirrors_only_offered_options() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_seg(PEER_ISS, None, Control::Syn, &[]));
    let syn_ack = h.take_one();
    assert_eq!(syn_ack.header.window_scale, None);
    assert!(!syn_ack.header.sack_permitted);
    assert_eq!(syn_ack.header.max_seg_size, Some(MSS as u16));
}

#[test]
fn retransmitted_syn_gets_the_syn_ack_again() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_syn());
    let first = h.take_one();
    h.input(peer_syn());
    let second = h.take_one();
    assert_eq!(first.header, second.header);
}

#[test]
fn active_open_three_way_handshake() {
    let mut h = Harness::quick_acks();
    h.connect();
    assert_eq!(
        h.layer.poll_at(),
        Some(Instant::ZERO),
        "the SYN is pending output"
    );
    h.poll();
    let syn = h.take_one();
    let iss = syn.header.seq_number.0;
    check(&syn, Control::Syn, iss, None, 0);
    assert_eq!(syn.header.window_scale, Some(7));
    assert!(syn.header.sack_permitted);
    assert_eq!(syn.header.max_seg_size, Some(MSS as u16));
    let syn_ack = Repr {
        src_port: PEER_PORT,
        dst_port: US_PORT,
        ..peer_syn()
    };
    h.input(Repr {
        ack_number: Some(SeqNumber(iss + 1)),
        ..syn_ack
    });
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(*h.connect_results.borrow(), [Ok(())]);
    assert_eq!(h.conn().state(), State::Established);
}

#[test]
fn simultaneous_open() {
    let mut h = Harness::quick_acks();
    h.connect();
    h.poll();
    let iss = h.take_one().header.seq_number.0;
    // The peer's SYN crosses ours.
    h.input(peer_syn());
    let syn_ack = h.take_one();
    check(&syn_ack, Control::Syn, iss, Some(PEER_ISS + 1), 0);
    assert!(h.connect_results.borrow().is_empty());
    // The peer's SYN-ACK (answering our SYN) completes it.
    h.input(Repr {
        ack_number: Some(SeqNumber(iss + 1)),
        ..peer_syn()
    });
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(*h.connect_results.borrow(), [Ok(())]);
    assert_eq!(h.conn().state(), State::Established);
}

#[test]
fn simultaneous_open_completed_by_a_plain_ack() {
    let mut h = Harness::quick_acks();
    h.connect();
    h.poll();
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_syn());
    h.take_one();
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    assert_eq!(*h.connect_results.borrow(), [Ok(())]);
}

#[test]
fn connection_refused_by_reset() {
    let mut h = Harness::quick_acks();
    h.connect();
    h.poll();
    let iss = h.take_one().header.seq_number.0;
    // A RST that does not acknowledge our SYN is ignored.
    h.input(peer_seg(0, Some(iss + 7), Control::Rst, &[]));
    assert!(h.connect_results.borrow().is_empty());
    assert!(h.take().is_empty(), "no answer to a RST");
    h.input(peer_seg(0, Some(iss + 1), Control::Rst, &[]));
    assert_eq!(
        *h.connect_results.borrow(),
        [Err(TcpErrorKind::ConnectionRefused)]
    );
    assert_eq!(h.layer.connection_count(), 0);
}

#[test]
fn syn_sent_answers_a_bad_ack_with_reset() {
    let mut h = Harness::quick_acks();
    h.connect();
    h.poll();
    let iss = h.take_one().header.seq_number.0;
    h.input(Repr {
        ack_number: Some(SeqNumber(iss + 100)),
        ..peer_syn()
    });
    check(&h.take_one(), Control::Rst, iss + 100, None, 0);
    assert!(h.connect_results.borrow().is_empty(), "still connecting");
}

#[test]
fn no_listener_resets() {
    let mut h = Harness::quick_acks();
    // A SYN (no ACK): RST+ACK with seq 0 acknowledging the SYN.
    h.input(peer_syn());
    check(&h.take_one(), Control::Rst, 0, Some(PEER_ISS + 1), 0);
    // Data with an ACK: RST from its ACK number.
    h.input(peer_seg(5, Some(777), Control::None, b"hello"));
    check(&h.take_one(), Control::Rst, 777, None, 0);
    // A RST: nothing.
    h.input(peer_seg(5, Some(777), Control::Rst, &[]));
    assert!(h.take().is_empty());
    let c = h.layer.counters();
    assert_eq!((c.dropped_no_listener, c.resets_sent), (3, 2));
}

#[test]
fn listener_resets_a_stray_ack() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_seg(5, Some(777), Control::None, &[]));
    check(&h.take_one(), Control::Rst, 777, None, 0);
}

#[test]
fn syn_received_resets_an_unacceptable_ack() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 50), Control::None, &[]));
    check(&h.take_one(), Control::Rst, iss + 50, None, 0);
    assert!(h.conns.borrow().is_empty());
}

#[test]
fn reset_in_syn_received_returns_to_listen() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_syn());
    h.take_one();
    h.input(peer_seg(PEER_ISS + 1, None, Control::Rst, &[]));
    assert_eq!(h.layer.connection_count(), 0);
    assert!(h.events().is_empty(), "never handed out: nobody to tell");
    // The listener still works.
    h.input(peer_syn());
    assert_eq!(h.take_one().header.control, Control::Syn);
}

#[test]
fn active_close_fin_wait_1_2_time_wait() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        msl: Duration::from_secs(1),
        ..TcpConfig::default()
    });
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.close();
    assert!(h.layer.needs_poll());
    h.poll();
    check(&h.take_one(), Control::Fin, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(conn.state(), State::FinWait1);
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 2), Control::None, &[]));
    assert_eq!(conn.state(), State::FinWait2);
    assert!(h.take().is_empty());
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 2), Control::Fin, &[]));
    check(&h.take_one(), Control::None, iss + 2, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::TimeWait);
    assert_eq!(
        h.events(),
        [Ev::PeerClosed, Ev::Closed(CloseReason::Normal)]
    );
    assert_eq!(h.layer.poll_at(), Some(ms(2000)), "2 x MSL");
    // A retransmitted FIN in TIME-WAIT is acknowledged again and restarts the timer.
    h.advance_to(ms(500));
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 2), Control::Fin, &[]));
    check(&h.take_one(), Control::None, iss + 2, Some(PEER_ISS + 2), 0);
    assert_eq!(h.layer.poll_at(), Some(ms(2500)));
    h.advance_to(ms(2499));
    assert_eq!(h.layer.connection_count(), 1);
    h.advance_to(ms(2500));
    assert_eq!(h.layer.connection_count(), 0, "TIME-WAIT expired");
    assert_eq!(conn.state(), State::Closed);
    assert!(h.events().is_empty(), "closed was reported once");
    assert_eq!(h.layer.counters().connections_closed, 1);
}

#[test]
fn fin_wait_1_to_time_wait_on_fin_ack() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.close();
    h.poll();
    h.take_one();
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 2), Control::Fin, &[]));
    check(&h.take_one(), Control::None, iss + 2, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::TimeWait);
}

#[test]
fn passive_close_close_wait_last_ack() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::Fin, &[]));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::CloseWait);
    assert_eq!(h.events(), [Ev::PeerClosed]);
    // We may still send in CLOSE-WAIT.
    conn.send(IOBufChain::from(IOBuf::copy_from_slice(b"bye")))
        .expect("send");
    conn.close();
    h.poll();
    let segments = h.take();
    assert_eq!(segments.len(), 2);
    check(&segments[0], Control::None, iss + 1, Some(PEER_ISS + 2), 3);
    check(&segments[1], Control::Fin, iss + 4, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::LastAck);
    h.input(peer_seg(PEER_ISS + 2, Some(iss + 5), Control::None, &[]));
    assert_eq!(conn.state(), State::Closed);
    assert_eq!(h.events(), [Ev::Closed(CloseReason::Normal)]);
    assert_eq!(h.layer.connection_count(), 0);
}

/// A RST in LAST-ACK (the ACK of our FIN lost, the peer already gone) ends the
/// connection as closed, not reset: both FINs were exchanged (RFC 9293 §3.10.7.4).
#[test]
fn a_reset_in_last_ack_is_a_normal_close() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::Fin, &[]));
    h.take();
    assert_eq!(h.events(), [Ev::PeerClosed]);
    conn.close();
    h.poll();
    check(&h.take_one(), Control::Fin, iss + 1, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::LastAck);
    h.input(peer_seg(PEER_ISS + 2, None, Control::Rst, &[]));
    assert_eq!(conn.state(), State::Closed);
    assert_eq!(h.events(), [Ev::Closed(CloseReason::Normal)]);
    let counters = h.layer.counters();
    assert_eq!(
        (counters.connections_closed, counters.connections_reset),
        (1, 0)
    );
}

#[test]
fn default_peer_closed_closes_our_side() {
    let mut h = Harness::quick_acks();
    let log: Log = Rc::default();
    let log2 = log.clone();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 8, move |conn| {
            // A handler that keeps TcpHandler's default `peer_closed` (close).
            struct DefaultCloser(Log);
            impl TcpHandler for DefaultCloser {
                fn receive(&mut self, _: &dyn TcpConnection, _: IOBuf) {}
                fn closed(&mut self, reason: CloseReason) {
                    self.0.borrow_mut().push(Ev::Closed(reason));
                }
            }
            conn.set_handler(DefaultCloser(log2.clone()));
        })
        .expect("listen");
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::Fin, &[]));
    // The FIN is acknowledged at once; the close from `peer_closed` goes out on the poll
    // after it.
    let sent = h.take();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    check(&sent[0], Control::None, iss + 1, Some(PEER_ISS + 2), 0);
    check(&sent[1], Control::Fin, iss + 1, Some(PEER_ISS + 2), 0);
    h.input(peer_seg(PEER_ISS + 2, Some(iss + 2), Control::None, &[]));
    assert_eq!(*log.borrow(), [Ev::Closed(CloseReason::Normal)]);
}

#[test]
fn simultaneous_close_through_closing() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.close();
    h.poll();
    check(&h.take_one(), Control::Fin, iss + 1, Some(PEER_ISS + 1), 0);
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::Fin, &[]));
    check(&h.take_one(), Control::None, iss + 2, Some(PEER_ISS + 2), 0);
    assert_eq!(conn.state(), State::Closing);
    h.input(peer_seg(PEER_ISS + 2, Some(iss + 2), Control::None, &[]));
    assert_eq!(conn.state(), State::TimeWait);
    assert_eq!(
        h.events(),
        [Ev::PeerClosed, Ev::Closed(CloseReason::Normal)]
    );
}

#[test]
fn close_sends_queued_data_before_fin() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.send(IOBufChain::from(IOBuf::from_vec(alloc::vec![7u8; 2000])))
        .expect("send");
    conn.close();
    assert_eq!(
        conn.send(IOBufChain::new()),
        Err(ebb_core::net::SendError::Closed)
    );
    h.poll();
    let segments = h.take();
    assert_eq!(segments.len(), 3);
    check(
        &segments[0],
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        MSS,
    );
    check(
        &segments[1],
        Control::None,
        iss + 1 + MSS as u32,
        Some(PEER_ISS + 1),
        2000 - MSS,
    );
    check(
        &segments[2],
        Control::Fin,
        iss + 2001,
        Some(PEER_ISS + 1),
        0,
    );
}

#[test]
fn peer_reset_in_established() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    // Outside the window: dropped silently.
    h.input(peer_seg(PEER_ISS + 1 + 10_000_000, None, Control::Rst, &[]));
    assert!(h.take().is_empty());
    // In the window but not exact: challenge ACK (RFC 5961).
    h.input(peer_seg(PEER_ISS + 100, None, Control::Rst, &[]));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(conn.state(), State::Established);
    assert_eq!(h.layer.counters().challenge_acks, 1);
    // Exact: reset.
    h.input(peer_seg(PEER_ISS + 1, None, Control::Rst, &[]));
    assert!(h.take().is_empty());
    assert_eq!(conn.state(), State::Closed);
    assert_eq!(h.events(), [Ev::Closed(CloseReason::Reset)]);
    assert_eq!(h.layer.connection_count(), 0);
    assert_eq!(
        conn.send(IOBufChain::new()),
        Err(ebb_core::net::SendError::Failed(CloseReason::Reset))
    );
}

#[test]
fn syn_in_established_gets_a_challenge_ack() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    h.input(peer_seg(PEER_ISS + 5, None, Control::Syn, &[]));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(h.conn().state(), State::Established);
}

#[test]
fn out_of_window_data_is_acknowledged_and_dropped() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    h.input(peer_seg(
        PEER_ISS + 1 + 1_000_000,
        Some(iss + 1),
        Control::None,
        b"far",
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    // An old duplicate too.
    h.input(peer_seg(
        PEER_ISS - 10,
        Some(iss + 1),
        Control::None,
        b"old",
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(h.layer.counters().dropped_out_of_window, 2);
    assert!(h.events().is_empty());
}

#[test]
fn ack_of_unsent_data_is_answered_and_dropped() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1000),
        Control::None,
        b"data",
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
    assert!(h.events().is_empty(), "the segment was dropped");
}

#[test]
fn abort_sends_reset_and_reports_aborted() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.send(IOBufChain::from(IOBuf::copy_from_slice(b"lost")))
        .expect("send");
    conn.abort();
    h.poll();
    check(&h.take_one(), Control::Rst, iss + 1, Some(PEER_ISS + 1), 0);
    assert_eq!(h.events(), [Ev::Closed(CloseReason::Aborted)]);
    assert_eq!(h.layer.connection_count(), 0);
    assert_eq!(h.layer.counters().connections_aborted, 1);
    conn.abort();
    h.poll();
    assert!(
        h.take().is_empty() && h.events().is_empty(),
        "closed exactly once"
    );
}

#[test]
fn syn_queue_bound_drops_and_counts() {
    let mut h = Harness::new(TcpConfig {
        max_half_open_per_listener: 2,
        ..TcpConfig::default()
    });
    h.listen(8);
    for port in 0..5u16 {
        h.input(Repr {
            src_port: 1000 + port,
            ..peer_syn()
        });
    }
    assert_eq!(h.take().len(), 2, "two SYN-ACKs");
    assert_eq!(h.layer.counters().dropped_syn_queue_full, 3);
    assert_eq!(h.layer.connection_count(), 2);
}

#[test]
fn backlog_bound_holds_handshakes_until_a_handler_is_set() {
    let mut h = Harness::quick_acks();
    let pending: Rc<RefCell<Vec<TcpConn>>> = Rc::default();
    let stash = pending.clone();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 1, move |conn| {
            stash.borrow_mut().push(conn); // No handler yet.
        })
        .expect("listen");
    let mut isses = Vec::new();
    for port in [1000u16, 1001] {
        h.input(Repr {
            src_port: port,
            ..peer_syn()
        });
        isses.push(h.take_one().header.seq_number.0);
    }
    h.input(Repr {
        src_port: 1000,
        ..peer_seg(PEER_ISS + 1, Some(isses[0] + 1), Control::None, &[])
    });
    assert_eq!(pending.borrow().len(), 1);
    h.input(Repr {
        src_port: 1001,
        ..peer_seg(PEER_ISS + 1, Some(isses[1] + 1), Control::None, &[])
    });
    assert_eq!(
        pending.borrow().len(),
        1,
        "backlog full: the second waits half-open"
    );
    assert_eq!(h.layer.counters().dropped_backlog_full, 1);
    // Handling the first frees the slot; the peer's next ACK completes the second.
    let log: Log = Rc::default();
    pending.borrow()[0].set_handler(Logger(log.clone()));
    h.input(Repr {
        src_port: 1001,
        ..peer_seg(PEER_ISS + 1, Some(isses[1] + 1), Control::None, &[])
    });
    assert_eq!(pending.borrow().len(), 2);
}

#[test]
fn data_before_a_handler_waits_for_it() {
    let mut h = Harness::quick_acks();
    let pending: Rc<RefCell<Vec<TcpConn>>> = Rc::default();
    let stash = pending.clone();
    h.layer
        .listen(SocketAddrV4::new(US, US_PORT), 4, move |conn| {
            stash.borrow_mut().push(conn);
        })
        .expect("listen");
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"early",
    ));
    let ack = h.take_one();
    check(&ack, Control::None, iss + 1, Some(PEER_ISS + 6), 0);
    let log: Log = Rc::default();
    pending.borrow()[0].set_handler(Logger(log.clone()));
    h.poll();
    assert_eq!(*log.borrow(), [Ev::Receive(b"early".to_vec())]);
}

#[test]
fn connect_bounds_and_ports() {
    let h = Harness::new(TcpConfig {
        max_connections: 1,
        ..TcpConfig::default()
    });
    let remote = SocketAddrV4::new(PEER, 9);
    h.layer
        .connect(SocketAddrV4::new(US, 0), remote, |_| {})
        .expect("first");
    assert_eq!(
        h.layer.connect(SocketAddrV4::new(US, 0), remote, |_| {}),
        Err(TcpErrorKind::OutOfResources)
    );
    let h = Harness::quick_acks();
    h.layer
        .connect(SocketAddrV4::new(US, 5), remote, |_| {})
        .expect("first");
    assert_eq!(
        h.layer.connect(SocketAddrV4::new(US, 5), remote, |_| {}),
        Err(TcpErrorKind::AddressInUse)
    );
}

#[test]
fn ephemeral_ports_are_keyed_unpredictable_and_never_reused_while_held() {
    // The local ports of `n` connections to `remote` from a layer seeded with `seed`.
    let ports = |seed: [u64; 2], remote: SocketAddrV4, n: usize| {
        let mut h = Harness::new(TcpConfig {
            isn_seed: seed,
            ..TcpConfig::default()
        });
        let mut ports = Vec::new();
        for _ in 0..n {
            h.layer
                .connect(SocketAddrV4::new(US, 0), remote, |_| {})
                .expect("a free port");
            // One SYN per connection, in connect order.
            h.poll();
            ports.push(h.take_one().header.src_port);
        }
        ports
    };
    let remote = SocketAddrV4::new(PEER, 9);
    let a = ports([1, 2], remote, 50);
    assert_eq!(a.len(), 50, "one SYN per connection");
    assert!(a.iter().all(|&p| p >= 49152), "in the dynamic range: {a:?}");
    let mut distinct = a.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 50, "no port reused while held");
    assert_eq!(a, ports([1, 2], remote, 50), "deterministic for a secret");
    assert_ne!(
        a[0],
        ports([3, 4], remote, 1)[0],
        "the secret moves the start"
    );
    assert_ne!(
        a[0],
        ports([1, 2], SocketAddrV4::new(PEER, 10), 1)[0],
        "so does the peer"
    );
    assert_ne!(a[0], 49152, "not the first port of the range");
}

#[test]
fn isn_depends_on_tuple_and_seed() {
    let isn = |seed: [u64; 2], port: u16| {
        let mut h = Harness::new(TcpConfig {
            isn_seed: seed,
            ..TcpConfig::default()
        });
        h.listen(8);
        h.input(Repr {
            src_port: port,
            ..peer_syn()
        });
        h.take_one().header.seq_number.0
    };
    assert_eq!(
        isn([1, 2], 1000),
        isn([1, 2], 1000),
        "deterministic for a seed"
    );
    assert_ne!(isn([1, 2], 1000), isn([1, 2], 1001), "differs per tuple");
    assert_ne!(isn([1, 2], 1000), isn([3, 4], 1000), "differs per secret");
}

#[test]
fn malformed_segments_are_counted_and_dropped() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    // SYN and FIN together.
    let mut bytes = bytes_of(&peer_syn()).as_slice().to_vec();
    bytes[13] |= 0x01;
    h.input_buf(IOBuf::from_vec(bytes));
    // An option with length 0.
    let mut bytes = bytes_of(&peer_syn()).as_slice().to_vec();
    bytes[21] = 0;
    h.input_buf(IOBuf::from_vec(bytes));
    // Too short for a header.
    h.input_buf(IOBuf::from_vec(alloc::vec![0u8; 10]));
    assert!(h.take().is_empty());
    assert_eq!(h.layer.counters().dropped_bad_options, 3);
    assert_eq!(h.layer.connection_count(), 0);
}

#[test]
fn connection_table_bound_drops_syns() {
    let mut h = Harness::new(TcpConfig {
        max_connections: 1,
        ..TcpConfig::default()
    });
    h.listen(8);
    h.input(peer_syn());
    h.input(Repr {
        src_port: 1234,
        ..peer_syn()
    });
    assert_eq!(h.take().len(), 1, "one SYN-ACK");
    assert_eq!(h.layer.counters().dropped_table_full, 1);
}

#[test]
fn acks_for_unacceptable_segments_are_rate_limited() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    for _ in 0..25 {
        h.input(peer_seg(
            PEER_ISS - 100,
            Some(iss + 1),
            Control::None,
            b"old",
        ));
    }
    assert_eq!(h.take().len(), 10, "ten per 100 ms");
    assert_eq!(h.layer.counters().acks_rate_limited, 15);
    h.now = h.now + Duration::from_millis(100);
    h.input(peer_seg(
        PEER_ISS - 100,
        Some(iss + 1),
        Control::None,
        b"old",
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 1), 0);
}
