//! A compute loop timed with the TSC, for comparison with the same loop in a Linux process
//! (`crates/ebb-vmm/tests/boot.rs`). Prints `compute: <best cycles>`.
#![no_std]
#![no_main]

use ebb_native::{arch, println};

include!("../workload.rs");

fn main() -> i32 {
    let mut best = u64::MAX;
    for _ in 0..ROUNDS {
        let t0 = arch::rdtsc();
        core::hint::black_box(workload(ITERATIONS));
        best = best.min(arch::rdtsc() - t0);
    }
    println!("compute: {best}");
    0
}

ebb_native::entry!(main);
