//! The network apps (`apps/httpd`, `apps/sink`, `apps/echo`) built as native images and
//! run by `ebb run`, talked to from the host with real tools, bytes checked by SHA-256:
//!
//! * through `--net user` (the default for network apps: the forwards terminated in the
//!   monitor by ebb-usernet, passt behind them) and `-p` port forwards: `curl` downloads
//!   100 MB from httpd, `nc` uploads 100 MB to sink, concurrent connections echo through
//!   echo — with 2 vCPUs, one queue pair each; memcached passes `memccapable` and serves
//!   concurrent clients, through `--net user` and through `--net passt` (everything
//!   through passt, the older path); without passt, `--net user`'s forwards still work;
//! * through `--net tap=NAME` (root), the TAP device's kernel end moved into a network
//!   namespace where Linux is 10.0.2.2/24: `ping`, `curl`, `nc`, with 1 and 2 vCPUs;
//! * with `--net-faults` between the guest and the TAP device, the monitor's fault
//!   counters asserted non-zero and the bytes still right;
//! * over TAP with virtio-net checksum offload negotiated (the default there): the
//!   monitor's counters must show CSUM and GUEST_CSUM agreed, the download sent with
//!   partial checksums and (without faults) the upload received with them — the same
//!   SHA-256 checks on the bytes.
//!
//! Every app is built once (`ebb build --native`); every run has a `--timeout`, and is
//! killed when its test ends. Without KVM, passt, root, TAP or a tool, a test prints
//! `SKIPPED: ...` through `ebb_testkit` (a failure where `EBB_REQUIRE` names it).

mod common;

use common::{build, ebb, kvm};
use ebb_testkit::lines::Lines;
use ebb_testkit::netcheck::{echo, free_port};
use ebb_testkit::netns::{Netns, adopt, namespace, need_namespace_and_tap, unique_name};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Bytes moved by the bulk transfers.
const BULK: u64 = 100_000_000;
/// From `ebb run` to the app's "listening" line (the image is already built).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The guest's address on both backends (the apps' native default).
const GUEST: &str = "10.0.2.15";

/// The native image of `app`, built once per test binary.
fn image(app: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(a, _)| a == app) {
        return path.clone();
    }
    let path = build(app, "--native");
    built.push((app.to_string(), path.clone()));
    path
}

/// An app running under `ebb run`, killed when dropped.
struct Served {
    child: Child,
    /// The app's console (the monitor writes the guest's console to stdout).
    stdout: Lines,
    /// `ebb`'s and the monitor's lines.
    stderr: Lines,
}

impl Served {
    /// `ebb run TARGET --timeout 600 EXTRA...`, then waits for the app's "listening" line.
    fn start(target: &str, extra: &[&str]) -> Served {
        let child = ebb()
            .args(["run", target, "--timeout", "600"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ebb run");
        Served::watch(child)
    }

    /// Takes over a started `ebb run` and waits for the app's "listening" line.
    fn watch(mut child: Child) -> Served {
        let stdout = Lines::spawn(child.stdout.take().expect("stdout"));
        let stderr = Lines::spawn(child.stderr.take().expect("stderr"));
        let mut served = Served {
            child,
            stdout,
            stderr,
        };
        if let Err(e) = served.wait_for(": listening on ", START_TIMEOUT) {
            served.fail(&e);
        }
        served
    }

    /// Waits for a console line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        self.stdout.wait_for(needle, timeout)
    }

    /// The monitor's counter line, asked for with SIGUSR1 (see `ebb_vmm::vm::net_summary`).
    fn counters(&mut self) -> Result<String, String> {
        let signalled = Command::new("kill")
            .args(["-USR1", &self.child.id().to_string()])
            .status()
            .map_err(|e| format!("kill -USR1: {e}"))?;
        if !signalled.success() {
            return Err("kill -USR1 failed".into());
        }
        self.stderr
            .wait_for("ebb-vmm: virtio-net:", Duration::from_secs(10))
    }

    /// Stops the app; everything it printed, for a failure message.
    fn stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdout.drain(Duration::from_millis(200));
        self.stderr.drain(Duration::from_millis(200));
        format!(
            "--- stdout\n{}--- stderr\n{}",
            self.stdout.seen(),
            self.stderr.seen()
        )
    }

