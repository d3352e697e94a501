//! The `shm_window` target's seeds: two ends that keep the protocol (bytes both ways
//! across the wrap, a full ring, a drain one byte at a time) and a peer that does not (an
//! index claiming more than the ring holds, a produced index taken back, a consumed index
//! ahead or backwards, a state that is no state, scribbled data, a window dirty before
//! anyone opened it). `seed_files_are_current` checks `seeds/shm_window/` holds exactly
//! these bytes (`WRITE_SEEDS=1 cargo test` rewrites them); `seeds_reach_every_outcome`
//! runs the harness on them.

use std::path::PathBuf;

use ebb_shm_fuzz::{Outcomes, run};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

const HOST: u8 = 0;
const GUEST: u8 = 1;

fn write(side: u8, len: u16) -> Vec<u8> {
    [vec![side], len.to_le_bytes().to_vec()].concat()
}
fn publish(side: u8) -> Vec<u8> {
    vec![2 | side]
}
fn read(side: u8, len: u16) -> Vec<u8> {
    [vec![4 | side], len.to_le_bytes().to_vec()].concat()
}
fn read_uninit(side: u8, len: u16) -> Vec<u8> {
    [vec![6 | side], len.to_le_bytes().to_vec()].concat()
}
fn release(side: u8) -> Vec<u8> {
    vec![8 | side]
}
/// 0 room, 1 want_room, 2 arm_receive, 3 disarm_receive, 4 set_state, 5 peer_state.
fn misc(side: u8, sel: u8) -> Vec<u8> {
    vec![10 | side, sel]
}
fn drain(side: u8, chunk: u8) -> Vec<u8> {
    vec![12 | side, chunk]
}
fn scribble(offset: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = vec![14];
    s.extend_from_slice(&offset.to_le_bytes());
    s.push(bytes.len() as u8);
    s.extend_from_slice(bytes);
    s
}
/// Slots 0..4: produced and consumed of host → guest, then of guest → host; 8 + k:
/// word k of host state, host core, guest state, guest core, then the rings' flags.
fn nudge(slot: u8, delta: i16) -> Vec<u8> {
    [vec![15, slot], delta.to_le_bytes().to_vec()].concat()
}

fn seed(layout: u8, ops: &[Vec<u8>]) -> Vec<u8> {
    [vec![layout], ops.concat()].concat()
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut exchange = Vec::new();
    for _ in 0..6 {
        exchange.extend([
            write(GUEST, 3000),
            publish(GUEST),
            read(HOST, 4096),
            release(HOST),
            write(HOST, 2500),
            publish(HOST),
            misc(GUEST, 2),
            read_uninit(GUEST, 4096),
            release(GUEST),
        ]);
    }
    vec![
        ("honest-exchange", seed(0, &exchange)),
        (
            "full-ring",
            seed(
                1,
                &[
                    write(HOST, 10000),
                    publish(HOST),
                    misc(HOST, 1),
                    drain(GUEST, 199),
                    misc(HOST, 0),
                    write(HOST, 5000),
                    publish(HOST),
                    read(GUEST, 65535),
                ],
            ),
        ),
        (
            "drain-bytewise",
            seed(2, &[write(GUEST, 4096), publish(GUEST), drain(HOST, 0)]),
        ),
        (
            "too-much-in-flight",
            seed(
                0,
                &[
                    write(GUEST, 10),
                    publish(GUEST),
                    nudge(2, 5000),
                    read(HOST, 100),
                    drain(HOST, 50),
                    misc(HOST, 2),
                ],
            ),
        ),
        (
            "produced-backwards",
            seed(
                0,
                &[
                    write(GUEST, 100),
                    publish(GUEST),
                    read(HOST, 0), // told 100 bytes wait, reads none yet
                    nudge(2, -99),
                    read(HOST, 100),
                    nudge(2, 99),
                    read_uninit(HOST, 100),
                ],
            ),
        ),
        (
            "consumed-ahead",
            seed(
                0,
                &[
                    write(HOST, 3),
                    publish(HOST),
                    nudge(1, 10),
                    write(HOST, 5),
                    misc(HOST, 0),
                ],
            ),
        ),
        (
            "consumed-backwards",
            seed(
                0,
                &[
                    write(HOST, 50),
                    publish(HOST),
                    read(GUEST, 50),
                    release(GUEST),
                    misc(HOST, 0),
                    nudge(1, -1),
                    misc(HOST, 1),
                ],
            ),
        ),
        (
            "invalid-state",
            seed(0, &[nudge(8 + 2, 99), misc(HOST, 5), misc(HOST, 4)]),
        ),
        (
            "scribbled-data",
            seed(
                0,
                &[
                    write(GUEST, 200),
                    publish(GUEST),
                    scribble(8192 + 10, &[0xff; 16]),
                    read(HOST, 200),
                    release(HOST),
                ],
            ),
        ),
        (
            "dirty-before-open",
            seed(
                0x10,
                &[
                    scribble(256, &[0xab; 255]),
                    scribble(512, &[0x01; 100]),
                    write(HOST, 10),
                    publish(HOST),
                    read(GUEST, 100),
                    read(HOST, 100),
                    misc(GUEST, 0),
                ],
            ),
        ),
        (
            "state-taken-before-open",
            seed(0x10, &[nudge(8, 1), write(HOST, 10)]),
        ),
        ("truncated", vec![3, 0]),
    ]
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/shm_window");
    seed_files::check(&dir, seeds());
}

#[test]
fn seeds_reach_every_outcome() {
    let mut total = Outcomes::default();
    for (name, bytes) in seeds() {
        let o = run(&bytes);
        eprintln!("{name}: {o:?}");
        total.bytes_read += o.bytes_read;
        total.bytes_checked += o.bytes_checked;
        total.full += o.full;
        total.too_many += o.too_many;
        total.backwards += o.backwards;
        total.bad_consumed += o.bad_consumed;
        total.invalid_states += o.invalid_states;
        total.drains += o.drains;
        total.scribbles += o.scribbles;
        total.refused_opens += o.refused_opens;
    }
    assert!(total.bytes_checked >= 6 * 5500 + 4096, "{total:?}");
    assert!(total.bytes_read > total.bytes_checked, "{total:?}");
    assert!(total.full >= 1, "{total:?}");
    assert!(total.too_many >= 2, "{total:?}");
    assert!(total.backwards >= 1, "{total:?}");
    assert!(total.bad_consumed >= 2, "{total:?}");
    assert!(total.invalid_states >= 1, "{total:?}");
    assert!(total.drains >= 2, "{total:?}");
    assert!(total.refused_opens >= 1, "{total:?}");
}
