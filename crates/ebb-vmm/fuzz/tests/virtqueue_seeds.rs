//! The `virtqueue` target's seeds: well-formed queues (a transmit chain, receive chains,
//! a control command) and hostile ones (a self loop, a cycle through the whole table, an
//! available index that jumps, a buffer in the MMIO window of a huge guest, a chain of
//! more than 4 GiB, a queue size that is not a power of two). Each is checked against
//! what the queue code must make of it, so the seeds stay meaningful;
//! `seed_files_are_current` checks `seeds/virtqueue/` holds exactly these bytes,
//! `WRITE_SEEDS=1 cargo test` rewrites them.

use ebb_abi::virtio::{DESC_F_NEXT, DESC_F_WRITE, MMIO_BASE};
use ebb_vmm::virtio::queue::QueueConfig;
use ebb_vmm_fuzz::virtqueue::{MEM_SIZE, Op, Outcome, guest_memory, input, run};
use std::path::PathBuf;

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

const N: u16 = DESC_F_NEXT;
const W: u16 = DESC_F_WRITE;
const QUEUE: QueueConfig = QueueConfig {
    size: 16,
    desc: 0,
    avail: 0x100,
    used: 0x200,
};

/// `(name, bytes, what must come of them)`.
type Seed = (&'static str, Vec<u8>, fn(&Outcome) -> bool);

/// The live queue stopped with an error containing `words`.
fn err(o: &Outcome, words: &str) -> bool {
    o.error.as_deref().is_some_and(|e| e.contains(words))
}

/// The pure walk refused the chain with an error containing `words`.
fn walk_err(o: &Outcome, words: &str) -> bool {
    matches!(&o.walk, Some(Err(e)) if e.contains(words))
}

fn seeds() -> Vec<Seed> {
    let walk = (MEM_SIZE, 0);
    let cycle: Vec<_> = (0..16u16)
        .map(|i| (0x4000 + 64 * u64::from(i), 64, N, (i + 1) % 16))
        .collect();
    vec![
        (
            "tx-one-chain",
            input(
                0,
                QUEUE,
                walk,
                &[Op::Pop, Op::PushUsed(1), Op::Kicks(1), Op::Notify(0)],
                &[(0x4000, 64, 0, 0)],
                &[0],
            ),
            |o| o.valid && o.popped == 1 && o.error.is_none() && o.walk == Some(Ok(1)),
        ),
        (
            "rx-two-chains",
            input(
                1,
                QUEUE,
                walk,
                &[Op::Pop, Op::Pop, Op::PushUsed(2), Op::PushUsed(3), Op::Pop],
                &[
                    (0x4000, 1526, W | N, 1),
                    (0x5000, 64, W, 0),
                    (0x6000, 1526, W, 0),
                ],
                &[0, 2],
            ),
            |o| o.valid && o.popped == 2 && o.error.is_none() && o.walk == Some(Ok(2)),
        ),
        (
            "ctrl-read-then-write",
            input(
                2,
                QUEUE,
                walk,
                &[Op::Pop, Op::PushUsed(0)],
                &[(0x4000, 2, N, 1), (0x4010, 2, N, 2), (0x4020, 1, W, 0)],
                &[0],
            ),
            |o| o.valid && o.popped == 1 && o.error.is_none() && o.walk == Some(Ok(3)),
        ),
        (
            "self-loop",
            input(0, QUEUE, walk, &[Op::Pop], &[(0x4000, 64, N, 0)], &[0]),
            |o| o.popped == 0 && err(o, "loops") && walk_err(o, "loops"),
        ),
        (
            "long-cycle",
            input(0, QUEUE, walk, &[Op::Pop], &cycle, &[3]),
            |o| o.popped == 0 && err(o, "head 3 loops") && walk_err(o, "head 0 loops"),
        ),
        (
            "index-jump",
            input(
                0,
                QUEUE,
                walk,
                &[Op::Jump(1), Op::Pop],
                &[(0x4000, 64, 0, 0)],
                &[0],
            ),
            |o| o.popped == 0 && err(o, "jumped from 0 to 2049"),
        ),
        (
            "window-walk",
            input(
                1,
                QUEUE,
                (u64::MAX, 0),
                &[Op::Pop],
                &[(MMIO_BASE, 64, W, 0)],
                &[0],
            ),
            |o| walk_err(o, "0xfeb00000+64 is outside") && err(o, "outside"),
        ),
        (
            "four-gib-walk",
            input(
                0,
                QUEUE,
                (1 << 40, 0),
                &[],
                &[(0, 3 << 30, N, 1), (1 << 33, 3 << 30, 0, 0)],
                &[],
            ),
            |o| walk_err(o, "more than 4 GiB") && o.valid,
        ),
        (
            "size-not-power-of-two",
            input(
                0,
                QueueConfig { size: 100, ..QUEUE },
                walk,
                &[],
                &[(0x4000, 64, 0, 0)],
                &[0],
            ),
            |o| !o.valid && o.walk == Some(Ok(1)),
        ),
    ]
}

#[test]
fn seeds_do_what_they_are_for() {
    let mem = guest_memory();
    for (name, bytes, expected) in seeds() {
        let outcome = run(&bytes, &mem);
        assert!(expected(&outcome), "{name}: {outcome:?}");
    }
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/virtqueue");
    seed_files::check(
        &dir,
        seeds().into_iter().map(|(name, bytes, _)| (name, bytes)),
    );
}
