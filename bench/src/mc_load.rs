//! The engine of `mc-load`: memcached text-protocol clients on one epoll loop per thread.
//!
//! Each thread owns its connections (non-blocking sockets, edge-triggered epoll) and
//! shares nothing with the others until the end, when the histograms and counters are
//! merged. A request is written into its connection's output buffer with the time it
//! counts from and is answered in order (memcached answers a connection's requests in
//! the order it received them), so a response is matched to the oldest request still
//! waiting on its connection.
//!
//! * Closed loop: each connection keeps `depth` requests outstanding, issuing them in
//!   batches of `pipeline` (one write each); a latency runs from just before the write
//!   to the read that completed the response.
//! * Open loop: requests arrive as a Poisson process of rate `qps` (per thread: its
//!   share), each arrival a batch of `pipeline` requests on a connection chosen
//!   uniformly (so each connection sees a Poisson process too). A request is written at
//!   its scheduled time whether or not the connection's earlier requests have been
//!   answered, and its latency runs **from the scheduled time**: a client that falls
//!   behind (or a server that stalls it) shows up in the latencies instead of silently
//!   thinning the load ("coordinated omission"). The loop sleeps to the next arrival
//!   with `epoll_pwait2` (nanosecond timeout, timer slack set to 1 ns); the wake-up
//!   jitter of the client's own timer is part of what it measures.
//!
//! Only responses completed inside the measured window (after the warm-up) are counted;
//! requests still unanswered at the end are reported as `outstanding`.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::mc_workload::{Op, Rng, Workload};

/// How requests are generated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// `depth` outstanding per connection.
    Closed { depth: usize },
    /// Poisson arrivals at `qps` requests per second (all threads together).
    Open { qps: f64 },
}

#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    pub conns: usize,
    pub threads: usize,
    pub mode: Mode,
    pub pipeline: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Thread `i` runs on `pin[i % pin.len()]` (no pinning when empty).
    pub pin: Vec<usize>,
    pub seed: u64,
    pub connect_timeout: Duration,
}

/// What a run measured (all threads).
#[derive(Clone, Debug)]
pub struct Report {
    pub hist: Histogram<u64>,
    /// Responses completed in the window.
    pub completed: u64,
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    /// Error replies (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, `NOT_STORED`) and
    /// connections lost.
    pub errors: u64,
    pub first_error: Option<String>,
    /// The window, seconds (the longest of the threads').
    pub measured_s: f64,
    /// CPU time of the client's threads in the window (user + system), seconds.
    pub cpu_s: f64,
    /// Requests sent and not answered when the window closed.
    pub outstanding: u64,
    /// Open loop: arrivals not sent, because their connection already had too much
    /// unsent or had failed (failures also count as errors).
    pub dropped: u64,
    /// Open loop: how late the client wrote each arrival (ns after its scheduled time,
    /// counted for arrivals scheduled in the window). Part of every latency; when it is
    /// large the client (or its CPU) is the bottleneck, not the server.
    pub lag: Histogram<u64>,
}

impl Report {
    fn new() -> Result<Report, String> {
        Ok(Report {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| format!("histogram: {e}"))?,
            completed: 0,
            gets: 0,
            hits: 0,
            sets: 0,
            errors: 0,
            first_error: None,
            measured_s: 0.0,
            cpu_s: 0.0,
            outstanding: 0,
            dropped: 0,
            lag: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| format!("histogram: {e}"))?,
        })
    }

    fn merge(&mut self, o: Report) -> Result<(), String> {
        self.hist
            .add(&o.hist)
            .and_then(|()| self.lag.add(&o.lag))
            .map_err(|e| format!("histogram: {e}"))?;
        self.completed += o.completed;
        self.gets += o.gets;
        self.hits += o.hits;
        self.sets += o.sets;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.measured_s = self.measured_s.max(o.measured_s);
        self.cpu_s += o.cpu_s;
        self.outstanding += o.outstanding;
        self.dropped += o.dropped;
        Ok(())
    }

    pub fn rps(&self) -> f64 {
        self.completed as f64 / self.measured_s.max(1e-9)
    }

    pub fn hit_ratio(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.hits as f64 / self.gets as f64
        }
    }

    /// Latency quantile in µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e3
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Protocol.

