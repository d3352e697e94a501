//! The `ebb` command end to end: the built binary builds the apps under `apps/` and runs
//! them hosted and natively (1 and 2 vCPUs), and reports its errors clearly.
//!
//! The apps are built once per test binary (`ebb build`, native and hosted) into a target
//! directory of their own under `CARGO_TARGET_TMPDIR`, with the RUSTFLAGS-style variables
//! cargo sets for this test removed (they would replace the native target's linker flags
//! from the repository's `.cargo/config.toml`). Native tests skip (`ebb_testkit::skip`:
//! `SKIPPED: ...`, or a failure where `EBB_REQUIRE` names kvm) when `/dev/kvm` is
//! unusable. Every run has a `--timeout`, so none can hang.

mod common;

use common::{apps_target_dir, build, ebb, kvm, repo_root};
use ebb_testkit::{Run, for_nested_cargo};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const APPS: [&str; 3] = ["hello", "multicore", "timer"];

fn output(cmd: &mut Command) -> Run {
    Run::of(cmd)
}

/// The apps' executables, built once: (app, native image, hosted executable).
fn built() -> &'static [(&'static str, PathBuf, PathBuf)] {
    static BUILT: OnceLock<Vec<(&'static str, PathBuf, PathBuf)>> = OnceLock::new();
    BUILT.get_or_init(|| {
        APPS.iter()
            .map(|&app| (app, build(app, "--native"), build(app, "--hosted")))
            .collect()
    })
}

fn native_image(app: &str) -> &'static Path {
    built()
        .iter()
        .find(|(name, _, _)| *name == app)
        .map(|(_, image, _)| image.as_path())
        .expect("a built app")
}

/// `ebb run APP --timeout 60 EXTRA... -- ARGS...`, after the apps are built.
fn run(app: &str, extra: &[&str], args: &[&str]) -> Run {
    built();
    let mut cmd = ebb();
    cmd.args(["run", app, "--timeout", "60"]).args(extra);
    if !args.is_empty() {
        cmd.arg("--").args(args);
    }
    output(&mut cmd)
}

/// Checks the one stderr line that says which runtime ran the app.
fn assert_ran(run: &Run, app: &str, how: &str) {
    let line = format!("ebb: running {app} {how}");
    assert!(run.stderr.contains(&line), "no {line:?}: {run:?}");
}

fn check_hello(run: &Run, cores: u32) {
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.contains(&format!(
            "hello: hello from Ebbflow on {cores} core(s), args [\"one\", \"two\"]"
        )),
        "{run:?}"
    );
    let answered: Vec<String> = (0..cores).map(|c| c.to_string()).collect();
    assert!(
        run.stdout
            .contains(&format!("hello: cores [{}] answered", answered.join(", "))),
        "{run:?}"
    );
}

fn check_multicore(run: &Run, cores: u32) {
    assert_eq!(run.code, 0, "{run:?}");
    for core in 0..cores {
        assert!(
            run.stdout.contains(&format!("(ran on core {core})\n")),
            "core {core} missing: {run:?}"
        );
    }
    assert!(
        run.stdout.contains(
            "total sum 20000100000 (expected 20000100000), primes 17984 (expected 17984)"
        ),
        "{run:?}"
    );
    assert!(run.stdout.contains("multicore: ok\n"), "{run:?}");
}

fn check_timer(run: &Run, cores: u32) {
    assert_eq!(run.code, 0, "{run:?}");
    for core in 0..cores.min(2) {
        let fired: Vec<&str> = run
            .stdout
            .lines()
            .filter(|l| l.starts_with(&format!("timer: core {core}: timer ")))
            .collect();
        assert_eq!(fired.len(), 7, "core {core}: {run:?}");
        // Deadline order: 5, 10, 15, 20, 30, 40, 50 ms (timers 3, 1, 6, 5, 2, 0, 4).
        for (line, timer) in fired.iter().zip([3, 1, 6, 5, 2, 0, 4]) {
            assert!(
                line.contains(&format!("timer {timer} (deadline")),
                "order: {run:?}"
            );
            assert!(!line.contains("EARLY"), "{run:?}");
        }
    }
    assert!(
        run.stdout.contains("around sleep(5 s): expired after"),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("around sleep(10 ms): finished after"),
        "{run:?}"
    );
    assert!(run.stdout.contains("timer: ok\n"), "{run:?}");
}

fn check(app: &str, run: &Run, cores: u32) {
    match app {
        "hello" => check_hello(run, cores),
        "multicore" => check_multicore(run, cores),
        _ => check_timer(run, cores),
    }
}