    fn fail(&mut self, what: &str) -> ! {
        let output = self.stop();
        panic!("{what}\n{output}");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `key=` in the monitor's counter line (0 when absent).
fn counter(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `curl` (optionally inside namespace `ns`) fetches `/bytes/len` from `base` and checks
/// the length and SHA-256 against the pattern httpd serves; with the index page first
/// on the same connection (keep-alive).
fn curl_bytes(ns: Option<&Netns>, base: &str, len: u64) -> Result<(), String> {
    let mut cmd = match ns {
        Some(ns) => ns.exec(&["curl"]),
        None => Command::new("curl"),
    };
    let out = cmd
        .args(["-sS", "--fail", "--max-time", "120"])
        .args(["-o", "/dev/null", &format!("{base}/")])
        .args(["-o", "/dev/null", &format!("{base}/bytes/{len}")])
        .args(["-w", "%{size_download} %{num_connects}\\n"])
        .output()
        .map_err(|e| format!("run curl: {e}"))?;
    if !out.status.success() {
        return Err(format!("curl failed: {out:?}"));
    }
    // `-o /dev/null` for the sizes and connection count; the bytes themselves next.
    let report = String::from_utf8_lossy(&out.stdout);
    let sizes: Vec<&str> = report.lines().collect();
    if sizes.len() != 2 || !sizes[1].starts_with(&format!("{len} ")) || !sizes[1].ends_with(" 0") {
        return Err(format!(
            "expected two answers on one kept-alive connection, the second {len} bytes: {report}"
        ));
    }
    let mut cmd = match ns {
        Some(ns) => ns.exec(&["curl"]),
        None => Command::new("curl"),
    };
    let mut child = cmd
        .args(["-sS", "--fail", "--max-time", "120"])
        .arg(format!("{base}/bytes/{len}"))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run curl: {e}"))?;
    let mut body = child.stdout.take().expect("curl's stdout");
    let mut hasher = Sha256::new();
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                got += n as u64;
            }
            Err(e) => return Err(format!("reading curl's output: {e}")),
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let expected = ebb_bytestream::pattern::Pattern::get().sha256(len);
    if !status.success() || got != len || hasher.finalize().as_slice() != expected {
        return Err(format!(
            "GET /bytes/{len}: curl {status}, {got} bytes, sha256 matches the pattern: no"
        ));
    }
    Ok(())
}

/// `BULK` bytes of a 1 MiB random block repeated, and their SHA-256.
fn upload_file() -> &'static (PathBuf, String) {
    static FILE: OnceLock<(PathBuf, String)> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("ebb-upload-{}", std::process::id()));
        let mut block = vec![0u8; 1 << 20];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in block.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let mut file = std::fs::File::create(&path).expect("create the upload file");
        let mut hasher = Sha256::new();
        let mut left = BULK;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            file.write_all(&block[..n]).expect("write the upload file");
            hasher.update(&block[..n]);
            left -= n as u64;
        }
        (path, hex(&hasher.finalize()))
    })
}

/// `nc` (optionally inside `ns`) uploads the file to `host:port`; the sink must report
/// its length and SHA-256.
fn nc_upload(served: &mut Served, ns: Option<&Netns>, host: &str, port: u16) -> Result<(), String> {
    let (path, sha) = upload_file();
    let mut cmd = match ns {
        Some(ns) => ns.exec(&["nc"]),
        None => Command::new("nc"),
    };
    let status = cmd
        .args(["-N", "-w", "60", host, &port.to_string()])
        .stdin(std::fs::File::open(path).map_err(|e| e.to_string())?)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("run nc: {e}"))?;
    if !status.success() {
        return Err(format!("nc exited with {status}"));
    }
    let line = served.wait_for(
        &format!("sink: {BULK} bytes sha256"),
        Duration::from_secs(60),
    )?;
    if !line.contains(sha.as_str()) {
        return Err(format!(
            "the sink's digest differs from the file's ({sha}): {line}"
        ));
    }
    Ok(())
}

fn user_networking(test: &str, tools: &[&str]) -> Option<()> {
    kvm(test)?;
    ebb_testkit::need_tools(test, &["passt"])?;
    ebb_testkit::need_tools(test, tools)
}

#[test]
fn httpd_serves_curl_natively_through_user_networking() {
    let test = "httpd_serves_curl_natively_through_user_networking";
    let Some(()) = user_networking(test, &["curl"]) else {
        return;
    };
    image("httpd");
    let port = free_port();
    // By app name: `ebb run` finds httpd's network in its manifest (--net user); -p
    // replaces its default forward (8080 may be taken on a test machine).
    let forward = format!("{port}:80");
    let mut served = Served::start("httpd", &["--cpus", "2", "-p", &forward]);
    if !served.stderr_lines_contain("network: user-mode (forwards in the monitor") {
        served.fail("ebb run did not say it gave httpd user-mode networking");
    }
    if let Err(e) = curl_bytes(None, &format!("http://127.0.0.1:{port}"), BULK) {
        served.fail(&e);
    }
    let counters = served.counters().unwrap_or_else(|e| served.fail(&e));
    if counter(&counters, "rx_frames") == 0 || counters.contains("broken") {
        served.fail(&format!("the device is not healthy: {counters}"));
    }
}

#[test]
fn httpd_natively_closes_idle_connections_and_answers_slow_heads_with_408() {
    // The hosted server's timeout test (apps/httpd/tests/timeouts.rs), against the same
    // app booted natively: its watchdogs run on the native runtime's timers.
    let test = "httpd_natively_closes_idle_connections_and_answers_slow_heads_with_408";
    let Some(()) = user_networking(test, &[]) else {
        return;
    };
    image("httpd");
    let port = free_port();
    let forward = format!("{port}:80");
    let mut served = Served::start(
        "httpd",
        &[
            "--cpus",
            "1",
            "-p",
            &forward,
            "--",
            "--idle-timeout",
            "0.4",
            "--head-timeout",
            "0.3",
        ],
    );
    if let Err(e) =
        ebb_testkit::http_timeouts::check(([127, 0, 0, 1], port).into(), Duration::from_secs(3))
    {
        served.fail(&e);
    }
}

