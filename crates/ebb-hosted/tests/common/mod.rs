//! Helpers shared by the tests that run ebb-net against Linux in a network namespace
//! (`tap.rs`, `interop.rs`, `multicore_net.rs`): what a test needs from the machine (root,
//! TAP, tools — a missing one is a skip through `ebb_testkit`, anything else that fails is
//! a failure), `ip` commands, a namespace deleted on drop, a child process killed and
//! reaped on drop, and running a tool from inside the runtime.
//!
//! Not every test file uses every helper.
#![allow(dead_code)]

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use ebb_core::event;
use std::sync::atomic::{AtomicU32, Ordering};

#[allow(unused_imports)] // only tap.rs asks for a tool by hand
pub use ebb_testkit::have_tool as have;
use ebb_testkit::{Capability, skip};

/// `Some(())` when this machine can give `test` a network namespace and a TAP device —
/// root, `/dev/net/tun`, `ip` and every program in `tools`; otherwise the skip for the
/// first capability missing.
pub fn need_namespace_and_tap(test: &str, tools: &[&str]) -> Option<()> {
    ebb_testkit::need_root(test, "a network namespace and a TAP device")?;
    if !std::path::Path::new("/dev/net/tun").exists() {
        return skip(test, Capability::Tap, "/dev/net/tun does not exist");
    }
    ebb_testkit::need_tools(test, &["ip"])?;
    ebb_testkit::need_tools(test, tools)
}

/// Creates namespace `name` for `test`; a failure is the test's failure (the capability
/// was checked by [`need_namespace_and_tap`]).
pub fn namespace(test: &str, name: String) -> Netns {
    Netns::create(name).unwrap_or_else(|e| panic!("{test}: {e}"))
}

/// Runs `ip ARGS`, panicking with its output if it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A name unique to this process and call: `{prefix}{pid}{n}` (keep the prefix short,
/// interface names have at most 15 bytes).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id())
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates namespace `name` (with its loopback up), or says why it cannot.
    pub fn create(name: String) -> Result<Netns, String> {
        let created = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        if !created.status.success() {
            return Err(format!(
                "cannot create a network namespace: {}",
                String::from_utf8_lossy(&created.stderr).trim()
            ));
        }
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        Ok(ns)
    }

    /// Moves interface `dev` into the namespace, gives it `cidr` and brings it up.
    pub fn adopt(&self, dev: &str, cidr: &str) {
        adopt(&self.name, dev, cidr);
    }

    /// `ip netns exec NS args...`
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// Moves interface `dev` into namespace `ns`, gives it `cidr` and brings it up.
pub fn adopt(ns: &str, dev: &str, cidr: &str) {
    ip(&["link", "set", dev, "netns", ns]);
    ip(&["-n", ns, "addr", "add", cidr, "dev", dev]);
    ip(&["-n", ns, "link", "set", dev, "up"]);
}

/// A child process killed and reaped on drop.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How a Linux-side tool ended.
pub struct ToolRun {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolRun {
    pub fn check(&self, what: &str) -> Result<(), String> {
        if self.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}): {}{}",
                self.status, self.stdout, self.stderr
            ))
        }
    }
}

/// Spawns `command` and waits for it (at most `timeout`) without blocking the core: the
/// stack keeps running.
pub async fn run_tool(mut command: Command, timeout: Duration) -> Result<ToolRun, String> {
    let child = command.spawn().map_err(|e| format!("spawn: {e}"))?;
    let mut child = Reaped(child);
    let started = std::time::Instant::now();
    loop {
        match child.0.try_wait() {
            Ok(Some(status)) => {
                use std::io::Read;
                let mut stdout = String::new();
                let mut stderr = String::new();
                if let Some(mut out) = child.0.stdout.take() {
                    let _ = out.read_to_string(&mut stdout);
                }
                if let Some(mut err) = child.0.stderr.take() {
                    let _ = err.read_to_string(&mut stderr);
                }
                return Ok(ToolRun {
                    status,
                    stdout,
                    stderr,
                });
            }
            Ok(None) if started.elapsed() > timeout => {
                return Err(format!("still running after {timeout:?}"));
            }
            Ok(None) => event::sleep(Duration::from_millis(10)).await,
            Err(e) => return Err(format!("wait: {e}")),
        }
    }
}