fn hosted(app: &str) {
    let run = run(app, &["--hosted", "--cpus", "2"], hello_args(app));
    assert_ran(&run, app, "hosted (2 cores; --hosted)");
    check(app, &run, 2);
}

fn native(test: &str, app: &str, cpus: u32) {
    built();
    if kvm(test).is_none() {
        return;
    }
    let cpus_arg = cpus.to_string();
    let run = run(app, &["--native", "--cpus", &cpus_arg], hello_args(app));
    let vcpus = if cpus == 1 { "1 vCPU" } else { "2 vCPUs" };
    assert_ran(&run, app, &format!("natively ({vcpus}, 128 MiB; --native)"));
    check(app, &run, cpus);
}

fn hello_args(app: &str) -> &'static [&'static str] {
    if app == "hello" { &["one", "two"] } else { &[] }
}

#[test]
fn hello_hosted() {
    hosted("hello");
}

#[test]
fn multicore_hosted() {
    hosted("multicore");
}

#[test]
fn timer_hosted() {
    hosted("timer");
}

#[test]
fn hello_native_1_vcpu() {
    native("hello_native_1_vcpu", "hello", 1);
}

#[test]
fn hello_native_2_vcpus() {
    native("hello_native_2_vcpus", "hello", 2);
}

#[test]
fn multicore_native_1_vcpu() {
    native("multicore_native_1_vcpu", "multicore", 1);
}

#[test]
fn multicore_native_2_vcpus() {
    native("multicore_native_2_vcpus", "multicore", 2);
}

#[test]
fn timer_native_1_vcpu() {
    native("timer_native_1_vcpu", "timer", 1);
}

#[test]
fn timer_native_2_vcpus() {
    native("timer_native_2_vcpus", "timer", 2);
}

/// Without `--native`/`--hosted` the app runs natively when KVM works, hosted otherwise,
/// and the stderr line says so.
#[test]
fn run_picks_the_runtime_by_kvm() {
    let run = run("hello", &["--cpus", "2"], &["one", "two"]);
    match ebb_vmm::kvm_usable() {
        Ok(()) => assert_ran(
            &run,
            "hello",
            "natively (2 vCPUs, 128 MiB; /dev/kvm is usable)",
        ),
        Err(_) => assert!(
            run.stderr.contains("ebb: /dev/kvm unusable (")
                && run.stderr.contains("): running hello hosted (2 cores)"),
            "{run:?}"
        ),
    }
    check_hello(&run, 2);
}

/// An image path is booted as it is, without cargo.
#[test]
fn image_file_runs_without_building() {
    let image = native_image("multicore");
    if kvm("image_file_runs_without_building").is_none() {
        return;
    }
    let mut cmd = ebb();
    // A workspace is not even needed: run from a directory outside it, with a cargo that
    // does not exist, to show cargo is not invoked.
    cmd.current_dir(std::env::temp_dir())
        .env("CARGO", "/nonexistent/cargo")
        .arg("run")
        .arg(image)
        .args(["--cpus", "2", "--timeout", "60"]);
    let run = output(&mut cmd);
    assert_ran(
        &run,
        "multicore",
        "natively (2 vCPUs, 128 MiB; an image file)",
    );
    check_multicore(&run, 2);
}

/// The app's exit code and arguments pass through, both ways.
#[test]
fn exit_codes_and_arguments_pass_through() {
    let run_hosted = run("multicore", &["--hosted", "--cpus", "1"], &["zero"]);
    assert_eq!(run_hosted.code, 2, "{run_hosted:?}");
    assert!(
        run_hosted.stdout.contains("the argument is N"),
        "{run_hosted:?}"
    );
    let small = run("multicore", &["--hosted", "--cpus", "2"], &["10"]);
    assert_eq!(small.code, 0, "{small:?}");
    assert!(
        small
            .stdout
            .contains("total sum 55 (expected 55), primes 4 (expected 4)"),
        "{small:?}"
    );
    if kvm("exit_codes_and_arguments_pass_through (native part)").is_none() {
        return;
    }
    let run_native = run("multicore", &["--native", "--cpus", "1"], &["zero"]);
    assert_eq!(run_native.code, 2, "{run_native:?}");
    assert!(
        run_native.stdout.contains("the argument is N"),
        "{run_native:?}"
    );
}

/// A hosted app that outlives `--timeout` is killed and `ebb` exits with 124.
#[test]
fn hosted_timeout_kills_the_app() {
    built();
    let run = output(ebb().args([
        "run",
        "timer",
        "--hosted",
        "--cpus",
        "1",
        "--timeout",
        "0.01",
    ]));
    assert_eq!(run.code, 124, "{run:?}");
    assert!(run.stderr.contains("timer timed out after"), "{run:?}");
}

