//! The same `net_echo` image (tests/guests: ebb-net over the guest's virtio-net driver,
//! echo on TCP port 7) on QEMU's virtio-net instead of our monitor's: QEMU's device is
//! the reference implementation, so this is our driver against a device we did not write.
//!
//! ```text
//! qemu-system-x86_64 -M microvm,auto-kernel-cmdline=off -accel tcg -m 128M -smp N
//!   -nographic -no-reboot -kernel net_echo
//!   -device isa-debug-exit,iobase=0xf4,iosize=0x04
//!   -global virtio-mmio.force-legacy=false
//!   -netdev user,id=n0,hostfwd=tcp:127.0.0.1:PORT-:7
//!   -device virtio-net-device,netdev=n0,id=vn0[,mq=on]
//!   -qmp unix:SOCKET,server=on,wait=off
//! ```
//!
//! Each test waits for the guest's "listening" line on the serial console (QEMU's stdout),
//! asks QEMU over QMP which features the driver acknowledged (QEMU offers many more than
//! the driver implements: MRG_RXBUF, CTRL_VQ, CTRL_RX, GUEST_ANNOUNCE, INDIRECT_DESC, and
//! MQ with `mq=on`; the driver must take only VERSION_1, RING_EVENT_IDX, MAC and STATUS),
//! echoes 1 MB of pseudo-random bytes on each of a few sequential connections through
//! QEMU's user-network port forward, checked byte for byte, and kills QEMU.
//!
//! One more test runs QEMU's virtio-net on a TAP device (`-netdev tap,vnet_hdr=on`, root,
//! in a network namespace whose Linux is 10.0.2.2/24): there QEMU offers CSUM and
//! GUEST_CSUM (its peer has a virtio-net header), the driver must acknowledge both, and
//! `apps/httpd` serves `curl` in the namespace 20 MB checked by SHA-256 — our checksum
//! offload against a device we did not write and Linux completing the checksums.
//!
//! TCG, not KVM: the PVH stub's ring-0 code is ~1000x slower under the nested KVM here.
//! Without `qemu-system-x86_64` each test prints `SKIPPED: <test>: ...` and returns.

mod common;

use common::{app_image, guests, qemu};
use ebb_testkit::lines::Lines;
use ebb_testkit::netcheck::{echo, free_port};
use sha2::Digest;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest from starting QEMU to the guest's "listening" line (about 2 s here).
const BOOT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a whole test may take; every blocking step is bounded by what is left of it.
const TEST_BUDGET: Duration = Duration::from_secs(60);
/// Bytes echoed per connection, and connections per test (one after the other).
const ECHO_BYTES: usize = 1 << 20;
const CONNECTIONS: u64 = 3;

/// A running QEMU with net_echo; killed when dropped, so a failing test leaves none behind.
struct Qemu {
    child: Child,
    port: u16,
    qmp: PathBuf,
    /// The serial console, line by line.
    console: Lines,
    stderr: Option<JoinHandle<String>>,
}

impl Qemu {
    /// Boots `image` with `-smp cpus`, `device_extra` appended to the virtio-net device's
    /// options and a free host port forwarded to `guest_port`.
    fn boot(test: &str, image: &Path, cpus: u32, device_extra: &str, guest_port: u16) -> Qemu {
        let port = free_port();
        let netdev = format!("user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:{guest_port}");
        let mut qemu = Qemu::start(test, image, cpus, device_extra, &netdev, None);
        qemu.port = port;
        qemu
    }

