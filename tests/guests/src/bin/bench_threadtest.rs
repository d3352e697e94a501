//! Benchmark: Hoard's threadtest on the native runtime, with ebb-mem's general-purpose
//! allocator as the guest's global allocator; compared with the hosted runs of
//! `bench/src/bin/threadtest-*.rs` (ebb, glibc, jemalloc, mimalloc) by
//! `bench/scripts/native-micro.sh`.
//!
//! T = number of vCPUs; each core runs `i` rounds of: allocate an array of N/T pointers,
//! allocate N/T 8-byte objects into it (writing each), free them all in order, free the
//! array — `ebb_threadtest::worker`, the loop the hosted `threadtest-*` binaries run too. The workers start
//! together behind a spin barrier; the time is from the earliest start to the latest end,
//! on the TSC.
//!
//! Command line: `n=N i=I` (default 100000 and 1000). Prints
//! `allocator=ebb-native threads=T objects=N iterations=I size=8 seconds=S` (the hosted
//! binaries' format), then `bench_threadtest: ok`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use core::hint::black_box;
use core::sync::atomic::{AtomicUsize, Ordering};
use ebb_native::ebb_core::future::join_all;
use ebb_native::ebb_core::{CoreId, event};
use ebb_native::{arch, println};

/// `name=value` from the command line.
fn arg(name: &str) -> Option<usize> {
    ebb_native::cmdline().split_whitespace().find_map(|word| {
        let (key, value) = word.split_once('=')?;
        (key == name).then(|| value.parse().ok())?
    })
}

async fn main() -> i32 {
    let objects = arg("n").unwrap_or(100_000).max(1);
    let iterations = arg("i").unwrap_or(1_000).max(1);
    let threads = event::num_cores();
    let per_thread = objects / threads;
    let arrived = Arc::new(AtomicUsize::new(0));
    let runs = (0..threads as u32).map(|core| {
        let arrived = arrived.clone();
        event::run_on(CoreId(core), move || {
            arrived.fetch_add(1, Ordering::AcqRel);
            while arrived.load(Ordering::Acquire) < threads {
                core::hint::spin_loop();
            }
            let start = arch::rdtsc();
            let sum = ebb_threadtest::worker(per_thread, iterations);
            (start, arch::rdtsc(), sum)
        })
    });
    let mut first_start = u64::MAX;
    let mut last_end = 0;
    for result in join_all(runs).await {
        match result {
            Ok((start, end, sum)) => {
                black_box(sum);
                first_start = first_start.min(start);
                last_end = last_end.max(end);
            }
            Err(e) => {
                println!("bench_threadtest: a worker failed: {e}");
                return 3;
            }
        }
    }
    let cycles = last_end.saturating_sub(first_start);
    let micros = cycles * 1000 / ebb_native::boot_info().tsc_khz.max(1);
    println!(
        "allocator=ebb-native threads={threads} objects={objects} iterations={iterations} size=8 seconds={}.{:04}",
        micros / 1_000_000,
        micros % 1_000_000 / 100
    );
    println!("bench_threadtest: ok");
    0
}

ebb_native::runtime_entry!(main);
