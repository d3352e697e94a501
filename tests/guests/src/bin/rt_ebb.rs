//! A `MulticoreEbb` counter on the native platform: every core increments its own rep,
//! which the miss handler builds on that core (on its first call there), and main gathers
//! the per-core counts. Also times a rep lookup (the GS-relative table load) in cycles.
#![no_std]
#![no_main]

extern crate alloc;

use core::cell::Cell;
use ebb_native::ebb_core::ebb::MulticoreEbb;
use ebb_native::ebb_core::event;
use ebb_native::ebb_core::future::join_all;
use ebb_native::ebb_core::{CoreId, EbbRef};
use ebb_native::{arch, println};

/// One core's rep: which core built it and its count.
struct Counter {
    built_on: u32,
    count: Cell<u64>,
}

type Counters = MulticoreEbb<Counter>;

/// Increments per core: core c adds 1000 * (c + 1).
fn increments(core: u32) -> u64 {
    1000 * u64::from(core + 1)
}

#[inline(never)]
fn lookup_cycles(ebb: EbbRef<Counters>) -> u64 {
    const N: u64 = 1_000_000;
    let t0 = arch::rdtsc();
    for _ in 0..N {
        let rep = core::hint::black_box(ebb).rep();
        core::hint::black_box(rep);
    }
    (arch::rdtsc() - t0) * 100 / N
}

async fn main() -> i32 {
    let cores = event::num_cores() as u32;
    let ebb = match Counters::create(|core| Counter {
        built_on: event::core_id().0 * 1000 + core.0, // records where the constructor ran
        count: Cell::new(0),
    }) {
        Ok(ebb) => ebb,
        Err(e) => {
            println!("rt_ebb: create failed: {e:?}");
            return 2;
        }
    };
    let calls = (0..cores).map(|c| {
        event::run_on(CoreId(c), move || {
            let before = ebb.is_resolved_here();
            for _ in 0..increments(c) {
                let rep = ebb.rep();
                rep.count.set(rep.count.get() + 1);
            }
            (before, ebb.is_resolved_here())
        })
    });
    for (c, r) in join_all(calls).await.into_iter().enumerate() {
        match r {
            Ok((false, true)) => {}
            other => {
                println!("rt_ebb: core {c}: resolution before/after {other:?}");
                return 3;
            }
        }
    }
    let gathered = match Counters::gather(ebb, |rep| (rep.built_on, rep.count.get())).await {
        Ok(g) => g,
        Err(e) => {
            println!("rt_ebb: gather failed: {e}");
            return 4;
        }
    };
    let mut total = 0;
    for (c, &(built_on, count)) in gathered.iter().enumerate() {
        let c = c as u32;
        println!(
            "rt_ebb: core {c}: rep built on core {} for core {}, count {count}",
            built_on / 1000,
            built_on % 1000
        );
        if built_on != c * 1000 + c || count != increments(c) {
            return 5;
        }
        total += count;
    }
    let lookup = lookup_cycles(ebb);
    println!(
        "rt_ebb: total {total} over {cores} cores; rep lookup {}.{:02} cycles",
        lookup / 100,
        lookup % 100
    );
    println!("rt_ebb: ok");
    0
}

ebb_native::runtime_entry!(main);
