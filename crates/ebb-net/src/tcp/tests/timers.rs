//! Every timer: retransmission with backoff and Karn's rule, SYN retries, give-up,
//! zero-window probes, delayed ACKs.

use super::*;
use crate::tcp::State;
use ebb_core::iobuf::IOBufChain;

/// A passive open whose handshake ACK arrives `rtt_ms` after our SYN-ACK (one RTT
/// sample: SRTT = rtt, RTTVAR = rtt / 2). Returns our ISS.
fn accept_with_rtt(h: &mut Harness, rtt_ms: u64) -> u32 {
    h.listen(8);
    h.input(peer_syn());
    let iss = h.take_one().header.seq_number.0;
    h.now = h.now + Duration::from_millis(rtt_ms);
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    iss
}

fn send(conn: &TcpConn, n: usize) {
    conn.send(IOBufChain::from(IOBuf::from_vec(alloc::vec![1u8; n])))
        .expect("send");
}

/// Delayed ACKs and tail loss probes off: the retransmission timer alone.
fn rto_only() -> Harness {
    Harness::new(TcpConfig {
        delayed_ack: None,
        tail_loss_probe: false,
        ..TcpConfig::default()
    })
}

#[test]
fn retransmission_backoff_and_karn() {
    let mut h = rto_only();
    let iss = accept_with_rtt(&mut h, 100); // RTO = 100 + 4 * 50 = 300 ms.
    let conn = h.conn();
    h.now = ms(1000);
    send(&conn, 100);
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(h.layer.poll_at(), Some(ms(1300)));
    h.advance_to(ms(1300));
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(h.layer.poll_at(), Some(ms(1900)), "backed off to 600 ms");
    h.advance_to(ms(1900));
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(h.layer.poll_at(), Some(ms(3100)), "1200 ms");
    assert_eq!(h.layer.counters().retransmissions, 2);
    // The ACK is ambiguous (which transmission?): Karn says take no sample, keep the
    // backed-off RTO.
    h.now = ms(2000);
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 101), Control::None, &[]));
    assert_eq!(h.layer.poll_at(), None, "nothing outstanding");
    send(&conn, 100);
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 101,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(
        h.layer.poll_at(),
        Some(ms(3200)),
        "still 1200 ms: no sample taken"
    );
    // A fresh segment's ACK is a valid sample (100 ms): RTO = 250 ms, backoff cleared.
    h.now = ms(2100);
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 201), Control::None, &[]));
    send(&conn, 100);
    h.poll();
    h.take_one();
    assert_eq!(h.layer.poll_at(), Some(ms(2350)));
}

#[test]
fn retransmissions_give_up_with_timed_out() {
    let mut h = Harness::new(TcpConfig {
        delayed_ack: None,
        tail_loss_probe: false,
        max_retransmissions: 3,
        ..TcpConfig::default()
    });
    accept_with_rtt(&mut h, 100);
    let conn = h.conn();
    send(&conn, 10);
    h.poll();
    h.take();
    h.advance_to(ms(60_000));
    assert_eq!(h.take().len(), 3, "three retransmissions, then give up");
    assert_eq!(h.events(), [Ev::Closed(CloseReason::TimedOut)]);
    assert_eq!(conn.state(), State::Closed);
    assert_eq!(h.layer.connection_count(), 0);
    let c = h.layer.counters();
    assert_eq!((c.timeouts, c.connections_timed_out), (3, 1));
}

#[test]
fn syn_retries_back_off_then_connect_times_out() {
    let mut h = Harness::quick_acks();
    h.connect();
    h.poll();
    let iss = h.take_one().header.seq_number.0;
    let mut resent_at = Vec::new();
    while h.connect_results.borrow().is_empty() {
        let due = h.layer.poll_at().expect("a timer");
        h.advance_to(due);
        for segment in h.take() {
            check(&segment, Control::Syn, iss, None, 0);
            resent_at.push(h.now.as_nanos() / 1_000_000);
        }
    }
    assert_eq!(resent_at, [1000, 3000, 7000, 15_000, 31_000, 63_000]);
    assert_eq!(
        h.now,
        ms(123_000),
        "the last wait is capped at max_rto (60 s)"
    );
    assert_eq!(*h.connect_results.borrow(), [Err(TcpErrorKind::TimedOut)]);
    assert_eq!(h.layer.connection_count(), 0);
}

#[test]
fn syn_ack_is_retransmitted_and_half_open_expires() {
    let mut h = Harness::quick_acks();
    h.listen(8);
    h.input(peer_syn());
    let syn_ack = h.take_one();
    h.advance_to(ms(1000));
    assert_eq!(h.take_one().header, syn_ack.header);
    h.advance_to(ms(200_000));
    assert_eq!(h.take().len(), 5, "six SYN-ACK retransmissions in all");
    assert_eq!(
        h.layer.connection_count(),
        0,
        "the half-open connection is gone"
    );
    assert!(h.events().is_empty());
}