#[test]
fn sink_counts_an_nc_upload_natively_through_user_networking() {
    let test = "sink_counts_an_nc_upload_natively_through_user_networking";
    let Some(()) = user_networking(test, &["nc"]) else {
        return;
    };
    let image = image("sink");
    let port = free_port();
    let forward = format!("{port}:9000");
    let mut served = Served::start(image.to_str().expect("a UTF-8 path"), &["-p", &forward]);
    if let Err(e) = nc_upload(&mut served, None, "127.0.0.1", port) {
        served.fail(&e);
    }
}

/// Python: `N` concurrent connections to `HOST:PORT`, each echoing 1 MiB of random bytes,
/// checked byte for byte; prints `ok N` (run inside a namespace, where this process is not).
const ECHO_CLIENT: &str = r#"
import os, socket, sys, threading
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size, failures = 1 << 20, []
def one(i):
    try:
        s = socket.create_connection((host, port), timeout=60)
        data = os.urandom(size)
        sender = threading.Thread(target=s.sendall, args=(data,))
        sender.start()
        got = bytearray()
        while len(got) < size:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        sender.join()
        if bytes(got) != data:
            failures.append(f"connection {i}: {len(got)} bytes, differ")
    except Exception as e:
        failures.append(f"connection {i}: {e!r}")
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print("ok", n) if not failures else print("\n".join(failures))
sys.exit(1 if failures else 0)
"#;