#[test]
fn unknown_app_lists_the_apps() {
    let run = output(ebb().args(["run", "no-such-app"]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("ebb: error: unknown app \"no-such-app\""),
        "{run:?}"
    );
    for app in ["echo", "hello", "multicore", "timer"] {
        assert!(run.stderr.contains(app), "{app} not listed: {run:?}");
    }
    let build = output(ebb().args(["build", "no-such-app"]));
    assert_eq!(build.code, 1, "{build:?}");
    assert!(build.stderr.contains("unknown app"), "{build:?}");
}

#[test]
fn manifest_path_finds_the_workspace_from_anywhere() {
    let run = output(
        ebb()
            .current_dir(std::env::temp_dir())
            .arg("--manifest-path")
            .arg(repo_root().join("Cargo.toml"))
            .args(["run", "no-such-app"]),
    );
    assert!(run.stderr.contains("the apps under "), "{run:?}");
    let lost = output(ebb().current_dir("/").args(["run", "hello"]));
    assert_eq!(lost.code, 1, "{lost:?}");
    assert!(lost.stderr.contains("no Ebbflow workspace"), "{lost:?}");
}

/// A file that is not an image: ebb-vmm's error, whether or not KVM works (the image is
/// validated before /dev/kvm is opened).
#[test]
fn a_text_file_is_not_an_image() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-an-image.txt");
    std::fs::write(&path, "just some text\n").expect("write the text file");
    let run = output(ebb().arg("run").arg(&path).args(["--timeout", "10"]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("ebb: error: ")
            && run
                .stderr
                .contains("not-an-image.txt: image is not a valid ELF file"),
        "{run:?}"
    );
}

/// A hosted app's Linux executable given as an image: ebb-vmm's error and a hint.
#[test]
fn a_linux_executable_is_not_an_image() {
    let hosted = built()
        .iter()
        .find(|(name, _, _)| *name == "hello")
        .map(|(_, _, hosted)| hosted.clone())
        .expect("a built app");
    let run = output(ebb().arg("run").arg(&hosted).args(["--timeout", "10"]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("not a static executable (ET_EXEC)")
            && run.stderr.contains("run it with --hosted"),
        "{run:?}"
    );
    let as_hosted = output(ebb().arg("run").arg(&hosted).args([
        "--hosted",
        "--cpus",
        "2",
        "--timeout",
        "60",
        "--",
        "one",
        "two",
    ]));
    assert_ran(&as_hosted, "hello", "hosted (2 cores; --hosted)");
    check_hello(&as_hosted, 2);
}

/// `--native` without a usable `/dev/kvm` names `/dev/kvm` and the reason. Checked for
/// real when KVM is absent; otherwise, as root, with `/dev/null` bind-mounted over
/// `/dev/kvm` in a private mount namespace (`unshare`), which also checks the automatic
/// fallback to hosted. The message itself is checked in every case.
#[test]
fn native_without_kvm_is_a_clear_error() {
    let message = ebb_cli::CliError::KvmUnusable {
        reason: "cannot open /dev/kvm: Permission denied (os error 13)".into(),
    }
    .to_string();
    assert!(
        message.contains("/dev/kvm is unusable: cannot open /dev/kvm: Permission denied")
            && message.contains("--hosted"),
        "{message}"
    );
    built();
    if ebb_vmm::kvm_usable().is_err() {
        let run = run("hello", &["--native"], &[]);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(
            run.stderr
                .contains("ebb: error: cannot run natively: /dev/kvm is unusable: "),
            "{run:?}"
        );
        return;
    }
    // KVM works here: hide it.
    let Some(hidden) = without_kvm(&["run", "hello", "--native", "--timeout", "60"]) else {
        return;
    };
    assert_eq!(hidden.code, 1, "{hidden:?}");
    assert!(
        hidden.stderr.contains(
            "ebb: error: cannot run natively: /dev/kvm is unusable: KVM_CREATE_VM failed"
        ),
        "{hidden:?}"
    );
    let Some(auto) = without_kvm(&[
        "run",
        "hello",
        "--cpus",
        "2",
        "--timeout",
        "60",
        "--",
        "one",
        "two",
    ]) else {
        return;
    };
    assert!(
        auto.stderr
            .contains("ebb: /dev/kvm unusable (KVM_CREATE_VM failed")
            && auto.stderr.contains("): running hello hosted (2 cores)"),
        "{auto:?}"
    );
    check_hello(&auto, 2);
}

/// Runs `ebb ARGS` with `/dev/null` over `/dev/kvm` in a private mount namespace; `None`
/// (after a skip) when the machine cannot arrange that: not root, no `unshare`. As root
/// with `unshare`, failing to hide `/dev/kvm` fails the test.
fn without_kvm(args: &[&str]) -> Option<Run> {
    let test = "native_without_kvm_is_a_clear_error (KVM hidden)";
    ebb_testkit::need_root(test, "hiding /dev/kvm in a mount namespace")?;
    ebb_testkit::need_tools(test, &["unshare"])?;
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind /dev/null /dev/kvm")
        .output()
        .expect("run unshare");
    assert!(
        probe.status.success(),
        "{test}: cannot hide /dev/kvm: {}",
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind /dev/null /dev/kvm && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ebb"))
        .arg("--target-dir")
        .arg(apps_target_dir())
        .args(args);
    Some(output(for_nested_cargo(&mut cmd)))
}

/// A toolchain without the native target: simulated with an empty sysroot for the target
/// crates (`RUSTFLAGS=--sysroot EMPTY`; with `--target`, cargo does not apply RUSTFLAGS to
/// build scripts), which makes rustc fail exactly as it does when the target is not
/// installed ("can't find crate for `core`" ... "target may not be installed").
#[test]
fn missing_native_target_is_explained() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let empty_sysroot = tmp.join("empty-sysroot");
    std::fs::create_dir_all(&empty_sysroot).expect("create the empty sysroot");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebb"));
    cmd.arg("--target-dir")
        .arg(tmp.join("no-native-target"))
        .args(["build", "--native", "hello"])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
        .env(
            "RUSTFLAGS",
            format!("--sysroot {}", empty_sysroot.display()),
        );
    let run = output(&mut cmd);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(
            "ebb: error: the x86_64-unknown-none target is not installed, so native images \
             cannot be built: run `rustup target add x86_64-unknown-none`"
        ),
        "{run:?}"
    );
}

/// Builds test images of `tests/guests` (the ebb-vmm tests' guests, into the same target
/// directory) once; the directory holding them.
fn test_guests() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../guests");
        ebb_testkit::guests::build(
            &repo_root(),
            &target_dir,
            &["panic", "page_fault", "exit_code"],
            "ebb-cli tests: ",
        )
    })
}

