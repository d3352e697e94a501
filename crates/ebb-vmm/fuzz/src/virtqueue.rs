//! What the `virtqueue` fuzz target runs: arbitrary bytes as a queue configuration, a
//! descriptor table and an available ring in guest memory, and a short script of what
//! the device and a driver do next; and a builder for its seeds.
//!
//! Input layout ([`HEADER`] bytes, then the guest memory image):
//!
//! | bytes   | what                                                                  |
//! |---------|-----------------------------------------------------------------------|
//! | 0       | direction: 0 read (transmit), 1 write (receive), 2 read-then-write    |
//! | 1..3    | queue size (u16, any value: `walk_chain` gets it unvalidated)         |
//! | 3..27   | descriptor table, available ring, used ring addresses (u64 each)      |
//! | 27..35  | guest memory size for the pure walk (u64, any value: up to 2^64)       |
//! | 35..37  | head for the pure walk (u16)                                          |
//! | 37..53  | script: 16 operations on the live queue (see [`run`])                 |
//! | 53..    | copied into guest memory at address 0 (the descriptor table of the   |
//! |         | pure walk is at its start; the live queue's rings are where 3..27 say) |
//!
//! Invariants (each an `assert!`, so a violation is a crash): nothing panics; every
//! accepted chain has between 1 and `size` buffers, each of non-zero length, inside
//! guest memory (no overflow) and outside the MMIO window, in the direction the queue
//! takes, adding up to at most `u32::MAX`; the walk reads at most `size` descriptors;
//! a validated configuration has aligned rings inside memory that do not overlap; the
//! live queue never hands out more chains than the driver published.

use ebb_abi::virtio::{
    MMIO_WINDOW_END, MMIO_WINDOW_START, avail_ring_bytes, desc_table_bytes, used_ring_bytes,
};
use ebb_vmm::guest::GuestMem;
use ebb_vmm::virtio::queue::{Chain, DeviceQueue, Direction, QueueConfig, RawDesc, walk_chain};
use std::sync::atomic::Ordering;
use vm_memory::{GuestAddress, GuestMemoryMmap};

/// Guest memory of the live queue: small, so clearing it each run is cheap.
pub const MEM_SIZE: u64 = 64 << 10;
/// Bytes before the memory image.
pub const HEADER: usize = 53;
/// Operations in the script.
pub const SCRIPT: usize = 16;
/// Largest queue the device accepts (`ebb_vmm::virtio::net::QUEUE_MAX`).
const QUEUE_MAX: u16 = ebb_vmm::virtio::net::QUEUE_MAX;

/// One script operation: `op | arg << 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The device takes the next available chain.
    Pop,
    /// The device returns the oldest chain it holds, with `arg * 97` bytes written.
    PushUsed(u8),
    /// The driver publishes `arg` more entries (whatever is in the ring).
    Publish(u8),
    /// The device asks for kicks (`arg` odd) or stops asking.
    Kicks(u8),
    /// The device decides whether to notify, having moved its used index from `arg`.
    Notify(u8),
    /// The driver sets `avail.idx` to `arg * 2049` (a jump, forward or back).
    Jump(u8),
}

impl Op {
    /// The script byte.
    pub fn byte(self) -> u8 {
        let (op, arg) = match self {
            Op::Pop => (0, 0),
            Op::PushUsed(a) => (3, a),
            Op::Publish(a) => (4, a),
            Op::Kicks(a) => (5, a),
            Op::Notify(a) => (6, a),
            Op::Jump(a) => (7, a),
        };
        op | (arg & 31) << 3
    }

    fn from_byte(b: u8) -> Op {
        let arg = b >> 3;
        match b & 7 {
            0..=2 => Op::Pop,
            3 => Op::PushUsed(arg),
            4 => Op::Publish(arg),
            5 => Op::Kicks(arg),
            6 => Op::Notify(arg),
            _ => Op::Jump(arg),
        }
    }
}

