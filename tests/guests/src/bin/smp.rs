//! Two cores: core 1 sleeps in the wait hypercall until core 0 kicks it, answers through
//! shared memory, and core 0 reports the round trip. Also checks the clock hypercall.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, Ordering};
use ebb_native::{boot_info, hypercall, println};

static ANSWER: AtomicU32 = AtomicU32::new(0);
static READY: AtomicU32 = AtomicU32::new(0);

fn main() -> i32 {
    if boot_info().cpu_count < 2 {
        println!("smp: needs 2 cpus");
        return 2;
    }
    let (real, mono) = hypercall::clock();
    println!("smp: clock realtime_ns {real} monotonic_ns {mono}");
    // A short wait with no kick must time out, and the clock must show it took as long.
    if hypercall::wait(1_000_000) {
        println!("smp: wait without a kick reported a kick");
        return 3;
    }
    let (real_after, mono_after) = hypercall::clock();
    println!("smp: after a 1 ms wait realtime_ns {real_after} monotonic_ns {mono_after}");
    while READY.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    hypercall::kick(1);
    while ANSWER.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    println!("smp: core 1 answered {}", ANSWER.load(Ordering::Relaxed));
    0
}

fn secondary(core: u32) {
    READY.store(1, Ordering::Release);
    let kicked = hypercall::wait(u64::MAX);
    ANSWER.store(if kicked { 100 + core } else { 1 }, Ordering::Release);
}

ebb_native::entry!(main, secondary);
