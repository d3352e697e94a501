//! ebb-net inside the hosted runtime (`ebb_hosted::netstack`) against Linux's own TCP/IP
//! stack and ordinary tools, over a TAP device in a fresh network namespace per test.
//!
//! Each test runs a one-core hosted runtime in the test process; its main task starts a
//! `NetStack` (which creates the TAP device), moves the device into the namespace at
//! `10.198.{net}.1/24` (ebb is `.2`, or a DHCP lease), runs the apps' own handlers
//! (`httpd::Http`, `ebb_bytestream::Sink`, `ebb_bytestream::PatternSender`) on the stack and the Linux side's
//! tool in the namespace, and returns what both saw; the test thread checks it:
//!
//! * `ping` from Linux to ebb;
//! * `curl` downloading 100 MB from the ebb HTTP responder (count and SHA-256 equal the
//!   pattern's), and a keep-alive pair of requests;
//! * `nc` uploading 100 MB of random bytes to the ebb sink (SHA-256 of sent = received);
//! * ebb connecting to a Linux `nc -l`: sending 100 MB of the pattern, and receiving 100 MB
//!   of random bytes;
//! * all four bulk transfers again with the fault injector on (1 % drop, 1 % reorder,
//!   0.5 % duplicate, 0.1 % corrupt, seeded, both directions), also 100 MB each;
//! * a DHCP-configured stack (lease from `dnsmasq` in the namespace) serving a request,
//!   after refusing to connect while it had no address;
//! * an idle stack sleeping (a handful of polls per second, not a spin).
//!
//! The whole file takes about 30 s here (the stack is optimized in test builds: see the
//! root `Cargo.toml`'s `[profile.dev.package.*]`).
//!
//! The tests take a global lock so they run one at a time (two cores: parallel 100 MB
//! transfers would only slow each other down). Needs root, `/dev/net/tun`, `ip`, and per
//! test `ping`, `curl`, `nc` (netcat-openbsd), `python3` (counts and hashes the Linux
//! side's stream), `dnsmasq`; without them a test prints `SKIPPED: <test>: <reason>`.
//!
//! Run: `cargo test -p ebbflow-tests --test interop -- --nocapture` (as root).

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use ebb_bytestream::pattern::Pattern;
use ebb_bytestream::{PatternSender, ReportFn, Sink, StreamReport, hex};
use ebb_core::event;
use ebb_core::future::promise;
use ebb_core::net::{CloseReason, TcpErrorKind};
use ebb_hosted::netstack::{
    AddressConfig, FaultSetting, NetStack, NetStackCounters, TapNetStackConfig, TcpConn,
};
use ebb_net::iface::{InterfaceCounters, Ipv4Cidr};
use ebb_net_driver::DeviceCounters;
use ebb_net_driver::{FaultConfig, Probability};
use sha2::{Digest, Sha256};

mod common;
use common::{
    Dnsmasq, Started, adopt, assert_every_fault_happened, namespace, need_namespace_and_tap,
    run_tool, start_netstack, unique_name,
};

const MB: u64 = 1_000_000;
/// Bytes moved by the fault-free bulk tests.
const CLEAN_BYTES: u64 = 100 * MB;
/// Bytes moved by the tests with faults injected.
const FAULTY_BYTES: u64 = 100 * MB;
/// Longest a Linux-side tool may run.
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// One test at a time (see the module docs).
static SERIAL: Mutex<()> = Mutex::new(());

/// Counts and hashes stdin; prints `COUNT HEX` (the Linux side of a download).
const COUNT_AND_HASH: &str = "import sys,hashlib\n\
h=hashlib.sha256(); n=0\n\
while True:\n\
\x20   b=sys.stdin.buffer.read(1<<20)\n\
\x20   if not b: break\n\
\x20   h.update(b); n+=len(b)\n\
print(n, h.hexdigest())\n";