    /// Boots `image` with `-netdev NETDEV` (id n0), QEMU run inside network namespace
    /// `netns` if given.
    fn start(
        test: &str,
        image: &Path,
        cpus: u32,
        device_extra: &str,
        netdev: &str,
        netns: Option<&str>,
    ) -> Qemu {
        let qmp = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("qmp-{test}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&qmp);
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "qemu-system-x86_64"]);
                c
            }
            None => Command::new("qemu-system-x86_64"),
        };
        let mut child = command
            // auto-kernel-cmdline=off: QEMU would otherwise append its virtio_mmio.device=
            // hints for Linux to the guest's command line; the driver probes the slots.
            .args(["-M", "microvm,auto-kernel-cmdline=off", "-accel", "tcg"])
            .args(["-m", "128M", "-smp", &cpus.to_string()])
            .args(["-nographic", "-no-reboot"])
            .arg("-kernel")
            .arg(image)
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
            // microvm's transports default to the legacy (version 1) interface.
            .args(["-global", "virtio-mmio.force-legacy=false"])
            .arg("-netdev")
            .arg(netdev)
            .arg("-device")
            .arg(format!("virtio-net-device,netdev=n0,id=vn0{device_extra}"))
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", qmp.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qemu-system-x86_64");
        let console = Lines::spawn(child.stdout.take().expect("qemu's stdout"));
        let mut stderr = child.stderr.take().expect("qemu's stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Qemu {
            child,
            port: 0,
            qmp,
            console,
            stderr: Some(stderr),
        }
    }

    /// Waits for the console line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        self.console.wait_for(needle, timeout)
    }

    /// Kills QEMU and returns what it printed, for a failure message.
    fn stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.console.drain(Duration::from_millis(100));
        let stderr = self
            .stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&self.qmp);
        format!(
            "--- console\n{}--- qemu stderr\n{stderr}",
            self.console.seen()
        )
    }

    /// Panics with `what`, QEMU's console and its stderr.
    fn fail(&mut self, what: &str) -> ! {
        let output = self.stop();
        panic!("{what}\n{output}");
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.qmp);
    }
}

/// What QEMU reports about its virtio-net device (`x-query-virtio-status`), as JSON text.
fn virtio_status(qmp: &Path, timeout: Duration) -> Result<String, String> {
    let mut stream = UnixStream::connect(qmp).map_err(|e| format!("connect to QMP: {e}"))?;
    stream
        .set_read_timeout(Some(timeout.max(Duration::from_millis(100))))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    // The greeting, then one reply per command (skipping asynchronous events).
    let mut reply = || -> Result<String, String> {
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return Err("QMP closed".into()),
                Ok(_) if line.contains("\"event\"") => continue,
                Ok(_) if line.contains("\"error\"") => return Err(format!("QMP: {line}")),
                Ok(_) => return Ok(line),
                Err(e) => return Err(format!("reading QMP: {e}")),
            }
        }
    };
    reply()?;
    let mut command = |text: &str| -> Result<String, String> {
        writeln!(stream, "{text}").map_err(|e| format!("writing QMP: {e}"))?;
        reply()
    };
    command(r#"{"execute":"qmp_capabilities"}"#)?;
    command(r#"{"execute":"x-query-virtio-status","arguments":{"path":"/machine/peripheral/vn0"}}"#)
}

/// The JSON object that follows `"key":` in `json` (braces counted; QEMU's feature
/// descriptions contain none), or "" if `key` is absent.
fn object<'a>(json: &'a str, key: &str) -> &'a str {
    let Some(at) = json.find(&format!("\"{key}\"")) else {
        return "";
    };
    let rest = &json[at..];
    let Some(open) = rest.find('{') else {
        return "";
    };
    let mut depth = 0;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &rest[open..=open + i];
                }
            }
            _ => {}
        }
    }
    ""
}

/// Feature names the driver must acknowledge (it requires the first two and uses the
/// others when offered; QEMU's user network offers MAC and STATUS, not MTU).
const ACKED: [&str; 4] = [
    "VIRTIO_F_VERSION_1",
    "VIRTIO_RING_F_EVENT_IDX",
    "VIRTIO_NET_F_MAC",
    "VIRTIO_NET_F_STATUS",
];
/// Offered by QEMU, not implemented by the driver: acknowledging one would be a bug
/// (MRG_RXBUF changes how receive buffers are used, INDIRECT_DESC how chains look).
const DECLINED: [&str; 7] = [
    "VIRTIO_NET_F_MRG_RXBUF",
    "VIRTIO_NET_F_CTRL_VQ",
    "VIRTIO_NET_F_CTRL_RX",
    "VIRTIO_NET_F_GUEST_ANNOUNCE",
    "VIRTIO_RING_F_INDIRECT_DESC",
    "VIRTIO_F_NOTIFY_ON_EMPTY",
    "VIRTIO_NET_F_MQ",
];

