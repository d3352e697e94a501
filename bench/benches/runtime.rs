//! Runtime micro-benchmarks, each beside its peer in the same run:
//!
//! * `ebb_call`: a call through an `EbbRef` (per-core table lookup + method) vs a direct
//!   call on `&T`;
//! * `task_switch`: two tasks ping-ponging on one core through the executor vs two pthreads
//!   ping-ponging on one core (futex condvar);
//! * `spawn_on_round_trip`: `run_on(other core, || ())` from core 0 to core 1 and back, with
//!   idle cores sleeping at once (every hop an eventfd wake-up), polling 50 µs before
//!   sleeping (the default), and kept busy by idle handlers.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use ebb_core::ebb::MulticoreEbb;
use ebb_core::event::{self, IdleStatus, run_on, spawn_local};
use ebb_core::{CoreId, percore};
use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

/// A per-core counter, the kind of thing a multicore Ebb holds.
struct Counter {
    hits: Cell<u64>,
}

impl Counter {
    #[inline(never)]
    fn add(&self, n: u64) -> u64 {
        let v = self.hits.get() + n;
        self.hits.set(v);
        v
    }
}

const CALLS_PER_ITER: u64 = 100;

fn ebb_call(c: &mut Criterion) {
    // Act as core 0 so reps are cached in this thread's table, as on a runtime core.
    percore::set_current_core(Some(CoreId(0)));
    let ebb = MulticoreEbb::create(|_| Counter { hits: Cell::new(0) }).expect("create");
    ebb.add(0); // take the miss now
    let direct = Counter { hits: Cell::new(0) };
    let mut group = c.benchmark_group("ebb_call");
    // 100 calls per iteration, so the timing loop's own cost does not swamp a ~1 ns call.
    group.throughput(criterion::Throughput::Elements(CALLS_PER_ITER));
    group.bench_function("direct_call", |b| {
        b.iter(|| {
            for _ in 0..CALLS_PER_ITER {
                black_box(&direct).add(black_box(1));
            }
        })
    });
    group.bench_function("ebb_ref_call", |b| {
        b.iter(|| {
            for _ in 0..CALLS_PER_ITER {
                black_box(ebb).rep().add(black_box(1));
            }
        })
    });
    group.finish();
    percore::set_current_core(None);
}

/// Whose turn it is, and the other task's waker.
struct Baton {
    turn: Cell<u8>,
    wakers: [Cell<Option<Waker>>; 2],
}

async fn player(me: u8, rounds: u64, baton: Rc<Baton>) {
    for _ in 0..rounds {
        poll_fn(|cx| {
            if baton.turn.get() == me {
                Poll::Ready(())
            } else {
                baton.wakers[me as usize].set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
        let other = 1 - me;
        baton.turn.set(other);
        if let Some(w) = baton.wakers[other as usize].take() {
            w.wake();
        }
    }
}

/// Runs `rounds` round trips between two tasks on one hosted core; returns the time spent.
fn executor_pingpong(rounds: u64) -> Duration {
    let config = ebb_hosted::Config::with_cores(1);
    ebb_hosted::run(config, move || async move {
        let baton = Rc::new(Baton {
            turn: Cell::new(0),
            wakers: [Cell::new(None), Cell::new(None)],
        });
        let start = Instant::now();
        let a = spawn_local(player(0, rounds, baton.clone()));
        let b = spawn_local(player(1, rounds, baton));
        a.await;
        b.await;
        start.elapsed()
    })
    .expect("runtime")
}

fn task_switch(c: &mut Criterion) {
    let mut group = c.benchmark_group("task_switch");
    // One iteration = one switch: a round trip of both players is two switches.
    group.bench_function("ebb_tasks_one_core", |b| {
        b.iter_custom(|iters| executor_pingpong(iters.div_ceil(2).max(1)))
    });
    group.sample_size(10);
    group.bench_function("pthreads_one_core", |b| {
        b.iter_custom(|iters| {
            let per_switch = ebb_bench::pingpong::pthread_pingpong(iters.div_ceil(2).max(1));
            per_switch * iters as u32
        })
    });
    group.finish();
}

/// Runs `rounds` `run_on` round trips from core 0 to core 1.
/// How the two cores wait between round trips.
#[derive(Clone, Copy)]
enum Wake {
    /// Idle cores sleep in epoll at once; every hop is an eventfd wake-up.
    Sleeping,
    /// The default: idle cores poll for 50 µs before sleeping (adaptive polling).
    AdaptivePoll,
    /// Idle handlers keep both cores spinning.
    Busy,
}

fn spawn_on_round_trips(rounds: u64, mode: Wake) -> Duration {
    let config = ebb_hosted::Config {
        idle_poll: match mode {
            Wake::Sleeping => Duration::ZERO,
            _ => ebb_hosted::Config::default().idle_poll,
        },
        ..ebb_hosted::Config::with_cores(2)
    };
    ebb_hosted::run(config, move || async move {
        if matches!(mode, Wake::Busy) {
            // Keep both cores spinning in their loops instead of sleeping in epoll.
            run_on(CoreId(1), || {
                event::add_idle_handler(|| IdleStatus::Busy);
            })
            .await
            .expect("core 1");
            event::add_idle_handler(|| IdleStatus::Busy);
        }
        let start = Instant::now();
        for _ in 0..rounds {
            run_on(CoreId(1), || ()).await.expect("round trip");
        }
        start.elapsed()
    })
    .expect("runtime")
}

fn spawn_on_round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_on_round_trip");
    group.sample_size(20);
    group.bench_function("idle_cores_sleep", |b| {
        b.iter_custom(|iters| spawn_on_round_trips(iters, Wake::Sleeping))
    });
    group.bench_function("adaptive_poll_50us", |b| {
        b.iter_custom(|iters| spawn_on_round_trips(iters, Wake::AdaptivePoll))
    });
    group.bench_function("both_cores_busy", |b| {
        b.iter_custom(|iters| spawn_on_round_trips(iters, Wake::Busy))
    });
    group.finish();
}

criterion_group!(benches, ebb_call, task_switch, spawn_on_round_trip);
criterion_main!(benches);