/// The faults of the faulty runs: seeded, on both directions.
fn faults(seed: u64) -> FaultSetting {
    FaultSetting {
        config: FaultConfig::NONE
            .with_drop(Probability::from_percent(1))
            .with_reorder(Probability::from_percent(1), Duration::from_millis(1))
            .with_duplicate(Probability::from_ppm(5_000))
            // 0.5 %: with large receive and segmentation offload a 100 MB transfer is
            // only ~1,600 frames each way, and every kind of fault must happen.
            .with_corrupt(Probability::from_ppm(5_000)),
        seed,
    }
}

/// What a test's body gets: the running stack and the Linux side.
struct Env {
    stack: NetStack,
    ns: String,
    ebb: Ipv4Cidr,
    linux_ip: Ipv4Addr,
}

impl Env {
    /// `ip netns exec NS sh -c SCRIPT`, stdout and stderr piped.
    fn shell(&self, script: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// Parses the `COUNT HEX` line of [`COUNT_AND_HASH`].
fn count_and_hash(out: &str) -> Result<(u64, String), String> {
    let mut words = out.split_whitespace();
    match (words.next().map(str::parse::<u64>), words.next()) {
        (Some(Ok(n)), Some(h)) if h.len() == 64 => Ok((n, h.to_string())),
        _ => Err(format!("unexpected output {out:?}")),
    }
}

fn pattern_sha(len: u64) -> String {
    hex(&Pattern::get().sha256(len))
}

/// A report callback and the future of its report.
fn report_slot() -> (ReportFn, impl Future<Output = Result<StreamReport, String>>) {
    let (tx, rx) = promise::<StreamReport>();
    let report: ReportFn = Box::new(move |r| {
        let _ = tx.set(r);
    });
    (report, async move {
        event::timeout(TOOL_TIMEOUT, rx)
            .await
            .map_err(|_| "no report in time".to_string())?
            .map_err(|e| e.to_string())
    })
}

/// Connects to `remote`, retrying while nobody listens yet (the Linux tool is starting).
async fn connect_retrying(stack: &NetStack, remote: SocketAddrV4) -> Result<TcpConn, String> {
    let mut last = TcpErrorKind::ConnectionRefused;
    for _ in 0..100 {
        match stack.connect(remote).await {
            Ok(conn) => return Ok(conn),
            Err(e @ TcpErrorKind::ConnectionRefused) => last = e,
            Err(e) => return Err(format!("connect to {remote}: {e}")),
        }
        event::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("connect to {remote}: {last}"))
}

/// A random file of `len` bytes for Linux to send, and its SHA-256.
struct RandomFile {
    path: String,
    sha256: String,
}

impl RandomFile {
    fn create(len: u64) -> Result<RandomFile, String> {
        let path = format!("/tmp/{}.bin", unique_name("ebbinterop"));
        let status = Command::new("head")
            .args(["-c", &len.to_string(), "/dev/urandom"])
            .stdout(std::fs::File::create(&path).map_err(|e| e.to_string())?)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("head -c {len} /dev/urandom failed"));
        }
        let mut hasher = Sha256::new();
        let mut file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
        std::io::copy(&mut file, &mut hasher).map_err(|e| e.to_string())?;
        Ok(RandomFile {
            path,
            sha256: hex(&hasher.finalize()),
        })
    }
}

impl Drop for RandomFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs `body` against a fresh namespace and a `NetStack` on a one-core hosted runtime.
/// Returns `None` (after printing `SKIPPED`) when the machine cannot run it; panics with
/// the body's error, and prints the stack's counters either way.
fn with_netstack<T, F>(
    test: &str,
    net: u8,
    tools: &[&str],
    fault: Option<FaultSetting>,
    dhcp: bool,
    body: impl FnOnce(Env) -> F + Send + 'static,
) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = (Result<T, String>, NetStack)> + 'static,
{
    with_netstack_offload(test, net, tools, fault, dhcp, true, body)
}

