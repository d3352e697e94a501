//! `ebb build --native` on a toolchain that lacks the native target: the first thing a new
//! user with an older rustup-installed toolchain meets.
//!
//! The machine's own toolchain is left alone. Each test builds a stand-in toolchain under
//! `CARGO_TARGET_TMPDIR`: a sysroot that links every directory of the real one except
//! `lib/rustlib/x86_64-unknown-none`, a `rustc` script that runs the real compiler with
//! `--sysroot` pointing there (handed to cargo and `ebb` as `$RUSTC`, as a user might), and
//! a `rustup` script first on `PATH` that logs its arguments and either "installs" the
//! target (links the real one in), fails like an offline rustup, or is absent.

use ebb_testkit::{Run, for_nested_cargo};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = ebb_toolchain::NATIVE_TARGET;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a fake `rustup target add` does.
#[derive(Clone, Copy)]
enum FakeRustup {
    /// Links the real target into the stand-in sysroot and succeeds.
    Installs,
    /// Prints an error and exits 1, like rustup without a network.
    Fails,
    /// There is no rustup on `PATH` at all.
    Absent,
}

/// A stand-in toolchain without the native target.
struct StandIn {
    dir: PathBuf,
    sysroot: PathBuf,
    rustc: PathBuf,
    bin: PathBuf,
    rustup_log: PathBuf,
}

fn write_script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).expect("write a script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn stand_in(name: &str, rustup: FakeRustup) -> StandIn {
    // The real toolchain must have the target so the fake rustup can link it in (one test
    // at a time: two `rustup target add` at once would race).
    static REAL_TARGET: std::sync::Mutex<()> = std::sync::Mutex::new(());
    {
        let _one = REAL_TARGET.lock().unwrap_or_else(|p| p.into_inner());
        ebb_toolchain::ensure_native_target(&repo_root(), "cli toolchain test: ")
            .expect("the real toolchain gets the native target");
    }
    let real = ebb_toolchain::Toolchain::for_dir(&repo_root()).expect("the real toolchain");
    let real_sysroot = real.sysroot().to_path_buf();

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stand-in-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let sysroot = dir.join("sysroot");
    let rustlib = sysroot.join("lib/rustlib");
    std::fs::create_dir_all(&rustlib).expect("create the stand-in sysroot");
    for entry in std::fs::read_dir(real_sysroot.join("lib/rustlib")).expect("read rustlib") {
        let entry = entry.expect("a rustlib entry");
        if entry.file_name() != TARGET {
            symlink(entry.path(), rustlib.join(entry.file_name())).expect("link a rustlib entry");
        }
    }
    let rustc = dir.join("rustc");
    write_script(
        &rustc,
        &format!(
            "exec '{}' --sysroot '{}' \"$@\"\n",
            real_sysroot.join("bin/rustc").display(),
            sysroot.display()
        ),
    );
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create the stand-in bin directory");
    let rustup_log = dir.join("rustup.log");
    let install = format!(
        "ln -s '{}' '{}'\nexit 0\n",
        real_sysroot.join("lib/rustlib").join(TARGET).display(),
        rustlib.join(TARGET).display()
    );
    let on_target_add = match rustup {
        FakeRustup::Installs => Some(install.as_str()),
        FakeRustup::Fails => {
            Some("echo 'error: could not download file (no network)' >&2\nexit 1\n")
        }
        FakeRustup::Absent => None,
    };
    if let Some(action) = on_target_add {
        write_script(
            &bin.join("rustup"),
            &format!(
                "echo \"$@\" >> '{}'\n\
                 if [ \"$1 $2 $3\" = 'target add {TARGET}' ]; then\n{action}fi\n\
                 echo \"fake rustup: unexpected arguments: $*\" >&2\nexit 2\n",
                rustup_log.display()
            ),
        );
    }
    StandIn {
        dir,
        sysroot,
        rustc,
        bin,
        rustup_log,
    }
}

/// `ebb build --native hello` with the stand-in toolchain; `keep_path` keeps the system's
/// `PATH` after the fake rustup (cargo needs `cc` to link build scripts).
fn build_hello(toolchain: &StandIn, keep_path: bool) -> Run {
    let path = if keep_path {
        let system = std::env::var("PATH").unwrap_or_default();
        format!("{}:{system}", toolchain.bin.display())
    } else {
        toolchain.bin.display().to_string()
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebb"));
    cmd.current_dir(repo_root())
        .arg("--target-dir")
        .arg(toolchain.dir.join("target"))
        .args(["build", "--native", "hello"])
        .env("PATH", path)
        .env("RUSTC", &toolchain.rustc);
    Run::of(for_nested_cargo(&mut cmd))
}

fn rustup_calls(toolchain: &StandIn) -> String {
    std::fs::read_to_string(&toolchain.rustup_log).unwrap_or_default()
}

#[test]
fn a_missing_native_target_is_added_and_the_build_goes_on() {
    let toolchain = stand_in("installs", FakeRustup::Installs);
    let run = build_hello(&toolchain, true);
    assert_eq!(run.code, 0, "{run:?}");
    let note = format!(
        "ebb: the {TARGET} target is missing from the Rust toolchain at {}; adding it with \
         `rustup target add {TARGET}`",
        toolchain.sysroot.display()
    );
    assert_eq!(
        run.stderr.matches(&note).count(),
        1,
        "one line says what is added: {run:?}"
    );
    assert_eq!(rustup_calls(&toolchain), format!("target add {TARGET}\n"));
    let image = PathBuf::from(run.stdout.trim());
    let bytes = std::fs::read(&image).expect("the image ebb printed exists");
    assert_eq!(
        &bytes[..4],
        b"\x7fELF",
        "{} is an ELF image",
        image.display()
    );
    assert!(
        image.to_string_lossy().contains(TARGET),
        "{} is the native image",
        image.display()
    );

    // Now present: a second build neither says nor installs anything.
    let again = build_hello(&toolchain, true);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(!again.stderr.contains("is missing"), "{again:?}");
    assert_eq!(rustup_calls(&toolchain), format!("target add {TARGET}\n"));
}

#[test]
fn a_failing_rustup_is_a_clear_error() {
    let toolchain = stand_in("fails", FakeRustup::Fails);
    let run = build_hello(&toolchain, true);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "ebb: error: the {TARGET} target is not installed and `rustup target add {TARGET}` \
             failed (exit status: 1): error: could not download file (no network) (or use \
             --hosted)"
        )),
        "{run:?}"
    );
    assert_eq!(rustup_calls(&toolchain), format!("target add {TARGET}\n"));
    assert!(run.stdout.is_empty(), "nothing built: {run:?}");
}

#[test]
fn without_rustup_the_error_says_what_is_missing() {
    let toolchain = stand_in("absent", FakeRustup::Absent);
    let run = build_hello(&toolchain, false);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "ebb: error: the {TARGET} target is not installed in the Rust toolchain at {} and \
             rustup is not available to add it",
            toolchain.sysroot.display()
        )),
        "{run:?}"
    );
    assert!(run.stdout.is_empty(), "nothing built: {run:?}");
}
