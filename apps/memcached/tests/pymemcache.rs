//! A second real client library: `tests/pymemcache_check.py` drives the server with
//! pymemcache (Debian: `python3-pymemcache`) through every text command it offers, with
//! binary-safe values and `noreply`, and checks each result: against the hosted server,
//! and natively (one vCPU, under KVM, through passt).

mod common;

use common::ServerProcess;
use ebb_testkit::Capability;
use std::process::Command;
use std::time::Duration;

/// A Python 3 that can import pymemcache (the one on PATH may be a pyenv without it).
fn python_with_pymemcache() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import pymemcache.client.base"])
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

/// The script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymemcache_check.py");

/// A Python 3 with pymemcache, or `None` when `test` was skipped.
fn python(test: &str) -> Option<&'static str> {
    ebb_testkit::need_tools(test, &["python3"])?;
    match python_with_pymemcache() {
        Some(python) => Some(python),
        None => ebb_testkit::skip(
            test,
            Capability::tool("pymemcache"),
            "no python3 can import pymemcache (Debian: python3-pymemcache)",
        ),
    }
}

#[test]
fn pymemcache_client_works() {
    let test = "pymemcache_client_works";
    let Some(python) = python(test) else {
        return;
    };
    let script = SCRIPT;
    // The script's expectations are memcached's own: where Debian's memcached is
    // installed, it must pass there first.
    let mut servers = Vec::new();
    if ebb_testkit::have_tool("memcached") {
        servers.push(ServerProcess::reference(&[]));
    }
    servers.push(ServerProcess::ours(&[]));
    for server in &servers {
        run_script(python, script, server);
    }
}

#[test]
fn pymemcache_client_works_natively() {
    let test = "pymemcache_client_works_natively";
    let Some(python) = python(test) else {
        return;
    };
    let Some(server) = ServerProcess::native(test, 1, None, &[]) else {
        return;
    };
    run_script(python, SCRIPT, &server);
}

fn run_script(python: &'static str, script: &'static str, server: &ServerProcess) {
    let name = server.name;
    for seed in ["1", "2", "3"] {
        let port = server.port.to_string();
        let output = common::bounded("pymemcache_check.py", Duration::from_secs(60), move || {
            Command::new(python)
                .args([script, &port, seed])
                .output()
                .expect("run python")
        });
        assert!(
            output.status.success(),
            "pymemcache_check.py (seed {seed}) against {name} failed: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