#[test]
fn fin_is_retransmitted() {
    let mut h = Harness::quick_acks();
    let iss = accept_with_rtt(&mut h, 100);
    h.conn().close();
    h.poll();
    check(&h.take_one(), Control::Fin, iss + 1, Some(PEER_ISS + 1), 0);
    h.advance(Duration::from_millis(300));
    check(&h.take_one(), Control::Fin, iss + 1, Some(PEER_ISS + 1), 0);
}

#[test]
fn zero_window_probe_with_backoff() {
    let mut h = Harness::quick_acks();
    let iss = accept_with_rtt(&mut h, 100);
    let conn = h.conn();
    h.input(Repr {
        window_len: 0,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    assert_eq!(conn.send_window(), 0);
    send(&conn, 500);
    h.poll();
    assert!(h.take().is_empty(), "the peer's window is zero");
    let t0 = h.now;
    assert_eq!(
        h.layer.poll_at(),
        Some(t0 + Duration::from_millis(300)),
        "persist = RTO"
    );
    h.advance_to(t0 + Duration::from_millis(300));
    // The probe: an old sequence number, no data; the peer must answer with its window.
    check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    assert_eq!(
        h.layer.poll_at(),
        Some(t0 + Duration::from_millis(900)),
        "backed off"
    );
    h.advance_to(t0 + Duration::from_millis(900));
    check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    assert_eq!(h.layer.counters().window_probes, 2);
    // The window opens (scale 7: 10 << 7 = 1280 bytes): the data goes at once.
    h.input(Repr {
        window_len: 10,
        ..peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[])
    });
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        500,
    );
    assert_eq!(
        conn.state(),
        State::Established,
        "probes never time a connection out"
    );
}

static FULL: [u8; MSS] = [0x55; MSS];

#[test]
fn delayed_ack_timer_and_every_second_full_segment() {
    let mut h = Harness::new(TcpConfig::default()); // Delayed ACK 40 ms.
    let iss = accept_with_rtt(&mut h, 10);
    let t = h.now;
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"small",
    ));
    assert!(h.take().is_empty(), "held back");
    assert_eq!(h.layer.poll_at(), Some(t + Duration::from_millis(40)));
    h.advance_to(t + Duration::from_millis(40));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 6), 0);
    let seq = PEER_ISS + 6;
    h.input(peer_seg(seq, Some(iss + 1), Control::None, &FULL));
    assert!(h.take().is_empty(), "one full segment: wait");
    h.input(peer_seg(
        seq + MSS as u32,
        Some(iss + 1),
        Control::None,
        &FULL,
    ));
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(seq + 2 * MSS as u32),
        0,
    );
    assert_eq!(
        h.layer.poll_at(),
        None,
        "the delayed ACK timer is cancelled"
    );
}

#[test]
fn data_piggybacks_a_delayed_ack() {
    let mut h = Harness::new(TcpConfig::default());
    let iss = accept_with_rtt(&mut h, 10);
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"ping",
    ));
    assert!(h.take().is_empty());
    send(&h.conn(), 4);
    h.poll();
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 5), 4);
    assert!(h.layer.poll_at() != Some(h.now + Duration::from_millis(40)));
}

#[test]
fn tail_loss_probe_repairs_a_lost_last_segment() {
    let mut h = Harness::quick_acks();
    let iss = accept_with_rtt(&mut h, 10); // SRTT 10 ms, RTO 200 ms.
    let conn = h.conn();
    let t0 = h.now;
    let m = MSS as u32;
    send(&conn, 3 * MSS);
    h.poll();
    assert_eq!(h.take().len(), 3);
    assert_eq!(
        h.layer.poll_at(),
        Some(t0 + Duration::from_millis(20)),
        "PTO = 2 x SRTT"
    );
    // The first two arrive; the ACK restarts the probe timer.
    h.now = t0 + Duration::from_millis(10);
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1 + 2 * m),
        Control::None,
        &[],
    ));
    let t1 = h.now;
    // One segment in flight: the probe allows for a delayed ACK.
    assert_eq!(h.layer.poll_at(), Some(t1 + Duration::from_millis(70)));
    h.advance_to(t1 + Duration::from_millis(70));
    check(
        &h.take_one(),
        Control::None,
        iss + 1 + 2 * m,
        Some(PEER_ISS + 1),
        MSS,
    );
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1 + 3 * m),
        Control::None,
        &[],
    ));
    assert_eq!(h.layer.poll_at(), None);
    let c = h.layer.counters();
    assert_eq!((c.tail_loss_probes, c.timeouts), (1, 0));
}

#[test]
fn one_tail_loss_probe_per_flight_then_the_rto() {
    let mut h = Harness::quick_acks();
    let iss = accept_with_rtt(&mut h, 10);
    let t0 = h.now;
    send(&h.conn(), 100);
    h.poll();
    h.take_one();
    h.advance_to(t0 + Duration::from_millis(70));
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(
        h.layer.poll_at(),
        Some(t0 + Duration::from_millis(200)),
        "then the RTO"
    );
    h.advance_to(t0 + Duration::from_millis(200));
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 1),
        100,
    );
    assert_eq!(h.layer.counters().tail_loss_probes, 1);
}

