//! ebb-core's runtime on every vCPU: main (a task on core 0) sends work to every core with
//! `run_on`, gathers each core's id and a computed value, then exercises RCU across the
//! cores (a hash map written on core 0 and read everywhere, and a `call_rcu` callback that
//! must wait for a grace period covering every core). Exits 0 when everything checks.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use ebb_native::ebb_core::event::{self, Handle};
use ebb_native::ebb_core::future::join_all;
use ebb_native::ebb_core::rcu::RcuHashMap;
use ebb_native::ebb_core::{CoreId, percore};
use ebb_native::{arch, println};

/// A per-core computation whose result the main task can check: sum of i * (core + 1).
fn work(core: u32) -> u64 {
    (1..=10_000u64).map(|i| i * u64::from(core + 1)).sum()
}

async fn main() -> i32 {
    let cores = event::num_cores();
    println!(
        "rt_multicore: {} cores, main on {}",
        cores,
        event::core_id()
    );
    let calls = (0..cores as u32).map(|c| {
        event::run_on(CoreId(c), move || {
            let me = event::core_id().0;
            let same = percore::current_core() == Some(CoreId(me))
                && ebb_native::core_id() == me
                && arch::current_privilege_level() == 3;
            (me, same, work(me))
        })
    });
    let results = join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok((core, same, value)) => {
                println!("rt_multicore: core {core} returned {value} (ids agree: {same})");
                if *core != i as u32 || !same || *value != work(i as u32) {
                    return 3;
                }
            }
            Err(e) => {
                println!("rt_multicore: core {i} failed: {e}");
                return 4;
            }
        }
    }

    // RCU: written on core 0, read on every core.
    let Some(handle) = Handle::current() else {
        return 5;
    };
    let map: Arc<RcuHashMap<u32, u64>> = Arc::new(RcuHashMap::new(handle.rcu().clone()));
    for k in 0..1000u32 {
        map.insert(k, u64::from(k) * 3);
    }
    let reads = (0..cores as u32).map(|c| {
        let map = map.clone();
        event::run_on(CoreId(c), move || {
            (0..1000u32)
                .map(|k| map.get(&k, |v| *v).unwrap_or(0))
                .sum::<u64>()
        })
    });
    let sums: Vec<u64> = join_all(reads).await.into_iter().flatten().collect();
    let expected: u64 = (0..1000u64).map(|k| k * 3).sum();
    println!("rt_multicore: rcu map sums per core {sums:?} (expected {expected})");
    if sums.len() != cores || sums.iter().any(|&s| s != expected) {
        return 6;
    }
    for k in 0..500u32 {
        map.remove(&k);
    }
    let freed = Arc::new(AtomicBool::new(false));
    let flag = freed.clone();
    let gp_before = handle.rcu().completed_grace_periods();
    handle.rcu().call_rcu(
        Some(event::core_id()),
        alloc::boxed::Box::new(move || flag.store(true, Ordering::Release)),
    );
    let mut waited_ms = 0;
    while !freed.load(Ordering::Acquire) {
        event::sleep(Duration::from_millis(1)).await;
        waited_ms += 1;
        if waited_ms > 5000 {
            println!("rt_multicore: call_rcu callback never ran");
            return 7;
        }
    }
    let gps = handle.rcu().completed_grace_periods() - gp_before;
    println!(
        "rt_multicore: call_rcu ran after {gps} grace period(s), {} entries left",
        map.len()
    );
    if map.len() != 500 {
        return 8;
    }
    println!("rt_multicore: ok (heap: {})", ebb_native::heap::report());
    0
}

ebb_native::runtime_entry!(main);