/// `ebb run IMAGE` on a test guest, outside the workspace.
fn run_guest(guest: &str) -> Run {
    output(
        ebb()
            .current_dir(std::env::temp_dir())
            .arg("run")
            .arg(test_guests().join(guest))
            .args(["--timeout", "60"]),
    )
}

/// A guest that panics: the monitor's symbolized report, exit status 101, then one line
/// of `ebb`'s saying everything the app held in memory is lost. A fault says so too; an
/// exit with a code of its own does not.
#[test]
fn a_guest_panic_says_its_memory_is_lost() {
    if kvm("a_guest_panic_says_its_memory_is_lost").is_none() {
        return;
    }
    let lost = "held in memory is lost";
    let run = run_guest("panic");
    assert_eq!(run.code, 101, "{run:?}");
    assert!(run.stdout.contains("about to panic"), "{run:?}");
    let report = "ebb-vmm: guest panicked on core 0: deliberate panic: 6 * 7 = 42";
    let line = "ebb: the guest panicked (exit status 101): everything panic held in memory \
                is lost (whatever it stored, every open connection)\n";
    let (Some(at_report), Some(at_backtrace), Some(at_line)) = (
        run.stderr.find(report),
        run.stderr.find("<panic::deeper+0x"),
        run.stderr.find(line),
    ) else {
        panic!("no report, backtrace line or {line:?}: {run:?}");
    };
    assert!(
        at_report < at_backtrace && at_backtrace < at_line,
        "the line comes after the report: {run:?}"
    );
    assert_eq!(run.stderr.matches(lost).count(), 1, "once: {run:?}");
    assert!(
        run.stderr[at_line..].ends_with(line),
        "the line is the last: {run:?}"
    );

    let fault = run_guest("page_fault");
    assert_eq!(fault.code, 102, "{fault:?}");
    assert!(
        fault.stderr.contains("ebb-vmm: guest fault on core 0")
            && fault.stderr.contains(
                "ebb: the guest faulted (exit status 102): everything page_fault held in memory \
                 is lost"
            ),
        "{fault:?}"
    );

    let exited = run_guest("exit_code");
    assert_eq!(exited.code, 42, "{exited:?}");
    assert!(!exited.stderr.contains(lost), "{exited:?}");
}