/// Boots, checks the negotiation and echoes; `offered` must be among QEMU's features.
fn run(test: &str, cpus: u32, device_extra: &str, offered: &[&str]) {
    // Built (once for all tests) before the clock starts: the budget is QEMU's.
    let image = guests().join("net_echo");
    let started = Instant::now();
    let left = || TEST_BUDGET.saturating_sub(started.elapsed());
    let mut vm = Qemu::boot(test, &image, cpus, device_extra, 7);
    let listening = match vm.wait_for("listening", BOOT_TIMEOUT.min(left())) {
        Ok(line) => line,
        Err(e) => vm.fail(&e),
    };
    let booted = started.elapsed();
    // One pair: the PVH stub starts only the boot vCPU, and QEMU's user network has one
    // queue pair anyway (with mq=on its max_virtqueue_pairs is 1).
    if !listening.contains("(1 queue pairs)") {
        vm.fail(&format!("expected one queue pair: {listening}"));
    }
    let status = match virtio_status(&vm.qmp, left()) {
        Ok(s) => s,
        Err(e) => vm.fail(&e),
    };
    let (guest, host) = (
        object(&status, "guest-features"),
        object(&status, "host-features"),
    );
    let mut wrong = Vec::new();
    let compact: String = status.chars().filter(|c| !c.is_whitespace()).collect();
    if !status.contains("VIRTIO_CONFIG_S_DRIVER_OK") || !compact.contains("\"broken\":false") {
        wrong.push("the device is not DRIVER_OK and healthy".to_string());
    }
    wrong.extend(
        ACKED
            .iter()
            .filter(|f| !guest.contains(*f))
            .map(|f| format!("the driver did not acknowledge {f}")),
    );
    wrong.extend(
        DECLINED
            .iter()
            .filter(|f| guest.contains(&format!("{f}:")))
            .map(|f| format!("the driver acknowledged {f}, which it does not implement")),
    );
    if guest.contains("unknown") {
        wrong.push("the driver acknowledged feature bits QEMU cannot name".to_string());
    }
    wrong.extend(
        offered
            .iter()
            .filter(|f| !host.contains(&format!("{f}:")))
            .map(|f| format!("QEMU did not offer {f}: this test no longer tests declining it")),
    );
    if !wrong.is_empty() {
        vm.fail(&format!(
            "{}\n--- x-query-virtio-status\n{status}",
            wrong.join("\n")
        ));
    }
    for i in 0..CONNECTIONS {
        if let Err(e) = echo(
            ([127, 0, 0, 1], vm.port).into(),
            ECHO_BYTES,
            0x5eed + i,
            left(),
        ) {
            vm.fail(&format!("connection {i}: {e}"));
        }
    }
    let output = vm.stop();
    eprintln!(
        "{test}: booted in {booted:?}, {CONNECTIONS} x {ECHO_BYTES} bytes echoed, {:?} in all",
        started.elapsed()
    );
    assert!(
        started.elapsed() <= TEST_BUDGET,
        "{test} took {:?}, over its budget of {TEST_BUDGET:?}\n{output}",
        started.elapsed()
    );
}

#[test]
fn net_echo_serves_through_qemus_virtio_net_and_hostfwd() {
    let test = "net_echo_serves_through_qemus_virtio_net_and_hostfwd";
    let Some(()) = qemu(test) else { return };
    run(
        test,
        1,
        "",
        &["VIRTIO_NET_F_MRG_RXBUF", "VIRTIO_NET_F_CTRL_VQ"],
    );
}

#[test]
fn two_vcpus_and_an_offered_mq_still_serve_on_one_queue_pair() {
    let test = "two_vcpus_and_an_offered_mq_still_serve_on_one_queue_pair";
    let Some(()) = qemu(test) else { return };
    run(
        test,
        2,
        ",mq=on",
        &["VIRTIO_NET_F_MQ", "VIRTIO_NET_F_CTRL_VQ"],
    );
}

/// Bytes `apps/httpd` serves through QEMU (TCG emulates every guest instruction).
const HTTPD_BYTES: u64 = 20 << 20;

