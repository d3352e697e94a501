//! ebb-net on several cores of the hosted runtime, against Linux over a two-queue TAP
//! device in a fresh network namespace.
//!
//! A two-core runtime starts a `NetStack` with two queues (core 0 drives queue 0, core 1
//! queue 1) and listens on every core with the application choosing each connection's
//! core from the peer's port (its bit 1). A Python client in the namespace opens 16 connections at
//! once and sends each 256 KiB of random bytes, which the ebb side echoes; the client
//! checks every byte. Then core 1 connects out to a Python echo server in the namespace
//! and checks its own echo. What must hold:
//!
//! * every echo intact, on every connection;
//! * each connection accepted on — and its handler run on — the core the placement chose,
//!   whichever queue Linux delivered its SYN to, and both cores used;
//! * the outgoing connection served entirely on core 1;
//! * every connection closed gracefully; every frame one core steered to another arrived
//!   there (the counters of both cores add up).
//!
//! The second test runs it all again with the fault injector on both queues (1 % drop,
//! 1 % reorder, 0.5 % duplicate, 0.1 % corrupt, both directions); the third with the
//! address leased by `dnsmasq` in the namespace — only the home core runs DHCP, so the
//! connections placed on core 1 are served only if core 1 took the lease from it.
//!
//! Needs root, `/dev/net/tun`, `ip`, `python3` (and `dnsmasq` for the third); otherwise
//! prints
//! `SKIPPED: <test>: <reason>`. Run: `cargo test -p ebbflow-tests --test multicore_net --
//! --nocapture` (as root).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebb_core::CoreId;
use ebb_core::event;
use ebb_core::future::promise;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_hosted::netstack::{
    AddressConfig, FaultSetting, NetStack, NetStackRef, Placement, TapNetStackConfig,
};
use ebb_net::iface::Ipv4Cidr;
use ebb_net_driver::{FaultConfig, Probability};

mod common;
use common::{
    Dnsmasq, Started, adopt, assert_every_fault_happened, namespace, need_namespace_and_tap,
    run_tool, start_netstack, unique_name,
};

/// One test at a time (see `multicore_echo`).
static SERIAL: Mutex<()> = Mutex::new(());

const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const ECHO_PORT: u16 = 7;
const CONNECTIONS: usize = 16;
const BYTES_PER_CONNECTION: usize = 256 << 10;
const OUTBOUND_BYTES: usize = 1 << 20;

/// The Linux side: `CONNECTIONS` concurrent connections, each sending random bytes and
/// checking the echo; prints `PORT ok|BAD` per connection, exits 1 on any failure.
const CLIENT: &str = r#"
import os, socket, sys, threading
host, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
results = []
def one():
    data = os.urandom(size)
    s = socket.create_connection((host, port), timeout=60)
    sport = s.getsockname()[1]
    sender = threading.Thread(target=s.sendall, args=(data,))
    sender.start()
    got = bytearray()
    while len(got) < size:
        b = s.recv(1 << 16)
        if not b:
            break
        got += b
    sender.join()
    s.close()
    results.append((sport, bytes(got) == data))
threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads: t.start()
for t in threads: t.join()
for sport, ok in results:
    print(sport, "ok" if ok else "BAD")
sys.exit(0 if len(results) == n and all(ok for _, ok in results) else 1)
"#;

/// The Linux side of the outgoing connection: echoes one connection.
const ECHO_SERVER: &str = r#"
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(1)
l.settimeout(60)
c, _ = l.accept()
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    c.sendall(b)
c.close()
"#;

/// Echoes what it receives (the accepted side).
/// Echoes, and records `(core, remote port)` every time one of its callbacks runs, so
/// the test can check where each connection's handler ran (not only where it was
/// accepted).
struct Echo {
    ran_on: Arc<Mutex<Vec<(CoreId, u16)>>>,
}

impl Echo {
    fn record(&self, conn: &dyn TcpConnection) {
        if let Ok(mut ran_on) = self.ran_on.lock() {
            ran_on.push((event::core_id(), conn.peer_addr().port()));
        }
    }
}

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.record(conn);
        if conn.send(IOBufChain::from(data)).is_err() {
            conn.abort();
        }
    }
    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.record(conn);
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        self.record(conn);
        conn.close();
    }
    fn closed(&mut self, _: CloseReason) {}
}

/// The outgoing side: checks the echo of what it sent, reports the core it ran on.
struct EchoCheck {
    expected: Vec<u8>,
    got: usize,
    intact: bool,
    cores: Vec<CoreId>,
    done: Option<ebb_core::future::Promise<(bool, usize, Vec<CoreId>)>>,
}