/// [`with_netstack`] with the TAP device's offload (`TapConfig::vnet_hdr`) on or off.
fn with_netstack_offload<T, F>(
    test: &str,
    net: u8,
    tools: &[&str],
    fault: Option<FaultSetting>,
    dhcp: bool,
    offload: bool,
    body: impl FnOnce(Env) -> F + Send + 'static,
) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = (Result<T, String>, NetStack)> + 'static,
{
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    need_namespace_and_tap(test, tools)?;
    let faulty = fault.is_some();
    let id = unique_name("");
    let ns = namespace(test, format!("ebbio{id}"));
    let ns_name = ns.name.clone();
    let tap_name = format!("ebi{id}");
    let linux_ip = Ipv4Addr::new(10, 198, net, 1);
    let static_cidr = Ipv4Cidr::new(Ipv4Addr::new(10, 198, net, 2), 24).expect("valid /24");
    let mut config = TapNetStackConfig::new(
        tap_name,
        if dhcp {
            AddressConfig::Dhcp
        } else {
            AddressConfig::Static {
                cidr: static_cidr,
                // Linux is the gateway too (for the ICMP test; the others stay on-link).
                gateway: Some(linux_ip),
            }
        },
    );
    config.faults = fault;
    config.tap.vnet_hdr = offload;
    config.tap.large_receive = offload;
    let runtime = ebb_hosted::Config {
        pin: false,
        idle_poll: Duration::ZERO,
        ..ebb_hosted::Config::with_cores(1)
    };
    enum Outcome<T> {
        Skipped(ebb_testkit::Capability, String),
        Ran(Result<(T, Duration), String>, Box<Option<NetStackCounters>>),
    }
    let outcome = ebb_hosted::run(runtime, move || async move {
        let stack = match start_netstack(config) {
            Started::Running(stack) => stack,
            Started::Skip(capability, reason) => return Outcome::Skipped(capability, reason),
            Started::Failed(e) => return Outcome::Ran(Err(e), Box::new(None)),
        };
        let dev = match stack.device_name() {
            Ok(dev) => dev,
            Err(e) => return Outcome::Ran(Err(e.to_string()), Box::new(None)),
        };
        adopt(&ns_name, &dev, &format!("{linux_ip}/24"));
        // With DHCP the body waits for the lease itself (its server starts there).
        let ebb = stack.address().unwrap_or(static_cidr);
        let env = Env {
            stack,
            ns: ns_name,
            ebb,
            linux_ip,
        };
        let started = std::time::Instant::now();
        let (result, stack) = body(env).await;
        let elapsed = started.elapsed();
        let counters = stack.shutdown().ok();
        Outcome::Ran(result.map(|value| (value, elapsed)), Box::new(counters))
    })
    .expect("hosted runtime");
    drop(ns);
    match outcome {
        Outcome::Skipped(capability, reason) => ebb_testkit::skip(test, capability, &reason),
        Outcome::Ran(result, counters) => {
            if let Some(c) = counters.as_ref() {
                println!("{test}: runner {:?}", c.runner);
                println!("{test}: tcp {:?}", c.tcp);
                println!("{test}: device {:?}", c.device);
                if let Some(f) = c.faults {
                    println!("{test}: faults {f:?}");
                }
            }
            if faulty && result.is_ok() {
                assert_every_fault_happened(
                    test,
                    &[counters.as_ref().as_ref().and_then(|c| c.faults)],
                );
            }
            match result {
                Ok((value, elapsed)) => {
                    println!("{test}: body took {elapsed:?}");
                    Some(value)
                }
                Err(e) => panic!("{test}: {e}"),
            }
        }
    }
}

#[test]
fn linux_pings_ebb() {
    let test = "linux_pings_ebb";
    let Some(out) = with_netstack(test, 1, &["ping"], None, false, |env| async move {
        let ping = env.shell(&format!("ping -c 3 -i 0.2 -W 2 {}", env.ebb.address()));
        let result = run_tool(ping, TOOL_TIMEOUT).await.and_then(|run| {
            run.check("ping")?;
            Ok(run.stdout)
        });
        (result, env.stack)
    }) else {
        return;
    };
    assert!(out.contains("3 received"), "{out}");
}