#[test]
fn the_httpd_app_image_serves_curl_through_qemus_virtio_net() {
    let test = "the_httpd_app_image_serves_curl_through_qemus_virtio_net";
    let Some(()) = qemu(test) else { return };
    let Some(()) = ebb_testkit::need_tools(test, &["curl"]) else {
        return;
    };
    // The very image `ebb run httpd` boots under our monitor.
    let image = app_image("httpd");
    let started = Instant::now();
    let left = || TEST_BUDGET.saturating_sub(started.elapsed());
    let mut vm = Qemu::boot(test, &image, 1, "", 80);
    if let Err(e) = vm.wait_for("httpd: listening on 10.0.2.15:80", BOOT_TIMEOUT.min(left())) {
        vm.fail(&e);
    }
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", vm.port);
    let curl = |url: &str| {
        Command::new("curl")
            .args([
                "-sS",
                "--fail",
                "--max-time",
                &left().as_secs().max(1).to_string(),
            ])
            .arg(url)
            .output()
            .expect("run curl")
    };
    let index = curl(&url("/"));
    let body = curl(&url(&format!("/bytes/{HTTPD_BYTES}")));
    let expected = ebb_bytestream::pattern::Pattern::get().sha256(HTTPD_BYTES);
    let got: [u8; 32] = sha2::Sha256::digest(&body.stdout).into();
    let mut wrong = Vec::new();
    if !index.status.success() || !String::from_utf8_lossy(&index.stdout).contains("Ebbflow httpd")
    {
        wrong.push(format!("GET / failed: {index:?}"));
    }
    if !body.status.success() || body.stdout.len() as u64 != HTTPD_BYTES || got != expected {
        wrong.push(format!(
            "GET /bytes/{HTTPD_BYTES}: {} bytes, status {}, sha256 matches: {}; curl: {}",
            body.stdout.len(),
            body.status,
            got == expected,
            String::from_utf8_lossy(&body.stderr)
        ));
    }
    if !wrong.is_empty() {
        vm.fail(&wrong.join("\n"));
    }
    vm.stop();
    eprintln!("{test}: {HTTPD_BYTES} bytes in {:?}", started.elapsed());
}

/// A fresh namespace (named from `prefix`) with a TAP device at 10.0.2.2/24, QEMU's
/// user-network host address, and the `-netdev` for QEMU to open it with a virtio-net
/// header (so QEMU's device offers the offloads).
fn tap_netdev(test: &str, prefix: &str) -> (ebb_testkit::netns::Netns, String) {
    let ns = ebb_testkit::netns::namespace(test, ebb_testkit::netns::unique_name(prefix));
    let tap = format!("{prefix}tap0");
    ebb_testkit::netns::ip(&["-n", &ns.name, "tuntap", "add", "dev", &tap, "mode", "tap"]);
    ebb_testkit::netns::ip(&["-n", &ns.name, "addr", "add", "10.0.2.2/24", "dev", &tap]);
    ebb_testkit::netns::ip(&["-n", &ns.name, "link", "set", &tap, "up"]);
    let netdev = format!("tap,id=n0,ifname={tap},script=no,downscript=no,vnet_hdr=on");
    (ns, netdev)
}

#[test]
fn checksum_offload_on_qemus_tap_netdev() {
    let test = "checksum_offload_on_qemus_tap_netdev";
    let Some(()) = qemu(test) else { return };
    let Some(()) = ebb_testkit::netns::need_namespace_and_tap(test, &["curl"]) else {
        return;
    };
    let (ns, netdev) = tap_netdev(test, "ebbq");
    let image = app_image("httpd");
    let started = Instant::now();
    let left = || TEST_BUDGET.saturating_sub(started.elapsed());
    let mut vm = Qemu::start(test, &image, 1, "", &netdev, Some(&ns.name));
    if let Err(e) = vm.wait_for("httpd: listening on 10.0.2.15:80", BOOT_TIMEOUT.min(left())) {
        vm.fail(&e);
    }
    let status = match virtio_status(&vm.qmp, left()) {
        Ok(s) => s,
        Err(e) => vm.fail(&e),
    };
    let (guest, host) = (
        object(&status, "guest-features"),
        object(&status, "host-features"),
    );
    let mut wrong = Vec::new();
    // Segmentation offload comes with the checksum offloads, and the driver takes it
    // both ways: the download below goes out in frames up to 64 KiB that QEMU's device,
    // not ours, hands to the TAP device for the kernel to take whole, and the upload
    // arrives in such frames.
    for f in [
        "VIRTIO_NET_F_CSUM",
        "VIRTIO_NET_F_GUEST_CSUM",
        "VIRTIO_NET_F_HOST_TSO4",
        "VIRTIO_NET_F_GUEST_TSO4",
    ] {
        if !host.contains(&format!("{f}:")) {
            wrong.push(format!("QEMU over TAP did not offer {f}"));
        } else if !guest.contains(&format!("{f}:")) {
            wrong.push(format!("the driver did not acknowledge {f}"));
        }
    }
    // Merged receive buffers: the driver does not implement them.
    for f in ["VIRTIO_NET_F_MRG_RXBUF"] {
        if guest.contains(&format!("{f}:")) {
            wrong.push(format!(
                "the driver acknowledged {f}, which it does not implement"
            ));
        }
    }
    if guest.contains("unknown") {
        wrong.push("the driver acknowledged feature bits QEMU cannot name".to_string());
    }
    if !wrong.is_empty() {
        vm.fail(&format!(
            "{}\n--- x-query-virtio-status\n{status}",
            wrong.join("\n")
        ));
    }
    let body = ns
        .exec(&["curl", "-sS", "--fail", "--max-time"])
        .arg(left().as_secs().max(1).to_string())
        .arg(format!("http://10.0.2.15/bytes/{HTTPD_BYTES}"))
        .output()
        .expect("run curl");
    let expected = ebb_bytestream::pattern::Pattern::get().sha256(HTTPD_BYTES);
    let got: [u8; 32] = sha2::Sha256::digest(&body.stdout).into();
    if !body.status.success() || body.stdout.len() as u64 != HTTPD_BYTES || got != expected {
        vm.fail(&format!(
            "GET /bytes/{HTTPD_BYTES} over TAP: {} bytes, status {}, sha256 matches: {}; curl: {}",
            body.stdout.len(),
            body.status,
            got == expected,
            String::from_utf8_lossy(&body.stderr)
        ));
    }
    vm.stop();
    eprintln!("{test}: {HTTPD_BYTES} bytes in {:?}", started.elapsed());
}

