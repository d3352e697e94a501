//! `wake-cost`: what a sleep costs a hosted core, the figure its idle-poll window follows.
//!
//! A core with nothing to do either polls (spins) until the next event or sleeps in
//! `epoll_wait` and is woken. Spinning costs the time spun; sleeping costs the CPU of
//! going to sleep and waking, and the delay of the wake. The ski-rental rule — spin as
//! long as a sleep costs, then sleep — is never more than twice the better choice in
//! hindsight, so the hosted idle-poll window (`ebb_hosted::Config::idle_poll`) follows
//! this machine's figure.
//!
//! Two threads on two CPUs ping-pong one 8-byte count through two eventfds, each waiting
//! in `epoll_wait` on its own. The client always polls (`epoll_wait` with a zero timeout),
//! the server once polls the same way and once blocks (no timeout). Per round trip:
//!
//! * the round trip's time each way: the difference is the wake's delay;
//! * the server thread's CPU time (user + system, `CLOCK_THREAD_CPUTIME_ID`): while it
//!   polls this is the whole round trip; while it blocks, its own work plus the sleep's
//!   CPU cost.
//!
//! Prints one JSON line with the medians over `--runs`.

use std::hint::black_box;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use rustix::event::{EventfdFlags, Timespec, epoll, eventfd};
use rustix::fd::OwnedFd;
use rustix::time::{ClockId, clock_gettime};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "the CPU cost and the delay of a sleep in epoll_wait that another CPU wakes"
)]
struct Args {
    /// Round trips per run.
    #[arg(long, default_value_t = 100_000)]
    round_trips: u64,
    /// Runs per way of waiting (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The client's CPU.
    #[arg(long, default_value_t = 0)]
    client_cpu: usize,
    /// The server's CPU.
    #[arg(long, default_value_t = 1)]
    server_cpu: usize,
}

#[derive(Debug, Default, Serialize)]
struct Figures {
    /// Round trip with a polling server, µs.
    round_trip_polling_us: f64,
    /// Round trip with a server that sleeps between requests, µs.
    round_trip_blocking_us: f64,
    /// The difference: how long a wake delays the request, µs.
    wake_delay_us: f64,
    /// The server's CPU per round trip while polling (the whole round trip), µs.
    server_cpu_polling_us: f64,
    /// The server's CPU per round trip while sleeping between requests, µs.
    server_cpu_blocking_us: f64,
}

struct Channel {
    epoll: OwnedFd,
    fd: OwnedFd,
}

impl Channel {
    fn new() -> io::Result<Channel> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epoll,
            &fd,
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        )?;
        Ok(Channel { epoll, fd })
    }

    /// Waits for the count, polling or blocking, and consumes it.
    fn receive(&self, block: bool) {
        const NO_WAIT: Timespec = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut events = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }];
        let timeout = if block { None } else { Some(&NO_WAIT) };
        loop {
            let ready = epoll::wait(&self.epoll, &mut events[..], timeout).expect("epoll_wait");
            if ready > 0 {
                break;
            }
        }
        let mut count = [0u8; 8];
        black_box(rustix::io::read(&self.fd, &mut count).expect("eventfd read"));
    }

    fn send(&self) {
        rustix::io::write(&self.fd, &1u64.to_ne_bytes()).expect("eventfd write");
    }
}

fn thread_cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One run: (round trip µs, server CPU µs per round trip).
fn run(args: &Args, block: bool) -> io::Result<(f64, f64)> {
    let to_server = Arc::new(Channel::new()?);
    let to_client = Arc::new(Channel::new()?);
    let n = args.round_trips;
    let server = {
        let (to_server, to_client) = (to_server.clone(), to_client.clone());
        let cpu = args.server_cpu;
        std::thread::spawn(move || -> io::Result<f64> {
            ebb_bench::sys::pin_current_thread(cpu)?;
            let start = thread_cpu_ns();
            for _ in 0..n {
                to_server.receive(block);
                to_client.send();
            }
            Ok((thread_cpu_ns() - start) as f64 / 1e3 / n as f64)
        })
    };
    ebb_bench::sys::pin_current_thread(args.client_cpu)?;
    let start = Instant::now();
    for _ in 0..n {
        to_server.send();
        to_client.receive(false);
    }
    let round_trip = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    let cpu = server.join().expect("server thread")?;
    Ok((round_trip, cpu))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let runs = args.runs.max(1);
    let (mut rt_poll, mut cpu_poll, mut rt_block, mut cpu_block) = (vec![], vec![], vec![], vec![]);
    // Alternate the two ways, so drifts of a shared machine fall on both.
    for _ in 0..runs {
        let (rt, cpu) = run(&args, false)?;
        rt_poll.push(rt);
        cpu_poll.push(cpu);
        let (rt, cpu) = run(&args, true)?;
        rt_block.push(rt);
        cpu_block.push(cpu);
    }
    let mut f = Figures {
        round_trip_polling_us: median(rt_poll),
        round_trip_blocking_us: median(rt_block),
        server_cpu_polling_us: median(cpu_poll),
        server_cpu_blocking_us: median(cpu_block),
        ..Figures::default()
    };
    f.wake_delay_us = f.round_trip_blocking_us - f.round_trip_polling_us;
    println!(
        "{}",
        serde_json::to_string(&f).expect("serialising plain figures")
    );
    Ok(())
}