impl TcpHandler for EchoCheck {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let core = event::core_id();
        if !self.cores.contains(&core) {
            self.cores.push(core);
        }
        let end = self.got + data.len();
        if end > self.expected.len() || self.expected[self.got..end] != *data.as_slice() {
            self.intact = false;
        }
        self.got = end;
        if self.got >= self.expected.len() {
            conn.close();
        }
    }
    fn closed(&mut self, _: CloseReason) {
        if let Some(done) = self.done.take() {
            let _ = done.set((self.intact, self.got, std::mem::take(&mut self.cores)));
        }
    }
}

fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Core 1 connects to Linux's echo server (retrying while it starts), sends
/// `OUTBOUND_BYTES`, and checks the echo. Runs on core 1.
async fn connect_from_here(
    handle: NetStackRef,
    remote: SocketAddrV4,
) -> Result<(CoreId, bool, usize, Vec<CoreId>), String> {
    let part = handle.on_this_core().map_err(|e| e.to_string())?;
    let mut attempt = 0;
    let conn = loop {
        match part.connect(remote).await {
            Ok(conn) => break conn,
            Err(TcpErrorKind::ConnectionRefused) if attempt < 100 => {
                attempt += 1;
                event::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(format!("connect from core {}: {e}", part.core().0)),
        }
    };
    let (tx, rx) = promise();
    let data = pattern(OUTBOUND_BYTES);
    conn.set_handler(EchoCheck {
        expected: data.clone(),
        got: 0,
        intact: true,
        cores: Vec::new(),
        done: Some(tx),
    });
    conn.send(IOBufChain::from(IOBuf::copy_from_slice(&data)))
        .map_err(|e| format!("send: {e:?}"))?;
    let (intact, got, cores) = event::timeout(TOOL_TIMEOUT, rx)
        .await
        .map_err(|_| "the echo did not come back in time".to_string())?
        .map_err(|e| e.to_string())?;
    Ok((part.core(), intact, got, cores))
}

/// What the runtime's main task saw.
struct Seen {
    accepted: Vec<(CoreId, u16)>,
    /// `(core, remote port)` for every callback of an accepted connection's handler.
    handler_ran_on: Vec<(CoreId, u16)>,
    /// Each core's fault injector counters (`None` without faults).
    faults: Vec<Option<ebb_net_driver::FaultStats>>,
    client_output: String,
    outbound: (CoreId, bool, usize, Vec<CoreId>),
    per_core: Vec<(
        CoreId,
        String,
        ebb_hosted::netstack::RunnerCounters,
        ebb_net::tcp::TcpCounters,
    )>,
}

#[test]
fn connections_are_owned_by_the_core_the_application_chose() {
    multicore_echo(
        "connections_are_owned_by_the_core_the_application_chose",
        1,
        None,
        false,
    );
}

#[test]
fn connections_are_owned_by_the_core_the_application_chose_with_faults() {
    let faults = FaultSetting {
        config: FaultConfig::NONE
            .with_drop(Probability::from_ppm(10_000))
            .with_reorder(Probability::from_ppm(10_000), Duration::from_millis(1))
            .with_duplicate(Probability::from_ppm(5_000))
            .with_corrupt(Probability::from_ppm(3_000)),
        seed: 11,
    };
    multicore_echo(
        "connections_are_owned_by_the_core_the_application_chose_with_faults",
        2,
        Some(faults),
        false,
    );
}

#[test]
fn every_core_serves_on_the_address_the_home_core_leased_by_dhcp() {
    multicore_echo(
        "every_core_serves_on_the_address_the_home_core_leased_by_dhcp",
        3,
        None,
        true,
    );
}

/// The scenario of the module docs on `10.197.{net}.0/24`, optionally with `faults` on
/// both queues (each queue its own seed), and with the address from `dnsmasq` in the
/// namespace (only the home core runs DHCP; the other core must take the lease).
fn multicore_echo(test: &str, net: u8, faults: Option<FaultSetting>, dhcp: bool) {
    // One at a time: two two-core runtimes on a two-core machine only slow each other.
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tools: &[&str] = if dhcp {
        &["python3", "dnsmasq"]
    } else {
        &["python3"]
    };
    if need_namespace_and_tap(test, tools).is_none() {
        return;
    }
    let id = unique_name("");
    let ns = namespace(test, format!("ebbmc{id}"));
    let ns_name = ns.name.clone();
    let linux_ip = Ipv4Addr::new(10, 197, net, 1);
    let ebb_cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 197, net, 2), 24).expect("valid /24");
    let mut config = TapNetStackConfig::new(
        format!("ebm{id}"),
        if dhcp {
            AddressConfig::Dhcp
        } else {
            AddressConfig::Static {
                cidr: ebb_cidr,
                gateway: None,
            }
        },
    );
    config.queues = 2;
    config.faults = faults;
    let runtime = ebb_hosted::Config {
        pin: false,
        idle_poll: Duration::ZERO,
        ..ebb_hosted::Config::with_cores(2)
    };
    enum Outcome {
        Skipped(ebb_testkit::Capability, String),
        Ran(Result<Seen, String>),
    }
    let outcome = ebb_hosted::run(runtime, move || async move {
        let stack = match start_netstack(config) {
            Started::Running(stack) => stack,
            Started::Skip(capability, reason) => return Outcome::Skipped(capability, reason),
            Started::Failed(e) => return Outcome::Ran(Err(e)),
        };
        let result = run_body(&stack, &ns_name, linux_ip, (!dhcp).then_some(ebb_cidr)).await;
        let _ = stack.shutdown();
        Outcome::Ran(result)
    })
    .expect("hosted runtime");
    drop(ns);
    let seen = match outcome {
        Outcome::Skipped(capability, reason) => {
            return ebb_testkit::skip(test, capability, &reason).unwrap_or(());
        }
        Outcome::Ran(result) => result.unwrap_or_else(|e| panic!("{test}: {e}")),
    };
    for (core, _, runner, tcp) in &seen.per_core {
        println!("{test}: core {}: {runner:?}", core.0);
        println!("{test}: core {}: {tcp:?}", core.0);
    }
    if faults.is_some() {
        assert_every_fault_happened(test, &seen.faults);
    }

    // Every connection echoed intact.
    let ports: Vec<u16> = seen
        .client_output
        .lines()
        .map(|line| match line.split_once(' ') {
            Some((port, "ok")) => port.parse().expect("a port number"),
            _ => panic!("{test}: client line {line:?}"),
        })
        .collect();
    assert_eq!(ports.len(), CONNECTIONS, "{}", seen.client_output);

    // Each accepted on the core the placement chose (port parity), both cores used.
    assert_eq!(seen.accepted.len(), CONNECTIONS, "{:?}", seen.accepted);
    for &(core, port) in &seen.accepted {
        let chosen = usize::from(port >> 1) % 2;
        assert_eq!(core.index(), chosen, "port {port} on core {}", core.0);
        assert!(
            ports.contains(&port),
            "port {port} accepted but not the client's"
        );
    }
    for core in [0, 1] {
        assert!(
            seen.accepted.iter().any(|(c, _)| c.index() == core),
            "no connection on core {core}: {:?}",
            seen.accepted
        );
    }
    // Each connection's handler ran on that same core, every time, and ran at all: every
    // client port's echo went through a callback.
    for &port in &ports {
        let ran: Vec<CoreId> = seen
            .handler_ran_on
            .iter()
            .filter(|(_, p)| *p == port)
            .map(|(core, _)| *core)
            .collect();
        let chosen = usize::from(port >> 1) % 2;
        assert!(!ran.is_empty(), "port {port}: its handler never ran");
        assert!(
            ran.iter().all(|core| core.index() == chosen),
            "port {port}: handler ran on cores {ran:?}, owned by core {chosen}"
        );
    }

    // The outgoing connection lived on core 1: connected there, echo received there.
    let (from, intact, got, cores) = &seen.outbound;
    assert_eq!(from.index(), 1);
    assert!(
        *intact && *got == OUTBOUND_BYTES,
        "echo {got} bytes intact={intact}"
    );
    assert_eq!(cores, &[CoreId(1)], "handler ran only on core 1");

    // Every connection ended normally, none timed out or was aborted, every SYN found a
    // listener. (A RST or an out-of-window drop may appear: a frame Linux put on the
    // non-owner's queue reaches the owner later than frames on its own queue, so a
    // late segment of a connection that has just closed is answered with a RST, as any
    // TCP would. Linux then steers a flow to the queue its owner transmits on.)
    let closed: u64 = seen
        .per_core
        .iter()
        .map(|(_, _, _, t)| t.connections_closed)
        .sum();
    assert_eq!(
        closed,
        CONNECTIONS as u64 + 1,
        "every connection closed gracefully"
    );
    for (core, _, runner, tcp) in &seen.per_core {
        assert_eq!(tcp.connections_aborted, 0, "core {}: {tcp:?}", core.0);
        assert_eq!(tcp.connections_timed_out, 0, "core {}: {tcp:?}", core.0);
        if faults.is_none() {
            assert_eq!(tcp.dropped_no_listener, 0, "core {}: {tcp:?}", core.0);
        } else {
            // A few segments may find no connection: a RST the injector duplicated
            // after its first copy ended one (core 1's connect refused while Linux's
            // echo server starts; a connection in LAST-ACK, closed by the peer's RST),
            // or a late segment of a connection that has just closed, delayed or
            // duplicated by the injector (answered with a RST, as any TCP would). A SYN
            // that found no listener would have failed a connect, which the echoes
            // above would have caught.
            assert!(tcp.dropped_no_listener <= 4, "core {}: {tcp:?}", core.0);
        }
        assert_eq!(tcp.dropped_owned_elsewhere, 0, "core {}: {tcp:?}", core.0);
        assert_eq!(runner.steer_failures, 0, "core {}: {runner:?}", core.0);
        assert_eq!(runner.steered_dropped, 0, "core {}: {runner:?}", core.0);
    }
    // Each frame steered to one core, or copied to the one other core (ARP replies).
    let steered: u64 = seen
        .per_core
        .iter()
        .map(|(_, _, d, _)| d.steered_out + d.steered_everywhere)
        .sum();
    let received: u64 = seen.per_core.iter().map(|(_, _, d, _)| d.steered_in).sum();
    println!("{test}: frames steered between cores: {steered} (received {received})");
    assert_eq!(steered, received, "every steered frame arrived");
}