/// Bytes streamed to the native sink under QEMU.
const SINK_BYTES: u64 = 20 << 20;

#[test]
fn large_receive_on_qemus_tap_netdev() {
    // The other way from `checksum_offload_on_qemus_tap_netdev`: the namespace streams
    // to the `sink` image, and with GUEST_TSO4 negotiated QEMU's device hands the guest
    // Linux's segments whole, up to 64 KiB each, into the driver's large receive buffers.
    let test = "large_receive_on_qemus_tap_netdev";
    let Some(()) = qemu(test) else { return };
    let Some(()) = ebb_testkit::netns::need_namespace_and_tap(test, &["nc"]) else {
        return;
    };
    let (ns, netdev) = tap_netdev(test, "ebbr");
    let image = app_image("sink");
    let started = Instant::now();
    let left = || TEST_BUDGET.saturating_sub(started.elapsed());
    let mut vm = Qemu::start(test, &image, 1, "", &netdev, Some(&ns.name));
    if let Err(e) = vm.wait_for(
        "sink: listening on 10.0.2.15:9000",
        BOOT_TIMEOUT.min(left()),
    ) {
        vm.fail(&e);
    }
    let status = match virtio_status(&vm.qmp, left()) {
        Ok(s) => s,
        Err(e) => vm.fail(&e),
    };
    if !object(&status, "guest-features").contains("VIRTIO_NET_F_GUEST_TSO4:") {
        vm.fail(&format!(
            "the driver did not acknowledge VIRTIO_NET_F_GUEST_TSO4\n--- x-query-virtio-status\n{status}"
        ));
    }
    let pattern = ebb_bytestream::pattern::Pattern::get();
    let mut nc = ns
        .exec(&["nc", "-N", "-w", "30", "10.0.2.15", "9000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run nc");
    {
        let mut stdin = nc.stdin.take().expect("nc's stdin");
        let mut sent = 0u64;
        while sent < SINK_BYTES {
            let chunk = pattern.slice(sent, (1 << 20).min((SINK_BYTES - sent) as usize));
            for segment in chunk.segments() {
                if let Err(e) = stdin.write_all(segment) {
                    vm.fail(&format!("writing to nc after {sent} bytes: {e}"));
                }
            }
            sent += chunk.len() as u64;
        }
    }
    let status = nc.wait().expect("wait for nc");
    if !status.success() {
        vm.fail(&format!("nc exited with {status}"));
    }
    let expected: String = pattern
        .sha256(SINK_BYTES)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let needle = format!("sink: {SINK_BYTES} bytes sha256");
    match vm.wait_for(&needle, left()) {
        Ok(line) if line.contains(&expected) => {}
        Ok(line) => vm.fail(&format!("the sink's digest is not {expected}: {line}")),
        Err(e) => vm.fail(&e),
    }
    vm.stop();
    eprintln!("{test}: {SINK_BYTES} bytes in {:?}", started.elapsed());
}
