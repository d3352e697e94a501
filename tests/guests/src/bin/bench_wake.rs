//! Benchmark: cross-core wake-up latency on the native runtime, against Linux's futex wake
//! (`bench/src/bin/wake-latency.rs`, run by `bench/scripts/native-micro.sh`). Needs 2 vCPUs;
//! run it with `--pin` so vCPU i sits on host CPU i like the Linux threads.
//!
//! Each round (as in `rt_wake`'s spin mode): core 0 waits until core 1 is asleep in the
//! WAIT hypercall (plus 200 µs for it to get all the way into the monitor's poll), reads the
//! TSC and `spawn_on`s core 1 a closure that stores the TSC; the kick wakes core 1, which
//! runs it. One way is spawn to closure start, round trip is spawn to core 0 seeing the
//! store (core 0 spins, never sleeps). Only rounds in which a kick ended core 1's wait
//! count; others are reported as `not_asleep`.
//!
//! Command line: `rounds=N` (default 500). Prints `wake: side=native what=oneway|roundtrip
//! rounds=N min_us=.. median_us=.. p99_us=.. max_us=..` (`bench/src/tsc_bench.rs`), then
//! `bench_wake: ok`.
#![no_std]
#![no_main]

extern crate alloc;

#[path = "../../../../bench/src/tsc_bench.rs"]
mod tsc_bench;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use ebb_native::ebb_core::CoreId;
use ebb_native::ebb_core::event;
use ebb_native::platform::NativePlatform;
use ebb_native::{arch, println};
use tsc_bench::{LatencyLine, cycles_to_ns, ns_to_cycles};

const SLEEPER: CoreId = CoreId(1);

/// Spins (keeping core 0 awake) until core 1 has been in the WAIT hypercall for `settle`
/// cycles; false if it is not asleep within 2 s.
fn until_sleeper_sleeps(platform: &NativePlatform, tsc_khz: u64) -> bool {
    let give_up = arch::rdtsc() + ns_to_cycles(2_000_000_000, tsc_khz);
    while !platform.is_waiting(SLEEPER) {
        if arch::rdtsc() > give_up {
            return false;
        }
        core::hint::spin_loop();
    }
    let settled = arch::rdtsc() + ns_to_cycles(200_000, tsc_khz);
    while arch::rdtsc() < settled {
        core::hint::spin_loop();
    }
    platform.is_waiting(SLEEPER)
}

async fn main() -> i32 {
    let rounds = ebb_native::cmdline()
        .split_whitespace()
        .find_map(|word| word.strip_prefix("rounds="))
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(500)
        .clamp(1, 1_000_000);
    if event::num_cores() < 2 {
        println!("bench_wake: needs 2 cpus");
        return 2;
    }
    let Some(platform) = ebb_native::runtime::platform() else {
        return 3;
    };
    let tsc_khz = ebb_native::boot_info().tsc_khz.max(1);
    let (mut one_way, mut round_trip) = (Vec::new(), Vec::new());
    let mut not_asleep = 0;
    for _ in 0..rounds {
        if !until_sleeper_sleeps(platform, tsc_khz) {
            println!("bench_wake: core 1 never went to sleep");
            return 4;
        }
        let woken_before = platform.wait_stats(SLEEPER).woken_by_kick;
        let ran_at = Arc::new(AtomicU64::new(0));
        let flag = ran_at.clone();
        let t0 = arch::rdtsc();
        if event::spawn_on(SLEEPER, move || {
            flag.store(arch::rdtsc(), Ordering::Release)
        })
        .is_err()
        {
            return 5;
        }
        let t1 = loop {
            if ran_at.load(Ordering::Acquire) != 0 {
                break arch::rdtsc();
            }
            core::hint::spin_loop();
        };
        // Count the round only if a kick ended core 1's wait (it ran the closure after it).
        if platform.wait_stats(SLEEPER).woken_by_kick > woken_before {
            let ran = ran_at.load(Ordering::Relaxed);
            one_way.push(cycles_to_ns(ran.saturating_sub(t0), tsc_khz));
            round_trip.push(cycles_to_ns(t1 - t0, tsc_khz));
        } else {
            not_asleep += 1;
        }
    }
    println!(
        "wake: side=native tsc_khz={tsc_khz} waker_core=0 sleeper_core=1 not_asleep={not_asleep}"
    );
    for (what, values) in [("oneway", &mut one_way), ("roundtrip", &mut round_trip)] {
        if let Some(line) = LatencyLine::new("native", what, values) {
            println!("{line}");
        }
    }
    println!("bench_wake: ok");
    0
}

ebb_native::runtime_entry!(main);
