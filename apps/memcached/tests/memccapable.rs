//! libmemcached's protocol checker, `memccapable` (Debian: `libmemcached-tools`), against
//! the hosted server: every test of the ASCII protocol and every test of the binary
//! protocol must pass.

mod common;

use common::ServerProcess;
use std::process::Command;
use std::time::Duration;

/// Runs `memccapable MODE` against a fresh server; panics unless every test passed.
fn capable(test: &str, mode: &'static str, min_tests: usize) {
    if ebb_testkit::need_tools(test, &["memccapable"]).is_none() {
        return;
    }
    let server = ServerProcess::ours(&[]);
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
        "memccapable {mode}: tests not passed: {failed:#?}\n{all}"
    );
    assert!(
        !stdout.contains("tests failed"),
        "memccapable {mode} reports failures:\n{all}"
    );
    assert!(
        stdout.contains("All tests passed"),
        "memccapable {mode} did not finish with 'All tests passed':\n{all}"
    );
    assert!(
        results.len() >= min_tests,
        "memccapable {mode}: only {} tests ran (expected at least {min_tests}):\n{all}",
        results.len()
    );
    assert!(
        output.status.success(),
        "memccapable {mode}: {}\n{all}",
        output.status
    );
    println!("memccapable {mode}: {} tests passed", results.len());
}

#[test]
fn memccapable_ascii_protocol_passes() {
    capable("memccapable_ascii_protocol_passes", "-a", 25);
}

#[test]
fn memccapable_binary_protocol_passes() {
    capable("memccapable_binary_protocol_passes", "-b", 25);
}
