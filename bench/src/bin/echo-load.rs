//! `echo-load`: closed-loop load generator for TCP echo servers.
//!
//! `--conns` connections, each with exactly one request in flight: write
//! `--size` bytes, wait until `--size` bytes have come back, record the
//! latency, repeat. One thread, one `mio` poller (edge-triggered), so the
//! generator is cheap and can be pinned to one core (`--pin-core`).
//! After `--warmup` (not recorded) it measures for `--duration` and prints one
//! JSON line to stdout. Exits non-zero on connection errors.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ebb_bench::parse_duration;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Closed-loop TCP echo load generator (single-threaded, mio)"
)]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: SocketAddr,
    /// Concurrent connections (one request in flight each).
    #[arg(long, default_value_t = 50)]
    conns: usize,
    /// Request (and echo) size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Measured duration (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up before measuring (not recorded).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    warmup: Duration,
    /// Pin the generator thread to this CPU.
    #[arg(long)]
    pin_core: Option<usize>,
    /// Give up if the connections are not all established within this time.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    connect_timeout: Duration,
}

#[derive(Debug, Serialize)]
struct Output {
    rps: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    conns: usize,
    size: usize,
    duration_s: f64,
    errors: u64,
    mean_us: f64,
    requests: u64,
    warmup_s: f64,
}

struct Conn {
    stream: Option<TcpStream>,
    connected: bool,
    written: usize,
    received: usize,
    started: Instant,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok((out, first_err)) => {
            println!(
                "{}",
                serde_json::to_string(&out).expect("serialising plain struct")
            );
            if out.errors > 0 {
                eprintln!(
                    "echo-load: {} connection error(s) during the run; first: {}",
                    out.errors,
                    first_err.unwrap_or_default()
                );
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("echo-load: error: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<(Output, Option<String>), String> {
    if args.conns == 0 || args.size == 0 {
        return Err("--conns and --size must be positive".into());
    }
    if let Some(core) = args.pin_core {
        ebb_bench::sys::pin_current_thread(core).map_err(|e| format!("--pin-core: {e}"))?;
    }
    let _ = ebb_bench::sys::raise_fd_limit(args.conns as u64 + 256);

    let mut poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let mut conns = Vec::with_capacity(args.conns);
    let now = Instant::now();
    for i in 0..args.conns {
        let mut s = TcpStream::connect(args.addr)
            .map_err(|e| format!("connection {i} to {}: connect: {e}", args.addr))?;
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("connection {i}: register: {e}"))?;
        conns.push(Conn {
            stream: Some(s),
            connected: false,
            written: 0,
            received: 0,
            started: now,
        });
    }

    let mut events = Events::with_capacity(1024);
    // Phase 1: wait until every connection is established.
    let deadline = Instant::now() + args.connect_timeout;
    let mut connecting = args.conns;
    while connecting > 0 {
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "{connecting} of {} connections to {} not established within {:?}",
                args.conns, args.addr, args.connect_timeout
            ));
        }
        poll_once(&mut poll, &mut events, deadline - now)?;
        for ev in events.iter() {
            let i = ev.token().0;
            let c = &mut conns[i];
            if c.connected {
                continue;
            }
            let s = c.stream.as_ref().expect("open during connect");
            match s.take_error() {
                Ok(Some(e)) | Err(e) => {
                    return Err(format!("connection {i} to {}: connect: {e}", args.addr));
                }
                Ok(None) => {}
            }
            match s.peer_addr() {
                Ok(_) => {
                    s.set_nodelay(true)
                        .map_err(|e| format!("connection {i}: TCP_NODELAY: {e}"))?;
                    c.connected = true;
                    connecting -= 1;
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                Err(e) => return Err(format!("connection {i} to {}: connect: {e}", args.addr)),
            }
        }
    }

    // Phase 2: closed loop.
    let payload: Vec<u8> = (0..args.size).map(|i| (i % 251) as u8).collect();
    let mut rbuf = vec![0u8; args.size.clamp(4096, 256 * 1024)];
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let mut errors = 0u64;
    let mut first_err: Option<String> = None;
    let mut alive = args.conns;

