//! Native networking end to end: boots `net_echo` (tests/guests: ebb-net over the guest's
//! virtio-net driver, echo on port 7) under the monitor with `--net user` (passt, no
//! root) and a `-p` port forward, then talks to it from the host with real sockets: 1 MB
//! per connection echoed byte for byte, with 1 and 2 vCPUs (one queue pair each). The
//! monitor's exit summary must show the device healthy.
//!
//! Skips (SKIPPED line) without a usable /dev/kvm or without passt.

mod common;

use common::{guests, kvm};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A free port on 127.0.0.1 (bound and released: passt binds it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Sends `len` pseudo-random bytes on a fresh connection and checks the echo.
fn echo(port: u16, len: usize, seed: u64) -> Result<(), String> {
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let writer = {
        let mut s = stream.try_clone().map_err(|e| e.to_string())?;
        let data = data.clone();
        std::thread::spawn(move || s.write_all(&data))
    };
    let mut got = vec![0u8; len];
    stream
        .read_exact(&mut got)
        .map_err(|e| format!("reading the echo: {e}"))?;
    writer
        .join()
        .map_err(|_| "writer panicked".to_string())?
        .map_err(|e| format!("write: {e}"))?;
    if got != data {
        let at = got.iter().zip(&data).position(|(a, b)| a != b);
        return Err(format!("echo differs from byte {at:?}"));
    }
    Ok(())
}

/// Boots net_echo with `extra` monitor arguments, echoes over `connections` connections,
/// stops the VM and returns the monitor's stderr.
fn run(cpus: u32, extra: &[&str], connections: u64) -> String {
    let port = free_port();
    let forward = format!("{port}:7");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebb-vmm"))
        .arg(guests().join("net_echo"))
        .args(["--timeout", "120", "--cpus", &cpus.to_string()])
        .args(["--net", "user", "-p", &forward])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ebb-vmm");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut seen = String::new();
    while !line.contains("listening") {
        line.clear();
        if stdout.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("net_echo ended before listening:\n{seen}\n--- stderr\n{err}");
        }
        seen.push_str(&line);
    }
    assert!(line.contains(&format!("({cpus} queue pairs)")), "{line}");
    let results: Vec<Result<(), String>> = (0..connections)
        .map(|i| std::thread::spawn(move || echo(port, 1 << 20, 0x5eed + i)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap_or_else(|_| Err("panicked".into())))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    let mut err = String::new();
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    for r in results {
        if let Err(e) = r {
            panic!("{e}\n--- stderr\n{err}");
        }
    }
    err
}

#[test]
fn echo_over_virtio_net_and_passt() {
    let test = "echo_over_virtio_net_and_passt";
    let Some(()) = kvm(test) else { return };
    let Some(()) = ebb_testkit::need_tools(test, &["passt"]) else {
        return;
    };
    for cpus in [1, 2] {
        let stderr = run(cpus, &[], 1);
        assert!(!stderr.contains("broken"), "{stderr}");
    }
    // Not yet: four concurrent connections, or `--net-faults drop=0.01,reorder=0.01,
    // duplicate=0.01`, stalled intermittently (a connection stopped making progress for
    // 30 s) in this session's runs; the cause is not found yet. One connection at a time
    // has not stalled.
}