/// What starting a test's `NetStack` came to.
pub enum Started {
    /// It runs.
    Running(ebb_hosted::netstack::NetStack),
    /// This machine cannot run it (no `/dev/net/tun`, no right to create TAP devices):
    /// the test skips, or fails where `EBB_REQUIRE` names the capability.
    Skip(Capability, String),
    /// It failed: the test fails.
    Failed(String),
}

/// Starts a `NetStack` (on a core of a running runtime), telling "cannot run here"
/// apart from failure.
pub fn start_netstack(config: ebb_hosted::netstack::NetStackConfig) -> Started {
    use ebb_hosted::netstack::{StartError, start};
    use ebb_hosted::tap::TapError;
    match start(config) {
        Ok(stack) => Started::Running(stack),
        Err(StartError::Tap(e @ (TapError::NoTunDevice | TapError::PermissionDenied { .. }))) => {
            Started::Skip(Capability::Tap, e.to_string())
        }
        Err(e) => Started::Failed(format!("start: {e}")),
    }
}

/// A DHCP server (`dnsmasq`) in namespace `ns` on `dev`, leasing `.50`–`.60` of
/// `server_ip`'s /24 for 2 minutes; killed, and its lease file removed, on drop.
pub struct Dnsmasq {
    _child: Reaped,
    lease_file: String,
}

impl Dnsmasq {
    /// Starts it (no DNS, no config file, bound to `dev` only).
    pub fn start(ns: &str, dev: &str, server_ip: std::net::Ipv4Addr) -> Result<Dnsmasq, String> {
        let [a, b, c, _] = server_ip.octets();
        let lease_file = format!("/tmp/{ns}.leases");
        Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "dnsmasq",
                "--no-daemon",
                "--conf-file=/dev/null",
                "--port=0",
                "--bind-interfaces",
                &format!("--interface={dev}"),
                &format!("--dhcp-range={a}.{b}.{c}.50,{a}.{b}.{c}.60,255.255.255.0,2m"),
                &format!("--dhcp-leasefile={lease_file}"),
                "--pid-file=",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|child| Dnsmasq {
                _child: Reaped(child),
                lease_file,
            })
            .map_err(|e| format!("spawn dnsmasq: {e}"))
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lease_file);
    }
}

/// Asserts that the fault injector really made every kind of fault it was set to make —
/// dropped, reordered, duplicated and corrupted frames — in both directions, so a test
/// "with faults" cannot pass on a clean link. `stats` are the injectors' counters, one
/// per queue, summed here.
pub fn assert_every_fault_happened(test: &str, stats: &[Option<ebb_net::phy::FaultStats>]) {
    assert!(
        !stats.is_empty() && stats.iter().all(Option::is_some),
        "{test}: a fault injector's counters are missing: {stats:?}"
    );
    let sum = |pick: fn(&ebb_net::phy::FaultStats) -> &ebb_net::phy::FaultCounts| {
        let mut total = ebb_net::phy::FaultCounts::default();
        for s in stats.iter().flatten() {
            let c = pick(s);
            total.seen += c.seen;
            total.dropped += c.dropped;
            total.reordered += c.reordered;
            total.duplicated += c.duplicated;
            total.corrupted += c.corrupted;
        }
        total
    };
    for (direction, counts) in [
        ("received", sum(|s| &s.rx)),
        ("transmitted", sum(|s| &s.tx)),
    ] {
        println!("{test}: faults on {direction} frames: {counts:?}");
        for (kind, n) in [
            ("dropped", counts.dropped),
            ("reordered", counts.reordered),
            ("duplicated", counts.duplicated),
            ("corrupted", counts.corrupted),
        ] {
            assert!(
                n > 0,
                "{test}: the fault injector {kind} no {direction} frame ({counts:?})"
            );
        }
    }
}