#[test]
fn echo_answers_concurrent_connections_natively_through_user_networking() {
    // Eight 1 MiB echoes at once, three rounds: the echo closes its receive window under
    // back-pressure and reopens it, with passt as the peer. passt sends past a window as
    // it closes; until ebb-net took the ACKs of the segments that then start past the
    // zero window, 2 to 10 connections in 24 deadlocked here (docs/10).
    let test = "echo_answers_concurrent_connections_natively_through_user_networking";
    let Some(()) = user_networking(test, &["python3"]) else {
        return;
    };
    let image = image("echo");
    let port = free_port();
    let forward = format!("{port}:7");
    let mut served = Served::start(
        image.to_str().expect("a UTF-8 path"),
        &["--cpus", "2", "-p", &forward],
    );
    for round in 0..3 {
        let out = Command::new("python3")
            .args(["-c", ECHO_CLIENT, "127.0.0.1", &port.to_string(), "8"])
            .output()
            .expect("run python3");
        if !out.status.success() {
            served.fail(&format!(
                "round {round}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

#[test]
fn echo_answers_concurrent_connections_natively_on_two_vcpus() {
    // Over TAP, Linux being the peer.
    let test = "echo_answers_concurrent_connections_natively_on_two_vcpus";
    let Some(()) = kvm(test) else { return };
    let Some(()) = need_namespace_and_tap(test, &["python3"]) else {
        return;
    };
    let ns = namespace(test, unique_name("ebbn"));
    let tap = unique_name("ebbt");
    let net = format!("tap={tap}");
    let image = image("echo");
    let mut served = Served::start(
        image.to_str().expect("a UTF-8 path"),
        &["--cpus", "2", "--net", &net],
    );
    adopt(&ns.name, &tap, "10.0.2.2/24");
    for round in 0..3 {
        let out = ns
            .exec(&["python3", "-c", ECHO_CLIENT, GUEST, "7", "8"])
            .output()
            .expect("run python3");
        if !out.status.success() {
            served.fail(&format!(
                "round {round}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

impl Served {
    /// Whether the monitor's start line (stderr) says `text`; waits up to 5 s for it.
    fn stderr_lines_contain(&mut self, text: &str) -> bool {
        self.stderr.seen().contains(text)
            || self.stderr.wait_for(text, Duration::from_secs(5)).is_ok()
    }
}

/// httpd and sink natively on a TAP device whose kernel end sits in a namespace with
/// Linux at 10.0.2.2/24; `faults` adds `--net-faults`, whose counters must move.
fn over_tap(test: &str, cpus: u32, faults: Option<&str>) {
    let Some(()) = kvm(test) else { return };
    let Some(()) = need_namespace_and_tap(test, &["ping", "curl", "nc"]) else {
        return;
    };
    let ns = namespace(test, unique_name("ebbn"));
    let cpus = cpus.to_string();
    // httpd: ping and curl.
    let tap = unique_name("ebbt");
    let net = format!("tap={tap}");
    let mut args = vec!["--cpus", cpus.as_str(), "--net", net.as_str()];
    if let Some(spec) = faults {
        args.extend(["--net-faults", spec]);
    }
    let httpd = image("httpd");
    let mut served = Served::start(httpd.to_str().expect("a UTF-8 path"), &args);
    adopt(&ns.name, &tap, "10.0.2.2/24");
    let ping = ns
        .exec(&["ping", "-c", "3", "-W", "5", GUEST])
        .output()
        .expect("run ping");
    if !ping.status.success() {
        served.fail(&format!("ping {GUEST} failed: {ping:?}"));
    }
    let len = if faults.is_some() { BULK / 5 } else { BULK };
    if let Err(e) = curl_bytes(Some(&ns), &format!("http://{GUEST}"), len) {
        served.fail(&e);
    }
    let line = served.counters().unwrap_or_else(|e| served.fail(&e));
    // Checksum offload was negotiated and the download went out with partial checksums.
    for key in ["csum", "guest_csum", "tx_csum_partial"] {
        if counter(&line, key) == 0 {
            served.fail(&format!("no checksum offload ({key}=0): {line}"));
        }
    }
    if faults.is_some() {
        for dir in ["rx", "tx"] {
            for fault in ["dropped", "reordered", "duplicated", "corrupted"] {
                let key = format!("{dir}_fault_{fault}");
                if counter(&line, &key) == 0 {
                    served.fail(&format!("the fault injector reports no {key}: {line}"));
                }
            }
        }
    }
    drop(served);
    // sink: an nc upload (a fresh TAP device: the last one left with its VM).
    let tap = unique_name("ebbt");
    let net = format!("tap={tap}");
    args[3] = net.as_str();
    let sink = image("sink");
    let mut served = Served::start(sink.to_str().expect("a UTF-8 path"), &args);
    adopt(&ns.name, &tap, "10.0.2.2/24");
    if let Err(e) = nc_upload(&mut served, Some(&ns), GUEST, 9000) {
        served.fail(&e);
    }
    // The namespace's TCP sent the upload with CHECKSUM_PARTIAL: the guest took it as
    // NEEDS_CSUM (a fault injector in between hands frames on with complete checksums).
    let line = served.counters().unwrap_or_else(|e| served.fail(&e));
    let partial = counter(&line, "rx_csum_partial");
    if faults.is_none() && partial == 0 || faults.is_some() && partial != 0 {
        served.fail(&format!(
            "rx_csum_partial={partial} with faults {faults:?}: {line}"
        ));
    }
}

#[test]
fn httpd_and_sink_natively_over_tap_in_a_namespace() {
    over_tap("httpd_and_sink_natively_over_tap_in_a_namespace", 1, None);
}

#[test]
fn httpd_and_sink_natively_over_a_two_queue_tap_device() {
    over_tap(
        "httpd_and_sink_natively_over_a_two_queue_tap_device",
        2,
        None,
    );
}

#[test]
fn httpd_and_sink_natively_over_tap_with_faults() {
    over_tap(
        "httpd_and_sink_natively_over_tap_with_faults",
        2,
        Some("drop=0.01,reorder=0.01,duplicate=0.01,corrupt=0.01,seed=7"),
    );
}

/// `PATH` without `passt`: a directory of links to everything on `PATH` but passt.
fn path_without_passt() -> std::ffi::OsString {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("no-passt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the PATH directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for entry in std::env::split_paths(&path)
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
    {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        if name != "passt" && !dir.join(&name).exists() {
            let _ = std::os::unix::fs::symlink(entry.path(), dir.join(&name));
        }
    }
    dir.into_os_string()
}

#[test]
fn without_passt_net_passt_runs_a_network_app_hosted_on_its_forwarded_port() {
    let test = "without_passt_net_passt_runs_a_network_app_hosted_on_its_forwarded_port";
    let Some(()) = kvm(test) else { return };
    build("echo", "--hosted");
    let port = free_port();
    let forward = format!("{port}:7");
    let child = ebb()
        .env("PATH", path_without_passt())
        .args([
            "run",
            "echo",
            "--net",
            "passt",
            "--timeout",
            "120",
            "-p",
            &forward,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ebb run");
    let mut served = Served::watch(child);
    if !served.stderr_lines_contain("passt is not installed")
        || !served.stderr.seen().contains("hosted")
    {
        served.fail("ebb run did not say it fell back to hosted for want of passt");
    }
    if let Err(e) = echo(
        ([127, 0, 0, 1], port).into(),
        1 << 16,
        7,
        Duration::from_secs(30),
    ) {
        served.fail(&format!("the hosted echo on the forwarded port: {e}"));
    }
    // `ebb run` killed: the hosted app goes with it (it used to keep the port for good).
    served.stop();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hosted echo still serves port {port} 10 s after `ebb run` was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn without_passt_net_user_forwards_still_reach_a_native_app() {
    // The image's address is static (10.0.2.15/24, `ebb::net`'s default), so the
    // forwards terminated in the monitor need nothing of passt's DHCP.
    let test = "without_passt_net_user_forwards_still_reach_a_native_app";
    let Some(()) = kvm(test) else { return };
    let image = image("echo");
    let port = free_port();
    let forward = format!("{port}:7");
    let child = ebb()
        .env("PATH", path_without_passt())
        .args([
            "run",
            image.to_str().expect("a UTF-8 path"),
            "--net",
            "user",
            "--timeout",
            "120",
            "-p",
            &forward,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ebb run");
    let mut served = Served::watch(child);
    if !served.stderr_lines_contain("passt is not installed")
        || !served.stderr.seen().contains("natively")
    {
        served.fail("ebb run did not say it runs natively without passt");
    }
    for seed in 0..4 {
        if let Err(e) = echo(
            ([127, 0, 0, 1], port).into(),
            1 << 20,
            seed,
            Duration::from_secs(30),
        ) {
            served.fail(&format!("the native echo on the forwarded port: {e}"));
        }
    }
}

#[test]
fn echo_through_the_in_monitor_forwards_with_faults() {
    // `--net-faults` between the guest and the forwarder, every kind both ways: ebb-net
    // on both ends repairs them, and the echoes come back byte for byte.
    let test = "echo_through_the_in_monitor_forwards_with_faults";
    let Some(()) = user_networking(test, &[]) else {
        return;
    };
    let image = image("echo");
    let port = free_port();
    let forward = format!("{port}:7");
    let mut served = Served::start(
        image.to_str().expect("a UTF-8 path"),
        &[
            "--cpus",
            "1",
            "-p",
            &forward,
            "--net-faults",
            "drop=0.02,reorder=0.02,duplicate=0.02,corrupt=0.01,seed=5",
        ],
    );
    if !served.stderr_lines_contain("forwards in the monitor") {
        served.fail("ebb run did not say the forwards are in the monitor");
    }
    for seed in 0..4 {
        if let Err(e) = echo(
            ([127, 0, 0, 1], port).into(),
            256 << 10,
            seed,
            Duration::from_secs(60),
        ) {
            served.fail(&format!("echo {seed} through faults: {e}"));
        }
    }
    let line = served.counters().unwrap_or_else(|e| served.fail(&e));
    for dir in ["rx", "tx"] {
        for fault in ["dropped", "reordered", "duplicated", "corrupted"] {
            let key = format!("{dir}_fault_{fault}");
            if counter(&line, &key) == 0 {
                served.fail(&format!("the fault injector reports no {key}: {line}"));
            }
        }
    }
}

/// The main job as the README runs it: no `--cpus`, so one vCPU fewer than the host has
/// CPUs (at least one), and the start line says why.
#[test]
fn memcached_natively_passes_memccapable_and_stops_on_ctrl_c() {
    let host = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let vcpus = ebb_cli::launch::default_vcpus(host);
    let start = if vcpus == host {
        format!("natively ({host} vCPU")
    } else {
        let noun = if vcpus == 1 { "vCPU" } else { "vCPUs" };
        format!("natively ({vcpus} {noun}: one CPU of {host} left to the network device's thread")
    };
    memccapable_then_ctrl_c(
        "memcached_natively_passes_memccapable_and_stops_on_ctrl_c",
        "user",
        None,
        &[
            &start,
            "network: user-mode (forwards in the monitor, passt for the rest)",
        ],
    );
}

#[test]
fn memcached_natively_passes_memccapable_through_passt() {
    memccapable_then_ctrl_c(
        "memcached_natively_passes_memccapable_through_passt",
        "passt",
        Some("1"),
        &["network: user-mode (passt)"],
    );
}

/// memcached through `--net NET` on `cpus` vCPUs (`ebb run`'s default without): the
/// start lines say each of `says`, `memccapable -a` and `-b` pass, 16 clients at once
/// each set and get their own keys, and Ctrl-C stops it.
fn memccapable_then_ctrl_c(test: &str, net: &str, cpus: Option<&str>, says: &[&str]) {
    let Some(()) = user_networking(test, &["memccapable"]) else {
        return;
    };
    image("memcached");
    let port = free_port();
    let forward = format!("{port}:11211");
    let mut args = vec!["--net", net, "-p", &forward];
    if let Some(cpus) = cpus {
        args.extend(["--cpus", cpus]);
    }
    let mut served = Served::start("memcached", &args);
    for says in says {
        if !served.stderr_lines_contain(says) {
            served.fail(&format!("ebb run did not say {says:?}"));
        }
    }
    let clients: Vec<_> = (0..16)
        .map(|client| std::thread::spawn(move || memcached_client(port, client, 200)))
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        if let Err(e) = c.join().expect("client thread") {
            served.fail(&format!("concurrent client {i}: {e}"));
        }
    }
    for mode in ["-a", "-b"] {
        let out = Command::new("memccapable")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), mode, "-t", "10"])
            .output()
            .expect("run memccapable");
        // Every test passes but the two memcached 1.6.45 fails as well (it ignores the
        // extra tokens of `delete a b c d e`, which memccapable wants refused).
        if let Err(e) = ebb_testkit::memccapable::as_memcached_1_6_45(mode, &out) {
            served.fail(&e);
        }
    }
    // Ctrl-C: the monitor stops the guest, prints its summary and exits with 130.
    let interrupted = Command::new("kill")
        .args(["-INT", &served.child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        match served.child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => served.fail("ebb run did not stop within 10 s of SIGINT"),
        }
    };
    let output = served.stop();
    assert_eq!(status.code(), Some(130), "{output}");
    assert!(output.contains("ebb-vmm: stopped by SIGINT"), "{output}");
    assert!(output.contains("ebb-vmm: virtio-net: "), "{output}");
}

/// One client of the memcached at 127.0.0.1:`port`: `rounds` sets of its own keys, each
/// value read back.
fn memcached_client(port: u16, client: u32, rounds: u32) -> Result<(), String> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    let mut read_until = |c: &mut std::net::TcpStream, end: &[u8]| -> Result<Vec<u8>, String> {
        reply.clear();
        let mut chunk = [0u8; 4096];
        while !reply.ends_with(end) {
            let n = c.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("closed".into());
            }
            reply.extend_from_slice(&chunk[..n]);
        }
        Ok(reply.clone())
    };
    for round in 0..rounds {
        let value = format!("{client}-{round}-").repeat(1 + (round as usize % 50));
        let key = format!("c{client}k{}", round % 10);
        c.write_all(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes())
            .map_err(|e| e.to_string())?;
        let stored = read_until(&mut c, b"\r\n")?;
        if stored != b"STORED\r\n" {
            return Err(format!("set {key}: {}", String::from_utf8_lossy(&stored)));
        }
        c.write_all(format!("get {key}\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let got = read_until(&mut c, b"END\r\n")?;
        let want = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
        if got != want.as_bytes() {
            return Err(format!("get {key}: {}", String::from_utf8_lossy(&got)));
        }
    }
    Ok(())
}

/// One `stats` value of the memcached at 127.0.0.1:`port`, or why not.
fn memcached_stat(port: u16, name: &str) -> Result<u64, String> {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    c.write_all(b"stats\r\n").map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    while !text.ends_with(b"END\r\n") {
        let n = c.read(&mut chunk).map_err(|e| format!("stats: {e}"))?;
        if n == 0 {
            return Err("stats: closed".into());
        }
        text.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no {name} in stats"))
}

/// 80 clients each send 999 KB of a 1 MB value to the native server in a 64 MiB guest
/// (`-m 16`) and never the rest — 80 MB of requests still arriving. Before the server
/// bounded the memory such input holds, the guest ran out of memory and panicked (200
/// clients did the same to the README's 128 MiB guest); now connections past the bound
/// are refused (`read_buf_oom`), reset if they go on sending, and the server goes on
/// serving. (Before the reset, the refused values streamed in whole and were dropped:
/// on a loaded host the guest then answered new connections after 15-20 s, past
/// passt's patience, which reset them.)
#[test]
fn memcached_natively_survives_clients_holding_partial_values() {
    let test = "memcached_natively_survives_clients_holding_partial_values";
    let Some(()) = user_networking(test, &[]) else {
        return;
    };
    image("memcached");
    let port = free_port();
    let forward = format!("{port}:11211");
    let mut served = Served::start(
        "memcached",
        &[
            "--cpus", "1", "--mem", "64M", "-p", &forward, "--", "-m", "16",
        ],
    );
    let mut holders = Vec::new();
    let body = vec![b'v'; 999_000];
    for i in 0..80 {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        // A refused connection is reset once more of its value arrives, which may be
        // before all of it is written.
        if let Err(e) = c
            .write_all(format!("set hold{i} 0 0 1000000\r\n").as_bytes())
            .and_then(|()| c.write_all(&body))
            && !matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        {
            served.fail(&format!("holder {i}: {e}"));
        }
        holders.push(c);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let refused = loop {
        if let Ok(Some(status)) = served.child.try_wait() {
            served.fail(&format!("ebb run exited: {status}"));
        }
        match memcached_stat(port, "read_buf_oom") {
            Ok(n) if n >= 40 => break n,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            last => served.fail(&format!("too few refusals after 120 s: {last:?}")),
        }
    };
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(b"set after 0 0 2\r\nok\r\nget after\r\n")
        .unwrap();
    let want = b"STORED\r\nVALUE after 0 2\r\nok\r\nEND\r\n";
    let mut got = vec![0u8; want.len()];
    if let Err(e) = c.read_exact(&mut got) {
        served.fail(&format!(
            "after {refused} refusals the server does not answer: {e}"
        ));
    }
    assert_eq!(got, want, "{}", String::from_utf8_lossy(&got));
    // Refused values were cut short by the reset: the server read the few MB it holds
    // and a little of each refused value, not the 80 MB sent.
    let read = memcached_stat(port, "bytes_read").unwrap_or_else(|e| served.fail(&e));
    if read > 48_000_000 {
        served.fail(&format!("the server read {read} bytes of refused values"));
    }
    drop(holders);
    let output = served.stop();
    assert!(!output.contains("panicked"), "{output}");
}

/// `-m` larger than the guest can hold is refused at start, with the memory to ask for,
/// instead of an allocation failing under load.
#[test]
fn memcached_natively_refuses_a_memory_limit_the_guest_cannot_hold() {
    let test = "memcached_natively_refuses_a_memory_limit_the_guest_cannot_hold";
    let Some(()) = kvm(test) else {
        return;
    };
    image("memcached");
    let run = ebb_testkit::Run::of(ebb().args([
        "run",
        "--net",
        "none",
        "--timeout",
        "60",
        "memcached",
        "--",
        "-m",
        "256",
    ]));
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stdout.contains("-m 256 MB does not fit in this node's")
            && run.stdout.contains("ebb run --mem"),
        "{run:?}"
    );
}

/// An app run by `ebb run IMAGE -p PORT:GUEST_PORT` as user `nobody` (uid and gid 65534),
/// handed this (root) test's open /dev/kvm with `--kvm-fd`: /dev/kvm is root's alone here,
/// and a descriptor grants this one process access without changing anything other
/// processes see. The `ebb` binary and the image are copied to a temporary directory
/// first, so that `nobody` can reach them wherever the repository lies.
struct AsNobody {
    served: Served,
    port: u16,
    dir: PathBuf,
}

impl AsNobody {
    /// `None` (the test recorded as skipped) without KVM, passt, `setpriv`, `tools` or root.
    fn start(test: &str, app: &str, guest_port: u16, tools: &[&str]) -> Option<AsNobody> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let needed: Vec<&str> = ["setpriv"].iter().chain(tools).copied().collect();
        user_networking(test, &needed)?;
        ebb_testkit::need_root(test, "handing user nobody an open /dev/kvm")?;
        let dir = std::env::temp_dir().join(format!("ebb-nobody-{}-{app}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let (ebb_copy, image_copy) = (dir.join("ebb"), dir.join(app));
        std::fs::copy(env!("CARGO_BIN_EXE_ebb"), &ebb_copy).expect("copy ebb");
        std::fs::copy(image(app), &image_copy).expect("copy the image");
        for (path, mode) in [(&dir, 0o755), (&ebb_copy, 0o755), (&image_copy, 0o644)] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        let kvm = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .expect("open /dev/kvm as root");
        let fd = kvm.as_raw_fd();
        let port = free_port();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&ebb_copy)
            .arg("run")
            .arg(&image_copy)
            .args(["--timeout", "300", "-p", &format!("{port}:{guest_port}")])
            .args(["--kvm-fd", &fd.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: runs in the child between fork and exec, where only async-signal-safe
        // calls are allowed: fcntl is one. It clears close-on-exec on the descriptor to
        // inherit.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut served = Served::watch(cmd.spawn().expect("start setpriv ebb run"));
        drop(kvm); // the child has its own copy
        let status = std::fs::read_to_string(format!("/proc/{}/status", served.child.id()))
            .unwrap_or_default();
        let uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_string));
        if uid.as_deref() != Some("65534") {
            served.fail(&format!("ebb does not run as nobody: Uid {uid:?}"));
        }
        if !served.stderr_lines_contain(&format!("running {app} natively")) {
            served.fail("not booted natively");
        }
        Some(AsNobody { served, port, dir })
    }
}

impl Drop for AsNobody {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn httpd_natively_through_user_networking_as_an_unprivileged_user() {
    let test = "httpd_natively_through_user_networking_as_an_unprivileged_user";
    let Some(mut app) = AsNobody::start(test, "httpd", 80, &["curl"]) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", app.port);
    if let Err(e) = curl_bytes(None, &url, BULK / 10) {
        app.served.fail(&e);
    }
}

#[test]
fn sink_natively_through_user_networking_as_an_unprivileged_user() {
    let test = "sink_natively_through_user_networking_as_an_unprivileged_user";
    let Some(mut app) = AsNobody::start(test, "sink", 9000, &["nc"]) else {
        return;
    };
    let port = app.port;
    if let Err(e) = nc_upload(&mut app.served, None, "127.0.0.1", port) {
        app.served.fail(&e);
    }
}

/// Python: one connection to `HOST:PORT` echoing 256 KiB of random bytes, checked byte for
/// byte; prints `ok`.
const ECHO_ONCE: &str = r#"
import os, socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
data = os.urandom(256 << 10)
got = bytearray()
for i in range(0, len(data), 16384):
    s.sendall(data[i:i + 16384])
    while len(got) < i + 16384:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit(f"closed after {len(got)} bytes")
        got += chunk
print("ok" if bytes(got) == data else "differ")
sys.exit(0 if bytes(got) == data else 1)
"#;

#[test]
fn echo_natively_through_user_networking_as_an_unprivileged_user() {
    let test = "echo_natively_through_user_networking_as_an_unprivileged_user";
    let Some(mut app) = AsNobody::start(test, "echo", 7, &["python3"]) else {
        return;
    };
    let out = Command::new("python3")
        .args(["-c", ECHO_ONCE, "127.0.0.1", &app.port.to_string()])
        .output()
        .expect("run python3");
    if !out.status.success() {
        app.served.fail(&format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
}

/// Exits to the monitor per request for memcached natively booted as `ebb run` boots it:
/// one vCPU, passt, the runtime's and the monitor's default poll settings (no
/// `idle_poll_us`; on a CPU shared with the device thread the guest polls 1 ms while
/// idle, `ebb_native::runtime::SHARED_CPUS_IDLE_POLL`). One connection, 500 warm-up then
/// 2,000 `set`/`get` round trips (1:9), the monitor's counters (SIGUSR1) before and after.
/// Asserted: no MMIO exit at all, and at most [`MEMCACHED_EXITS_PER_REQUEST`] exits and
/// [`MEMCACHED_KICKS_PER_REQUEST`] queue kicks per request — the measured figures with a
/// margin for a loaded host (see docs/10-native-networking.md, "Exits per request").
#[test]
fn memcached_natively_exits_per_request_at_default_poll_settings() {
    let test = "memcached_natively_exits_per_request_at_default_poll_settings";
    let Some(()) = user_networking(test, &[]) else {
        return;
    };
    image("memcached");
    let port = free_port();
    let forward = format!("{port}:11211");
    let mut served = Served::start("memcached", &["--cpus", "1", "-p", &forward]);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_nodelay(true).expect("TCP_NODELAY");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let value = [b'v'; 64];
    // Warm-up: every key set (gets before the first set of their key would miss).
    for i in 0..100 {
        let mut r = format!("set key{i} 0 0 {}\r\n", value.len()).into_bytes();
        r.extend_from_slice(&value);
        r.extend_from_slice(b"\r\n");
        let mut stored = [0u8; 8];
        c.write_all(&r).unwrap();
        c.read_exact(&mut stored).unwrap();
        assert_eq!(&stored, b"STORED\r\n");
    }
    let mut round_trips = |n: u32| -> Result<(), String> {
        let mut answer = [0u8; 256];
        for i in 0..n {
            let key = format!("key{}", i % 100);
            let (request, want): (Vec<u8>, Vec<u8>) = if i % 10 == 0 {
                let mut r = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
                r.extend_from_slice(&value);
                r.extend_from_slice(b"\r\n");
                (r, b"STORED\r\n".to_vec())
            } else {
                let mut w = format!("VALUE {key} 0 {}\r\n", value.len()).into_bytes();
                w.extend_from_slice(&value);
                w.extend_from_slice(b"\r\nEND\r\n");
                (format!("get {key}\r\n").into_bytes(), w)
            };
            c.write_all(&request)
                .map_err(|e| format!("request {i}: {e}"))?;
            let got = &mut answer[..want.len()];
            c.read_exact(got).map_err(|e| format!("answer {i}: {e}"))?;
            if *got != *want {
                return Err(format!("answer {i}: {}", String::from_utf8_lossy(got)));
            }
        }
        Ok(())
    };
    if let Err(e) = round_trips(500) {
        served.fail(&format!("warm-up: {e}"));
    }
    const REQUESTS: u32 = 2000;
    let before = served.counters().unwrap_or_else(|e| served.fail(&e));
    let started = Instant::now();
    if let Err(e) = round_trips(REQUESTS) {
        served.fail(&format!("steady phase: {e}"));
    }
    let elapsed = started.elapsed();
    let after = served.counters().unwrap_or_else(|e| served.fail(&e));
    let delta = |key: &str| counter(&after, key) - counter(&before, key);
    let (exits, mmio, kicks, wakeups) = (
        delta("exits"),
        delta("mmio_exits"),
        delta("kicks"),
        delta("wakeups"),
    );
    let per = |n: u64| n as f64 / f64::from(REQUESTS);
    eprintln!(
        "{REQUESTS} memcached requests of 64-byte values: {:.0} µs per round trip; per \
         request: {:.4} exits to the monitor ({:.4} MMIO), {:.4} queue kicks, {:.4} vCPU \
         wake-ups",
        elapsed.as_secs_f64() * 1e6 / f64::from(REQUESTS),
        per(exits),
        per(mmio),
        per(kicks),
        per(wakeups),
    );
    let output = served.stop();
    assert_eq!(mmio, 0, "MMIO exits in the steady phase\n{output}");
    assert!(
        per(exits) <= MEMCACHED_EXITS_PER_REQUEST,
        "{exits} exits in {REQUESTS} requests\n{before}\n{after}\n{output}"
    );
    assert!(
        per(kicks) <= MEMCACHED_KICKS_PER_REQUEST,
        "{kicks} kicks in {REQUESTS} requests\n{before}\n{after}\n{output}"
    );
}

/// Bound of [`memcached_natively_exits_per_request_at_default_poll_settings`].
const MEMCACHED_EXITS_PER_REQUEST: f64 = 2.5;
/// Bound of [`memcached_natively_exits_per_request_at_default_poll_settings`].
const MEMCACHED_KICKS_PER_REQUEST: f64 = 1.0;
