//! The `steer` target's seeds: a control byte (receiving core, port 80's placement, and
//! whether the frame's four-tuple is owned) in front of real frames — SYNs and data to
//! port 80, UDP, a ping, an ARP request — so the fuzzer starts on every steering path.
//! `seed_files_are_current` checks `seeds/steer/` holds exactly these bytes;
//! `WRITE_SEEDS=1 cargo test --test steer_seeds` rewrites them.

use std::path::PathBuf;

use ebb_net::wire::TcpControl;
use ebb_net_fuzz::{OUR_IP, PEER_IP, PEER_MAC, arp_request, ping, tcp_frame, udp_frame};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let frames = [
        ("syn", tcp_frame(40_000, 80, 1, None, TcpControl::Syn, b"")),
        (
            "data",
            tcp_frame(40_001, 80, 9, Some(5), TcpControl::None, b"hello"),
        ),
        ("udp", udp_frame(68, 67, b"x")),
        ("ping", ping(1, 1, b"ebb")),
        ("arp", arp_request(PEER_MAC, PEER_IP, OUR_IP)),
    ];
    let mut seeds = Vec::new();
    for (name, frame) in frames {
        // Policies 0..=3 in the high nibble; bit 0 claims the tuple for core 2.
        for control in [0x00u8, 0x11, 0x21, 0x30, 0x31] {
            let mut bytes = vec![control];
            bytes.extend_from_slice(&frame);
            seeds.push((format!("{name}-{control:02x}"), bytes));
        }
    }
    seeds
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/steer");
    seed_files::check(&dir, seeds());
}

#[test]
fn seeds_cover_every_policy_and_the_owner_path() {
    let seeds = seeds();
    let policies: std::collections::BTreeSet<u8> = seeds.iter().map(|(_, b)| b[0] >> 4).collect();
    assert_eq!(policies, (0..=3).collect(), "a port 80 policy no seed uses");
    assert!(
        seeds.iter().any(|(_, b)| b[0] & 1 == 1),
        "no seed claims its four-tuple"
    );
    assert!(
        seeds.iter().all(|(_, b)| b.len() > 1 + 14),
        "a seed without a frame behind its control byte"
    );
    let names: std::collections::BTreeSet<_> = seeds.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), seeds.len(), "two seeds share a name");
}