async fn run_body(
    stack: &NetStack,
    ns: &str,
    linux_ip: Ipv4Addr,
    static_address: Option<Ipv4Cidr>,
) -> Result<Seen, String> {
    let dev = stack.device_name().map_err(|e| e.to_string())?;
    adopt(ns, &dev, &format!("{linux_ip}/24"));
    stack.ready().await.map_err(|e| format!("ready: {e}"))?;
    // With DHCP: a server in the namespace; the lease it gives is our address.
    let _dnsmasq = match static_address {
        Some(_) => None,
        None => Some(Dnsmasq::start(ns, &dev, linux_ip)?),
    };
    let ebb = match static_address {
        Some(cidr) => cidr,
        None => event::timeout(Duration::from_secs(30), stack.wait_for_address())
            .await
            .map_err(|_| "no lease in 30 s".to_string())?
            .map_err(|e| e.to_string())?,
    };
    if stack.cores().len() != 2 {
        return Err(format!("cores {:?}", stack.cores()));
    }

    let accepted = Arc::new(Mutex::new(Vec::new()));
    let record = accepted.clone();
    let handler_ran_on = Arc::new(Mutex::new(Vec::new()));
    let ran_on = handler_ran_on.clone();
    let _listener = stack
        .listen_on_every_core(
            ECHO_PORT,
            // Port bit 1, not parity: Linux's connect() picks even ports.
            Placement::Chosen(|tuple, cores| usize::from(tuple.remote.port() >> 1) % cores),
            move |conn| {
                let port = conn.four_tuple().remote.port();
                if let Ok(mut accepted) = record.lock() {
                    accepted.push((event::core_id(), port));
                }
                conn.set_handler(Echo {
                    ran_on: ran_on.clone(),
                });
            },
        )
        .await
        .map_err(|e| format!("listen: {e}"))?;

    let client = netns_python(
        ns,
        CLIENT,
        &[
            &ebb.address().to_string(),
            &ECHO_PORT.to_string(),
            &CONNECTIONS.to_string(),
            &BYTES_PER_CONNECTION.to_string(),
        ],
    );
    let run = run_tool(client, TOOL_TIMEOUT).await?;
    run.check("the Python client")?;

    // Core 1 connects out.
    let server = netns_python(ns, ECHO_SERVER, &[&linux_ip.to_string(), "9000"]);
    let server = event::spawn_local(run_tool(server, TOOL_TIMEOUT));
    let handle = stack.handle();
    let remote = SocketAddrV4::new(linux_ip, 9000);
    let outbound = event::spawn_local_on(CoreId(1), move || connect_from_here(handle, remote))
        .await
        .map_err(|e| format!("core 1: {e:?}"))??;
    server.await?.check("the Python echo server")?;

    // Let the last FINs and ACKs settle before reading counters.
    event::sleep(Duration::from_millis(200)).await;
    let mut per_core = Vec::new();
    let mut faults = Vec::new();
    for (core, counters) in stack.counters_per_core().await {
        let c = counters.map_err(|e| format!("counters of core {}: {e}", core.0))?;
        per_core.push((core, format!("{:?}", c.interface), c.runner, c.tcp));
        faults.push(c.faults);
    }
    let accepted = accepted.lock().map_err(|e| e.to_string())?.clone();
    let handler_ran_on = handler_ran_on.lock().map_err(|e| e.to_string())?.clone();
    Ok(Seen {
        accepted,
        handler_ran_on,
        faults,
        client_output: run.stdout,
        outbound,
        per_core,
    })
}

/// `ip netns exec NS python3 -c SCRIPT ARGS...`, output piped.
fn netns_python(ns: &str, script: &str, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns, "python3", "-c", script])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}
