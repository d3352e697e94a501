//! `-t N` sets the core count hosted: the runtime starts N cores (on this 2-CPU machine
//! `-t 1` runs one), an `EBB_CPUS` that says otherwise is refused with a clear error, and
//! `stats` reports the threads serving.

mod common;

use common::ServerProcess;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Our server with `-t threads` and no `EBB_CPUS`: it serves, and reports `threads`.
fn serves_on(threads: usize) {
    let t = threads.to_string();
    let server = ServerProcess::ours_with_cpus_env(None, &["-t", &t]);
    let mut c = server.client();
    assert_eq!(c.set("k", 0, 0, b"v"), "STORED");
    assert_eq!(c.get("k"), Some((0, b"v".to_vec())));
    // The server refuses a -t other than its runtime's core count, so running at all
    // says the runtime has `threads` cores; the stats say so too.
    assert_eq!(c.stat("threads"), threads as u64);
    assert_eq!(c.stats("settings")["num_threads"], t);
}

#[test]
fn t1_serves_on_one_core_without_ebb_cpus() {
    serves_on(1);
}

#[test]
fn t2_serves_on_two_cores_without_ebb_cpus() {
    serves_on(2);
}

#[test]
fn t_agreeing_with_ebb_cpus_serves() {
    let server = ServerProcess::ours_on(1, &["-t", "1"]);
    assert_eq!(server.client().stat("threads"), 1);
    let server = ServerProcess::ours_on(2, &["--threads=2"]);
    assert_eq!(server.client().stat("threads"), 2);
}

/// Runs our server with `EBB_CPUS` (if given) and `args`, expecting it to refuse them:
/// its exit code and what it printed on standard error.
fn refused(cpus: Option<&str>, args: &[&str]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_memcached"));
    match cpus {
        Some(cpus) => command.env("EBB_CPUS", cpus),
        None => command.env_remove("EBB_CPUS"),
    };
    let args: Vec<String> = ["-p", "0"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect();
    let output = common::bounded("memcached refusing", Duration::from_secs(30), move || {
        command
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run our memcached")
    });
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn ebb_cpus_conflicting_with_t_is_a_clear_error() {
    let (code, stderr) = refused(Some("2"), &["-t", "1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("EBB_CPUS=2 conflicts with the command line, which asks for 1 core"),
        "{stderr}"
    );
}

#[test]
fn t_that_is_not_a_core_count_is_refused() {
    for bad in ["0", "x"] {
        let (code, stderr) = refused(None, &["-t", bad]);
        assert_eq!(code, Some(2), "-t {bad}: {stderr}");
        assert!(
            stderr.contains(&format!("bad -t \"{bad}\"")),
            "-t {bad}: {stderr}"
        );
    }
}

/// Natively the cores are the VM's vCPUs: `ebb run memcached -- -t 1` without `--cpus`
/// boots one (memcached's manifest names `-t` as its core-count flag), says so in its
/// start line, and the server serves with `threads 1`.
#[test]
fn t1_boots_one_vcpu_natively_through_ebb_run() {
    let test = "t1_boots_one_vcpu_natively_through_ebb_run";
    let Some(server) = ServerProcess::native_by_app_name(test, &["-t", "1"]) else {
        return;
    };
    let mut c = server.client();
    assert_eq!(c.set("k", 0, 0, b"v"), "STORED");
    assert_eq!(c.stat("threads"), 1);
    let output = server.output();
    assert!(
        output.contains("natively (1 vCPU: the app's -t 1,"),
        "the start line says where the vCPU count came from:\n{output}"
    );
    assert!(output.contains("1 core;"), "the banner:\n{output}");
}
