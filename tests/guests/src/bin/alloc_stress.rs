//! Stress test of the guest's global allocator (ebb-mem's `GeneralPurposeAllocator`),
//! booted by `crates/ebb-vmm/tests/alloc.rs` with 1 and 2 vCPUs.
//!
//! 1. **Mixed load with remote frees.** Every core runs a task that, for `rounds=R` rounds
//!    (default 300), allocates a batch of blocks of random size (1 B to 1 MiB, log-uniform)
//!    and alignment (1 B to 4 KiB), fills each with a pattern derived from its unique tag,
//!    keeps some in a local pool (freed or resized with `realloc` later, on the same core)
//!    and sends the rest to the next core (`spawn_on`), which checks and frees them there:
//!    with 2 vCPUs those are remote frees. Every block is checked byte for byte before it is
//!    freed, so two live blocks that overlapped would show as a mismatch, and every pointer
//!    is checked for its alignment.
//! 2. **Exhaustion.** Core 0 grows until allocation fails, through fallible APIs only
//!    (`Vec::try_reserve_exact` in 1 MiB chunks, then smaller ones), showing that running
//!    out is an error value, not a crash; checks every chunk, frees half, allocates again
//!    (must work), frees everything, and grows again in 1 MiB chunks (must get back at
//!    least 90 % of the first time).
//!
//! Prints `alloc_stress: mixed: ...` and `alloc_stress: exhaustion: ...` summaries, the
//! allocator's report, and `alloc_stress: ok`; exits non-zero on any mismatch, misaligned
//! block, or a check that failed (the code says which).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::alloc::{alloc as raw_alloc, dealloc as raw_dealloc, realloc as raw_realloc};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use ebb_native::ebb_core::CoreId;
use ebb_native::ebb_core::event;
use ebb_native::ebb_core::future::join_all;
use ebb_native::println;

/// Blocks allocated per round and core.
const BATCH: usize = 24;
/// Most blocks a core keeps in its local pool.
const LOCAL_POOL: usize = 48;
/// Most batches a core may have in flight to the next core (bounds memory use).
const MAX_IN_FLIGHT: u64 = 4;
/// Largest block size and alignment.
const MAX_SIZE: usize = 1 << 20;
const MAX_ALIGN_SHIFT: u32 = 12;

/// SplitMix64: a small deterministic generator (the run is reproducible from its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// 1 B to 1 MiB, log-uniform, so small and large sizes are both common.
    fn size(&mut self) -> usize {
        let bits = self.below(21) as u32; // 0..=20
        (1 + self.below(1u64 << bits) as usize).min(MAX_SIZE)
    }

    fn layout(&mut self) -> Layout {
        let align = 1usize << self.below(u64::from(MAX_ALIGN_SHIFT) + 1);
        // A power of two up to 4 KiB and a size up to 1 MiB always make a valid layout.
        Layout::from_size_align(self.size(), align).unwrap_or(Layout::new::<u64>())
    }
}

/// The byte at `offset` of the block tagged `tag`: differs between tags and along the
/// block, so an overlap with another live block is caught by the check.
fn pattern(tag: u64, offset: usize) -> u8 {
    let seed = (tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8;
    seed ^ (offset as u8) ^ ((offset >> 8) as u8).rotate_left(3)
}

/// Shared counters of the mixed phase.
#[derive(Default)]
struct Counters {
    allocated: AtomicU64,
    bytes: AtomicU64,
    local_frees: AtomicU64,
    remote_frees: AtomicU64,
    reallocs: AtomicU64,
    failed: AtomicU64,
    mismatches: AtomicU64,
    misaligned: AtomicU64,
    /// Batches sent to another core and not freed yet, per sending core.
    in_flight: [AtomicU64; 2],
}

/// One block from the global allocator, filled with its tag's pattern; freed on drop.
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
    tag: u64,
    /// The core that allocated it.
    owner: u32,
}

// SAFETY: a `Block` owns its memory exclusively (nothing else holds the pointer), and the
// global allocator accepts a free from any core, which is what sending it enables.
unsafe impl Send for Block {}

