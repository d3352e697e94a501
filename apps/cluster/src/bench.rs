//! `--bench`: the Messenger between the front end and a native node, beside plain Linux
//! TCP between two processes on loopback, in the same run, rounds alternating.
//!
//! * round trip: 64-byte calls (request and reply frames), and one-way message
//!   ping-pong (the raw Messenger), against a blocking 64-byte TCP ping-pong with an echo
//!   process;
//! * throughput: 1 MiB messages to the node until 256 MiB arrived (`EBB_BENCH_MIB`),
//!   against as many written to a sink process.
//!
//! The node is behind its monitor's user-mode network (a guest-to-host forward), so its
//! figures include that hop: guest ebb-net ↔ virtio ↔ the monitor's ebb-net endpoint ↔
//! a host socket ↔ the front end. With `--tap-bridge` it is on a TAP device enslaved to
//! a bridge (guest ebb-net ↔ virtio ↔ TAP ↔ bridge ↔ the front end's socket), and the
//! fair peer is Linux TCP across a veth pair: [`PEER_NETNS_ENV`] puts the peer process
//! in a namespace at the far end of one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::future::{Promise, promise};
use ebb::{IOBuf, IOBufChain};
use ebb_dist::messenger::Messenger;
use ebb_dist::node::NodeId;
use ebb_dist::remote::encode;

use crate::protocol::{ECHO_KIND, NODE, PING_KIND, PONG_KIND, SINK_KIND, SINK_TOTAL_KIND};

const SAMPLES: usize = 20_000;
const MESSAGE: usize = 1 << 20;
/// Bytes per throughput measurement by default (`EBB_BENCH_MIB` MiB overrides it):
/// 256 MiB, a tenth of a second or more on every path here, so that slow start and the
/// receive window's growth are a small part of it (64 MiB before 2026-11-29).
const TOTAL: usize = 256 << 20;

type Waiter = Arc<spin::Mutex<Option<Promise<()>>>>;

/// Round trips in µs: median and 99th percentile.
fn summary(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[us.len() * 99 / 100])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// CPU time of every thread of process `pid` so far, in ns (the scheduler's own
/// accounting, `/proc/PID/task/*/schedstat`): this process's event loops, its monitor's
/// vCPU and I/O threads, or the TCP peer's.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time the whole machine spent busy so far (every CPU, every process: user, system,
/// interrupts, guests), in ns, from `/proc/stat`: the check on `cpu_ns`, which a vCPU's
/// time in the guest may escape.
fn machine_busy_ns() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = stat.lines().next() else {
        return 0;
    };
    // cpu user nice system idle iowait irq softirq steal guest guest_nice (ticks)
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    busy * (1_000_000_000 / 100)
}

