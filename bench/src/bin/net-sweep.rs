//! `net-sweep`: NetPIPE-style measurements against a TCP echo server, and their plot.
//!
//! * `pingpong`: one connection with TCP_NODELAY; for each message size, send N bytes,
//!   read the N echoed bytes back, repeat for `--seconds` (after `--warmup`). One CSV row
//!   per size: round trips, p50/p99/mean round-trip time (µs) and NetPIPE's throughput,
//!   the bits of one message over half the mean round trip
//!   (`mbps = 8·N / (mean_rtt / 2) / 1e6`).
//! * `stream`: one connection, for `--duration` after `--warmup`: `echo` writes and reads
//!   concurrently (two threads) and reports the echoed rate, which is both directions at
//!   once; `send` only writes (to a discarding server) and reports the rate the server
//!   accepted.
//! * `plot`: reads `pingpong` rows (any number of runs, several targets) and draws the
//!   medians over runs of p50 latency and throughput against size, one line per target,
//!   into an SVG (no font files needed).
//!
//! With `--server-pid PID` each measured window is bracketed by samples of the server
//! process's CPU time (utime + stime of all its threads, /proc/PID/stat, in clock ticks),
//! reported per round trip (or per MiB for `stream`). With `--vmm-log FILE` as well, the
//! server is an `ebb-vmm` whose stderr goes to FILE: the window is also bracketed by
//! SIGUSR1, and the differences of the monitor's counter lines give exits, MMIO exits,
//! kicks and wake-ups per round trip (per MiB).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ebb_bench::parse_duration;
use hdrhistogram::Histogram;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "NetPIPE-style ping-pong sweep, streaming echo, and plot"
)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, clap::Args)]
struct Target {
    /// Echo server address.
    #[arg(long)]
    addr: SocketAddr,
    /// Name of the target in the output (first column).
    #[arg(long, default_value = "target")]
    label: String,
    /// Pin this client to a CPU.
    #[arg(long)]
    pin_core: Option<usize>,
    /// Server process whose CPU time is sampled around each measured window.
    #[arg(long)]
    server_pid: Option<i32>,
    /// The server is ebb-vmm with stderr in this file: also take its counters (SIGUSR1).
    #[arg(long, requires = "server_pid")]
    vmm_log: Option<PathBuf>,
    /// Give up on a round trip (or stream) making no progress for this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    stall: Duration,
    /// Do not print the CSV header.
    #[arg(long)]
    no_header: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Ping-pong, one message in flight, for each size.
    Pingpong {
        #[command(flatten)]
        target: Target,
        /// Comma-separated sizes in bytes, or `sweep` (powers of two, 1 B to 1 MiB).
        #[arg(long, default_value = "sweep")]
        sizes: String,
        /// Measured time per size.
        #[arg(long, default_value = "500ms", value_parser = parse_duration)]
        seconds: Duration,
        /// Unrecorded round trips before each size's window, for this long.
        #[arg(long, default_value = "100ms", value_parser = parse_duration)]
        warmup: Duration,
        /// At least this many round trips per size, however long they take.
        #[arg(long, default_value_t = 5)]
        min_round_trips: u64,
    },
    /// Streaming: `echo` (write and read at once) or `send` (write only).
    Stream {
        #[command(flatten)]
        target: Target,
        /// `echo` or `send`.
        #[arg(long, default_value = "echo")]
        mode: StreamMode,
        /// Bytes per write.
        #[arg(long, default_value_t = 65536)]
        chunk: usize,
        /// `echo`: at most this many bytes written and not yet echoed back (0: no limit,
        /// only TCP's own windows). A limit makes the stream latency-bound: the rate is
        /// then at most the limit per round trip.
        #[arg(long, default_value_t = 0)]
        window: u64,
        /// Measured time.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        duration: Duration,
        /// Unmeasured time before it.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        warmup: Duration,
    },
    /// Draws `pingpong` CSV rows (medians over runs) into an SVG.
    Plot {
        /// CSV with a header, as `pingpong` prints (rows of several runs and targets).
        #[arg(long)]
        input: PathBuf,
        /// Output SVG.
        #[arg(long)]
        out: PathBuf,
        /// Title above the plots.
        #[arg(long, default_value = "TCP ping-pong, one connection")]
        title: String,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StreamMode {
    Echo,
    Send,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Pingpong {
            target,
            sizes,
            seconds,
            warmup,
            min_round_trips,
        } => parse_sizes(&sizes)
            .and_then(|sizes| pingpong(&target, &sizes, seconds, warmup, min_round_trips)),
        Cmd::Stream {
            target,
            mode,
            chunk,
            window,
            duration,
            warmup,
        } => stream(&target, mode, chunk, window, duration, warmup),
        Cmd::Plot { input, out, title } => plot(&input, &out, &title),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("net-sweep: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    if s == "sweep" {
        return Ok((0..=20).map(|i| 1usize << i).collect());
    }
    s.split(',')
        .map(|v| match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("bad size {v:?} in --sizes (positive byte counts)")),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The server's CPU time and the monitor's counters.

/// The monitor's counters (see `ebb_vmm::vm::net_summary`).
const COUNTERS: [&str; 4] = ["exits", "mmio_exits", "kicks", "wakeups"];

#[derive(Debug, Clone, Default)]
struct Sample {
    cpu_ticks: Option<u64>,
    counters: Option<BTreeMap<String, u64>>,
}

/// What the window cost the server: CPU seconds and the counters' differences.
#[derive(Debug, Default)]
struct Cost {
    cpu_s: Option<f64>,
    counters: Option<BTreeMap<String, u64>>,
}

impl Cost {
    /// `[cpu µs, exits, mmio_exits, kicks, wakeups]` per `units`, empty where unknown.
    fn per(&self, units: f64) -> Vec<String> {
        let mut cols = vec![
            self.cpu_s
                .map(|s| format!("{:.2}", s * 1e6 / units))
                .unwrap_or_default(),
        ];
        for key in COUNTERS {
            cols.push(
                self.counters
                    .as_ref()
                    .and_then(|c| c.get(key))
                    .map(|&v| format!("{:.3}", v as f64 / units))
                    .unwrap_or_default(),
            );
        }
        cols
    }
}

struct Probe {
    pid: Option<i32>,
    vmm_log: Option<PathBuf>,
    tick: f64,
}

const LINE_PREFIX: &str = "ebb-vmm: virtio-net:";

impl Probe {
    fn new(t: &Target) -> Self {
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Probe {
            pid: t.server_pid,
            vmm_log: t.vmm_log.clone(),
            tick: 1.0 / if hz > 0 { hz as f64 } else { 100.0 },
        }
    }

    fn sample(&self) -> Result<Sample, String> {
        let Some(pid) = self.pid else {
            return Ok(Sample::default());
        };
        let counters = match &self.vmm_log {
            Some(log) => Some(vmm_counters(pid, log)?),
            None => None,
        };
        Ok(Sample {
            cpu_ticks: Some(cpu_ticks(pid)?),
            counters,
        })
    }

    fn cost(&self, a: &Sample, b: &Sample) -> Cost {
        Cost {
            cpu_s: a
                .cpu_ticks
                .zip(b.cpu_ticks)
                .map(|(a, b)| b.saturating_sub(a) as f64 * self.tick),
            counters: a.counters.as_ref().zip(b.counters.as_ref()).map(|(a, b)| {
                b.iter()
                    .map(|(k, v)| (k.clone(), v.saturating_sub(*a.get(k).unwrap_or(&0))))
                    .collect()
            }),
        }
    }
}

/// utime + stime of process `pid` (all its threads, in clock ticks).
fn cpu_ticks(pid: i32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The fields after the command name, which is in parentheses: state is field 3.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| format!("{path}: unexpected format"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{path}: no field {n}"))
    };
    Ok(field(14)? + field(15)?)
}

/// Sends SIGUSR1 to the monitor and waits for the counter line it then prints to `log`.
fn vmm_counters(pid: i32, log: &Path) -> Result<BTreeMap<String, u64>, String> {
    let count = |text: &str| text.lines().filter(|l| l.starts_with(LINE_PREFIX)).count();
    let read = || std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()));
    let before = count(&read()?);
    // SAFETY: kill only sends a signal; the monitor handles SIGUSR1.
    if unsafe { libc::kill(pid, libc::SIGUSR1) } != 0 {
        return Err(format!("SIGUSR1 to {pid}: {}", io::Error::last_os_error()));
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let text = read()?;
        if count(&text) > before {
            let line = text
                .lines()
                .rfind(|l| l.starts_with(LINE_PREFIX))
                .unwrap_or_default();
            return Ok(line
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                .collect());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no counter line in {} within 2 s of SIGUSR1",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

const COST_HEADER: &str = "server_cpu_us,exits,mmio_exits,kicks,wakeups";

fn connect(t: &Target) -> Result<TcpStream, String> {
    if let Some(core) = t.pin_core {
        ebb_bench::sys::pin_current_thread(core).map_err(|e| format!("--pin-core: {e}"))?;
    }
    let s = TcpStream::connect_timeout(&t.addr, Duration::from_secs(5))
        .map_err(|e| format!("connect to {}: {e}", t.addr))?;
    s.set_nodelay(true)
        .map_err(|e| format!("TCP_NODELAY: {e}"))?;
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// Ping-pong.

/// Messages up to this size are written and then read with blocking calls (the socket
/// buffers hold them); larger ones are written and read at once (poll), so that neither
/// side can block on a full buffer.
const BLOCKING_MAX: usize = 64 * 1024;

fn pingpong(
    t: &Target,
    sizes: &[usize],
    seconds: Duration,
    warmup: Duration,
    min_round_trips: u64,
) -> Result<(), String> {
    let mut s = connect(t)?;
    let probe = Probe::new(t);
    if !t.no_header {
        println!(
            "target,size_bytes,round_trips,seconds,rt_per_s,p50_us,p99_us,mean_us,mbps,{}",
            COST_HEADER.replace(',', "_per_rt,") + "_per_rt"
        );
    }
    let max = sizes.iter().copied().max().unwrap_or(1);
    let mut tx = vec![0u8; max];
    let mut rx = vec![0u8; max];
    for &size in sizes {
        for (i, b) in tx[..size].iter_mut().enumerate() {
            *b = (i.wrapping_mul(7) ^ size) as u8;
        }
        let big = size > BLOCKING_MAX;
        s.set_nonblocking(big)
            .map_err(|e| format!("set_nonblocking: {e}"))?;
        if !big {
            s.set_read_timeout(Some(t.stall))
                .and_then(|()| s.set_write_timeout(Some(t.stall)))
                .map_err(|e| format!("socket timeouts: {e}"))?;
        }
        let mut round = |s: &mut TcpStream| -> Result<(), String> {
            let r = if big {
                round_trip_polled(s, &tx[..size], &mut rx[..size], t.stall)
            } else {
                s.write_all(&tx[..size])
                    .and_then(|()| s.read_exact(&mut rx[..size]))
            };
            r.map_err(|e| format!("{size}-byte round trip: {e}"))?;
            if rx[0] != tx[0] || rx[size - 1] != tx[size - 1] || rx[size / 2] != tx[size / 2] {
                return Err(format!("{size}-byte round trip: echo differs"));
            }
            Ok(())
        };
        let start = Instant::now();
        let mut n = 0;
        while n < 2 || start.elapsed() < warmup {
            round(&mut s)?;
            n += 1;
        }
        let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let before = probe.sample()?;
        let start = Instant::now();
        let mut count = 0u64;
        let mut elapsed = Duration::ZERO;
        while count < min_round_trips || elapsed < seconds {
            let t0 = Instant::now();
            round(&mut s)?;
            let now = Instant::now();
            hist.record((now - t0).as_nanos().max(1) as u64)
                .map_err(|e| e.to_string())?;
            count += 1;
            elapsed = now - start;
        }
        let after = probe.sample()?;
        let cost = probe.cost(&before, &after);
        let secs = elapsed.as_secs_f64();
        let mean_us = secs * 1e6 / count as f64;
        let mbps = 8.0 * size as f64 / (mean_us / 2.0);
        let q = |p: f64| hist.value_at_quantile(p) as f64 / 1e3;
        println!(
            "{},{size},{count},{secs:.3},{:.1},{:.2},{:.2},{mean_us:.2},{mbps:.3},{}",
            t.label,
            count as f64 / secs,
            q(0.5),
            q(0.99),
            cost.per(count as f64).join(",")
        );
        io::stdout().flush().map_err(|e| e.to_string())?;
    }
    let _ = s.shutdown(Shutdown::Both);
    Ok(())
}

/// Writes `tx` and reads `rx.len()` bytes at once on a nonblocking socket.
fn round_trip_polled(
    s: &mut TcpStream,
    tx: &[u8],
    rx: &mut [u8],
    stall: Duration,
) -> io::Result<()> {
    let (mut written, mut read) = (0, 0);
    while read < rx.len() {
        let mut progress = false;
        if written < tx.len() {
            match s.write(&tx[written..]) {
                Ok(n) => {
                    written += n;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        match s.read(&mut rx[read..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                read += n;
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if progress {
            continue;
        }
        let mut pfd = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN | if written < tx.len() { libc::POLLOUT } else { 0 },
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, stall.as_millis() as libc::c_int) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else if rc == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("stalled for {stall:?} ({written} written, {read} read)"),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Streaming.

fn stream(
    t: &Target,
    mode: StreamMode,
    chunk: usize,
    window: u64,
    duration: Duration,
    warmup: Duration,
) -> Result<(), String> {
    if chunk == 0 || (window != 0 && window < chunk as u64) {
        return Err("--chunk must be positive and at most --window".into());
    }
    let s = connect(t)?;
    let probe = Probe::new(t);
    s.set_write_timeout(Some(t.stall))
        .map_err(|e| format!("socket timeout: {e}"))?;
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (window_start, window_end) = (start + warmup, start + warmup + duration);
    let (bytes, cost, secs) = match mode {
        StreamMode::Send => {
            let mut s = s;
            let buf = vec![0x5au8; chunk];
            let mut sent = 0u64;
            let mut first: Option<(Sample, u64, Instant)> = None;
            loop {
                let now = Instant::now();
                if first.is_none() && now >= window_start {
                    first = Some((probe.sample()?, sent, Instant::now()));
                }
                if now >= window_end {
                    break;
                }
                s.write_all(&buf).map_err(|e| format!("write: {e}"))?;
                sent += chunk as u64;
            }
            let after = probe.sample()?;
            let (before, at, t0) = first.ok_or("empty window")?;
            let _ = s.shutdown(Shutdown::Write);
            (sent - at, probe.cost(&before, &after), t0.elapsed())
        }
        StreamMode::Echo => {
            let mut w = s.try_clone().map_err(|e| format!("clone socket: {e}"))?;
            let echoed = Arc::new(AtomicU64::new(0));
            let done = Arc::new(AtomicBool::new(false));
            let (written2, echoed2, stop2, done2) =
                (written.clone(), echoed.clone(), stop.clone(), done.clone());
            let writer = std::thread::spawn(move || -> Result<(), String> {
                let buf = vec![0xa5u8; chunk];
                let mut result = Ok(());
                while !stop2.load(Ordering::Relaxed) {
                    let sent = written2.load(Ordering::Relaxed);
                    if window != 0 && sent + chunk as u64 - echoed2.load(Ordering::Relaxed) > window
                    {
                        std::thread::park_timeout(Duration::from_millis(1));
                        continue;
                    }
                    if let Err(e) = w.write_all(&buf) {
                        result = Err(format!("write: {e}"));
                        break;
                    }
                    written2.fetch_add(chunk as u64, Ordering::Relaxed);
                }
                let _ = w.shutdown(Shutdown::Write);
                done2.store(true, Ordering::SeqCst);
                result
            });
            let flow = Flow {
                written: &written,
                echoed: &echoed,
                stop: &stop,
                done: &done,
                writer: (window != 0).then(|| writer.thread().clone()),
            };
            let result = echo_reader(&s, &probe, &flow, window_start, window_end, t.stall);
            stop.store(true, Ordering::Relaxed);
            let _ = s.shutdown(Shutdown::Both);
            let wrote = writer.join().map_err(|_| "writer panicked".to_string())?;
            let r = result?;
            wrote?;
            r
        }
    };
    let mib = bytes as f64 / (1 << 20) as f64;
    if !t.no_header {
        println!(
            "target,mode,seconds,bytes,mbps,{}",
            COST_HEADER.replace(',', "_per_mib,") + "_per_mib"
        );
    }
    let mode = match mode {
        StreamMode::Echo => "echo",
        StreamMode::Send => "send",
    };
    let secs = secs.as_secs_f64();
    println!(
        "{},{mode},{secs:.3},{bytes},{:.1},{}",
        t.label,
        bytes as f64 * 8.0 / secs / 1e6,
        cost.per(mib).join(",")
    );
    Ok(())
}

/// Reads the echo until the window ends and then until everything written came back;
/// the bytes read in the window, its cost and its length.
/// What the echo's reader shares with its writer.
struct Flow<'a> {
    /// Bytes written (by the writer).
    written: &'a AtomicU64,
    /// Bytes read back (by the reader).
    echoed: &'a AtomicU64,
    /// The writer is to stop.
    stop: &'a AtomicBool,
    /// The writer has stopped.
    done: &'a AtomicBool,
    /// The writer, to wake when a window limits it.
    writer: Option<std::thread::Thread>,
}

fn echo_reader(
    s: &TcpStream,
    probe: &Probe,
    flow: &Flow<'_>,
    window_start: Instant,
    window_end: Instant,
    stall: Duration,
) -> Result<(u64, Cost, Duration), String> {
    let mut s = s;
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| format!("socket timeout: {e}"))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut read = 0u64;
    let mut first: Option<(Sample, u64, Instant)> = None;
    let mut result = None;
    let mut last_progress = Instant::now();
    loop {
        let now = Instant::now();
        if first.is_none() && now >= window_start {
            first = Some((probe.sample()?, read, Instant::now()));
        }
        if result.is_none() && now >= window_end {
            let after = probe.sample()?;
            let (before, at, t0) = first.take().ok_or("empty window")?;
            result = Some((read - at, probe.cost(&before, &after), t0.elapsed()));
            first = Some((Sample::default(), 0, t0)); // the window is taken
            flow.stop.store(true, Ordering::Relaxed);
        }
        if result.is_some()
            && flow.done.load(Ordering::SeqCst)
            && read >= flow.written.load(Ordering::Relaxed)
        {
            break;
        }
        match s.read(&mut buf) {
            // After the window, the writer's FIN may come back before `done` is seen.
            Ok(0) if result.is_some() && flow.stop.load(Ordering::Relaxed) => break,
            Ok(0) => return Err("the server closed the connection".into()),
            Ok(n) => {
                read += n as u64;
                last_progress = Instant::now();
                flow.echoed.store(read, Ordering::Relaxed);
                if let Some(w) = &flow.writer {
                    w.unpark();
                }
                if buf[0] != 0xa5 || buf[n - 1] != 0xa5 {
                    return Err("echo differs".into());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if last_progress.elapsed() > stall {
                    return Err(format!(
                        "stalled for {stall:?} ({read} of {} bytes back)",
                        flow.written.load(Ordering::Relaxed)
                    ));
                }
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    result.ok_or_else(|| "no window".to_string())
}

// ---------------------------------------------------------------------------------------
// Plot.

struct Point {
    p50_us: f64,
    mbps: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per target (in order of appearance): (size, medians over runs).
type Series = Vec<(String, Vec<(f64, Point)>)>;

fn read_series(input: &Path) -> Result<Series, String> {
    let text = std::fs::read_to_string(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().ok_or("empty input")?.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no column {name} in {}", input.display()))
    };
    let (c_target, c_size, c_p50, c_mbps) = (
        col("target")?,
        col("size_bytes")?,
        col("p50_us")?,
        col("mbps")?,
    );
    let mut order: Vec<String> = Vec::new();
    let mut rows: BTreeMap<(String, u64), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.get(c_target) == Some(&"target") {
            continue; // a header repeated by a later run
        }
        let get = |c: usize| -> Result<f64, String> {
            f.get(c)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("bad row {line:?}"))
        };
        let target = f.get(c_target).ok_or_else(|| format!("bad row {line:?}"))?;
        if !order.iter().any(|t| t == target) {
            order.push(target.to_string());
        }
        let e = rows
            .entry((target.to_string(), get(c_size)? as u64))
            .or_default();
        e.0.push(get(c_p50)?);
        e.1.push(get(c_mbps)?);
    }
    Ok(order
        .into_iter()
        .map(|target| {
            let points = rows
                .iter_mut()
                .filter(|((t, _), _)| *t == target)
                .map(|((_, size), (p50, mbps))| {
                    (
                        *size as f64,
                        Point {
                            p50_us: median(p50),
                            mbps: median(mbps),
                        },
                    )
                })
                .collect();
            (target, points)
        })
        .collect())
}

/// Axis labels of the log scales' decimal ticks: 1, 10, 100, 1k, 10k, 100k, 1M.
fn si_label(v: &f64) -> String {
    let v = *v;
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{}", v.round())
    } else {
        format!("{v}")
    }
}

/// Which value of a point a panel draws.
type Metric = fn(&Point) -> f64;

fn plot(input: &Path, out: &Path, title: &str) -> Result<(), String> {
    use plotters::prelude::*;
    let series = read_series(input)?;
    let all = || series.iter().flat_map(|(_, p)| p.iter());
    if all().next().is_none() {
        return Err(format!("no rows in {}", input.display()));
    }
    let bounds = |f: fn(&Point) -> f64| {
        all()
            .map(|(_, p)| f(p))
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    let (x_lo, x_hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), (s, _)| {
        (lo.min(*s), hi.max(*s))
    });
    let (lat_lo, lat_hi) = bounds(|p| p.p50_us);
    let (bw_lo, bw_hi) = bounds(|p| p.mbps);
    let colors = [
        RGBColor(214, 39, 40),
        RGBColor(255, 127, 14),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        BLACK,
    ];
    let err = |e: &dyn std::fmt::Display| format!("plot: {e}");

    let root = SVGBackend::new(out, (900, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 24))
        .map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(500);
    let panels: [(_, &str, (f64, f64), Metric); 2] = [
        (top, "p50 round trip (µs)", (lat_lo, lat_hi), |p| p.p50_us),
        (
            bottom,
            "throughput (Mbit/s, NetPIPE: message bits / half RTT)",
            (bw_lo, bw_hi),
            |p| p.mbps,
        ),
    ];
    for (area, y_desc, (lo, hi), value) in panels {
        let mut chart = ChartBuilder::on(&area)
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (x_lo * 0.8..x_hi * 1.25).log_scale(),
                (lo * 0.8..hi * 1.25).log_scale(),
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(y_desc)
            .x_label_formatter(&si_label)
            .y_label_formatter(&si_label)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (target, points)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            let data: Vec<(f64, f64)> = points.iter().map(|(s, p)| (*s, value(p))).collect();
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(target.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(data.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