impl Block {
    /// Allocates and fills a block; `None` when the allocator has no memory.
    fn try_new(layout: Layout, tag: u64) -> Option<Block> {
        // SAFETY: `layout` has a non-zero size (sizes start at 1).
        let ptr = NonNull::new(unsafe { raw_alloc(layout) })?;
        let mut block = Block {
            ptr,
            layout,
            tag,
            owner: event::core_id().0,
        };
        block.fill(0);
        Some(block)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` points at `layout.size()` bytes allocated for this block alone and
        // initialized by `fill` right after allocation.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// Writes the pattern from `from` to the end (the part before is already written).
    fn fill(&mut self, from: usize) {
        let tag = self.tag;
        for (offset, byte) in self.bytes_mut().iter_mut().enumerate().skip(from) {
            *byte = pattern(tag, offset);
        }
    }

    fn aligned(&self) -> bool {
        (self.ptr.as_ptr() as usize).is_multiple_of(self.layout.align())
    }

    /// Whether the first `len` bytes still hold the pattern.
    fn intact(&self, len: usize) -> bool {
        let tag = self.tag;
        self.bytes()
            .iter()
            .take(len)
            .enumerate()
            .all(|(offset, &byte)| byte == pattern(tag, offset))
    }

    /// Resizes with `realloc`; the kept prefix must survive. `false` if it did not (the
    /// block is then refilled anyway) or if the allocator refused (the block is unchanged).
    fn resize(&mut self, new_size: usize, failed: &AtomicU64) -> bool {
        // SAFETY: `ptr` was allocated with `layout` by the global allocator and is live;
        // `new_size` is non-zero and, rounded up to the alignment, far below isize::MAX.
        let new = unsafe { raw_realloc(self.ptr.as_ptr(), self.layout, new_size) };
        let Some(new) = NonNull::new(new) else {
            failed.fetch_add(1, Ordering::Relaxed);
            return true; // the old block is still valid and unchanged
        };
        let kept = self.layout.size().min(new_size);
        self.ptr = new;
        // The alignment came from a valid layout and the size is below 1 MiB + 4 KiB.
        self.layout = Layout::from_size_align(new_size, self.layout.align()).unwrap_or(self.layout);
        let ok = self.intact(kept);
        self.fill(kept);
        ok
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated by the global allocator with exactly `layout` (kept up to date
        // by `resize`), and this is its only owner.
        unsafe { raw_dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// Checks a block and frees it, counting a remote free when this core did not allocate it.
fn check_and_free(block: Block, counters: &Counters) {
    if !block.intact(block.layout.size()) {
        counters.mismatches.fetch_add(1, Ordering::Relaxed);
        println!(
            "alloc_stress: block {} ({:?} at {:p}) was overwritten",
            block.tag, block.layout, block.ptr
        );
    }
    let counter = if block.owner == event::core_id().0 {
        &counters.local_frees
    } else {
        &counters.remote_frees
    };
    counter.fetch_add(1, Ordering::Relaxed);
    drop(block);
}

/// One core's part of the mixed phase.
async fn mixed_worker(core: u32, cores: u32, rounds: u32, counters: Arc<Counters>) {
    let mut rng = Rng(0x5eed_0000 + u64::from(core));
    let next_core = CoreId((core + 1) % cores);
    let mut local: Vec<Block> = Vec::new();
    let mut tag = u64::from(core) << 48;
    for _ in 0..rounds {
        let mut batch = Vec::with_capacity(BATCH);
        for _ in 0..BATCH {
            tag += 1;
            let Some(block) = Block::try_new(rng.layout(), tag) else {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            counters.allocated.fetch_add(1, Ordering::Relaxed);
            counters
                .bytes
                .fetch_add(block.layout.size() as u64, Ordering::Relaxed);
            if !block.aligned() {
                counters.misaligned.fetch_add(1, Ordering::Relaxed);
            }
            if rng.below(2) == 0 {
                local.push(block);
            } else {
                batch.push(block);
            }
        }
        // Local churn: resize some, free (checked) the oldest beyond the pool's size.
        for _ in 0..4 {
            if local.is_empty() {
                break;
            }
            let i = rng.below(local.len() as u64) as usize;
            let new_size = rng.size();
            if !local[i].resize(new_size, &counters.failed) {
                counters.mismatches.fetch_add(1, Ordering::Relaxed);
                println!(
                    "alloc_stress: realloc lost the contents of block {}",
                    local[i].tag
                );
            }
            counters.reallocs.fetch_add(1, Ordering::Relaxed);
        }
        while local.len() > LOCAL_POOL {
            let i = rng.below(local.len() as u64) as usize;
            check_and_free(local.swap_remove(i), &counters);
        }
        // The rest goes to the next core, which checks and frees it there.
        let slot = &counters.in_flight[core as usize % 2];
        while slot.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
            event::yield_now().await;
        }
        slot.fetch_add(1, Ordering::AcqRel);
        let remote = counters.clone();
        let sent = event::spawn_on(next_core, move || {
            for block in batch {
                check_and_free(block, &remote);
            }
            remote.in_flight[core as usize % 2].fetch_sub(1, Ordering::AcqRel);
        });
        if sent.is_err() {
            // The closure (and the batch in it) was dropped, which freed the blocks.
            slot.fetch_sub(1, Ordering::AcqRel);
            counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        event::yield_now().await;
    }
    for block in local.drain(..) {
        check_and_free(block, &counters);
    }
}

/// What the exhaustion phase saw.
struct Exhaustion {
    /// 1 MiB chunks obtained before the first failure.
    first_mib: usize,
    /// Smaller chunks obtained after that, and their bytes.
    small_chunks: usize,
    small_bytes: usize,
    /// Whether a 1 GiB request was refused with an error value.
    huge_refused: bool,
    /// 1 MiB chunks obtained again after everything was freed.
    regrown_mib: usize,
}

/// Allocates `chunk`-byte vectors into `held` until one fails; how many it got. Stops too
/// if `held` itself cannot grow (that is also the allocator saying no).
fn grow(held: &mut Vec<Vec<u8>>, chunk: usize) -> usize {
    let mut got = 0;
    loop {
        if held.len() == held.capacity() && held.try_reserve(held.len().max(64)).is_err() {
            return got;
        }
        let mut v = Vec::new();
        if v.try_reserve_exact(chunk).is_err() {
            return got;
        }
        let tag = held.len() as u64;
        v.extend((0..chunk).map(|offset| pattern(tag, offset)));
        held.push(v);
        got += 1;
    }
}

fn all_intact(held: &[Vec<u8>]) -> bool {
    held.iter().enumerate().all(|(tag, v)| {
        v.iter()
            .enumerate()
            .all(|(offset, &byte)| byte == pattern(tag as u64, offset))
    })
}

/// The exhaustion phase (core 0, no await: nothing else allocates meanwhile). `Err` names
/// the check that failed.
fn exhaustion() -> Result<Exhaustion, &'static str> {
    let mut probe: Vec<u8> = Vec::new();
    let huge_refused = probe.try_reserve_exact(1 << 30).is_err();
    let mut held: Vec<Vec<u8>> = Vec::new();
    let first_mib = grow(&mut held, 1 << 20);
    let (mut small_chunks, mut small_bytes) = (0, 0);
    for chunk in [64 << 10, 4 << 10, 512, 64] {
        let got = grow(&mut held, chunk);
        small_chunks += got;
        small_bytes += got * chunk;
    }
    // Out of memory now: a fallible request must fail cleanly.
    let mut more: Vec<u8> = Vec::new();
    if more.try_reserve_exact(1 << 20).is_ok() {
        return Err("a 1 MiB request succeeded after exhaustion");
    }
    if !all_intact(&held) {
        return Err("a chunk was overwritten while memory ran out");
    }
    // Free every other chunk; allocating must work again.
    let mut index = 0;
    held.retain(|_| {
        index += 1;
        index % 2 == 0
    });
    let mut again: Vec<u8> = Vec::new();
    if again.try_reserve_exact(64 << 10).is_err() {
        return Err("no 64 KiB after freeing half");
    }
    again.resize(64 << 10, 0xa5);
    let mut smalls: Vec<Vec<u64>> = Vec::new();
    if smalls.try_reserve_exact(1000).is_err() {
        return Err("no room for 1000 small blocks after freeing half");
    }
    for i in 0..1000u64 {
        let mut v = Vec::new();
        if v.try_reserve_exact(3).is_err() {
            return Err("a small allocation failed after freeing half");
        }
        v.extend([i, !i, i ^ 0x55]);
        smalls.push(v);
    }
    let smalls_ok = smalls
        .iter()
        .enumerate()
        .all(|(i, v)| v[..] == [i as u64, !(i as u64), i as u64 ^ 0x55]);
    if !smalls_ok || again.iter().any(|&b| b != 0xa5) || !all_intact_halves(&held) {
        return Err("blocks allocated after freeing half were not intact");
    }
    drop((held, again, smalls));
    let mut regrown = Vec::new();
    let regrown_mib = grow(&mut regrown, 1 << 20);
    if !all_intact(&regrown) {
        return Err("a regrown chunk was overwritten");
    }
    drop(regrown);
    if regrown_mib * 10 < first_mib * 9 {
        return Err("freed memory did not come back (under 90 % regrown)");
    }
    Ok(Exhaustion {
        first_mib,
        small_chunks,
        small_bytes,
        huge_refused,
        regrown_mib,
    })
}

/// After `retain` kept the odd-tagged chunks, chunk `k` of `held` has tag `2k + 1`.
fn all_intact_halves(held: &[Vec<u8>]) -> bool {
    held.iter().enumerate().all(|(k, v)| {
        let tag = 2 * k as u64 + 1;
        v.iter()
            .enumerate()
            .all(|(offset, &byte)| byte == pattern(tag, offset))
    })
}

async fn main() -> i32 {
    let rounds = ebb_native::cmdline()
        .split_whitespace()
        .find_map(|word| word.strip_prefix("rounds="))
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(300)
        .max(1);
    // Two cores at most take part (the in-flight slots); more vCPUs just idle.
    let cores = event::num_cores().min(2) as u32;
    let counters = Arc::new(Counters::default());
    let workers = (0..cores).map(|core| {
        let counters = counters.clone();
        event::spawn_local_on(CoreId(core), move || {
            mixed_worker(core, cores, rounds, counters)
        })
    });
    if join_all(workers).await.iter().any(Result::is_err) {
        println!("alloc_stress: a worker could not run");
        return 2;
    }
    let mut waited_ms = 0;
    while counters
        .in_flight
        .iter()
        .any(|c| c.load(Ordering::Acquire) != 0)
    {
        event::sleep(Duration::from_millis(1)).await;
        waited_ms += 1;
        if waited_ms > 10_000 {
            println!("alloc_stress: remote frees never completed");
            return 3;
        }
    }
    let c = &*counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let freed = get(&c.local_frees) + get(&c.remote_frees);
    println!(
        "alloc_stress: mixed: cores={cores} rounds={rounds} blocks={} bytes={} local_frees={} \
         remote_frees={} reallocs={} failed={} mismatches={} misaligned={}",
        get(&c.allocated),
        get(&c.bytes),
        get(&c.local_frees),
        get(&c.remote_frees),
        get(&c.reallocs),
        get(&c.failed),
        get(&c.mismatches),
        get(&c.misaligned),
    );
    println!(
        "alloc_stress: heap after mixed: {}",
        ebb_native::heap::report()
    );
    if get(&c.mismatches) != 0 {
        return 4;
    }
    if get(&c.misaligned) != 0 {
        return 5;
    }
    if freed != get(&c.allocated) {
        println!(
            "alloc_stress: {} blocks allocated but {freed} freed",
            get(&c.allocated)
        );
        return 6;
    }
    match exhaustion() {
        Ok(e) => println!(
            "alloc_stress: exhaustion: 1GiB refused={} first_failure_after_mib={} \
             then small_chunks={} small_bytes={} usable_after_free=yes regrown_mib={}",
            e.huge_refused, e.first_mib, e.small_chunks, e.small_bytes, e.regrown_mib
        ),
        Err(what) => {
            println!("alloc_stress: exhaustion: {what}");
            return 7;
        }
    }
    println!(
        "alloc_stress: heap at the end: {}",
        ebb_native::heap::report()
    );
    println!("alloc_stress: ok");
    0
}

ebb_native::runtime_entry!(main);