/// curl in the namespace downloads `len` bytes from `httpd::Http` on ebb, over a TAP
/// device with or without `offload`. Returns the interface's counters at the end.
fn curl_download(
    test: &str,
    net: u8,
    len: u64,
    fault: Option<FaultSetting>,
    offload: bool,
) -> Option<InterfaceCounters> {
    let (count, sha, counters) = with_netstack_offload(
        test,
        net,
        &["curl", "python3"],
        fault,
        false,
        offload,
        move |env| async move {
            let result = async {
                env.stack
                    .listen(80, |conn| conn.set_handler(httpd::Http::default()))
                    .map_err(|e| e.to_string())?;
                let script = format!(
                    "set -e; curl -sS --fail --max-time 110 http://{}/bytes/{len} | python3 -c '{COUNT_AND_HASH}'",
                    env.ebb.address()
                );
                let run = run_tool(env.shell(&script), TOOL_TIMEOUT).await?;
                run.check("curl")?;
                let (count, sha) = count_and_hash(&run.stdout)?;
                let counters = env.stack.counters().map_err(|e| e.to_string())?;
                Ok((count, sha, counters.interface))
            }
            .await;
            (result, env.stack)
        },
    )?;
    assert_eq!(count, len);
    assert_eq!(sha, pattern_sha(len));
    Some(counters)
}

#[test]
fn curl_downloads_100mb_from_ebb_httpd() {
    let test = "curl_downloads_100mb_from_ebb_httpd";
    let Some(counters) = curl_download(test, 2, CLEAN_BYTES, None, true) else {
        return;
    };
    // With offload (the default) the response goes out in frames longer than the MTU,
    // which Linux takes whole: far fewer than the ~72,000 MSS-sized segments of 100 MB.
    assert!(
        counters.tx_tcp_segmentation > 0,
        "{test}: no frame used segmentation offload"
    );
    assert!(
        counters.tx_tcp_segmentation < 20_000 && counters.tx_checksum_partial > 0,
        "{test}: {} offloaded frames",
        counters.tx_tcp_segmentation
    );
}

#[test]
fn curl_downloads_100mb_from_ebb_httpd_without_offload() {
    let test = "curl_downloads_100mb_from_ebb_httpd_without_offload";
    let Some(counters) = curl_download(test, 13, CLEAN_BYTES, None, false) else {
        return;
    };
    assert_eq!(counters.tx_tcp_segmentation, 0);
    assert_eq!(counters.tx_checksum_partial, 0);
}

#[test]
fn curl_downloads_100mb_from_ebb_httpd_with_faults() {
    curl_download(
        "curl_downloads_100mb_from_ebb_httpd_with_faults",
        3,
        FAULTY_BYTES,
        Some(faults(3)),
        true,
    );
}

#[test]
fn curl_keep_alive_page_and_bytes_and_bad_request() {
    let test = "curl_keep_alive_page_and_bytes_and_bad_request";
    let Some(out) = with_netstack(test, 4, &["curl"], None, false, |env| async move {
        let result = async {
            env.stack
                .listen(80, |conn| conn.set_handler(httpd::Http::default()))
                .map_err(|e| e.to_string())?;
            let ip = env.ebb.address();
            // Two requests on one connection (curl reuses it), then a 400.
            let script = format!(
                "curl -sS -v http://{ip}/ http://{ip}/bytes/1000 -o /dev/null -o /dev/null 2>&1; \
                 curl -sS -o /dev/null -w 'status %{{http_code}}\\n' http://{ip}/bytes/nope"
            );
            let run = run_tool(env.shell(&script), TOOL_TIMEOUT).await?;
            run.check("curl")?;
            Ok(run.stdout)
        }
        .await;
        (result, env.stack)
    }) else {
        return;
    };
    assert!(
        out.contains("Re-using existing connection") || out.contains("Reusing existing"),
        "{out}"
    );
    assert!(out.contains("Content-Length: 1000"), "{out}");
    assert!(out.contains("status 400"), "{out}");
}