/// One reply of the text protocol.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Hit,
    Miss,
    Stored,
    NotStored,
    /// `ERROR`, `CLIENT_ERROR ..`, `SERVER_ERROR ..`: one line, the stream stays in step.
    Error(String),
}

/// The longest reply line we accept without its end (a `VALUE` header is < 300 bytes).
const MAX_LINE: usize = 4096;

/// Parses one reply from the front of `buf`: `Ok(None)` when it is not complete yet,
/// else the bytes it took. Only single-key `get` and `set` replies are expected.
pub fn parse_reply(buf: &[u8]) -> Result<Option<(usize, Reply)>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() > MAX_LINE {
            return Err(format!("reply line longer than {MAX_LINE} bytes"));
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let after = eol + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    match line {
        b"END" => Ok(Some((after, Reply::Miss))),
        b"STORED" => Ok(Some((after, Reply::Stored))),
        b"NOT_STORED" => Ok(Some((after, Reply::NotStored))),
        _ if line.starts_with(b"VALUE ") => {
            // VALUE <key> <flags> <bytes> [<cas>]
            let bytes: usize = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.split(' ').nth(3))
                .and_then(|b| b.parse().ok())
                .ok_or_else(|| format!("bad VALUE line {:?}", text()))?;
            let total = after + bytes + 2 + 5;
            if buf.len() < total {
                return Ok(None);
            }
            if &buf[after + bytes..total] != b"\r\nEND\r\n" {
                return Err(format!(
                    "VALUE of {bytes} bytes not followed by END (multi-key reply?)"
                ));
            }
            Ok(Some((total, Reply::Hit)))
        }
        _ if line == b"ERROR"
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR") =>
        {
            Ok(Some((after, Reply::Error(text()))))
        }
        _ => Err(format!("unexpected reply line {:?}", text())),
    }
}

/// Bytes values are cut from (memcached stores them opaquely; printable keeps `-vv`
/// logs readable).
fn value_bytes(max: usize) -> Vec<u8> {
    (0..max + 2)
        .map(|i| b'a' + (i % 26) as u8)
        .collect::<Vec<u8>>()
}

fn encode(op: Op, w: &Workload, values: &[u8], out: &mut Vec<u8>) {
    match op {
        Op::Get { key } => {
            out.extend_from_slice(b"get ");
            w.write_key(key, out);
            out.extend_from_slice(b"\r\n");
        }
        Op::Set { key, value_len } => {
            out.extend_from_slice(b"set ");
            w.write_key(key, out);
            // flags 0, no expiry
            let _ = write!(out, " 0 0 {value_len}\r\n");
            out.extend_from_slice(&values[..value_len]);
            out.extend_from_slice(b"\r\n");
        }
    }
}

// ---------------------------------------------------------------------------------------
// epoll with a nanosecond timeout.

struct Epoll {
    fd: OwnedFd,
    /// `epoll_pwait2` is missing (Linux < 5.11): millisecond `epoll_wait`, rounded up.
    no_pwait2: bool,
}

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked and then owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll {
            fd,
            no_pwait2: false,
        })
    }

    fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn del(&self, fd: RawFd) {
        // SAFETY: removing an fd; errors (already gone) do not matter.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits at most `timeout`; the events found are `events[..n]`.
    fn wait(&mut self, events: &mut [libc::epoll_event], timeout: Duration) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        let rc = if self.no_pwait2 {
            let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128);
            // SAFETY: `events` is valid for `max` entries.
            unsafe {
                libc::epoll_wait(
                    self.fd.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    ms as libc::c_int,
                )
            }
        } else {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs() as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `events` is valid for `max` entries; `ts` lives across the call.
            unsafe {
                libc::epoll_pwait2(
                    self.fd.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    &ts,
                    std::ptr::null(),
                )
            }
        };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => Ok(0),
            Some(libc::ENOSYS) if !self.no_pwait2 => {
                self.no_pwait2 = true;
                Ok(0)
            }
            _ => Err(e),
        }
    }
}

