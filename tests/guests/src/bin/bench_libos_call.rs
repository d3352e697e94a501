//! Benchmark: the cost of a library-OS call in TSC cycles, against Linux's `getpid`
//! (`bench/src/bin/getpid-cycles.rs`, run by `bench/scripts/native-micro.sh`).
//!
//! On core 0 of the runtime, times `event::core_id()` (a GS-relative load of the core's
//! context), `event::now()` (the platform clock: `rdtsc`, a multiply and a shift behind a
//! trait object) and, for scale, a non-inlined function, the empty loop, an 8-byte `Box`
//! allocated and freed (the global allocator's fast path; the Linux side uses the same
//! allocator), the CLOCK hypercall (an exit to the monitor through port I/O) and, when the
//! monitor gave the guest a virtio-MMIO transport (`--net`), a read of its magic register
//! (an MMIO exit, which the vCPU thread answers in user space). The loop is the host's (`bench/src/tsc_bench.rs`,
//! included by path): batches of calls, each followed by a compiler barrier so a `pure`
//! GS read cannot be hoisted out of the loop. Prints one `libos-call: side=native
//! call=NAME batches=B per_batch=P min=C median=C` line per call (cycles per call, loop
//! included), then `bench_libos_call: ok`.
//!
//! Command line: `batches=B per_batch=P` (default 1000 and 1000).
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../../../../bench/src/tsc_bench.rs"]
mod tsc_bench;

use alloc::boxed::Box;
use alloc::vec;
use core::hint::black_box;
use ebb_native::ebb_core::event;
use ebb_native::{arch, hypercall, println};
use tsc_bench::{PerCall, time_batches};

/// `name=value` from the command line.
fn arg(name: &str) -> Option<u64> {
    ebb_native::cmdline().split_whitespace().find_map(|word| {
        let (key, value) = word.split_once('=')?;
        (key == name).then(|| value.parse().ok())?
    })
}

fn report(name: &str, batches: &mut [u64], per_batch: u32) {
    if let Some(pc) = PerCall::from_batches(batches, per_batch) {
        println!(
            "libos-call: side=native call={name} batches={} per_batch={per_batch} min={:.1} median={:.1}",
            batches.len(),
            pc.min,
            pc.median
        );
    }
}

#[inline(never)]
fn plain_function(x: u64) -> u64 {
    x.wrapping_add(1)
}

async fn main() -> i32 {
    let batch_count = arg("batches").unwrap_or(1000).clamp(1, 1_000_000) as usize;
    let per_batch = arg("per_batch").unwrap_or(1000).clamp(1, 1_000_000) as u32;
    println!(
        "libos-call: side=native tsc_khz={}",
        ebb_native::boot_info().tsc_khz
    );
    let mut batches = vec![0u64; batch_count];
    let tsc = arch::rdtsc;

    time_batches(&tsc, per_batch, &mut batches, || {});
    report("empty", &mut batches, per_batch);

    let mut x = 0u64;
    time_batches(&tsc, per_batch, &mut batches, || {
        x = plain_function(black_box(x));
    });
    report("function", &mut batches, per_batch);

    time_batches(&tsc, per_batch, &mut batches, || {
        black_box(event::core_id());
    });
    report("core_id", &mut batches, per_batch);

    time_batches(&tsc, per_batch, &mut batches, || {
        black_box(event::now());
    });
    report("now", &mut batches, per_batch);

    time_batches(&tsc, per_batch, &mut batches, || {
        drop(black_box(Box::new(black_box(8u64))));
    });
    report("alloc_free_8", &mut batches, per_batch);

    // An exit to the monitor costs ~100 µs here: a few short batches suffice.
    let mut exits = vec![0u64; 20];
    time_batches(&tsc, 5, &mut exits, || {
        black_box(hypercall::clock());
    });
    report("clock_hypercall", &mut exits, 5);

    // A register read of a virtio-MMIO transport, when the monitor has one (`--net`):
    // an exit the vCPU thread answers in user space, without the port-I/O path.
    if let Some(regs) = ebb_native::virtio::mmio::Regs::slot(0).filter(|r| r.present()) {
        let mut reads = vec![0u64; 200];
        time_batches(&tsc, 20, &mut reads, || {
            black_box(regs.read(0));
        });
        report("mmio_read", &mut reads, 20);
    }

    println!("bench_libos_call: ok");
    0
}

ebb_native::runtime_entry!(main);