/// nc in the namespace uploads `len` random bytes to `ebb_bytestream::Sink` on ebb.
/// Returns the device's counters at the end.
fn nc_upload(test: &str, net: u8, len: u64, fault: Option<FaultSetting>) -> Option<DeviceCounters> {
    let (report, sent_sha256, device) =
        with_netstack(test, net, &["nc"], fault, false, move |env| async move {
            let result = async {
                // Made here, not before: a skipped test makes no 100 MB file.
                let file = RandomFile::create(len)?;
                let path = &file.path;
                let (report, report_rx) = report_slot();
                let mut report = Some(report);
                env.stack
                    .listen(9000, move |conn| {
                        if let Some(report) = report.take() {
                            let peer = ebb_core::net::TcpConnection::peer_addr(&conn);
                            conn.set_handler(Sink::new(peer, report));
                        } else {
                            ebb_core::net::TcpConnection::abort(&conn);
                        }
                    })
                    .map_err(|e| e.to_string())?;
                let script = format!("nc -N -w 100 {} 9000 < {path}", env.ebb.address());
                let run = run_tool(env.shell(&script), TOOL_TIMEOUT).await?;
                run.check("nc")?;
                let report = report_rx.await?;
                let counters = env.stack.counters().map_err(|e| e.to_string())?;
                Ok((report, file.sha256.clone(), counters.device))
            }
            .await;
            (result, env.stack)
        })?;
    assert_eq!(report.reason, CloseReason::Normal);
    assert_eq!(report.bytes, len);
    assert_eq!(report.sha256, sent_sha256);
    Some(device)
}

#[test]
fn nc_uploads_100mb_to_ebb_sink() {
    let test = "nc_uploads_100mb_to_ebb_sink";
    let Some(device) = nc_upload(test, 5, CLEAN_BYTES, None) else {
        return;
    };
    // Large receive (on by default): Linux hands the stream over in frames longer than
    // the MTU, far fewer than the ~72,000 MSS-sized segments of 100 MB.
    let average = device.rx_bytes / device.rx_frames.max(1);
    assert!(
        average > 3_000,
        "{test}: {} frames averaging {average} bytes",
        device.rx_frames
    );
}

#[test]
fn nc_uploads_100mb_to_ebb_sink_with_faults() {
    let _ = nc_upload(
        "nc_uploads_100mb_to_ebb_sink_with_faults",
        6,
        FAULTY_BYTES,
        Some(faults(6)),
    );
}

/// ebb connects to `nc -l` in the namespace and sends `len` pattern bytes.
fn ebb_sends(test: &str, net: u8, len: u64, fault: Option<FaultSetting>) {
    let Some((sent, linux)) = with_netstack(
        test,
        net,
        &["nc", "python3"],
        fault,
        false,
        move |env| async move {
            let result = async {
                let script = format!(
                    "nc -l -w 100 {} 9001 | python3 -c '{COUNT_AND_HASH}'",
                    env.linux_ip
                );
                let listener = env.shell(&script);
                let tool = run_tool(listener, TOOL_TIMEOUT);
                let remote = SocketAddrV4::new(env.linux_ip, 9001);
                let stack = &env.stack;
                let send = async move {
                    let conn = connect_retrying(stack, remote).await?;
                    let (report, report_rx) = report_slot();
                    let peer = ebb_core::net::TcpConnection::peer_addr(&conn);
                    let mut sender = PatternSender::new(Pattern::get(), peer, len, report);
                    sender.start(&conn);
                    conn.set_handler(sender);
                    report_rx.await
                };
                let (run, sent) = ebb_core::future::join(tool, send).await;
                let run = run?;
                run.check("nc -l")?;
                Ok((sent?, count_and_hash(&run.stdout)?))
            }
            .await;
            (result, env.stack)
        },
    ) else {
        return;
    };
    assert_eq!(sent.reason, CloseReason::Normal);
    assert_eq!(sent.bytes, len);
    assert_eq!(sent.sha256, pattern_sha(len));
    assert_eq!(linux, (len, pattern_sha(len)));
}