/// CPU time (user + system) of the calling thread, seconds.
fn thread_cpu_s() -> f64 {
    // SAFETY: all-zero is a valid rusage, and getrusage only writes it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

// ---------------------------------------------------------------------------------------
// Connections.

#[derive(Clone, Copy, Debug)]
struct Pending {
    /// Where its latency is measured from.
    t0: Instant,
    get: bool,
}

struct Conn {
    stream: Option<TcpStream>,
    out: Vec<u8>,
    out_pos: usize,
    rbuf: Box<[u8]>,
    r_start: usize,
    r_end: usize,
    waiting: VecDeque<Pending>,
}

/// Unsent bytes above which an open-loop arrival on a connection is dropped (and
/// counted) rather than queued: past this the run is far beyond saturation anyway.
const MAX_UNSENT: usize = 16 << 20;

impl Conn {
    fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Writes what is buffered until done or the socket is full.
    fn flush(&mut self) -> Result<(), String> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        while self.out_pos < self.out.len() {
            match s.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err("write returned 0".into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos > (1 << 20) {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }
}

/// What a thread's loop is doing with its connections.
struct Thread<'a> {
    cfg: &'a Config,
    w: &'a Workload,
    values: Vec<u8>,
    rng: Rng,
    conns: Vec<Conn>,
    epoll: Epoll,
    alive: usize,
    report: Report,
    measure_from: Instant,
    end: Instant,
}

impl<'a> Thread<'a> {
    fn connect(cfg: &'a Config, w: &'a Workload, n: usize, seed: u64) -> Result<Self, String> {
        let epoll = Epoll::new().map_err(|e| format!("epoll_create: {e}"))?;
        let max_value = match w.value_size {
            crate::mc_workload::ValueSize::Fixed(v) => v,
            crate::mc_workload::ValueSize::Etc => crate::mc_workload::VALUE_MAX,
        };
        let rbuf_len = (64 << 10).max(2 * (max_value + 512));
        let mut conns = Vec::with_capacity(n);
        for i in 0..n {
            // Blocking connect with a timeout, then non-blocking for the loop: simple,
            // and connecting is not measured.
            let s = TcpStream::connect_timeout(&cfg.addr, cfg.connect_timeout)
                .map_err(|e| format!("connection {i} to {}: {e}", cfg.addr))?;
            s.set_nodelay(true)
                .and_then(|()| s.set_nonblocking(true))
                .map_err(|e| format!("connection {i}: {e}"))?;
            epoll
                .add(s.as_raw_fd(), i as u64)
                .map_err(|e| format!("connection {i}: epoll_ctl: {e}"))?;
            conns.push(Conn {
                stream: Some(s),
                out: Vec::with_capacity(16 << 10),
                out_pos: 0,
                rbuf: vec![0u8; rbuf_len].into_boxed_slice(),
                r_start: 0,
                r_end: 0,
                waiting: VecDeque::new(),
            });
        }
        let now = Instant::now();
        Ok(Thread {
            cfg,
            w,
            values: value_bytes(max_value),
            rng: Rng::new(seed),
            conns,
            epoll,
            alive: n,
            report: Report::new()?,
            measure_from: now,
            end: now,
        })
    }

    fn fail(&mut self, i: usize, e: String) {
        if let Some(s) = self.conns[i].stream.take() {
            self.epoll.del(s.as_raw_fd());
            self.alive -= 1;
            self.conns[i].waiting.clear();
            self.report.error(format!("connection {i}: {e}"));
        }
    }

    fn issue(&mut self, i: usize, op: Op, t0: Instant) {
        let c = &mut self.conns[i];
        encode(op, self.w, &self.values, &mut c.out);
        c.waiting.push_back(Pending {
            t0,
            get: matches!(op, Op::Get { .. }),
        });
    }

    /// Reads and matches replies on connection `i` until the socket is drained. Returns
    /// how many requests completed.
    fn read(&mut self, i: usize) -> Result<usize, String> {
        let mut done = 0;
        loop {
            let c = &mut self.conns[i];
            let Some(s) = c.stream.as_mut() else {
                return Ok(done);
            };
            if c.r_end == c.rbuf.len() {
                // Keep the partial reply, at the front.
                c.rbuf.copy_within(c.r_start..c.r_end, 0);
                c.r_end -= c.r_start;
                c.r_start = 0;
                if c.r_end == c.rbuf.len() {
                    return Err("reply larger than the read buffer".into());
                }
            }
            let space = c.rbuf.len() - c.r_end;
            let n = match s.read(&mut c.rbuf[c.r_end..]) {
                Ok(0) => return Err("server closed the connection".into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            };
            // One timestamp for every reply this read completed: they all arrived by now.
            let now = Instant::now();
            c.r_end += n;
            while let Some((used, reply)) = parse_reply(&c.rbuf[c.r_start..c.r_end])? {
                c.r_start += used;
                let p = c
                    .waiting
                    .pop_front()
                    .ok_or_else(|| format!("unsolicited reply {reply:?}"))?;
                done += 1;
                let counted = now >= self.measure_from && now < self.end;
                let r = &mut self.report;
                match (&reply, p.get) {
                    (Reply::Hit | Reply::Miss, true) | (Reply::Stored, false) => {}
                    (Reply::NotStored, false) | (Reply::Error(_), _) => {
                        if counted {
                            r.error(format!("connection {i}: {reply:?}"));
                        }
                    }
                    _ => return Err(format!("reply {reply:?} to a {}", p.op_name())),
                }
                if counted {
                    r.completed += 1;
                    if p.get {
                        r.gets += 1;
                        r.hits += u64::from(reply == Reply::Hit);
                    } else {
                        r.sets += 1;
                    }
                    let ns = now.saturating_duration_since(p.t0).as_nanos() as u64;
                    r.hist.saturating_record(ns.max(1));
                }
            }
            if c.r_start == c.r_end {
                c.r_start = 0;
                c.r_end = 0;
            }
            // A short read took everything queued: data that arrives later raises a new
            // edge (Linux signals each arrival), so the read that would only say EAGAIN,
            // one syscall per reply in a closed loop of depth 1, is skipped.
            if n < space {
                return Ok(done);
            }
        }
    }

    /// Closed loop: tops connection `i` up to `depth` outstanding, `pipeline` per write.
    fn refill(&mut self, i: usize, depth: usize) {
        let pipeline = self.cfg.pipeline;
        while self.conns[i].stream.is_some() && self.conns[i].waiting.len() + pipeline <= depth {
            let t0 = Instant::now();
            for _ in 0..pipeline {
                let op = self.w.next_op(&mut self.rng);
                self.issue(i, op, t0);
            }
        }
    }

    fn handle(&mut self, events: &[libc::epoll_event], closed_depth: Option<usize>) {
        for ev in events {
            let i = ev.u64 as usize;
            let flags = ev.events;
            if self.conns[i].stream.is_none() {
                continue;
            }
            let readable = libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLERR | libc::EPOLLHUP;
            let r = if flags & readable as u32 != 0 {
                self.read(i)
            } else {
                Ok(0)
            };
            let r = r.and_then(|_| {
                if let Some(depth) = closed_depth {
                    self.refill(i, depth);
                }
                self.conns[i].flush()
            });
            if let Err(e) = r {
                self.fail(i, e);
            }
        }
    }

    /// Runs the measured phase; the window is `[start + warmup, start + warmup + duration)`.
    fn run(&mut self) -> Result<(), String> {
        let cfg = self.cfg;
        let start = Instant::now();
        self.measure_from = start + cfg.warmup;
        self.end = self.measure_from + cfg.duration;
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut cpu0: Option<f64> = None;
        let n = self.conns.len();
        let (closed_depth, mean_gap_s) = match cfg.mode {
            Mode::Closed { depth } => (Some(depth), 0.0),
            // Each arrival is a batch of `pipeline` requests.
            Mode::Open { qps } => (
                None,
                cfg.pipeline as f64 * cfg.threads as f64 / qps.max(1e-9),
            ),
        };
        if let Some(depth) = closed_depth {
            for i in 0..n {
                self.refill(i, depth);
                if let Err(e) = self.conns[i].flush() {
                    self.fail(i, e);
                }
            }
        }
        let mut next_arrival = start + Duration::from_secs_f64(self.rng.exp(mean_gap_s));
        let mut dirty: Vec<usize> = Vec::new();
        let mut lags: Vec<Instant> = Vec::new();
        loop {
            let now = Instant::now();
            if cpu0.is_none() && now >= self.measure_from {
                cpu0 = Some(thread_cpu_s());
            }
            if now >= self.end || self.alive == 0 {
                let c0 = cpu0.unwrap_or_else(thread_cpu_s);
                // Replies are counted when read in [measure_from, end): that window is
                // the rate's denominator (cut short if every connection failed).
                self.report.measured_s = now
                    .min(self.end)
                    .saturating_duration_since(self.measure_from)
                    .as_secs_f64();
                self.report.cpu_s = thread_cpu_s() - c0;
                self.report.outstanding = self.conns.iter().map(|c| c.waiting.len() as u64).sum();
                return Ok(());
            }
            let mut wake = self.end;
            if closed_depth.is_none() {
                while next_arrival <= now {
                    let i = self.rng.below(n as u64) as usize;
                    let counted = next_arrival >= self.measure_from && next_arrival < self.end;
                    if self.conns[i].stream.is_none() || self.conns[i].unsent() > MAX_UNSENT {
                        if counted {
                            self.report.dropped += cfg.pipeline as u64;
                        }
                    } else {
                        for _ in 0..cfg.pipeline {
                            let op = self.w.next_op(&mut self.rng);
                            self.issue(i, op, next_arrival);
                        }
                        dirty.push(i);
                        lags.push(next_arrival);
                    }
                    next_arrival += Duration::from_secs_f64(self.rng.exp(mean_gap_s));
                }
                for i in dirty.drain(..) {
                    if let Err(e) = self.conns[i].flush() {
                        self.fail(i, e);
                    }
                }
                let sent = Instant::now();
                for t in lags.drain(..) {
                    if t >= self.measure_from && t < self.end {
                        let ns = sent.saturating_duration_since(t).as_nanos() as u64;
                        self.report.lag.saturating_record(ns.max(1));
                    }
                }
                wake = wake.min(next_arrival);
            }
            let timeout = wake.saturating_duration_since(Instant::now());
            let k = self
                .epoll
                .wait(&mut events, timeout)
                .map_err(|e| format!("epoll_wait: {e}"))?;
            self.handle(&events[..k], closed_depth);
        }
    }

    /// Sets every key in `ids` once (closed loop, 32 outstanding per connection in
    /// writes of 32) so that gets hit.
    fn preload(&mut self, ids: impl Iterator<Item = u64>, timeout: Duration) -> Result<(), String> {
        const BATCH: usize = 32;
        let mut ids = ids.peekable();
        let deadline = Instant::now() + timeout;
        // Replies count nowhere: the window is empty.
        let now = Instant::now();
        self.measure_from = now + Duration::from_secs(1 << 30);
        self.end = self.measure_from;
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let n = self.conns.len();
        let top_up = |t: &mut Self, ids: &mut std::iter::Peekable<_>, i: usize| {
            while t.conns[i].stream.is_some() && t.conns[i].waiting.len() < BATCH {
                let Some(key) = Iterator::next(ids) else {
                    break;
                };
                let value_len = t.w.value_len(&mut t.rng);
                t.issue(i, Op::Set { key, value_len }, now);
            }
            if let Err(e) = t.conns[i].flush() {
                t.fail(i, e);
            }
        };
        for i in 0..n {
            top_up(self, &mut ids, i);
        }
        loop {
            if ids.peek().is_none() && self.conns.iter().all(|c| c.waiting.is_empty()) {
                break;
            }
            if self.alive == 0 {
                return Err(format!(
                    "preload: every connection failed; first: {}",
                    self.report.first_error.clone().unwrap_or_default()
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("preload did not finish within {timeout:?}"));
            }
            let k = self
                .epoll
                .wait(&mut events, left)
                .map_err(|e| format!("epoll_wait: {e}"))?;
            for ev in &events[..k] {
                let i = ev.u64 as usize;
                if self.conns[i].stream.is_none() {
                    continue;
                }
                match self.read(i) {
                    Ok(_) => top_up(self, &mut ids, i),
                    Err(e) => self.fail(i, e),
                }
            }
        }
        if self.report.errors > 0 {
            return Err(format!(
                "preload: {} error(s); first: {}",
                self.report.errors,
                self.report.first_error.clone().unwrap_or_default()
            ));
        }
        Ok(())
    }
}

impl Pending {
    fn op_name(&self) -> &'static str {
        if self.get { "get" } else { "set" }
    }
}

/// Sets the calling thread's timer slack to 1 ns, so that its timed sleeps (the open
/// loop's arrivals) end when asked rather than up to 50 µs later.
fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Connects, optionally preloads every key, then runs the measured phase on
/// `cfg.threads` threads and merges what they measured.
pub fn run(cfg: &Config, w: &Workload, preload: bool) -> Result<Report, String> {
    if cfg.conns == 0 || cfg.threads == 0 || cfg.pipeline == 0 {
        return Err("--conns, --threads and --pipeline must be positive".into());
    }
    if cfg.threads > cfg.conns {
        return Err("--threads must not exceed --conns".into());
    }
    if let Mode::Closed { depth } = cfg.mode
        && depth < cfg.pipeline
    {
        return Err(format!(
            "--depth {depth} is below --pipeline {}: a connection could never send a batch",
            cfg.pipeline
        ));
    }
    if let Mode::Open { qps } = cfg.mode
        && !(qps > 0.0 && qps.is_finite())
    {
        return Err(format!("--qps {qps} must be positive"));
    }
    let _ = crate::sys::raise_fd_limit(cfg.conns as u64 + 256);
    let barrier = Arc::new(Barrier::new(cfg.threads));
    let results: Vec<Result<Report, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let barrier = barrier.clone();
                scope.spawn(move || -> Result<Report, String> {
                    // Every thread reaches the barrier, whatever fails, or the others
                    // would wait for ever.
                    let setup = (|| -> Result<Thread<'_>, String> {
                        if !cfg.pin.is_empty() {
                            let core = cfg.pin[t % cfg.pin.len()];
                            crate::sys::pin_current_thread(core)
                                .map_err(|e| format!("--pin-core: {e}"))?;
                        }
                        tight_timer_slack();
                        let n = cfg.conns / cfg.threads + usize::from(t < cfg.conns % cfg.threads);
                        let seed = mix_seed(cfg.seed, t);
                        let mut th = Thread::connect(cfg, w, n, seed)?;
                        if preload {
                            let threads = cfg.threads as u64;
                            let timeout = Duration::from_secs(60 + w.keys / 10_000);
                            th.preload((t as u64..w.keys).step_by(threads as usize), timeout)?;
                        }
                        Ok(th)
                    })();
                    barrier.wait();
                    let mut th = setup?;
                    th.report = Report::new()?;
                    th.run()?;
                    Ok(th.report)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("load thread panicked".into()))
            })
            .collect()
    });
    let mut total = Report::new()?;
    for r in results {
        total.merge(r?)?;
    }
    Ok(total)
}

