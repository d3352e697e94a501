//! `wake-latency`: cross-core wake-up of a sleeping thread on Linux, the peer of the native
//! `bench_wake` guest (a vCPU asleep in the WAIT hypercall woken by `spawn_on`).
//!
//! A sleeper thread pinned to `--sleeper-core` blocks in `FUTEX_WAIT`; each round the waker,
//! pinned to `--waker-core`, waits until the sleeper has announced it is going to sleep and
//! 200 µs more (as the guest does), reads the TSC, sets the futex word and calls
//! `FUTEX_WAKE`. The sleeper reads the TSC as soon as it runs (one way: wake call to the
//! woken code running) and the waker spins until it sees that (round trip). Only rounds in
//! which `FUTEX_WAKE` really woke a sleeping thread count; the others are reported as
//! `not_asleep`.
//!
//! Prints `wake: side=linux what=oneway|roundtrip rounds=N min_us=.. median_us=.. p99_us=..
//! max_us=..` (`bench/src/tsc_bench.rs`).

#[path = "../tsc_bench.rs"]
mod tsc_bench;

use clap::Parser;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tsc_bench::{LatencyLine, cycles_to_ns, host_rdtsc, host_tsc_khz, ns_to_cycles};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Cross-core wake-up latency of a thread blocked in a futex"
)]
struct Args {
    /// Rounds.
    #[arg(long, default_value_t = 500)]
    rounds: usize,
    /// CPU of the waking thread.
    #[arg(long, default_value_t = 0)]
    waker_core: usize,
    /// CPU of the sleeping thread.
    #[arg(long, default_value_t = 1)]
    sleeper_core: usize,
}

/// What the two threads share.
#[derive(Default)]
struct Shared {
    /// The futex word: 1 = wake up.
    word: AtomicU32,
    /// Set by the sleeper just before it blocks.
    going_to_sleep: AtomicBool,
    /// TSC when the woken sleeper ran (0 until then).
    ran_at: AtomicU64,
    stop: AtomicBool,
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: `word` is a live, aligned u32 for the whole call; a null timeout blocks until
    // woken (or a spurious return, which the caller's loop handles).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// Wakes one waiter; how many were woken.
fn futex_wake(word: &AtomicU32) -> i64 {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE only reads the wait queue.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    }
}

fn sleeper(shared: &Shared) {
    loop {
        shared.going_to_sleep.store(true, Ordering::Release);
        while shared.word.load(Ordering::Acquire) == 0 {
            futex_wait(&shared.word, 0);
        }
        shared.ran_at.store(host_rdtsc(), Ordering::Release);
        shared.word.store(0, Ordering::Release);
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = ebb_bench::sys::pin_current_thread(args.waker_core) {
        eprintln!("wake-latency: {e}");
        std::process::exit(1);
    }
    let tsc_khz = host_tsc_khz(Duration::from_millis(100));
    let shared = Arc::new(Shared::default());
    let sleeper_thread = {
        let shared = shared.clone();
        let core = args.sleeper_core;
        std::thread::spawn(move || {
            if let Err(e) = ebb_bench::sys::pin_current_thread(core) {
                eprintln!("wake-latency: {e}");
                std::process::exit(1);
            }
            sleeper(&shared)
        })
    };
    let settle = ns_to_cycles(200_000, tsc_khz);
    let (mut one_way, mut round_trip) = (Vec::new(), Vec::new());
    let mut not_asleep = 0;
    for _ in 0..args.rounds {
        while !shared.going_to_sleep.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let settled = host_rdtsc() + settle;
        while host_rdtsc() < settled {
            std::hint::spin_loop();
        }
        shared.going_to_sleep.store(false, Ordering::Relaxed);
        shared.ran_at.store(0, Ordering::Relaxed);
        let t0 = host_rdtsc();
        shared.word.store(1, Ordering::Release);
        let woken = futex_wake(&shared.word);
        let t1 = loop {
            if shared.ran_at.load(Ordering::Acquire) != 0 {
                break host_rdtsc();
            }
            std::hint::spin_loop();
        };
        if woken == 1 {
            let ran_at = shared.ran_at.load(Ordering::Relaxed);
            one_way.push(cycles_to_ns(ran_at.saturating_sub(t0), tsc_khz));
            round_trip.push(cycles_to_ns(t1 - t0, tsc_khz));
        } else {
            not_asleep += 1;
        }
    }
    while !shared.going_to_sleep.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
    shared.stop.store(true, Ordering::Release);
    shared.word.store(1, Ordering::Release);
    futex_wake(&shared.word);
    if sleeper_thread.join().is_err() {
        eprintln!("wake-latency: the sleeper thread panicked");
        std::process::exit(1);
    }
    println!(
        "wake: side=linux tsc_khz={tsc_khz} waker_core={} sleeper_core={} not_asleep={not_asleep}",
        args.waker_core, args.sleeper_core
    );
    for (what, values) in [("oneway", &mut one_way), ("roundtrip", &mut round_trip)] {
        if let Some(line) = LatencyLine::new("linux", what, values) {
            println!("{line}");
        }
    }
}
