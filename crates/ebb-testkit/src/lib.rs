//! # ebb-testkit — a skipped test is not a passed test
//!
//! Some tests need what not every machine has: KVM, root, a TAP device, network
//! namespaces, QEMU, or a tool such as `dnsmasq`. Such a test checks for its
//! [`Capability`] first and, when it is missing, calls [`skip`], which
//!
//! 1. prints `SKIPPED: <test>: <reason>` (seen with `--nocapture`);
//! 2. appends `<test>\t<capability>\t<reason>` to the file named by `$EBB_SKIP_LOG`, when
//!    set, because libtest hides the output of a test that returns normally — `.ci/run`
//!    lists these lines and counts them apart from the passed tests;
//! 3. **panics instead** when `$EBB_REQUIRE` names the capability (a comma-separated list
//!    such as `kvm,root,tap,netns,qemu,tools`, or `all`): on a machine that is supposed to
//!    have it, a missing capability is a failure. CI sets it.
//!
//! ## Invariants
//!
//! * A skip is only ever for a missing capability. Anything else that goes wrong while a
//!   test sets itself up (an `ip netns add` that fails for root, a TAP device that cannot
//!   be configured) is a failure, and the callers are written that way.
//! * The decisions are pure functions of their inputs ([`is_required`], [`skip_line`]), so
//!   they are unit-tested without touching the process environment.
//!
//! ## Where test helpers live
//!
//! One rule for the whole tree, so a helper is found where its subject is:
//!
//! * **A crate's own helpers** — what its tests need of its private items, and what other
//!   crates' tests use to drive it — are in that crate's module named `testing`
//!   (`src/testing.rs`; `#[cfg(test)]` when only its own unit tests use it): ebb-core's
//!   `TestPlatform`, ebb-mem's arenas and allocation model, ebb-net's hand-built frames,
//!   ebb-vmm's fake guest memory.
//! * **Helpers shared by one package's integration tests** are in its `tests/common/`.
//! * **What a test needs from the machine** — capabilities and skips, network namespaces,
//!   the native guest images, log lines, reachability checks — is here, in ebb-testkit,
//!   which depends on no runtime, stack or app crate.
//! * **Tests of several crates together** (a runtime with the stack and the apps) are in
//!   the top-level `tests/` package, so no runtime or library dev-depends on an app or on
//!   another runtime.

pub mod guests;
pub mod http_timeouts;
pub mod lines;
pub mod memccapable;
pub mod netcheck;
pub mod netns;
pub mod seed_files;
pub mod stream_cuts;
pub mod veth;

use std::fmt;
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Something a test needs from the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Capability {
    /// A usable `/dev/kvm`.
    Kvm,
    /// Running as root (network namespaces, TAP devices, mount namespaces).
    Root,
    /// `/dev/net/tun` and the right to create TAP devices.
    Tap,
    /// `ip netns` (root and iproute2).
    Netns,
    /// `qemu-system-x86_64`.
    Qemu,
    /// A nightly Rust toolchain (Miri, cargo-fuzz).
    Nightly,
    /// An external program found on `PATH`: `curl`, `nc`, `dnsmasq`, `python3`, ...
    Tool(String),
}

impl Capability {
    /// An external program.
    pub fn tool(name: &str) -> Capability {
        Capability::Tool(name.to_string())
    }

    /// The name `EBB_REQUIRE` and the skip log use: `kvm`, `root`, `tap`, `netns`,
    /// `qemu`, `nightly`, `tool:NAME`.
    pub fn name(&self) -> String {
        match self {
            Capability::Kvm => "kvm".into(),
            Capability::Root => "root".into(),
            Capability::Tap => "tap".into(),
            Capability::Netns => "netns".into(),
            Capability::Qemu => "qemu".into(),
            Capability::Nightly => "nightly".into(),
            Capability::Tool(name) => format!("tool:{name}"),
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Whether the `EBB_REQUIRE` value `spec` names `capability`: its own name, `all`, or for
/// a tool also `tools`. Names are comma-separated; spaces around them and case are
/// ignored.
pub fn is_required(spec: &str, capability: &Capability) -> bool {
    let name = capability.name();
    spec.split(',')
        .map(|word| word.trim().to_ascii_lowercase())
        .any(|word| {
            word == "all"
                || word == name
                || (word == "tools" && matches!(capability, Capability::Tool(_)))
        })
}

/// The skip log's line for one skip (tabs and newlines in the parts become spaces, so a
/// line is always three fields).
pub fn skip_line(test: &str, capability: &Capability, reason: &str) -> String {
    let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    format!(
        "{}\t{}\t{}\n",
        clean(test),
        capability.name(),
        clean(reason.trim())
    )
}

/// Says that `test` cannot run here because `capability` is missing (`reason` says how
/// it was found missing). Panics instead when `$EBB_REQUIRE` names the capability.
/// Returns `None`, so a set-up function can end with `return skip(..)`.
pub fn skip<T>(test: &str, capability: Capability, reason: &str) -> Option<T> {
    let spec = std::env::var("EBB_REQUIRE").unwrap_or_default();
    if is_required(&spec, &capability) {
        panic!("{test}: needs {capability} (required by EBB_REQUIRE={spec}): {reason}");
    }
    println!("SKIPPED: {test}: {reason}");
    if let Some(path) = std::env::var_os("EBB_SKIP_LOG") {
        // One write of the whole line to a file opened for appending: lines from tests
        // running in parallel (and from other test binaries) do not interleave.
        let line = skip_line(test, &capability, reason);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "{test}: cannot record the skip in EBB_SKIP_LOG={}: {e}",
                path.to_string_lossy()
            );
        }
    }
    None
}

/// Whether `program` is on `PATH`.
pub fn have_tool(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v '{program}'")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `Some(())` when every program in `tools` is on `PATH`; otherwise skips `test` for the
/// first one missing.
pub fn need_tools(test: &str, tools: &[&str]) -> Option<()> {
    match tools.iter().find(|tool| !have_tool(tool)) {
        None => Some(()),
        Some(tool) => skip(
            test,
            Capability::tool(tool),
            &format!("`{tool}` is not installed"),
        ),
    }
}

/// Whether this process runs with user id 0 (read from `/proc/self/status`, no `unsafe`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1)) // the effective id
            .is_some_and(|euid| euid == "0")
    })
}