/// Keepalive after 10 s of silence, probes 1 s apart, 3 unanswered probes to give up.
const KEEPALIVE: crate::tcp::Keepalive = crate::tcp::Keepalive {
    idle: Duration::from_secs(10),
    interval: Duration::from_secs(1),
    probes: 3,
};

fn with_keepalive() -> Harness {
    Harness::new(TcpConfig {
        delayed_ack: None,
        keepalive: Some(KEEPALIVE),
        ..TcpConfig::default()
    })
}

#[test]
fn keepalive_is_off_by_default() {
    let mut h = rto_only();
    accept_with_rtt(&mut h, 100);
    assert_eq!(
        h.layer.poll_at(),
        None,
        "nothing armed on an idle connection"
    );
    h.advance(Duration::from_secs(3 * 3600));
    assert!(h.take().is_empty());
    assert_eq!(h.conn().state(), State::Established);
}

#[test]
fn keepalive_probes_an_idle_connection_and_an_answer_keeps_it() {
    let mut h = with_keepalive();
    let iss = accept_with_rtt(&mut h, 100);
    let t0 = h.now;
    assert_eq!(h.layer.poll_at(), Some(t0 + Duration::from_secs(10)));
    h.advance_to(t0 + Duration::from_secs(10));
    // One below the next sequence number, empty: the peer must answer with an ACK.
    check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    assert_eq!(h.layer.counters().keepalive_probes, 1);
    h.now = t0 + Duration::from_millis(10_100);
    h.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
    assert!(h.take().is_empty(), "an ACK needs no answer");
    // The next look is at the probe interval; it finds the peer heard from and waits
    // a whole idle period from the answer.
    h.advance_to(t0 + Duration::from_secs(11));
    assert!(h.take().is_empty());
    assert_eq!(
        h.layer.poll_at(),
        Some(t0 + Duration::from_millis(20_100)),
        "idle counts from the answer"
    );
    h.advance_to(t0 + Duration::from_millis(20_100));
    check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    assert_eq!(h.conn().state(), State::Established);
}

#[test]
fn keepalive_closes_a_connection_whose_peer_went_silent() {
    let mut h = with_keepalive();
    let iss = accept_with_rtt(&mut h, 100);
    let t0 = h.now;
    let _ = h.events();
    for probe in 0..3u64 {
        h.advance_to(t0 + Duration::from_secs(10 + probe));
        check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    }
    h.advance_to(t0 + Duration::from_secs(13));
    assert!(h.take().is_empty(), "gives up without another segment");
    assert_eq!(h.conn().state(), State::Closed);
    assert_eq!(h.events(), [Ev::Closed(CloseReason::TimedOut)]);
    let c = h.layer.counters();
    assert_eq!((c.keepalive_probes, c.connections_timed_out), (3, 1));
    assert_eq!(h.layer.connection_count(), 0);
}

#[test]
fn keepalive_waits_while_data_flows_and_counts_idle_from_the_last_segment() {
    let mut h = with_keepalive();
    let iss = accept_with_rtt(&mut h, 100);
    let t0 = h.now;
    // Data from the peer at 5 s: the first probe moves to 15 s.
    h.now = t0 + Duration::from_secs(5);
    h.input(peer_seg(
        PEER_ISS + 1,
        Some(iss + 1),
        Control::None,
        b"hello",
    ));
    check(&h.take_one(), Control::None, iss + 1, Some(PEER_ISS + 6), 0);
    h.advance_to(t0 + Duration::from_secs(14));
    assert!(h.take().is_empty(), "no probe before 15 s");
    // At 14 s we send data the peer never acknowledges: retransmissions, not probes,
    // watch the peer while it is unacknowledged.
    let conn = h.conn();
    send(&conn, 100);
    h.poll();
    check(
        &h.take_one(),
        Control::None,
        iss + 1,
        Some(PEER_ISS + 6),
        100,
    );
    h.advance_to(t0 + Duration::from_secs(16));
    let sent = h.take();
    assert!(!sent.is_empty(), "the data was retransmitted");
    assert!(
        sent.iter().all(|s| s.payload.len() == 100),
        "retransmissions only, no keepalive probe: {sent:#?}"
    );
    assert_eq!(h.layer.counters().keepalive_probes, 0);
}

#[test]
fn keepalive_can_be_switched_per_connection() {
    let mut h = rto_only();
    let iss = accept_with_rtt(&mut h, 100);
    let t0 = h.now;
    let conn = h.conn();
    conn.set_keepalive(Some(KEEPALIVE));
    h.poll();
    assert_eq!(h.layer.poll_at(), Some(t0 + Duration::from_secs(10)));
    h.advance_to(t0 + Duration::from_secs(10));
    check(&h.take_one(), Control::None, iss, Some(PEER_ISS + 1), 0);
    conn.set_keepalive(None);
    h.poll();
    assert_eq!(h.layer.poll_at(), None, "disarmed");
    h.advance(Duration::from_secs(3600));
    assert!(h.take().is_empty());
    assert_eq!(conn.state(), State::Established);
}
