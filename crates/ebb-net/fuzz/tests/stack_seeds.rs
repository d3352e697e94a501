//! The `stack` target's seeds: real frames built with the `wire` reprs against the
//! harness's scripted starting state, so the fuzzer starts deep (answered ARP, a ping,
//! SYNs to the listener, data on the established connection, the connecting connection
//! completed, a UDP datagram, a DHCP lease).
//!
//! `seeds_reach_deep_states` runs each seed through the harness and checks that it got
//! where it is meant to (the right counters moved). `seed_files_are_current` checks
//! `seeds/stack/` holds exactly these bytes; `WRITE_SEEDS=1 cargo test --test stack_seeds`
//! rewrites them.

use std::path::PathBuf;

use ebb_net::wire::{DhcpMessageType, TcpControl};
use ebb_net_driver::NetDevice;
use ebb_net_fuzz::{
    FLAG_DHCP, FLAG_SLOW_DEVICE, Harness, LISTEN_PORT, OUR_IP, PEER_ISS, PEER_MAC, PEER_PORT,
    UDP_PORT, arp_request, dhcp_reply, encode, ping, tcp_frame, udp_frame,
};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

/// Step byte: `ms` milliseconds (0-31), no application action.
fn ms(ms: u8) -> u8 {
    assert!(ms < 32);
    ms
}
/// Step byte: 10 s per unit (1-16).
fn tens_of_seconds(n: u8) -> u8 {
    47 + n
}
/// Step bits for "the application sends 1 KiB first".
const APP_SEND: u8 = 1 << 6;
/// Step bits for "the application closes first".
const APP_CLOSE: u8 = 3 << 6;

