//! Shared by the `ebb` command's tests: the `ebb` binary set up to build the apps into a
//! target directory of their own, building an app once, and the KVM check.

#![allow(dead_code)] // each test file uses its own subset

use ebb_testkit::{Run, for_nested_cargo};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn apps_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("../ebb-apps")
}

/// `ebb` with the test's cargo variables removed and the apps' target directory.
pub fn ebb() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebb"));
    cmd.arg("--target-dir").arg(apps_target_dir());
    for_nested_cargo(&mut cmd);
    cmd
}

/// `ebb build FLAVOUR APP` (`--native` or `--hosted`); the executable's path.
pub fn build(app: &str, flavour: &str) -> PathBuf {
    let run = Run::of(ebb().args(["build", flavour, app]));
    assert_eq!(run.code, 0, "ebb build {flavour} {app}: {run:?}");
    let path = PathBuf::from(run.stdout.trim());
    assert!(path.is_file(), "ebb build printed {path:?}: {run:?}");
    path
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