    let start = Instant::now();
    let measure_from = start + args.warmup;
    let end = measure_from + args.duration;
    let mut ctx = Ctx {
        payload: &payload,
        rbuf: &mut rbuf,
        hist: &mut hist,
        measure_from,
        end,
        completed: 0,
    };
    for (i, c) in conns.iter_mut().enumerate() {
        c.started = start;
        if let Err(e) = drive(c, &mut ctx) {
            fail(&mut poll, c, i, e, &mut errors, &mut first_err);
            alive -= 1;
        }
    }
    let mut now = Instant::now();
    while now < end && alive > 0 {
        poll_once(&mut poll, &mut events, end - now)?;
        for ev in events.iter() {
            let i = ev.token().0;
            if conns[i].stream.is_none() {
                continue;
            }
            if let Err(e) = drive(&mut conns[i], &mut ctx) {
                fail(&mut poll, &mut conns[i], i, e, &mut errors, &mut first_err);
                alive -= 1;
            }
        }
        now = Instant::now();
    }
    let completed = ctx.completed;
    let measured = now
        .saturating_duration_since(measure_from)
        .max(Duration::from_nanos(1));
    if alive == 0 {
        eprintln!("echo-load: all connections failed; stopping early");
    }

    let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
    let q = |p: f64| us(hist.value_at_quantile(p));
    let out = Output {
        rps: (completed as f64 / measured.as_secs_f64() * 10.0).round() / 10.0,
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: us(hist.max()),
        conns: args.conns,
        size: args.size,
        duration_s: (measured.as_secs_f64() * 1000.0).round() / 1000.0,
        errors,
        mean_us: (hist.mean() / 100.0).round() / 10.0,
        requests: completed,
        warmup_s: args.warmup.as_secs_f64(),
    };
    if completed == 0 && errors == 0 {
        return Err(format!(
            "no request completed in {:?} (server at {} not echoing?)",
            measured, args.addr
        ));
    }
    Ok((out, first_err))
}

struct Ctx<'a> {
    payload: &'a [u8],
    rbuf: &'a mut [u8],
    hist: &'a mut Histogram<u64>,
    measure_from: Instant,
    end: Instant,
    completed: u64,
}

fn poll_once(poll: &mut Poll, events: &mut Events, timeout: Duration) -> Result<(), String> {
    match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        Err(e) => Err(format!("epoll_wait: {e}")),
    }
}

fn fail(
    poll: &mut Poll,
    c: &mut Conn,
    i: usize,
    e: String,
    errors: &mut u64,
    first_err: &mut Option<String>,
) {
    if let Some(mut s) = c.stream.take() {
        let _ = poll.registry().deregister(&mut s);
    }
    *errors += 1;
    if first_err.is_none() {
        *first_err = Some(format!("connection {i}: {e}"));
    }
}

/// Drives one connection until both directions would block (edge-triggered).
fn drive(c: &mut Conn, ctx: &mut Ctx<'_>) -> Result<(), String> {
    let size = ctx.payload.len();
    let s = c.stream.as_mut().expect("drive on open connection");
    loop {
        let mut progress = false;
        if c.written < size {
            match s.write(&ctx.payload[c.written..]) {
                Ok(0) => return Err("write returned 0".into()),
                Ok(k) => {
                    c.written += k;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        match s.read(ctx.rbuf) {
            Ok(0) => {
                return Err(format!(
                    "server closed the connection (EOF) with {} of {size} bytes echoed",
                    c.received
                ));
            }
            Ok(k) => {
                c.received += k;
                if c.received > c.written {
                    return Err(format!(
                        "server echoed {} bytes but only {} were sent",
                        c.received, c.written
                    ));
                }
                if c.received == size {
                    let now = Instant::now();
                    if now >= ctx.measure_from && now < ctx.end {
                        let ns = now.duration_since(c.started).as_nanos() as u64;
                        ctx.hist.saturating_record(ns.max(1));
                        ctx.completed += 1;
                    }
                    if now >= ctx.end {
                        return Ok(());
                    }
                    c.started = now;
                    c.written = 0;
                    c.received = 0;
                }
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
            Err(e) => return Err(format!("read: {e}")),
        }
        if !progress {
            return Ok(());
        }
    }
}
