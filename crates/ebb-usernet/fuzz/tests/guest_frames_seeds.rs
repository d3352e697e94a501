//! The `guest_frames` target's seeds: what a guest sends the user-mode network in earnest (an
//! ARP request for the endpoint, a SYN to a port without a forward, a DNS query and a TSO
//! frame for passt) and what it must not be trusted with (a frame too short to route, a
//! frame for passt longer than the MTU that is not TCP, an IPv4 header that lies about
//! its length). `seed_files_are_current` checks `seeds/guest_frames/` holds exactly these bytes
//! (`WRITE_SEEDS=1 cargo test` rewrites them); `seeds_reach_every_outcome` runs the
//! harness on them.

use std::path::PathBuf;

use ebb_usernet_fuzz::{Outcomes, frames};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const GUEST: [u8; 4] = [10, 0, 2, 15];
const ENDPOINT: [u8; 4] = [10, 0, 2, 3];

/// A record of the harness's input: kind, length, frame.
fn record(kind: u8, frame: &[u8]) -> Vec<u8> {
    let mut r = vec![kind];
    r.extend_from_slice(&(frame.len() as u16).to_le_bytes());
    r.extend_from_slice(frame);
    r
}

fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&GUEST_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ethernet + IPv4 (20 bytes, checksum set) to `to`, protocol `proto`, then `l4`.
fn ipv4(to: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
    ip.extend_from_slice(&GUEST);
    ip.extend_from_slice(&to);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut f = ethernet(0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// A TCP header (20 bytes, no options) with `flags` and `payload` behind it; the
/// checksum is left for a partial-checksum record.
fn tcp(dst_port: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = 40000u16.to_be_bytes().to_vec();
    t.extend_from_slice(&dst_port.to_be_bytes());
    t.extend_from_slice(&1000u32.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    t.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut arp = ethernet(0x0806);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&GUEST_MAC);
    arp.extend_from_slice(&GUEST);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&ENDPOINT);
    let syn = ipv4(ENDPOINT, 6, &tcp(80, 0x02, &[]));
    let mut udp = 53000u16.to_be_bytes().to_vec();
    udp.extend_from_slice(&53u16.to_be_bytes());
    udp.extend_from_slice(&(8u16 + 29).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
    );
    let dns = ipv4([8, 8, 8, 8], 17, &udp);
    let tso = ipv4([1, 1, 1, 1], 6, &tcp(443, 0x18, &[0x5a; 3946]));
    let big_udp = ipv4([1, 1, 1, 1], 17, &[0; 3000]);
    let mut lying = ipv4(ENDPOINT, 6, &tcp(80, 0x02, &[]));
    lying[16..18].copy_from_slice(&9000u16.to_be_bytes()); // longer than the frame
    vec![
        ("arp-for-the-endpoint", record(0, &arp)),
        (
            "syn-without-a-forward",
            [record(0, &arp), record(1, &syn)].concat(),
        ),
        ("dns-for-passt", record(0, &dns)),
        ("tso-for-passt", record(1, &tso)),
        ("too-short", record(0, &[0x08, 0x00, 1, 2])),
        ("too-long-for-passt", record(0, &big_udp)),
        ("lying-ipv4-length", record(0, &lying)),
        ("truncated-record", vec![1, 0xff, 0xff, 0x45]),
    ]
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/guest_frames");
    seed_files::check(&dir, seeds());
}

#[test]
fn seeds_reach_every_outcome() {
    let mut total = Outcomes::default();
    for (name, bytes) in seeds() {
        let o = frames(&bytes);
        eprintln!("{name}: {o:?}");
        total.to_endpoint += o.to_endpoint;
        total.to_rest += o.to_rest;
        total.malformed += o.malformed;
        total.rest_received += o.rest_received;
        total.to_guest += o.to_guest;
    }
    assert!(total.to_endpoint >= 4, "{total:?}");
    assert!(total.to_rest >= 2, "{total:?}");
    assert!(total.malformed >= 2, "{total:?}");
    assert!(
        total.rest_received >= 4,
        "the TSO frame is cut in three: {total:?}"
    );
    assert!(total.to_guest >= 2, "an ARP reply and a reset: {total:?}");
}
