//! `poll-cost`: the raw cost of "are there events?" without blocking.
//!
//! `ebb-hosted`'s per-core loop checks for I/O without blocking every 32
//! iterations while it is busy. This measures that primitive for each backend
//! on an idle instance (nothing ready, nothing in flight except an idle
//! eventfd, as the runtime's wake eventfd):
//!
//! * `epoll_pwait2_zero`: `epoll_pwait2` with a zero timeout (what the runtime does, via rustix);
//! * `uring_cq_peek`: reading the io_uring completion queue's head/tail (no syscall);
//! * `uring_enter_zero`: `io_uring_enter(to_submit 0, min_complete 0, flags 0)`;
//! * `uring_enter_getevents`: the same with `IORING_ENTER_GETEVENTS` (needed to
//!   run deferred completion work on a `DEFER_TASKRUN` ring);
//! * `uring_defer_enter_getevents`: that call on a `SINGLE_ISSUER | DEFER_TASKRUN` ring.
//!
//! Each is timed over `--calls` calls, `--runs` times; prints one JSON line
//! with the median (and min/max) ns per call of each.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::io;
use std::time::Instant;

use clap::Parser;
use io_uring::IoUring;
use rustix::event::{EventfdFlags, Timespec, epoll, eventfd};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "ns per non-blocking event check: epoll_pwait2(0) vs io_uring CQ peek / io_uring_enter"
)]
struct Args {
    /// Calls per run.
    #[arg(long, default_value_t = 1_000_000)]
    calls: u64,
    /// Runs per primitive (the median is reported).
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Pin the thread to this CPU.
    #[arg(long)]
    pin_core: Option<usize>,
}

#[derive(Debug, Serialize)]
struct Stat {
    median_ns: f64,
    min_ns: f64,
    max_ns: f64,
}

/// `IORING_ENTER_GETEVENTS` (include/uapi/linux/io_uring.h).
const ENTER_GETEVENTS: u32 = 1;

fn main() -> io::Result<()> {
    let args = Args::parse();
    if let Some(core) = args.pin_core {
        ebb_bench::sys::pin_current_thread(core)?;
    }
    let calls = args.calls.max(1);
    let mut out: BTreeMap<&str, Stat> = BTreeMap::new();

    // epoll with one idle eventfd registered, as a core's epoll with its wake fd.
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
    epoll::add(
        &ep,
        &wake,
        epoll::EventData::new_u64(u64::MAX),
        epoll::EventFlags::IN,
    )?;
    let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    out.insert(
        "epoll_pwait2_zero",
        measure(args.runs, calls, || {
            events.clear();
            let n = epoll::wait(
                &ep,
                rustix::buffer::spare_capacity(&mut events),
                Some(&zero),
            )
            .expect("epoll_wait");
            black_box(n);
        }),
    );

    let mut ring: IoUring = IoUring::new(256)?;
    out.insert(
        "uring_cq_peek",
        measure(args.runs, calls, || {
            let mut cq = ring.completion();
            black_box(cq.next());
        }),
    );
    out.insert(
        "uring_enter_zero",
        measure(args.runs, calls, || {
            black_box(ring.submit().expect("io_uring_enter"));
        }),
    );
    out.insert(
        "uring_enter_getevents",
        measure(args.runs, calls, || {
            // SAFETY: nothing to submit, no argument pointer: a pure completion check.
            let n = unsafe {
                ring.submitter()
                    .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
            };
            black_box(n.expect("io_uring_enter"));
        }),
    );
    let defer: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(256)?;
    out.insert(
        "uring_defer_enter_getevents",
        measure(args.runs, calls, || {
            // SAFETY: nothing to submit, no argument pointer: a pure completion check.
            let n = unsafe {
                defer
                    .submitter()
                    .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
            };
            black_box(n.expect("io_uring_enter"));
        }),
    );

    println!(
        "{}",
        serde_json::to_string(&out).expect("serialising plain map")
    );
    Ok(())
}

/// Runs `f` `calls` times, `runs` times over (after one warm-up run); ns per call.
fn measure(runs: usize, calls: u64, mut f: impl FnMut()) -> Stat {
    let mut per_call: Vec<f64> = (0..=runs.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_nanos() as f64 / calls as f64
        })
        .skip(1)
        .collect();
    per_call.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 10.0).round() / 10.0;
    Stat {
        median_ns: r(per_call[per_call.len() / 2]),
        min_ns: r(per_call[0]),
        max_ns: r(per_call[per_call.len() - 1]),
    }
}
