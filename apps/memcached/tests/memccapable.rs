//! libmemcached's protocol checker, `memccapable` (Debian: `libmemcached-tools`), against
//! the hosted server and the native one (booted under KVM, through passt; 1 and 2 vCPUs):
//! every test of the ASCII protocol and every test of the binary protocol must pass, but
//! for the two that memcached 1.6.45 fails as well (`ebb_testkit::memccapable`: they want
//! `delete a b c d e` refused, which 1.6.40 and later answer `NOT_FOUND`).

mod common;

use common::ServerProcess;
use ebb_testkit::memccapable;
use std::process::Command;
use std::time::Duration;

/// Runs `memccapable MODE` against a fresh server of ours, hosted or natively on `native`
/// vCPUs; panics unless every test passed but those memcached 1.6.45 fails as well
/// ([`ebb_testkit::memccapable::as_memcached_1_6_45`]), and at least `min_tests` ran.
fn capable(test: &str, mode: &'static str, min_tests: usize, native: Option<usize>) {
    if ebb_testkit::need_tools(test, &["memccapable"]).is_none() {
        return;
    }
    let server = match native {
        None => ServerProcess::ours(&[]),
        Some(cpus) => match ServerProcess::native(test, cpus, None, &[]) {
            Some(server) => server,
            None => return,
        },
    };
    let name = server.name;
    let port = server.port.to_string();
    let output = common::bounded("memccapable", Duration::from_secs(120), move || {
        Command::new("memccapable")
            .args(["-h", "127.0.0.1", "-p", &port, "-t", "5", "-v", mode])
            .output()
            .expect("run memccapable")
    });
    let passed = memccapable::as_memcached_1_6_45(mode, &output)
        .unwrap_or_else(|e| panic!("against {name}: {e}"));
    assert!(
        passed >= min_tests - memccapable::FAILED_BY_MEMCACHED_1_6_45.len(),
        "memccapable {mode} against {name}: only {passed} tests passed"
    );
    println!(
        "memccapable {mode} against {name}: {passed} tests passed, and as against memcached 1.6.45"
    );
    drop(server);
}

#[test]
fn memccapable_ascii_protocol_passes() {
    capable("memccapable_ascii_protocol_passes", "-a", 25, None);
}

#[test]
fn memccapable_binary_protocol_passes() {
    capable("memccapable_binary_protocol_passes", "-b", 25, None);
}

#[test]
fn memccapable_ascii_protocol_passes_natively() {
    let test = "memccapable_ascii_protocol_passes_natively";
    capable(test, "-a", 25, Some(1));
}

#[test]
fn memccapable_binary_protocol_passes_natively() {
    let test = "memccapable_binary_protocol_passes_natively";
    capable(test, "-b", 25, Some(1));
}

#[test]
fn memccapable_ascii_protocol_passes_natively_on_two_vcpus() {
    let test = "memccapable_ascii_protocol_passes_natively_on_two_vcpus";
    capable(test, "-a", 25, Some(2));
}

#[test]
fn memccapable_binary_protocol_passes_natively_on_two_vcpus() {
    let test = "memccapable_binary_protocol_passes_natively_on_two_vcpus";
    capable(test, "-b", 25, Some(2));
}
