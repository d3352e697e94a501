//! Benchmark: OS noise inside a native guest, against a Linux process on the same host core
//! (`bench/src/bin/tsc-noise.rs`, run by `bench/scripts/native-micro.sh`).
//!
//! Core 0 reads the TSC back to back for `seconds=S` (default 5) and records every gap
//! between consecutive reads (`bench/src/tsc_bench.rs`, included by path: the same loop and
//! histogram as the Linux side). The guest takes no interrupts and makes no hypercall in
//! the loop, so every long gap is the host (or the hypervisor under it) taking the vCPU
//! away. Run it with one vCPU and `--pin`. Prints `noise: side=native ...`, a `noise-log2:`
//! line, then `bench_noise: ok`.
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../../../../bench/src/tsc_bench.rs"]
mod tsc_bench;

use alloc::boxed::Box;
use ebb_native::{arch, println};
use tsc_bench::{GapHistogram, NoiseReport, noise_loop, ns_to_cycles};

fn main() -> i32 {
    let seconds = ebb_native::cmdline()
        .split_whitespace()
        .find_map(|word| word.strip_prefix("seconds="))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(5)
        .clamp(1, 3600);
    let tsc_khz = ebb_native::boot_info().tsc_khz;
    if tsc_khz == 0 {
        println!("bench_noise: the monitor did not report the TSC frequency");
        return 2;
    }
    let mut hist = Box::new(GapHistogram::new(tsc_khz));
    let tsc = arch::rdtsc;
    noise_loop(
        &tsc,
        ns_to_cycles(seconds * 1_000_000_000, tsc_khz),
        &mut hist,
    );
    println!(
        "{}",
        NoiseReport {
            side: "native",
            seconds,
            tsc_khz,
            hist: &hist,
        }
    );
    println!("bench_noise: ok");
    0
}

ebb_native::entry!(main);
