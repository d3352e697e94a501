//! Building an app with cargo, hosted or native, and finding the executable it produced.
//!
//! `cargo build --release -p APP [--target x86_64-unknown-none]` runs from the workspace
//! root, so the root `.cargo/config.toml` (the native target's linker script and flags)
//! applies. The executable's path comes from cargo's own JSON artifact messages rather
//! than from guessing the target directory, so `--target-dir`, `CARGO_TARGET_DIR` and
//! `build.target-dir` all work. Cargo's human-readable diagnostics are passed through to
//! our stderr as they come and kept, so a failure can be explained (a missing target).

use crate::error::{CliError, NATIVE_TARGET};
use crate::workspace::Workspace;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Which runtime an app is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// A Linux executable on the hosted runtime.
    Hosted,
    /// An `x86_64-unknown-none` image for ebb-vmm.
    Native,
}

impl Flavour {
    /// "hosted" or "native".
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Hosted => "hosted",
            Flavour::Native => "native",
        }
    }
}

/// How to invoke cargo.
#[derive(Clone, Debug)]
pub struct Cargo {
    /// The cargo executable: `$CARGO` when set (as under `cargo run` and `cargo test`),
    /// else `cargo` from `PATH`.
    pub program: String,
    /// `--target-dir` for cargo, when given (otherwise cargo honours `CARGO_TARGET_DIR`).
    pub target_dir: Option<PathBuf>,
}

impl Cargo {
    /// Cargo as found in the environment, with an optional target directory.
    pub fn from_env(target_dir: Option<PathBuf>) -> Cargo {
        Cargo {
            program: std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()),
            target_dir,
        }
    }

    /// Builds `app` (already known to be one of the workspace's apps) in release mode and
    /// returns its executable.
    pub fn build(&self, ws: &Workspace, app: &str, flavour: Flavour) -> Result<PathBuf, CliError> {
        if flavour == Flavour::Native {
            // A toolchain installed before the repository's toolchain file named the
            // target lacks it: add it now rather than fail the build (one line says so).
            ebb_toolchain::ensure_native_target(&ws.root, "ebb: ")?;
        }
        let mut cmd = Command::new(&self.program);
        cmd.current_dir(&ws.root)
            .args([
                "build",
                "--release",
                "--message-format=json-render-diagnostics",
            ])
            .arg("--manifest-path")
            .arg(ws.manifest())
            .args(["-p", app]);
        if flavour == Flavour::Native {
            cmd.args(["--target", NATIVE_TARGET]);
        }
        if let Some(dir) = &self.target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        let spawn_error = |source| CliError::CargoSpawn {
            cargo: self.program.clone(),
            source,
        };
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_error)?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(spawn_error(std::io::Error::other("no pipes to cargo")));
        };
        // Diagnostics go to the user as they come (a build can take minutes) and are kept.
        let diagnostics = std::thread::spawn(move || {
            let mut kept = String::new();
            let mut ours = std::io::stderr();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(ours, "{line}");
                kept.push_str(&line);
                kept.push('\n');
            }
            kept
        });
        let mut executable = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(path) = artifact_executable(&line, app) {
                executable = Some(path);
            }
        }
        let status = child.wait().map_err(spawn_error)?;
        let diagnostics = diagnostics.join().unwrap_or_default();
        if !status.success() {
            if flavour == Flavour::Native
                && native_target_missing(&diagnostics, installed_targets(&ws.root).as_deref())
            {
                return Err(CliError::TargetNotInstalled);
            }
            return Err(CliError::BuildFailed {
                app: app.to_string(),
                flavour: flavour.name(),
                status,
            });
        }
        executable.ok_or_else(|| CliError::NoExecutable {
            app: app.to_string(),
            flavour: flavour.name(),
        })
    }
}

/// The executable in one line of cargo's JSON output, if the line reports building a
/// binary target named `app`.
fn artifact_executable(line: &str, app: &str) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let target = message.get("target")?;
    let is_bin = target
        .get("kind")?
        .as_array()?
        .iter()
        .any(|kind| kind.as_str() == Some("bin"));
    if !is_bin || target.get("name")?.as_str()? != app {
        return None;
    }
    message
        .get("executable")?
        .as_str()
        .map(|p| Path::new(p).to_path_buf())
}

/// `rustup target list --installed` for the toolchain `root` uses (its
/// `rust-toolchain.toml`), when rustup is there to ask.
fn installed_targets(root: &Path) -> Option<String> {
    let out = Command::new("rustup")
        .current_dir(root)
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a failed native build failed because the target is not installed: rustc says
/// so in its diagnostics ("the `x86_64-unknown-none` target may not be installed"), or
/// rustup's list of installed targets lacks it.
pub fn native_target_missing(diagnostics: &str, installed: Option<&str>) -> bool {
    let rustc_says_so = diagnostics.contains("target may not be installed")
        || (diagnostics.contains("can't find crate for `core`")
            && diagnostics.contains(NATIVE_TARGET));
    let rustup_says_so =
        installed.is_some_and(|list| !list.lines().any(|l| l.trim() == NATIVE_TARGET));
    rustc_says_so || rustup_says_so
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_app_executable_in_cargo_json() {
        let bin = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/apps/hello#0.1.0","target":{"kind":["bin"],"crate_types":["bin"],"name":"hello","src_path":"/w/apps/hello/src/main.rs"},"executable":"/t/release/hello","fresh":true}"#;
        let lib = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"ebb"},"executable":null}"#;
        let other = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"other"},"executable":"/t/release/other"}"#;
        assert_eq!(
            artifact_executable(bin, "hello"),
            Some(PathBuf::from("/t/release/hello"))
        );
        assert_eq!(artifact_executable(lib, "ebb"), None);
        assert_eq!(artifact_executable(other, "hello"), None);
        assert_eq!(artifact_executable("not json", "hello"), None);
        assert_eq!(
            artifact_executable(r#"{"reason":"build-finished","success":true}"#, "hello"),
            None
        );
    }

    /// What rustc prints when the target's standard library is missing.
    const RUSTC_NO_TARGET: &str = "error[E0463]: can't find crate for `core`\n  |\n  = note: the `x86_64-unknown-none` target may not be installed\n  = help: consider downloading the target with `rustup target add x86_64-unknown-none`\n";

    #[test]
    fn diagnoses_a_missing_native_target() {
        assert!(native_target_missing(RUSTC_NO_TARGET, None));
        assert!(native_target_missing(
            "error: could not compile `hello`",
            Some("x86_64-unknown-linux-gnu\n")
        ));
        assert!(!native_target_missing(
            "error[E0425]: cannot find value `x`",
            Some("x86_64-unknown-linux-gnu\nx86_64-unknown-none\n")
        ));
        assert!(!native_target_missing("error: could not compile", None));
        let message = CliError::TargetNotInstalled.to_string();
        assert!(
            message.contains("rustup target add x86_64-unknown-none"),
            "{message}"
        );
    }
}