/// The calling thread's CPU time so far, in ns.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Bytes per throughput measurement, both sides: [`TOTAL`], or `EBB_BENCH_MIB` MiB.
fn total() -> usize {
    std::env::var("EBB_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&mib| mib > 0)
        .map_or(TOTAL, |mib| mib << 20)
}

/// Round trips per sample run (`EBB_BENCH_SAMPLES`, default 2000).
fn samples() -> usize {
    std::env::var("EBB_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SAMPLES)
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.2}x [{lo:.2}-{hi:.2}]", median(v.to_vec()))
}

/// What one path's rounds gave, as ratios to Linux TCP's figures of the same round.
#[derive(Default)]
struct Ratios {
    call: Vec<f64>,
    message: Vec<f64>,
    throughput: Vec<f64>,
    cpu: Vec<f64>,
    call_vs_message: Vec<f64>,
}

/// Runs `rounds` alternating rounds against every node of `targets` (its id and how it
/// is reached); the report.
pub async fn run(
    messenger: &Messenger,
    targets: &[(NodeId, &'static str)],
    rounds: u32,
) -> Result<String, String> {
    let waiter: Waiter = Arc::default();
    {
        let w = waiter.clone();
        messenger.on_message(NODE, PONG_KIND, move |_from, _payload| {
            if let Some(p) = w.lock().take() {
                let _ = p.set(());
            }
        });
    }
    if std::env::var_os("EBB_BENCH_MESSAGES_ONLY").is_some() {
        // Only message round trips, no TCP peer: what `strace -c` counts the system calls
        // of (bench/scripts/dist.sh runs it at two sample counts and takes the difference).
        let mut out = String::new();
        for (node, path) in targets {
            let msg = summary(message_rtts(messenger, *node, &waiter).await?);
            out.push_str(&format!(
                "bench messages only: {node} ({path}): {} round trips, median {:.1} µs\n",
                samples(),
                msg.0
            ));
        }
        return Ok(out.trim_end().to_string());
    }
    // Linux's ping-pong twice: both processes on the client's CPU (the front end's core
    // is pinned to one; the client thread inherits it) and the peer free to use every CPU.
    // Under nested virtualization the two differ by 4x in round trip (a wake-up across
    // CPUs costs an idle vCPU's wake); each of our figures is compared with the better.
    let client_cpu = rustix::thread::sched_getaffinity(None)
        .ok()
        .filter(|set| set.count() == 1)
        .and_then(|set| (0..rustix::thread::CpuSet::MAX_CPU).find(|&c| set.is_set(c)));
    let mut peers = Vec::new();
    if let Some(cpu) = client_cpu {
        peers.push((TcpPeer::start(Some(cpu))?, format!("both on CPU {cpu}")));
    }
    peers.push((TcpPeer::start(None)?, "the server on any CPU".to_string()));
    let peer_path = peers[0].0.path.clone();
    let me = std::process::id();
    let mut out = String::new();
    let mut ratios: Vec<Ratios> = targets.iter().map(|_| Ratios::default()).collect();
    for round in 1..=rounds {
        // The best of the peers' figures this round: round trip, CPU, throughput.
        let mut tcp_rtt = f64::INFINITY;
        let mut tcp_cpu = f64::INFINITY;
        let mut tcp_tput = 0f64;
        for (peer, placement) in &peers {
            let port = peer.at;
            // Both sides of the ping-pong: the client thread's CPU (measured by itself)
            // and the peer process's (it serves on one thread).
            let peer_before = cpu_ns(peer.child.id());
            let busy_before = machine_busy_ns();
            let (rtts, client_cpu) = off_loop(move || TcpPeer::rtts(port)).await?;
            let busy = (machine_busy_ns() - busy_before) as f64 / samples() as f64 / 1e3;
            let rtt = summary(rtts);
            let cpu = (client_cpu + cpu_ns(peer.child.id()) - peer_before) as f64
                / samples() as f64
                / 1e3;
            let tput = off_loop(move || TcpPeer::throughput(port)).await?;
            out.push_str(&format!(
                "bench round {round}: Linux TCP between two processes {peer_path}, {placement}: 64 B round trip median/p99 {:.1}/{:.1} µs, {cpu:.1} µs CPU per round trip (both processes; the machine: {busy:.1} µs); 1 MiB writes {tput:.0} MB/s\n",
                rtt.0, rtt.1
            ));
            tcp_rtt = tcp_rtt.min(rtt.0);
            tcp_cpu = tcp_cpu.min(cpu);
            tcp_tput = tcp_tput.max(tput);
        }
        for ((node, path), r) in targets.iter().zip(ratios.iter_mut()) {
            let call = summary(call_rtts(messenger, *node).await?);
            let cpu_before = cpu_ns(me);
            let busy_before = machine_busy_ns();
            let shm_before = ebb::shm::stats();
            let msg = summary(message_rtts(messenger, *node, &waiter).await?);
            let cpu = (cpu_ns(me) - cpu_before) as f64 / samples() as f64 / 1e3;
            let busy = (machine_busy_ns() - busy_before) as f64 / samples() as f64 / 1e3;
            let shm = ebb::shm::stats();
            let per = |after: u64, before: u64| (after - before) as f64 / samples() as f64;
            let wakes = format!(
                "wakes per round trip: {:.3} sent to the node, {:.3} from it",
                per(shm.wakes_sent, shm_before.wakes_sent),
                per(shm.wakes_received, shm_before.wakes_received)
            );
            let tput = throughput(messenger, *node, &waiter).await?;
            out.push_str(&format!(
                "bench round {round}: {node} ({path}): 64 B round trip median/p99 µs: call {:.1}/{:.1}, message {:.1}/{:.1}, {cpu:.1} µs CPU per message round trip (the whole front end process: event loops, vCPUs, monitor threads; the machine: {busy:.1} µs; {wakes}); 1 MiB messages {tput:.0} MB/s\n",
                call.0, call.1, msg.0, msg.1
            ));
            r.call.push(call.0 / tcp_rtt);
            r.message.push(msg.0 / tcp_rtt);
            r.throughput.push(tput / tcp_tput);
            r.cpu.push(cpu / tcp_cpu);
            r.call_vs_message.push(call.0 / msg.0);
        }
    }
    for (peer, _) in &mut peers {
        peer.stop();
    }
    let placements: Vec<&str> = peers.iter().map(|(_, p)| p.as_str()).collect();
    let placements = placements.join(" or ");
    for ((node, path), r) in targets.iter().zip(&ratios) {
        out.push_str(&format!(
            "bench summary ({rounds} rounds, front end ↔ {node} over {path}; against the better of Linux TCP between two processes {peer_path}, {placements}, each round): call round trip {}; message round trip {}; throughput {}; CPU per round trip {}; a call against a raw message round trip {}\n",
            range(&r.call),
            range(&r.message),
            range(&r.throughput),
            range(&r.cpu),
            range(&r.call_vs_message)
        ));
    }
    Ok(out.trim_end().to_string())
}

async fn call_rtts(messenger: &Messenger, node: NodeId) -> Result<Vec<f64>, String> {
    let payload = IOBufChain::from(IOBuf::copy_from_slice(&[7u8; 64]));
    let mut us = Vec::with_capacity(samples());
    for _ in 0..samples() {
        let t = Instant::now();
        messenger
            .call(node, NODE, ECHO_KIND, payload.clone())
            .await
            .map_err(|e| e.to_string())?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(us)
}

async fn message_rtts(
    messenger: &Messenger,
    node: NodeId,
    waiter: &Waiter,
) -> Result<Vec<f64>, String> {
    let payload = IOBufChain::from(IOBuf::copy_from_slice(&[7u8; 64]));
    let mut us = Vec::with_capacity(samples());
    for _ in 0..samples() {
        let (p, answered) = promise();
        *waiter.lock() = Some(p);
        let t = Instant::now();
        messenger
            .send(node, NODE, PING_KIND, payload.clone())
            .map_err(|e| e.to_string())?;
        ebb::timeout(Duration::from_secs(5), answered)
            .await
            .map_err(|_| "no pong in 5 s")?
            .map_err(|_| "the pong was dropped")?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(us)
}

/// MB/s of 1 MiB messages until [`total`] bytes arrived at the node.
async fn throughput(messenger: &Messenger, node: NodeId, waiter: &Waiter) -> Result<f64, String> {
    let block = IOBuf::from_vec(vec![0x5a; MESSAGE]);
    let (p, done) = promise();
    *waiter.lock() = Some(p);
    let announce = encode(&(total() as u64)).map_err(|e| e.to_string())?;
    messenger
        .send_when_ready(node, NODE, SINK_TOTAL_KIND, announce)
        .await
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    for _ in 0..total() / MESSAGE {
        messenger
            .send_when_ready(node, NODE, SINK_KIND, IOBufChain::from(block.clone()))
            .await
            .map_err(|e| e.to_string())?;
    }
    ebb::timeout(Duration::from_secs(60), done)
        .await
        .map_err(|_| "the node did not count every byte in 60 s")?
        .map_err(|_| "dropped")?;
    Ok(total() as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Runs the blocking `f` on a thread of its own, so this core's event loop goes on
/// (heartbeats, the nodes' traffic) while the TCP peer is measured.
async fn off_loop<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (p, done) = promise();
    std::thread::spawn(move || {
        let _ = p.set(f());
    });
    done.await
        .map_err(|_| "the measuring thread ended early".to_string())?
}

/// Where the TCP peer runs instead of beside the front end on loopback: `NETNS:ADDR`, a
/// network namespace and its address (the far end of a veth pair, for the comparison
/// with nodes on a TAP bridge: `bench/scripts/dist.sh` sets it up as root).
pub const PEER_NETNS_ENV: &str = "EBB_BENCH_PEER_NETNS";

/// The peer: this executable as a plain TCP server in another process.
struct TcpPeer {
    child: Child,
    at: SocketAddrV4,
    /// How the client reaches it, for the report ("on loopback", "over a veth pair").
    path: String,
}

impl TcpPeer {
    /// The peer pinned to `cpu`, or free to use every CPU.
    fn start(cpu: Option<usize>) -> Result<TcpPeer, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let (mut command, addr, path) = match std::env::var(PEER_NETNS_ENV) {
            Ok(spec) => {
                let (netns, addr) = spec
                    .split_once(':')
                    .ok_or_else(|| format!("{PEER_NETNS_ENV}={spec:?} is not NETNS:ADDR"))?;
                let addr: Ipv4Addr = addr
                    .parse()
                    .map_err(|_| format!("{PEER_NETNS_ENV}: {addr:?} is not an IPv4 address"))?;
                // `ip netns exec` enters the namespace and execs: the child's pid is the
                // peer's own (its CPU time is read from /proc).
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns]).arg(exe);
                (
                    command,
                    addr,
                    format!("over a veth pair (the peer in netns {netns})"),
                )
            }
            Err(_) => (
                Command::new(exe),
                Ipv4Addr::LOCALHOST,
                "on loopback".to_string(),
            ),
        };
        command.args(["--tcp-peer", "--listen", &addr.to_string()]);
        if let Some(cpu) = cpu {
            command.args(["--peer-cpu", &cpu.to_string()]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the TCP peer: {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let port = line
            .trim()
            .parse()
            .map_err(|_| format!("the TCP peer said {line:?}"))?;
        Ok(TcpPeer {
            child,
            at: SocketAddrV4::new(addr, port),
            path,
        })
    }

    fn connect(at: SocketAddrV4, mode: u8) -> Result<TcpStream, String> {
        let mut s = TcpStream::connect(at).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.write_all(&[mode]).map_err(|e| e.to_string())?;
        Ok(s)
    }

    /// The round trips, and the CPU time this thread spent on them (ns).
    fn rtts(port: SocketAddrV4) -> Result<(Vec<f64>, u64), String> {
        let mut s = TcpPeer::connect(port, b'e')?;
        let cpu_before = thread_cpu_ns();
        let (ping, mut pong) = ([7u8; 64], [0u8; 64]);
        let mut us = Vec::with_capacity(samples());
        for _ in 0..samples() {
            let t = Instant::now();
            s.write_all(&ping).map_err(|e| e.to_string())?;
            s.read_exact(&mut pong).map_err(|e| e.to_string())?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok((us, thread_cpu_ns() - cpu_before))
    }

    fn throughput(port: SocketAddrV4) -> Result<f64, String> {
        let mut s = TcpPeer::connect(port, b's')?;
        let block = vec![0x5au8; MESSAGE];
        let t = Instant::now();
        for _ in 0..total() / MESSAGE {
            s.write_all(&block).map_err(|e| e.to_string())?;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let mut ack = [0u8; 8];
        s.read_exact(&mut ack).map_err(|e| e.to_string())?;
        if u64::from_le_bytes(ack) != total() as u64 {
            return Err("the sink counted another total".into());
        }
        Ok(total() as f64 / t.elapsed().as_secs_f64() / 1e6)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TcpPeer {
    /// An error return must not leave the peer process behind.
    fn drop(&mut self) {
        self.stop();
    }
}

/// `--tcp-peer [--listen ADDR]`: listens on ADDR (127.0.0.1 by default), prints the
/// port, and serves each connection by its first byte: `e` echoes, `s` counts until EOF
/// and answers the count.
pub fn tcp_peer(args: &[String]) -> i32 {
    let addr = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(Ipv4Addr::LOCALHOST), |a| a.parse::<Ipv4Addr>());
    let Ok(addr) = addr else {
        eprintln!("cluster --tcp-peer: --listen takes an IPv4 address");
        return 2;
    };
    let listener = match TcpListener::bind((addr, 0)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cluster --tcp-peer: {e}");
            return 1;
        }
    };
    // This process serves on its Ebbflow core's thread, which the runtime pinned to a CPU
    // (with EBB_CPUS=1 the client's). `--peer-cpu N` pins it to CPU N; without it, it
    // may use every CPU, as a plain Linux process does.
    let mut cpus = rustix::thread::CpuSet::new();
    match args.iter().position(|a| a == "--peer-cpu") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<usize>().ok()) {
            Some(cpu) if cpu < rustix::thread::CpuSet::MAX_CPU => cpus.set(cpu),
            _ => {
                eprintln!("cluster --tcp-peer: --peer-cpu takes a CPU number");
                return 2;
            }
        },
        None => (0..rustix::thread::CpuSet::MAX_CPU).for_each(|c| cpus.set(c)),
    }
    if let Err(e) = rustix::thread::sched_setaffinity(None, &cpus) {
        eprintln!("cluster --tcp-peer: keeps its core's CPU: {e}");
    }
    println!("{}", listener.local_addr().map_or(0, |a| a.port()));
    let _ = std::io::stdout().flush();
    // One connection at a time, on this thread: the bench's are sequential, and the
    // process's CPU time stays on a thread that lives (`cpu_ns` reads live threads).
    for conn in listener.incoming().flatten() {
        serve(conn);
    }
    0
}

fn serve(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut mode = [0u8; 1];
    if s.read_exact(&mut mode).is_err() {
        return;
    }
    let mut buf = vec![0u8; 1 << 20];
    match mode[0] {
        b'e' => {
            let mut ping = [0u8; 64];
            while s.read_exact(&mut ping).is_ok() {
                if s.write_all(&ping).is_err() {
                    return;
                }
            }
        }
        _ => {
            let mut total = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n as u64,
                }
            }
            let _ = s.write_all(&total.to_le_bytes());
        }
    }
}