/// `Some(())` when running as root; otherwise skips `test` for [`Capability::Root`].
pub fn need_root(test: &str, for_what: &str) -> Option<()> {
    if is_root() {
        Some(())
    } else {
        skip(
            test,
            Capability::Root,
            &format!("{for_what} needs root (run the tests as root)"),
        )
    }
}

/// Removes from `cmd` the variables cargo sets for a test (or that a user may have set)
/// which would leak into a cargo build the test starts: RUSTFLAGS-style flags would
/// replace the native target's linker flags from the repository's `.cargo/config.toml`,
/// and a build target or target directory would send the build elsewhere.
pub fn for_nested_cargo(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
}

/// How a program a test ran ended, its output as text; `Debug` prints all of it, so
/// `assert!(.., "{run:?}")` shows what went wrong.
pub struct Run {
    /// The exit code, or -1 when a signal ended it.
    pub code: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Run {
    /// Runs `cmd` to completion; panics if it cannot be started.
    pub fn of(cmd: &mut Command) -> Run {
        let output = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        Run::from(output)
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_names_capabilities_all_and_tools() {
        let dnsmasq = Capability::tool("dnsmasq");
        assert!(!is_required("", &Capability::Kvm));
        assert!(is_required("kvm", &Capability::Kvm));
        assert!(is_required(" KVM , tap", &Capability::Tap));
        assert!(!is_required("kvm,tap", &Capability::Qemu));
        assert!(!is_required("kvmx", &Capability::Kvm), "whole names only");
        assert!(is_required("all", &Capability::Nightly));
        assert!(is_required("all", &dnsmasq));
        assert!(is_required("tools", &dnsmasq));
        assert!(
            !is_required("tools", &Capability::Root),
            "tools are programs only"
        );
        assert!(is_required("root,tool:dnsmasq", &dnsmasq));
        assert!(!is_required("tool:curl", &dnsmasq));
    }

    #[test]
    fn a_skip_line_always_has_three_fields() {
        let line = skip_line(
            "interop::x",
            &Capability::tool("nc"),
            "`nc`\tis not\ninstalled\n",
        );
        assert_eq!(line, "interop::x\ttool:nc\t`nc` is not installed\n");
        assert_eq!(line.trim_end().split('\t').count(), 3);
    }

    #[test]
    fn a_shell_is_a_tool_and_nonsense_is_not() {
        assert!(have_tool("sh"));
        assert!(!have_tool("ebb-testkit-no-such-program"));
    }

    /// Runs in a child process started by `skip_records_or_panics`: skips for a
    /// capability named by `EBB_TESTKIT_CHILD`.
    #[test]
    fn skip_child() {
        if let Ok(capability) = std::env::var("EBB_TESTKIT_CHILD") {
            let capability = match capability.as_str() {
                "kvm" => Capability::Kvm,
                tool => Capability::tool(tool),
            };
            let _: Option<()> = skip("the_child", capability, "it\tis missing");
        }
    }

    /// `skip` itself, in child processes with the environment CI gives it.
    #[test]
    fn skip_records_or_panics() {
        let log = std::env::temp_dir().join(format!("ebb-testkit-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let child = |capability: &str, require: &str| {
            std::process::Command::new(std::env::current_exe().expect("the test binary"))
                .args([
                    "--exact",
                    "tests::skip_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("EBB_TESTKIT_CHILD", capability)
                .env("EBB_REQUIRE", require)
                .env("EBB_SKIP_LOG", &log)
                .output()
                .expect("run the child")
        };
        let skipped = child("kvm", "qemu,tools");
        assert!(skipped.status.success(), "{skipped:?}");
        assert!(String::from_utf8_lossy(&skipped.stdout).contains("SKIPPED: the_child: it"));
        let required = child("kvm", "root,kvm");
        assert!(
            !required.status.success(),
            "EBB_REQUIRE=kvm fails: {required:?}"
        );
        assert!(
            String::from_utf8_lossy(&required.stderr)
                .contains("the_child: needs kvm (required by EBB_REQUIRE=root,kvm)"),
            "{required:?}"
        );
        let tool = child("dnsmasq", "");
        assert!(tool.status.success(), "{tool:?}");
        let tool_required = child("dnsmasq", "tools");
        assert!(!tool_required.status.success(), "{tool_required:?}");
        let recorded = std::fs::read_to_string(&log).expect("the skip log");
        assert_eq!(
            recorded, "the_child\tkvm\tit is missing\nthe_child\ttool:dnsmasq\tit is missing\n",
            "two skips recorded, the required ones not"
        );
        let _ = std::fs::remove_file(&log);
    }

    #[test]
    fn a_run_keeps_code_and_output() {
        let run = Run::of(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]));
        assert_eq!(
            (run.code, run.stdout.as_str(), run.stderr.as_str()),
            (3, "out\n", "err\n")
        );
        assert_eq!(
            format!("{run:?}"),
            "exit code 3\n--- stdout\nout\n--- stderr\nerr\n"
        );
    }

    #[test]
    fn need_tools_passes_when_all_are_there() {
        assert_eq!(need_tools("t", &["sh"]), Some(()));
    }
}
