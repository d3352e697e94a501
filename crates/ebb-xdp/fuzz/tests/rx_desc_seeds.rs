//! The `rx_desc` target's seeds: descriptors the kernel would write (a frame at the
//! headroom of a lent chunk, one filling the chunk) and ones it must not be trusted with
//! (outside the receive chunks, a chunk not lent, overrunning, option bits, a completion
//! of a chunk never sent). `seed_files_are_current` checks `seeds/rx_desc/` holds exactly
//! these bytes (`WRITE_SEEDS=1 cargo test` rewrites them); `seeds_reach_every_outcome`
//! runs the harness on them.

use std::path::PathBuf;

use ebb_xdp_fuzz::{Outcomes, check};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

fn record(addr: u64, len: u32, options: u32) -> Vec<u8> {
    let mut r = addr.to_le_bytes().to_vec();
    r.extend_from_slice(&len.to_le_bytes());
    r.extend_from_slice(&options.to_le_bytes());
    r
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // 4 receive chunks (0, 1 and 3 lent), 4 transmit chunks (4 and 5 sent).
    let header = vec![0x33u8, 0b1011, 0, 0b0011, 0];
    let with = |records: &[Vec<u8>]| {
        let mut bytes = header.clone();
        for r in records {
            bytes.extend_from_slice(r);
        }
        bytes
    };
    vec![
        (
            "frame",
            with(&[record(2048 + 256, 60, 0), record(256, 1514, 0)]),
        ),
        ("full-chunk", with(&[record(3 * 2048 + 256, 1792, 0)])),
        ("twice", with(&[record(256, 60, 0), record(256, 60, 0)])),
        ("not-lent", with(&[record(2 * 2048 + 256, 60, 0)])),
        (
            "outside",
            with(&[record(4 * 2048 + 256, 60, 0), record(u64::MAX, u32::MAX, 0)]),
        ),
        (
            "overrun",
            with(&[record(2048 + 300, 1792, 0), record(2048, 1793, 0)]),
        ),
        ("options", with(&[record(256, 60, 1)])),
        (
            "completion",
            with(&[
                record(4 * 2048, 0, 0),
                record(5 * 2048, 0, 0),
                record(6 * 2048, 0, 0),
            ]),
        ),
        ("indices", with(&[record(0, 2, u32::MAX - 1)])),
    ]
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/rx_desc");
    seed_files::check(&dir, seeds());
}

#[test]
fn seeds_reach_every_outcome() {
    let mut total = Outcomes::default();
    for (_, bytes) in seeds() {
        let o = check(&bytes);
        total.accepted += o.accepted;
        total.not_receive_chunk += o.not_receive_chunk;
        total.not_lent += o.not_lent;
        total.overruns += o.overruns;
        total.options += o.options;
        total.completions += o.completions;
    }
    assert_eq!(total.accepted, 4, "{total:?}");
    assert!(total.not_lent >= 2, "{total:?}");
    assert!(total.not_receive_chunk >= 2, "{total:?}");
    assert_eq!(total.overruns, 2, "{total:?}");
    assert!(total.options >= 1, "{total:?}");
    assert_eq!(total.completions, 2, "{total:?}");
}
