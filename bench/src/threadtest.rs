//! Hoard's `threadtest`, shared by the `threadtest-*` binaries (one per global allocator,
//! since the global allocator is fixed at compile time).
//!
//! T threads each run `iterations` rounds of: allocate an array of N/T pointers, allocate
//! N/T 8-byte objects into it (writing each), then free them all in order and free the
//! array — exactly the loop of Hoard's `threadtest.cpp`, in `ebb-threadtest` (the native
//! guest runs the same copy). Each thread declares itself an
//! Ebbflow core (`percore::set_current_core`), so Ebbflow's allocator uses its per-core
//! caches (the other allocators ignore it), and is pinned to CPU `t % ncpus`.
//!
//! Output: one line, `allocator=NAME threads=T objects=N iterations=I size=8 seconds=S`.

use clap::Parser;
use ebb_core::{CoreId, percore};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "Hoard threadtest: T threads allocate and free N/T 8-byte objects, I rounds")]
struct Args {
    /// Number of threads (each registered as an Ebbflow core).
    #[arg(short, long, default_value_t = 1)]
    threads: usize,
    /// Total objects N (each thread allocates N/T per round).
    #[arg(short = 'n', long, default_value_t = 100_000)]
    objects: usize,
    /// Rounds I.
    #[arg(short, long, default_value_t = 1_000)]
    iterations: usize,
    /// Do not pin threads to CPUs.
    #[arg(long)]
    no_pin: bool,
}

pub fn run(allocator: &str) {
    let args = Args::parse();
    let threads = args.threads.max(1);
    let per_thread = args.objects / threads;
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = barrier.clone();
            let (pin, iterations) = (!args.no_pin, args.iterations);
            std::thread::spawn(move || {
                if pin {
                    let _ = ebb_bench::sys::pin_current_thread(t % ncpus);
                }
                percore::set_current_core(Some(CoreId(t as u32)));
                barrier.wait();
                let sum = ebb_threadtest::worker(per_thread, iterations);
                percore::set_current_core(None);
                sum
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let sum: i64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let seconds = start.elapsed().as_secs_f64();
    black_box(sum);
    println!(
        "allocator={allocator} threads={threads} objects={} iterations={} size=8 seconds={seconds:.4}",
        args.objects, args.iterations
    );
}
