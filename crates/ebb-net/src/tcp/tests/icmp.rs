//! ICMP Destination Unreachable about our segments (RFC 1122 §4.2.3.9, RFC 5927, RFC
//! 1191): hard errors end a connect, soft ones are ignored once synchronized, errors
//! quoting a sequence number not in flight are ignored, and "fragmentation needed"
//! shrinks the segment size and resends at once.

use super::*;
use crate::tcp::State;
use crate::transport::{IcmpErrorKind, TcpIcmpError};
use ebb_core::iobuf::IOBufChain;

fn error(seq: u32, kind: IcmpErrorKind) -> TcpIcmpError {
    TcpIcmpError {
        local: SocketAddrV4::new(US, US_PORT),
        remote: SocketAddrV4::new(PEER, PEER_PORT),
        seq: SeqNumber(seq),
        kind,
    }
}

/// Connects and takes the SYN: returns our ISS.
fn syn_sent(h: &mut Harness) -> u32 {
    h.connect();
    h.poll();
    h.take_one().header.seq_number.0
}

#[test]
fn unreachable_ends_a_connect_at_once() {
    for (kind, expected) in [
        (
            IcmpErrorKind::PortUnreachable,
            TcpErrorKind::ConnectionRefused,
        ),
        (
            IcmpErrorKind::ProtocolUnreachable,
            TcpErrorKind::ConnectionRefused,
        ),
        (IcmpErrorKind::HostUnreachable, TcpErrorKind::Unreachable),
        (IcmpErrorKind::NetUnreachable, TcpErrorKind::Unreachable),
    ] {
        let mut h = Harness::quick_acks();
        let iss = syn_sent(&mut h);
        h.layer.icmp_error(h.now, error(iss, kind), &mut h.out);
        assert_eq!(*h.connect_results.borrow(), [Err(expected)], "{kind:?}");
        assert_eq!(h.layer.connection_count(), 0);
        let c = h.layer.counters();
        assert_eq!((c.icmp_errors, c.icmp_errors_ignored), (1, 0));
        assert!(h.take().is_empty(), "nothing sent in answer");
    }
}

#[test]
fn errors_about_segments_not_in_flight_or_connections_not_ours_are_ignored() {
    let mut h = Harness::quick_acks();
    let iss = syn_sent(&mut h);
    // Blind attacks guess the sequence number (RFC 5927 §4.1): a wrong one is ignored.
    for seq in [iss.wrapping_sub(1), iss + 1, iss + 100_000] {
        h.layer.icmp_error(
            h.now,
            error(seq, IcmpErrorKind::PortUnreachable),
            &mut h.out,
        );
    }
    // An unknown four-tuple.
    let mut stranger = error(iss, IcmpErrorKind::PortUnreachable);
    stranger.remote = SocketAddrV4::new(PEER, PEER_PORT + 1);
    h.layer.icmp_error(h.now, stranger, &mut h.out);
    assert!(h.connect_results.borrow().is_empty(), "still connecting");
    let c = h.layer.counters();
    assert_eq!((c.icmp_errors, c.icmp_errors_ignored), (0, 4));
}

#[test]
fn unreachable_is_a_soft_error_once_established() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.send(IOBufChain::from(IOBuf::copy_from_slice(b"data")))
        .expect("send");
    h.poll();
    let _ = h.take();
    h.layer.icmp_error(
        h.now,
        error(iss + 1, IcmpErrorKind::HostUnreachable),
        &mut h.out,
    );
    assert_eq!(conn.state(), State::Established);
    assert_eq!(h.layer.counters().icmp_errors_ignored, 1);
}

#[test]
fn fragmentation_needed_shrinks_segments_and_resends_at_once() {
    let mut h = Harness::quick_acks();
    let iss = h.accept_connection();
    let conn = h.conn();
    conn.send(IOBufChain::from(IOBuf::from_vec(alloc::vec![7u8; 3000])))
        .expect("send");
    h.poll();
    let first = h.take();
    assert_eq!(first[0].payload.len(), MSS, "full-sized segments first");
    // A router on the path takes at most 1000-byte packets.
    h.layer.icmp_error(
        h.now,
        error(
            iss + 1,
            IcmpErrorKind::FragmentationNeeded { next_hop_mtu: 1000 },
        ),
        &mut h.out,
    );
    let resent = h.take();
    assert!(!resent.is_empty(), "resent without waiting for the RTO");
    assert_eq!(resent[0].header.seq_number, SeqNumber(iss + 1));
    assert!(
        resent.iter().all(|s| s.payload.len() <= 960),
        "every segment fits 1000 bytes of IP: {:?}",
        resent.iter().map(|s| s.payload.len()).collect::<Vec<_>>()
    );
    assert_eq!(h.layer.counters().icmp_errors, 1);
    // A forged message cannot shrink segments below 552 − 40 bytes, nor grow them.
    for mtu in [100, 1400] {
        h.layer.icmp_error(
            h.now,
            error(
                iss + 1,
                IcmpErrorKind::FragmentationNeeded { next_hop_mtu: mtu },
            ),
            &mut h.out,
        );
    }
    let again = h.take();
    assert!(
        again.iter().all(|s| s.payload.len() <= 512) && !again.is_empty(),
        "clamped to 512-byte segments: {:?}",
        again.iter().map(|s| s.payload.len()).collect::<Vec<_>>()
    );
    let c = h.layer.counters();
    assert_eq!(
        (c.icmp_errors, c.icmp_errors_ignored),
        (2, 1),
        "1400 is ignored"
    );
}