/// What one input did, for the seeds' test.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The pure walk: the chain's buffer count, or the error.
    pub walk: Option<Result<usize, String>>,
    /// Whether the configuration was valid (then the script ran).
    pub valid: bool,
    /// Chains the live queue handed out.
    pub popped: usize,
    /// The error that stopped the live queue (the device would break), if any.
    pub error: Option<String>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn direction(b: u8) -> Direction {
    match b % 4 {
        1 => Direction::Write,
        2 => Direction::ReadThenWrite,
        _ => Direction::Read,
    }
}

/// Checks an accepted chain against every invariant.
fn check_chain(chain: &Chain, head: u16, size: u16, mem_size: u64, want: Direction) {
    assert_eq!(chain.head, head);
    let n = chain.readable.len() + chain.writable.len();
    assert!(
        n >= 1 && n <= usize::from(size),
        "{n} buffers in a queue of {size}"
    );
    let mut total = 0u64;
    for buf in chain.readable.iter().chain(&chain.writable) {
        assert!(buf.len > 0, "a zero-length buffer was accepted");
        let end = buf.addr.checked_add(u64::from(buf.len));
        assert!(
            end.is_some_and(|end| end <= mem_size),
            "buffer {:#x}+{} outside memory of {mem_size:#x}",
            buf.addr,
            buf.len
        );
        let end = end.unwrap_or(u64::MAX);
        assert!(
            end <= MMIO_WINDOW_START || buf.addr >= MMIO_WINDOW_END,
            "buffer {:#x}+{} in the MMIO window",
            buf.addr,
            buf.len
        );
        total += u64::from(buf.len);
    }
    assert!(total <= u64::from(u32::MAX), "a chain of {total} bytes");
    match want {
        Direction::Read => assert!(chain.writable.is_empty()),
        Direction::Write => assert!(chain.readable.is_empty()),
        Direction::ReadThenWrite => {}
    }
}

/// The pure walk over the descriptor table at the start of `image`.
fn walk(
    head: u16,
    size: u16,
    mem_size: u64,
    want: Direction,
    image: &[u8],
) -> Result<usize, String> {
    let mut reads = 0usize;
    let result = walk_chain(head, size, mem_size, want, |i| {
        reads += 1;
        let at = 16 * usize::from(i);
        let raw = image.get(at..at + 16)?;
        Some(RawDesc {
            addr: u64_at(raw, 0),
            len: u32::from_le_bytes(raw[8..12].try_into().ok()?),
            flags: u16_at(raw, 12),
            next: u16_at(raw, 14),
        })
    });
    assert!(
        reads <= usize::from(size),
        "{reads} descriptor reads in a queue of {size}"
    );
    match result {
        Ok(chain) => {
            check_chain(&chain, head, size, mem_size, want);
            Ok(chain.readable.len() + chain.writable.len())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Runs one input against `mem` (which it clears first).
pub fn run(data: &[u8], mem: &GuestMem) -> Outcome {
    let mut out = Outcome::default();
    if data.len() < HEADER {
        return out;
    }
    let want = direction(data[0]);
    let size = u16_at(data, 1);
    let config = QueueConfig {
        size,
        desc: u64_at(data, 3),
        avail: u64_at(data, 11),
        used: u64_at(data, 19),
    };
    let image = &data[HEADER..];
    out.walk = Some(walk(u16_at(data, 35), size, u64_at(data, 27), want, image));

    // The live queue, over guest memory holding the image.
    mem.write_bytes(0, &[0u8; MEM_SIZE as usize])
        .expect("clear");
    let image = &image[..image.len().min(MEM_SIZE as usize)];
    mem.write_bytes(0, image).expect("the image fits");
    if config.validate(QUEUE_MAX, mem.size()).is_err() {
        return out;
    }
    out.valid = true;
    assert!(size.is_power_of_two() && size <= QUEUE_MAX);
    let rings = [
        (config.desc, desc_table_bytes(size), 16),
        (config.avail, avail_ring_bytes(size), 2),
        (config.used, used_ring_bytes(size), 4),
    ];
    for (i, &(addr, len, align)) in rings.iter().enumerate() {
        assert!(
            addr % align == 0 && addr + len <= mem.size(),
            "ring {addr:#x}+{len}"
        );
        for &(other, other_len, _) in &rings[i + 1..] {
            assert!(
                addr + len <= other || other + other_len <= addr,
                "rings overlap"
            );
        }
    }
    let avail_idx = config.avail + 2;
    let published = mem
        .load_u16(avail_idx, Ordering::Acquire)
        .expect("inside memory");
    let mut queue = DeviceQueue::new(config, want);
    let mut held: std::collections::VecDeque<u16> = Default::default();
    let mut consumed = 0u16;
    let mut published = published;
    for &b in &data[37..37 + SCRIPT] {
        let step = match Op::from_byte(b) {
            Op::Pop => queue.pop(mem).map(|chain| {
                if let Some(chain) = chain {
                    check_chain(&chain, chain.head, size, mem.size(), want);
                    assert!(chain.head < size);
                    let pending = published.wrapping_sub(consumed);
                    assert!(
                        (1..=size).contains(&pending),
                        "a chain handed out with {pending} published and not taken"
                    );
                    consumed = consumed.wrapping_add(1);
                    held.push_back(chain.head);
                    out.popped += 1;
                }
            }),
            Op::PushUsed(arg) => match held.pop_front() {
                Some(head) => queue.push_used(mem, head, u32::from(arg) * 97).map(drop),
                None => Ok(()),
            },
            Op::Publish(arg) => {
                published = published.wrapping_add(u16::from(arg));
                mem.store_u16(avail_idx, published, Ordering::Release)
                    .expect("inside memory");
                Ok(())
            }
            Op::Kicks(arg) => queue.set_kicks_wanted(mem, arg % 2 == 1).map(drop),
            Op::Notify(arg) => queue.needs_notification(mem, u16::from(arg)).map(drop),
            Op::Jump(arg) => {
                published = u16::from(arg).wrapping_mul(2049);
                mem.store_u16(avail_idx, published, Ordering::Release)
                    .expect("inside memory");
                Ok(())
            }
        };
        if let Err(e) = step {
            out.error = Some(e.to_string());
            break;
        }
    }
    out
}

/// Fresh guest memory for [`run`].
pub fn guest_memory() -> GuestMem {
    let mmap = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)])
        .expect("host memory for the guest");
    GuestMem::new(mmap, MEM_SIZE)
}

