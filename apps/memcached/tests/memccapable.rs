//! libmemcached's protocol checker, `memccapable` (Debian: `libmemcached-tools`), against
//! the hosted server and the native one (booted under KVM, through passt; 1 and 2 vCPUs):
//! every test of the ASCII protocol and every test of the binary protocol must pass.

mod common;

use common::ServerProcess;
use std::process::Command;
use std::time::Duration;

/// Runs `memccapable MODE` against a fresh server of ours, hosted or natively on `native`
/// vCPUs; panics unless every test passed.
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
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    let results: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains('[') && l.trim_end().ends_with(']'))
        .collect();
    let failed: Vec<&&str> = results.iter().filter(|l| !l.contains("[pass]")).collect();
    assert!(
        failed.is_empty(),
        "memccapable {mode} against {name}: tests not passed: {failed:#?}\n{all}"
    );
    assert!(
        !stdout.contains("tests failed"),
        "memccapable {mode} against {name} reports failures:\n{all}"
    );
    assert!(
        stdout.contains("All tests passed"),
        "memccapable {mode} against {name} did not finish with 'All tests passed':\n{all}"
    );
    assert!(
        results.len() >= min_tests,
        "memccapable {mode} against {name}: only {} tests ran (expected at least {min_tests}):\n{all}",
        results.len()
    );
    assert!(
        output.status.success(),
        "memccapable {mode} against {name}: {}\n{all}",
        output.status
    );
    println!(
        "memccapable {mode} against {name}: {} tests passed",
        results.len()
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
