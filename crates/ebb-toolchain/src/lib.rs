//! # ebb-toolchain — the Rust toolchain that builds native images
//!
//! Native Ebbflow images are built for `x86_64-unknown-none`. The repository's
//! `rust-toolchain.toml` names that target, but rustup installs a toolchain file's targets
//! only when it installs the toolchain itself: on a machine that already had the pinned
//! toolchain, the target is missing and every native build fails with "can't find crate
//! for `core`". Everything in the repository that builds a native image (the `ebb`
//! command, the tests that boot guests) first calls [`ensure_target`], which looks at the
//! toolchain cargo is about to use and, when the target's standard library is not there,
//! adds it with `rustup target add` — saying so in one line — or explains exactly what is
//! missing when it cannot.
//!
//! ## Invariants
//!
//! * The toolchain examined is the one cargo would use in the same directory: `$RUSTC` if
//!   set, else `rustc`, run in the workspace root (so rustup honours its
//!   `rust-toolchain.toml` and `RUSTUP_TOOLCHAIN`).
//! * A target counts as installed when its standard library is in the sysroot
//!   (`<sysroot>/lib/rustlib/<target>/lib` holds a `libcore-*.rlib`), the same place rustc
//!   looks; nothing is inferred from rustup's bookkeeping.
//! * After `rustup target add` succeeds the sysroot is looked at again: a rustup that
//!   installed into another toolchain (a `$RUSTC` that rustup does not manage) is an error,
//!   not a silent success.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every native image is built for.
pub const NATIVE_TARGET: &str = "x86_64-unknown-none";

/// What [`ensure_target`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetStatus {
    /// The target was already installed.
    Present,
    /// The target was missing and `rustup target add` installed it.
    Installed,
}

/// Why the toolchain cannot build for the target.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// The compiler could not be started.
    #[error("cannot run {rustc:?} to find the Rust toolchain: {source}")]
    RustcSpawn {
        /// The compiler executable.
        rustc: OsString,
        /// The error.
        source: std::io::Error,
    },
    /// `rustc --print sysroot` failed or printed nothing usable.
    #[error("`{rustc:?} --print sysroot` failed: {stderr}")]
    NoSysroot {
        /// The compiler executable.
        rustc: OsString,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The target is missing and there is no rustup to add it.
    #[error(
        "the {target} target is not installed in the Rust toolchain at {} and rustup is not \
         available to add it ({source}): install the target's standard library for that \
         toolchain, or use a rustup-managed toolchain",
        sysroot.display()
    )]
    NoRustup {
        /// The target.
        target: String,
        /// The toolchain's sysroot.
        sysroot: PathBuf,
        /// Why rustup could not be run.
        source: std::io::Error,
    },
    /// `rustup target add` ran and failed.
    #[error(
        "the {target} target is not installed and `rustup target add {target}` failed \
         ({status}): {stderr}"
    )]
    RustupFailed {
        /// The target.
        target: String,
        /// rustup's exit status.
        status: std::process::ExitStatus,
        /// What rustup printed on stderr.
        stderr: String,
    },
    /// rustup said it installed the target, but the toolchain still lacks it.
    #[error(
        "`rustup target add {target}` succeeded but the toolchain at {} still lacks the \
         target (is $RUSTC a toolchain rustup does not manage?)",
        sysroot.display()
    )]
    StillMissing {
        /// The target.
        target: String,
        /// The toolchain's sysroot.
        sysroot: PathBuf,
    },
}

/// The toolchain cargo would use when run in `workdir`.
#[derive(Clone, Debug)]
pub struct Toolchain {
    rustc: OsString,
    sysroot: PathBuf,
    workdir: PathBuf,
}

