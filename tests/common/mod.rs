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

use ebb_testkit::Capability;
#[allow(unused_imports)] // only tap.rs asks for a tool by hand
pub use ebb_testkit::have_tool as have;

#[allow(unused_imports)] // each test file uses its own subset
pub use ebb_testkit::netns::{Netns, adopt, ip, namespace, need_namespace_and_tap, unique_name};

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
pub fn start_netstack(config: ebb_hosted::netstack::TapNetStackConfig) -> Started {
    use ebb_hosted::netstack::{HostedStartError, start};
    use ebb_tap::TapError;
    match start(config) {
        Ok(stack) => Started::Running(stack),
        Err(HostedStartError::Tap(
            e @ (TapError::NoTunDevice | TapError::PermissionDenied { .. }),
        )) => Started::Skip(Capability::Tap, e.to_string()),
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
pub fn assert_every_fault_happened(test: &str, stats: &[Option<ebb_net_driver::FaultStats>]) {
    assert!(
        !stats.is_empty() && stats.iter().all(Option::is_some),
        "{test}: a fault injector's counters are missing: {stats:?}"
    );
    let sum = |pick: fn(&ebb_net_driver::FaultStats) -> &ebb_net_driver::FaultCounts| {
        let mut total = ebb_net_driver::FaultCounts::default();
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