/// Builds an input: the configuration, the pure walk's memory size and head, the script,
/// and `descs` as the descriptor table at address 0 followed by an available ring at
/// `config.avail` publishing `heads` (the image extends to cover it).
pub fn input(
    want: u8,
    config: QueueConfig,
    walk: (u64, u16),
    script: &[Op],
    descs: &[(u64, u32, u16, u16)],
    heads: &[u16],
) -> Vec<u8> {
    let mut out = vec![want];
    out.extend_from_slice(&config.size.to_le_bytes());
    for addr in [config.desc, config.avail, config.used] {
        out.extend_from_slice(&addr.to_le_bytes());
    }
    out.extend_from_slice(&walk.0.to_le_bytes());
    out.extend_from_slice(&walk.1.to_le_bytes());
    let mut ops = [Op::Pop.byte(); SCRIPT];
    for (slot, op) in ops.iter_mut().zip(script) {
        *slot = op.byte();
    }
    out.extend_from_slice(&ops);
    assert_eq!(out.len(), HEADER);
    let mut image = Vec::new();
    for &(addr, len, flags, next) in descs {
        image.extend_from_slice(&addr.to_le_bytes());
        image.extend_from_slice(&len.to_le_bytes());
        image.extend_from_slice(&flags.to_le_bytes());
        image.extend_from_slice(&next.to_le_bytes());
    }
    if !heads.is_empty() {
        let avail = config.avail as usize;
        let end = avail + 4 + 2 * heads.len();
        image.resize(image.len().max(end), 0);
        image[avail + 2..avail + 4].copy_from_slice(&(heads.len() as u16).to_le_bytes());
        for (i, head) in heads.iter().enumerate() {
            image[avail + 4 + 2 * i..avail + 6 + 2 * i].copy_from_slice(&head.to_le_bytes());
        }
    }
    out.extend_from_slice(&image);
    out
}
