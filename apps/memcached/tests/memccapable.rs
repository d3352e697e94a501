//! libmemcached's protocol checker, `memccapable` (Debian: `libmemcached-tools`), against
//! the hosted server and the native one (booted under KVM, through passt; 1 and 2 vCPUs):
//! every test of the ASCII protocol and every test of the binary protocol must pass, but
//! for two that memcached 1.6.45 fails as well ([`FAILED_BY_MEMCACHED_1_6_45`]).

mod common;

use common::ServerProcess;
use std::process::Command;
use std::time::Duration;

/// memccapable's ASCII tests that memcached 1.6.45 fails, and so this server, which
/// follows its parser: each sends `delete a b c d e` (memcapable.cc line 1456) and wants
/// an error; 1.6.45 ignores the tokens after the key and answers `NOT_FOUND` (1.6.18,
/// which memccapable was written against, refuses them with a usage line). See
/// `src/protocol/mod.rs`, "Which memcached 1.6".
const FAILED_BY_MEMCACHED_1_6_45: &[&str] = &["ascii delete", "ascii delete noreply"];

/// Where those two fail: the error memccapable waited for after `delete a b c d e`.
const DELETE_EXTRA_ARGUMENTS_CHECK: &str = "memcapable.cc:1456: receive_error_response()";

/// Runs `memccapable MODE` against a fresh server of ours, hosted or natively on `native`
/// vCPUs; panics unless every test passed but exactly `expected_failures`, each at
/// [`DELETE_EXTRA_ARGUMENTS_CHECK`].
fn capable(test: &str, mode: &'static str, min_tests: usize, native: Option<usize>) {
    let expected_failures: &[&str] = if mode == "-a" {
        FAILED_BY_MEMCACHED_1_6_45
    } else {
        &[]
    };
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
    // A test's name starts its line; `[pass]` ends it, or the failure's lines follow
    // (memccapable prints `[FAIL]` on standard error).
    let names: Vec<&str> = stdout
        .split(['\n', ')'])
        .filter(|l| l.starts_with("ascii ") || l.starts_with("binary "))
        .map(|l| l.trim_end_matches("[pass]").trim_end())
        .collect();
    let passed_names: Vec<&str> = stdout
        .split(['\n', ')'])
        .filter_map(|l| l.trim_end().strip_suffix("[pass]"))
        .map(str::trim_end)
        .collect();
    let passed = passed_names.len();
    let failed: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !passed_names.contains(n))
        .collect();
    assert_eq!(
        failed, expected_failures,
        "memccapable {mode} against {name}: tests not passed other than expected\n{all}"
    );
    assert_eq!(
        stdout.matches(DELETE_EXTRA_ARGUMENTS_CHECK).count(),
        expected_failures.len(),
        "memccapable {mode} against {name}: the expected failures are not the extra delete arguments' check\n{all}"
    );
    if expected_failures.is_empty() {
        assert!(
            stdout.contains("All tests passed"),
            "memccapable {mode} against {name} did not finish with 'All tests passed':\n{all}"
        );
        assert!(
            output.status.success(),
            "memccapable {mode} against {name}: {}\n{all}",
            output.status
        );
    } else {
        let summary = format!(
            "{} of {} tests failed",
            expected_failures.len(),
            names.len()
        );
        assert!(
            all.contains(&summary),
            "memccapable {mode} against {name}: no '{summary}'\n{all}"
        );
    }
    assert!(
        names.len() >= min_tests,
        "memccapable {mode} against {name}: only {} tests ran (expected at least {min_tests}):\n{all}",
        names.len()
    );
    println!(
        "memccapable {mode} against {name}: {passed} tests passed, {} failed as they do against memcached 1.6.45",
        expected_failures.len()
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