#[test]
fn ebb_connects_and_sends_100mb_to_linux() {
    ebb_sends(
        "ebb_connects_and_sends_100mb_to_linux",
        7,
        CLEAN_BYTES,
        None,
    );
}

#[test]
fn ebb_connects_and_sends_100mb_to_linux_with_faults() {
    ebb_sends(
        "ebb_connects_and_sends_100mb_to_linux_with_faults",
        8,
        FAULTY_BYTES,
        Some(faults(8)),
    );
}

/// ebb connects to `nc -N -l` in the namespace and receives `len` random bytes.
fn ebb_receives(test: &str, net: u8, len: u64, fault: Option<FaultSetting>) {
    let Some((report, sent_sha256)) =
        with_netstack(test, net, &["nc"], fault, false, move |env| async move {
            let result = async {
                // Made here, not before: a skipped test makes no 100 MB file.
                let file = RandomFile::create(len)?;
                let path = &file.path;
                let script = format!("nc -N -l -w 100 {} 9002 < {path}", env.linux_ip);
                let tool = run_tool(env.shell(&script), TOOL_TIMEOUT);
                let remote = SocketAddrV4::new(env.linux_ip, 9002);
                let stack = &env.stack;
                let receive = async move {
                    let conn = connect_retrying(stack, remote).await?;
                    let (report, report_rx) = report_slot();
                    let peer = ebb_core::net::TcpConnection::peer_addr(&conn);
                    conn.set_handler(Sink::new(peer, report));
                    report_rx.await
                };
                let (run, report) = ebb_core::future::join(tool, receive).await;
                run?.check("nc -N -l")?;
                Ok((report?, file.sha256.clone()))
            }
            .await;
            (result, env.stack)
        })
    else {
        return;
    };
    assert_eq!(report.reason, CloseReason::Normal);
    assert_eq!(report.bytes, len);
    assert_eq!(report.sha256, sent_sha256);
}

#[test]
fn ebb_connects_and_receives_100mb_from_linux() {
    ebb_receives(
        "ebb_connects_and_receives_100mb_from_linux",
        9,
        CLEAN_BYTES,
        None,
    );
}

#[test]
fn ebb_connects_and_receives_100mb_from_linux_with_faults() {
    ebb_receives(
        "ebb_connects_and_receives_100mb_from_linux_with_faults",
        12,
        FAULTY_BYTES,
        Some(faults(12)),
    );
}

#[test]
fn dhcp_configured_stack_serves_a_request() {
    let test = "dhcp_configured_stack_serves_a_request";
    let net = 10;
    let Some((lease, page)) = with_netstack(
        test,
        net,
        &["dnsmasq", "curl"],
        None,
        true,
        move |env| async move {
            let result = async {
                let dev = env.stack.device_name().map_err(|e| e.to_string())?;
                // No address before the lease: connecting is refused at once.
                let early = env.stack.connect(SocketAddrV4::new(env.linux_ip, 80)).await;
                if !matches!(early, Err(TcpErrorKind::AddressNotAvailable)) {
                    return Err(format!("connect before the lease: {early:?}"));
                }
                let _dnsmasq = Dnsmasq::start(&env.ns, &dev, env.linux_ip)?;
                let lease = event::timeout(Duration::from_secs(30), env.stack.wait_for_address())
                    .await
                    .map_err(|_| "no lease in 30 s".to_string())?
                    .map_err(|e| e.to_string())?;
                env.stack
                    .listen(80, |conn| conn.set_handler(httpd::Http::default()))
                    .map_err(|e| e.to_string())?;
                let run = run_tool(
                    env.shell(&format!("curl -sS --fail http://{}/", lease.address())),
                    TOOL_TIMEOUT,
                )
                .await?;
                run.check("curl")?;
                Ok((lease, run.stdout))
            }
            .await;
            (result, env.stack)
        },
    ) else {
        return;
    };
    let octets = lease.address().octets();
    assert_eq!(octets[..3], [10, 198, net]);
    assert!((50..=60).contains(&octets[3]), "{lease:?}");
    assert!(page.contains("Ebbflow httpd"), "{page}");
}