impl Toolchain {
    /// Finds the toolchain for `workdir`: `$RUSTC` (as cargo honours it) or `rustc`, asked
    /// for its sysroot from `workdir`.
    pub fn for_dir(workdir: &Path) -> Result<Toolchain, ToolchainError> {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let out = Command::new(&rustc)
            .current_dir(workdir)
            .args(["--print", "sysroot"])
            .output()
            .map_err(|source| ToolchainError::RustcSpawn {
                rustc: rustc.clone(),
                source,
            })?;
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || printed.is_empty() {
            return Err(ToolchainError::NoSysroot {
                rustc,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(Toolchain {
            rustc,
            sysroot: PathBuf::from(printed),
            workdir: workdir.to_path_buf(),
        })
    }

    /// The toolchain's sysroot.
    pub fn sysroot(&self) -> &Path {
        &self.sysroot
    }

    /// Whether `target`'s standard library is installed.
    pub fn has_target(&self, target: &str) -> bool {
        has_core_library(&self.sysroot.join("lib/rustlib").join(target).join("lib"))
    }

    /// Makes sure `target` is installed: adds it with `rustup target add` (run in the
    /// workdir, so rustup picks the same toolchain) when it is missing, after calling
    /// `note` with one line saying so.
    pub fn ensure_target(
        &self,
        target: &str,
        note: impl FnOnce(&str),
    ) -> Result<TargetStatus, ToolchainError> {
        if self.has_target(target) {
            return Ok(TargetStatus::Present);
        }
        note(&format!(
            "the {target} target is missing from the Rust toolchain at {}; adding it with \
             `rustup target add {target}`",
            self.sysroot.display()
        ));
        let out = Command::new("rustup")
            .current_dir(&self.workdir)
            .args(["target", "add", target])
            .output()
            .map_err(|source| ToolchainError::NoRustup {
                target: target.to_string(),
                sysroot: self.sysroot.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ToolchainError::RustupFailed {
                target: target.to_string(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        if !self.has_target(target) {
            return Err(ToolchainError::StillMissing {
                target: target.to_string(),
                sysroot: self.sysroot.clone(),
            });
        }
        Ok(TargetStatus::Installed)
    }

    /// The compiler this toolchain was found through.
    pub fn rustc(&self) -> &OsString {
        &self.rustc
    }
}

/// [`Toolchain::for_dir`] then [`Toolchain::ensure_target`] for [`NATIVE_TARGET`], the
/// note printed on stderr after `prefix` (e.g. `"ebb: "`).
pub fn ensure_native_target(workdir: &Path, prefix: &str) -> Result<TargetStatus, ToolchainError> {
    Toolchain::for_dir(workdir)?.ensure_target(NATIVE_TARGET, |line| eprintln!("{prefix}{line}"))
}

/// Whether `dir` holds a `libcore-*.rlib` (a target's standard library).
fn has_core_library(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libcore-") && name.ends_with(".rlib")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ebb-toolchain-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        dir
    }

    #[test]
    fn a_target_is_installed_when_its_core_library_is_there() {
        let sysroot = scratch("sysroot");
        let toolchain = Toolchain {
            rustc: "rustc".into(),
            sysroot: sysroot.clone(),
            workdir: sysroot.clone(),
        };
        assert!(!toolchain.has_target(NATIVE_TARGET));
        let lib = sysroot.join("lib/rustlib").join(NATIVE_TARGET).join("lib");
        std::fs::create_dir_all(&lib).expect("create the target's lib directory");
        assert!(
            !toolchain.has_target(NATIVE_TARGET),
            "an empty lib/ is not a target"
        );
        std::fs::write(lib.join("liballoc-0123.rlib"), b"").expect("write");
        assert!(
            !toolchain.has_target(NATIVE_TARGET),
            "alloc alone is not a target"
        );
        std::fs::write(lib.join("libcore-0123.rlib"), b"").expect("write");
        assert!(toolchain.has_target(NATIVE_TARGET));
        let _ = std::fs::remove_dir_all(&sysroot);
    }

    #[test]
    fn the_running_toolchain_has_its_host_target() {
        let toolchain = Toolchain::for_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .expect("the toolchain building this test is found");
        let host = std::env::consts::ARCH.to_string() + "-unknown-linux-gnu";
        assert!(
            toolchain.has_target(&host),
            "{host} in {}",
            toolchain.sysroot().display()
        );
    }
}
