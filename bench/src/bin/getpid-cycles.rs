//! `getpid-cycles`: the cost of a Linux system call in TSC cycles, the peer of the native
//! `bench_libos_call` guest (a library-OS call is a function call there).
//!
//! Times `libc::syscall(SYS_getpid)` (raw: glibc may cache `getpid()`), the system call
//! row; `clock_gettime(CLOCK_MONOTONIC)` through glibc and the vDSO, no system call — the
//! real peer of the native `event::now()`, which a Linux program reads its clock with; a
//! plain non-inlined function call, the empty loop, and an 8-byte `Box` allocated and freed
//! through ebb-mem's general-purpose allocator (this binary's global allocator, on a thread
//! declared Ebbflow core 0, as natively), each as `--batches` batches of `--per-batch`
//! calls, with the same loop as the guest (`bench/src/tsc_bench.rs`). Prints
//! one line per call: `libos-call: side=linux call=NAME batches=B per_batch=P min=C
//! median=C` (cycles per call, loop included). Pin it: `taskset -c 0 getpid-cycles`.

#[path = "../tsc_bench.rs"]
mod tsc_bench;

use clap::Parser;
use ebb_core::{CoreId, percore};
use std::hint::black_box;
use tsc_bench::{PerCall, host_rdtsc, time_batches};

#[derive(Debug, Parser)]
#[command(version, about = "Linux getpid (raw syscall) cost in TSC cycles")]
struct Args {
    /// Timed batches (the min and median over them are reported).
    #[arg(long, default_value_t = 1000)]
    batches: usize,
    /// Calls per batch.
    #[arg(long, default_value_t = 1000)]
    per_batch: u32,
    /// CPU to pin to (default: leave the affinity as it is, e.g. set by taskset).
    #[arg(long)]
    core: Option<usize>,
}

/// The guest's allocator, so the `alloc_free_8` row compares the same code on both sides.
#[global_allocator]
static GLOBAL: ebb_mem::GeneralPurposeAllocator<ebb_mem::MmapSource> =
    ebb_mem::GeneralPurposeAllocator::new(ebb_mem::MmapSource::new());

#[inline(never)]
fn plain_function(x: u64) -> u64 {
    x.wrapping_add(1)
}

fn report(name: &str, batches: &mut [u64], per_batch: u32) {
    if let Some(pc) = PerCall::from_batches(batches, per_batch) {
        println!(
            "libos-call: side=linux call={name} batches={} per_batch={per_batch} min={:.1} median={:.1}",
            batches.len(),
            pc.min,
            pc.median
        );
    }
}

fn main() {
    let args = Args::parse();
    if let Some(core) = args.core
        && let Err(e) = ebb_bench::sys::pin_current_thread(core)
    {
        eprintln!("getpid-cycles: {e}");
        std::process::exit(1);
    }
    let tsc_khz = tsc_bench::host_tsc_khz(std::time::Duration::from_millis(100));
    println!("libos-call: side=linux tsc_khz={tsc_khz}");
    let mut batches = vec![0u64; args.batches.max(1)];
    let per_batch = args.per_batch.max(1);

    time_batches(&host_rdtsc, per_batch, &mut batches, || {});
    report("empty", &mut batches, per_batch);

    let mut x = 0u64;
    time_batches(&host_rdtsc, per_batch, &mut batches, || {
        x = plain_function(black_box(x));
    });
    report("function", &mut batches, per_batch);

    time_batches(&host_rdtsc, per_batch, &mut batches, || {
        // SAFETY: getpid takes no arguments, cannot fail and touches no memory of ours.
        black_box(unsafe { libc::syscall(libc::SYS_getpid) });
    });
    report("getpid", &mut batches, per_batch);

    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    time_batches(&host_rdtsc, per_batch, &mut batches, || {
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        black_box(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, black_box(&mut ts)) });
    });
    report("clock_gettime", &mut batches, per_batch);

    percore::set_current_core(Some(CoreId(0)));
    time_batches(&host_rdtsc, per_batch, &mut batches, || {
        drop(black_box(Box::new(black_box(8u64))));
    });
    report("alloc_free_8", &mut batches, per_batch);
    percore::set_current_core(None);
}
