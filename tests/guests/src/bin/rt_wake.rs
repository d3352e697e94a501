//! Cross-core wake-up on the native platform (needs 2 vCPUs). Core 1 idles into the WAIT
//! hypercall; core 0 then `spawn_on`s it a closure, which the kick wakes it to run:
//!
//! * "spin": core 0 stays awake, spinning on a flag the closure sets, so the round trip is
//!   the kick, core 1 leaving WAIT and running the closure, and the flag's cache line;
//! * "await": `run_on(..).await`, a full async round trip (core 0 may idle meanwhile).
//!
//! Also checks that a *running* core is never kicked. Prints min/median/max in
//! microseconds; exits 0 when every wake was a kick of a sleeping core.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use ebb_native::ebb_core::event::{self, Handle};
use ebb_native::ebb_core::{CoreId, Instant};
use ebb_native::platform::NativePlatform;
use ebb_native::{arch, println};

const ROUNDS: usize = 40;
const TARGET: CoreId = CoreId(1);

fn us(ticks: u64) -> u64 {
    ticks * 1000 / ebb_native::boot_info().tsc_khz.max(1)
}

/// Spins (keeping core 0 awake) until core 1 sits in the WAIT hypercall.
fn until_target_sleeps(platform: &NativePlatform) -> bool {
    let give_up = event::now() + Duration::from_secs(2);
    while !platform.is_waiting(TARGET) {
        if event::now() > give_up {
            return false;
        }
        core::hint::spin_loop();
    }
    // Let it get all the way into the monitor's poll.
    let settle = event::now() + Duration::from_micros(200);
    while event::now() < settle {
        core::hint::spin_loop();
    }
    platform.is_waiting(TARGET)
}

fn summary(name: &str, mut v: Vec<u64>) {
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return;
    }
    println!(
        "rt_wake: {name}: {n} rounds, round trip min {} us, median {} us, p90 {} us, max {} us",
        v[0],
        v[n / 2],
        v[n * 9 / 10],
        v[n - 1]
    );
}

async fn main() -> i32 {
    if event::num_cores() < 2 {
        println!("rt_wake: needs 2 cpus");
        return 2;
    }
    let (Some(platform), Some(handle)) = (ebb_native::runtime::platform(), Handle::current())
    else {
        return 3;
    };
    let mut code = 0;

    // Spin mode: core 0 never sleeps.
    let mut spin = Vec::new();
    let mut one_way = Vec::new();
    for _ in 0..ROUNDS {
        if !until_target_sleeps(platform) {
            println!("rt_wake: core 1 never went to sleep");
            return 4;
        }
        let kicks = handle.kicks(TARGET);
        let woken = platform.wait_stats(TARGET).woken_by_kick;
        let ran_at = Arc::new(AtomicU64::new(0));
        let flag = ran_at.clone();
        let t0 = arch::rdtsc();
        if event::spawn_on(TARGET, move || flag.store(arch::rdtsc(), Ordering::Release)).is_err() {
            return 5;
        }
        let t1 = loop {
            if ran_at.load(Ordering::Acquire) != 0 {
                break arch::rdtsc();
            }
            core::hint::spin_loop();
        };
        spin.push(us(t1 - t0));
        one_way.push(us(ran_at.load(Ordering::Relaxed).saturating_sub(t0)));
        // Exactly one kick, and core 1's wait ended by it.
        while platform.is_waiting(TARGET) && platform.wait_stats(TARGET).woken_by_kick == woken {
            core::hint::spin_loop();
        }
        if handle.kicks(TARGET) != kicks + 1 || platform.wait_stats(TARGET).woken_by_kick <= woken {
            println!(
                "rt_wake: round without a kick-ended wait: kicks {} -> {}, stats {:?}",
                kicks,
                handle.kicks(TARGET),
                platform.wait_stats(TARGET)
            );
            code = 6;
        }
    }
    summary("spin (core 0 awake)", spin);
    summary("one way (spawn_on to closure start)", one_way);

    // Await mode: the full async round trip.
    let mut awaited = Vec::new();
    for _ in 0..ROUNDS {
        if !until_target_sleeps(platform) {
            return 4;
        }
        let t0: Instant = event::now();
        if event::run_on(TARGET, || event::core_id().0).await != Ok(1) {
            return 7;
        }
        awaited.push((event::now() - t0).as_micros() as u64);
    }
    summary("await (run_on)", awaited);

    // A running core is never kicked: keep core 1 busy in a closure until core 0 has sent
    // it 100 more closures (5 s at most), then let it go.
    if !until_target_sleeps(platform) {
        return 4;
    }
    let kicks_before = handle.kicks(TARGET);
    let state = Arc::new(AtomicU64::new(0)); // 1: core 1 busy; 2: core 0 done sending
    let s2 = state.clone();
    let _ = event::spawn_on(TARGET, move || {
        s2.store(1, Ordering::Release);
        let give_up = event::now() + Duration::from_secs(5);
        while s2.load(Ordering::Acquire) != 2 && event::now() < give_up {
            core::hint::spin_loop();
        }
        if s2.load(Ordering::Acquire) != 2 {
            s2.store(3, Ordering::Release); // gave up: the check below fails
        }
    });
    while state.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let kicks_busy = handle.kicks(TARGET);
    let sends = 100;
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..sends {
        let d = done.clone();
        let _ = event::spawn_on(TARGET, move || {
            d.fetch_add(1, Ordering::Relaxed);
        });
    }
    let kicks_after = handle.kicks(TARGET);
    let released = state.compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire);
    while done.load(Ordering::Relaxed) < sends {
        event::sleep(Duration::from_millis(1)).await;
    }
    println!(
        "rt_wake: busy core: {sends} spawn_on sent while it ran, kicks {} (waking it: {})",
        kicks_after - kicks_busy,
        kicks_busy - kicks_before
    );
    if kicks_after != kicks_busy || released.is_err() {
        code = 8;
    }
    println!(
        "rt_wake: core 1 wait stats {:?}",
        platform.wait_stats(TARGET)
    );
    if code == 0 {
        println!("rt_wake: ok");
    }
    code
}

ebb_native::runtime_entry!(main);