#[test]
fn connect_through_a_router_without_a_route_fails_fast() {
    // Linux in the namespace is ebb's default gateway and forwards, but has no route to
    // 203.0.113.0/24 (TEST-NET-3): it answers our SYN with ICMP "net unreachable", and
    // the connect ends with `Unreachable` at once instead of `TimedOut` after the SYN
    // retries (about two minutes).
    let test = "connect_through_a_router_without_a_route_fails_fast";
    let Some((result, elapsed, counters)) =
        with_netstack(test, 12, &["sysctl"], None, false, |env| async move {
            let result = async {
                run_tool(env.shell("sysctl -qw net.ipv4.ip_forward=1"), TOOL_TIMEOUT)
                    .await?
                    .check("sysctl")?;
                let started = std::time::Instant::now();
                let far = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 1), 80);
                let outcome = event::timeout(Duration::from_secs(60), env.stack.connect(far))
                    .await
                    .map_err(|_| "no answer to the connect in 60 s".to_string())?;
                let elapsed = started.elapsed();
                let counters = env.stack.counters().map_err(|e| e.to_string())?;
                Ok((outcome.map(|_| ()), elapsed, counters))
            }
            .await;
            (result, env.stack)
        })
    else {
        return;
    };
    println!("{test}: connect ended after {elapsed:?}: {result:?}");
    assert_eq!(result, Err(TcpErrorKind::Unreachable));
    assert_eq!(
        counters.interface.rx_icmp_unreachable, 1,
        "{:?}",
        counters.interface
    );
    assert_eq!(counters.tcp.icmp_errors, 1, "{:?}", counters.tcp);
    assert!(
        elapsed < Duration::from_secs(10),
        "well before the first SYN retransmission backs off far: {elapsed:?}"
    );
}

#[test]
fn idle_stack_sleeps() {
    // The runner polls only when something happens: a frame arrives (readable), the
    // stack's earliest deadline fires (timer), or the application acts (idle handler).
    // An idle stack with a static address has no deadline due within this second (ARP
    // entries live 60 s; no TCP connection), and Linux sends on a fresh link only the odd
    // IPv6 router solicitation or MLD report — so an idle second costs a poll or two, and
    // every poll has an event behind it. A spinning runner, a busy timer or an idle
    // handler left registered would show here.
    let test = "idle_stack_sleeps";
    let Some((polls, events)) = with_netstack(test, 11, &[], None, false, |env| async move {
        event::sleep(Duration::from_millis(300)).await; // settle (gratuitous ARP, IPv6 noise)
        let before = env.stack.runner_counters();
        event::sleep(Duration::from_secs(1)).await;
        let after = env.stack.runner_counters();
        let events = (after.readable_events - before.readable_events)
            + (after.writable_events - before.writable_events)
            + (after.timer_fires - before.timer_fires);
        (Ok((after.polls - before.polls, events)), env.stack)
    }) else {
        return;
    };
    println!("{test}: {polls} polls, {events} device and timer events in an idle second");
    assert!(polls <= 4, "{polls} polls in an idle second (expected 0-2)");
    assert!(
        polls <= events + 1,
        "{polls} polls but only {events} events woke the runner"
    );
}
