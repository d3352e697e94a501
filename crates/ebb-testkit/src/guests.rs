//! The native test images of `tests/guests` (small guests that print, exit with a code,
//! panic, fault, ...), built for the tests that boot them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the test guests (`bins`, or all of them when empty) from the workspace at
/// `repo_root` into `target_dir`, adding the native target to the toolchain first if it
/// lacks it (as `ebb` would; `who` prefixes the one line saying so); the directory
/// holding the images.
///
/// # Panics
///
/// If the target cannot be added or the build fails (with cargo's output): a test that
/// needs the guests cannot go on without them.
pub fn build(repo_root: &Path, target_dir: &Path, bins: &[&str], who: &str) -> PathBuf {
    if let Err(e) = ebb_toolchain::ensure_native_target(repo_root, who) {
        panic!("the test guests cannot be built: {e}");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root) // for .cargo/config.toml's target rustflags
        .args(["build", "--release", "--target", "x86_64-unknown-none"]);
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    cmd.arg("--manifest-path")
        .arg(repo_root.join("tests/guests/Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    let out = crate::for_nested_cargo(&mut cmd)
        .output()
        .expect("run cargo to build the test guests");
    assert!(
        out.status.success(),
        "building tests/guests failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir.join("x86_64-unknown-none/release")
}

/// Builds the workspace app `app` (a package under `apps/`) as a native image, release,
/// into `target_dir`, adding the native target first if the toolchain lacks it (`who`
/// prefixes the line saying so), as `ebb build APP --native` would; the image's path.
///
/// # Panics
///
/// If the target cannot be added or the build fails (with cargo's output).
pub fn app_image(repo_root: &Path, target_dir: &Path, app: &str, who: &str) -> PathBuf {
    if let Err(e) = ebb_toolchain::ensure_native_target(repo_root, who) {
        panic!("apps/{app} cannot be built natively: {e}");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root) // for .cargo/config.toml's target rustflags
        .args([
            "build",
            "--release",
            "--target",
            "x86_64-unknown-none",
            "-p",
            app,
        ])
        .arg("--target-dir")
        .arg(target_dir);
    let out = crate::for_nested_cargo(&mut cmd)
        .output()
        .expect("run cargo to build an app");
    assert!(
        out.status.success(),
        "building apps/{app} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir.join("x86_64-unknown-none/release").join(app)
}
