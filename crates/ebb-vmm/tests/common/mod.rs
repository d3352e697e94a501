//! Shared by the boot tests: building the test guests once, the KVM and QEMU checks (a
//! skip, or a failure where `EBB_REQUIRE` names kvm), and running the monitor on a guest.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds the guest images once; the directory holding them.
pub fn guests() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../guests");
        ebb_testkit::guests::build(&repo_root(), &target_dir, &[], "ebb-vmm tests: ")
    })
}

/// Builds the native image of `app` (a package under `apps/`) once, as `ebb build
/// --native` would; its path.
pub fn app_image(app: &str) -> PathBuf {
    static DIRS: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(name, _)| name == app) {
        return path.clone();
    }
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../apps");
    let path = ebb_testkit::guests::app_image(&repo_root(), &target_dir, app, "ebb-vmm tests: ");
    built.push((app.to_string(), path.clone()));
    path
}

/// `Some(())` when QEMU is installed; otherwise skips `test`. An installed QEMU whose
/// `--version` fails is broken, not missing: the test fails.
pub fn qemu(test: &str) -> Option<()> {
    match Command::new("qemu-system-x86_64")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Some(()),
        Ok(s) => panic!("{test}: qemu-system-x86_64 --version failed ({s})"),
        Err(e) => ebb_testkit::skip(
            test,
            ebb_testkit::Capability::Qemu,
            &format!("qemu-system-x86_64 not installed ({e})"),
        ),
    }
}

/// `Some(())` when KVM works; otherwise skips `test` (see `ebb_testkit::skip`).
pub fn kvm(test: &str) -> Option<()> {
    match ebb_vmm::kvm_usable() {
        Ok(()) => Some(()),
        Err(e) => ebb_testkit::skip(
            test,
            ebb_testkit::Capability::Kvm,
            &format!("/dev/kvm unusable: {e}"),
        ),
    }
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `ebb-vmm <guest> <args...>`; every run has a timeout so no test can hang.
pub fn boot(guest: &str, args: &[&str]) -> Run {
    let start = Instant::now();
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(env!("CARGO_BIN_EXE_ebb-vmm"))
        .arg(guests().join(guest))
        .args(["--timeout", "30"])
        .args(args)
        .output()
        .expect("run ebb-vmm");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}
