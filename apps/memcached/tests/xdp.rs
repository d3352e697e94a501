//! The hosted server on ebb-net over AF_XDP (`--xdp IFACE`), talked to by real clients
//! from Linux: a veth pair with one queue each way, one end in a network namespace where
//! the server runs and drives it through an AF_XDP socket (10.0.9.2/24, ebb-net's), the
//! other in a second namespace as 10.0.9.1/24 with transmit checksumming off (Linux's
//! partial checksums are not flagged through XDP), where `memccapable` (ASCII and
//! binary) and the pymemcache script run against the server.
//!
//! Needs root (the namespace, the XDP program, the AF_XDP socket), `ip`, `ethtool` and
//! `memccapable` (libmemcached-tools); pymemcache (python3-pymemcache) for its part.
//! Without them the test prints `SKIPPED: ...`.

mod common;

use ebb_testkit::netns::{Netns, ip, namespace, unique_name};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The script of tests/pymemcache.rs.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymemcache_check.py");

/// Linux's end of the link, as the clients see it.
const LINUX_CIDR: &str = "10.0.9.1/24";
/// ebb-net's address on the other end.
const SERVER_CIDR: &str = "10.0.9.2/24";
const SERVER_IP: &str = "10.0.9.2";

/// A veth pair with one queue each way between two namespaces (deleted with them):
/// `server` holds `end` (no address: ebb-net's), `linux` holds the peer at
/// [`LINUX_CIDR`] with transmit checksumming off.
struct Link {
    server: Netns,
    linux: Netns,
    end: &'static str,
}

impl Link {
    fn create(test: &str) -> Link {
        let server = namespace(test, unique_name("ebbxs"));
        let linux = namespace(test, unique_name("ebbxc"));
        let (end, peer) = ("ebbxdp0", "ebbxdp1");
        ip(&[
            "-n",
            &server.name,
            "link",
            "add",
            end,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "netns",
            &linux.name,
        ]);
        ip(&["-n", &server.name, "link", "set", end, "up"]);
        ip(&["-n", &linux.name, "addr", "add", LINUX_CIDR, "dev", peer]);
        ip(&["-n", &linux.name, "link", "set", peer, "up"]);
        let out = linux
            .exec(&["ethtool", "-K", peer, "tx", "off"])
            .output()
            .expect("run ethtool");
        assert!(
            out.status.success(),
            "ethtool -K {peer} tx off: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Link { server, linux, end }
    }
}

/// Our memcached in `link`'s server namespace on its veth end through AF_XDP at
/// [`SERVER_CIDR`], killed on drop.
struct XdpServer {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl XdpServer {
    fn start(link: &Link) -> Result<XdpServer, String> {
        let mut child = link
            .server
            .exec(&[env!("CARGO_BIN_EXE_memcached")])
            .env("EBB_CPUS", "1")
            .args(["-p", "11211", "--xdp", link.end, "--ip", SERVER_CIDR])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn memcached: {e}"))?;
        let (tx, lines) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            });
        }
        // Only the readers send: an exited server disconnects the channel.
        drop(tx);
        let server = XdpServer { child, lines };
        let mut seen = String::new();
        loop {
            match server.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) if line.starts_with("memcached: listening on") => return Ok(server),
                Ok(line) => {
                    seen.push_str(&line);
                    seen.push('\n');
                }
                Err(_) => return Err(format!("no banner within 30 s (or it exited):\n{seen}")),
            }
        }
    }

    /// Everything printed so far (after the banner).
    fn output(&self) -> String {
        self.lines.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for XdpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn memcached_over_af_xdp_passes_memccapable_and_pymemcache_from_a_namespace() {
    let test = "memcached_over_af_xdp_passes_memccapable_and_pymemcache_from_a_namespace";
    let Some(()) = ebb_testkit::need_root(test, "network namespaces, a veth pair, an XDP program")
    else {
        return;
    };
    let Some(()) = ebb_testkit::need_tools(test, &["ip", "ethtool", "memccapable"]) else {
        return;
    };
    let link = Link::create(test);
    let server = match XdpServer::start(&link) {
        Ok(server) => server,
        Err(e) => panic!("{test}: {e}"),
    };
    for mode in ["-a", "-b"] {
        let out = link
            .linux
            .exec(&[
                "memccapable",
                "-h",
                SERVER_IP,
                "-p",
                "11211",
                "-t",
                "10",
                mode,
            ])
            .output()
            .expect("run memccapable");
        // Every test passes but the two memcached 1.6.45 fails as well.
        if let Err(e) = ebb_testkit::memccapable::as_memcached_1_6_45(mode, &out) {
            panic!("over AF_XDP: {e}\n--- server\n{}", server.output());
        }
        println!("memccapable {mode} over AF_XDP: passed, as against memcached 1.6.45");
    }
    let python = ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import pymemcache.client.base"])
            .output()
            .is_ok_and(|out| out.status.success())
    });
    let Some(python) = python else {
        ebb_testkit::skip::<()>(
            &format!("{test} (pymemcache part)"),
            ebb_testkit::Capability::tool("pymemcache"),
            "no python3 can import pymemcache (Debian: python3-pymemcache)",
        );
        return;
    };
    for seed in ["1", "2"] {
        let out = link
            .linux
            .exec(&[python, SCRIPT, "11211", seed, SERVER_IP])
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "pymemcache_check.py (seed {seed}) over AF_XDP: {}\n{}{}\n--- server\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            server.output()
        );
    }
    println!("pymemcache over AF_XDP: every check passed");
}