/// A seed: its file name, its bytes, and what it must have made the stack do.
type Seed = (&'static str, Vec<u8>, fn(&Harness) -> bool);

/// Every seed.
fn seeds() -> Vec<Seed> {
    let script = Harness::new(0).script();
    let dhcp = Harness::new(FLAG_DHCP).script();
    let our_next = script.established_iss.wrapping_add(1);
    let peer_next = PEER_ISS.wrapping_add(1);
    let request = b"GET / HTTP/1.1\r\nHost: ebb\r\n\r\n".to_vec();
    let data = |seq: u32, ack: u32, payload: &[u8]| {
        tcp_frame(
            PEER_PORT,
            LISTEN_PORT,
            seq,
            Some(ack),
            TcpControl::None,
            payload,
        )
    };
    vec![
        (
            "arp-request",
            encode(
                0,
                &[(ms(1), arp_request(PEER_MAC, ebb_net_fuzz::PEER_IP, OUR_IP))],
            ),
            |h| h.stack().iface().counters().tx_arp_replies >= 2,
        ),
        (
            "ping",
            encode(0, &[(ms(1), ping(7, 1, b"ebbflow ping"))]),
            |h| h.stack().iface().counters().tx_icmp_echo_replies == 1,
        ),
        (
            "syn",
            encode(
                0,
                &[(
                    ms(1),
                    tcp_frame(40001, LISTEN_PORT, 77, None, TcpControl::Syn, b""),
                )],
            ),
            |h| h.stack().tcp().connection_count() == 3,
        ),
        (
            "syn-ack-retransmitted",
            encode(
                0,
                &[
                    (
                        ms(1),
                        tcp_frame(40002, LISTEN_PORT, 500, None, TcpControl::Syn, b""),
                    ),
                    // 1.6 s: past the initial RTO, our SYN-ACK goes again.
                    (47, vec![]),
                ],
            ),
            |h| h.stack().tcp().counters().retransmissions >= 1,
        ),
        (
            "data",
            encode(
                0,
                &[
                    (ms(1), data(peer_next, our_next, &request)),
                    (ms(5), vec![]),
                ],
            ),
            // Echoed: the application's reply went out.
            |h| h.stack().device().counters().tx_bytes > 200,
        ),
        (
            "data-ack-fin",
            encode(
                0,
                &[
                    (ms(1), data(peer_next, our_next, &request)),
                    (
                        ms(2),
                        data(
                            peer_next + request.len() as u32,
                            our_next + request.len() as u32,
                            b"",
                        ),
                    ),
                    (
                        ms(3),
                        tcp_frame(
                            PEER_PORT,
                            LISTEN_PORT,
                            peer_next + request.len() as u32,
                            Some(our_next + request.len() as u32),
                            TcpControl::Fin,
                            b"",
                        ),
                    ),
                    // Acknowledges our FIN.
                    (
                        ms(3),
                        data(
                            peer_next + request.len() as u32 + 1,
                            our_next + request.len() as u32 + 1,
                            b"",
                        ),
                    ),
                    (tens_of_seconds(7), vec![]),
                ],
            ),
            |h| h.stack().tcp().counters().connections_closed >= 1,
        ),
        (
            "syn-ack",
            encode(
                0,
                &[
                    (
                        ms(1),
                        ebb_net_fuzz::tcp_frame(
                            ebb_net_fuzz::CONNECT_PORT,
                            script.connect_port,
                            5000,
                            Some(script.connect_iss.wrapping_add(1)),
                            TcpControl::Syn,
                            b"",
                        ),
                    ),
                    (APP_SEND | ms(1), vec![]),
                    (APP_CLOSE | ms(1), vec![]),
                ],
            ),
            |h| h.stack().tcp().counters().connections_opened >= 2,
        ),
        (
            "udp",
            encode(
                FLAG_SLOW_DEVICE,
                &[
                    (ms(1), udp_frame(5353, UDP_PORT, b"datagram")),
                    (ms(1), udp_frame(5353, 9, b"nobody here")),
                ],
            ),
            |h| {
                let c = h.stack().iface().counters();
                c.rx_udp == 1 && c.tx_icmp_port_unreachable == 1
            },
        ),
        (
            "dhcp-offer-ack",
            encode(
                FLAG_DHCP,
                &[
                    (
                        ms(1),
                        dhcp_reply(DhcpMessageType::Offer, dhcp.dhcp_xid, 3600),
                    ),
                    (ms(1), dhcp_reply(DhcpMessageType::Ack, dhcp.dhcp_xid, 3600)),
                    (ms(1), ping(7, 1, b"after the lease")),
                ],
            ),
            |h| h.stack().iface().ipv4_address() == Some(OUR_IP),
        ),
    ]
}

/// Replays `input` like the fuzz target, returning the harness for inspection.
fn replay(input: &[u8]) -> Harness {
    let (&flags, mut rest) = input.split_first().expect("seeds have a flags byte");
    let mut h = Harness::new(flags);
    while let Some((&step, tail)) = rest.split_first() {
        let (len, tail) = tail.split_first_chunk::<2>().expect("whole records");
        let (frame, tail) = tail.split_at(usize::from(u16::from_le_bytes(*len)));
        h.step(step, frame);
        rest = tail;
    }
    h
}

#[test]
fn scripted_start_is_as_documented() {
    let h = Harness::new(0);
    let s = h.script();
    assert_ne!(s.connect_port, 0, "our SYN to the peer went out");
    // The established connection and the connecting one.
    assert_eq!(h.stack().tcp().connection_count(), 2);
    assert_eq!(h.stack().tcp().counters().connections_opened, 1);
    let d = Harness::new(FLAG_DHCP);
    assert_ne!(d.script().dhcp_xid, 0, "the DISCOVER went out");
}

#[test]
fn seeds_reach_deep_states() {
    for (name, bytes, reached) in seeds() {
        let h = replay(&bytes);
        assert!(reached(&h), "seed {name} did not reach its state");
        // And the target's own entry point accepts it.
        Harness::run(&bytes);
    }
}

fn seed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/stack")
}

#[test]
fn seed_files_are_current() {
    let seeds = seeds().into_iter().map(|(name, bytes, _)| (name, bytes));
    seed_files::check(&seed_dir(), seeds);
}