fn mix_seed(seed: u64, thread: usize) -> u64 {
    crate::mc_workload::mix64(seed ^ (thread as u64).wrapping_mul(0x9e37_79b9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        assert_eq!(parse_reply(b"END\r\n").unwrap(), Some((5, Reply::Miss)));
        assert_eq!(
            parse_reply(b"STORED\r\nEN").unwrap(),
            Some((8, Reply::Stored))
        );
        assert_eq!(parse_reply(b"STOR").unwrap(), None);
        let hit = b"VALUE k 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(parse_reply(hit).unwrap(), Some((hit.len(), Reply::Hit)));
        for cut in 0..hit.len() {
            assert_eq!(parse_reply(&hit[..cut]).unwrap(), None, "cut at {cut}");
        }
        // Data that contains the terminator is taken by length, not by searching.
        let tricky = b"VALUE k 0 7\r\nab\r\nEND\r\nEND\r\n";
        assert_eq!(
            parse_reply(tricky).unwrap(),
            Some((tricky.len(), Reply::Hit))
        );
        assert!(matches!(
            parse_reply(b"SERVER_ERROR out of memory\r\n").unwrap(),
            Some((_, Reply::Error(_)))
        ));
        assert!(parse_reply(b"VALUE k 0 3\r\nabcXXEND\r\n").is_err());
        assert!(parse_reply(b"HELLO\r\n").is_err());
    }

    #[test]
    fn encodes_requests() {
        let w = Workload::new(
            100,
            crate::mc_workload::KeySize::Fixed(4),
            crate::mc_workload::ValueSize::Fixed(3),
            0.5,
            0.0,
        )
        .unwrap();
        let values = value_bytes(3);
        let mut out = Vec::new();
        encode(Op::Get { key: 7 }, &w, &values, &mut out);
        encode(
            Op::Set {
                key: 12,
                value_len: 3,
            },
            &w,
            &values,
            &mut out,
        );
        assert_eq!(out, b"get 7kkk\r\nset 12kk 0 0 3\r\nabc\r\n");
    }
}
