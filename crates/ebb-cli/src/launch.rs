//! Running an app or image: choosing native or hosted, then booting the image in this
//! process through the ebb-vmm library, or starting the hosted executable.
//!
//! The choice: `--hosted` runs hosted; `--native` runs natively or fails with
//! [`CliError::KvmUnusable`]; with neither, an app runs natively when
//! [`ebb_vmm::kvm_usable`] says KVM works and hosted otherwise, and an image file (which
//! can only run natively) is booted directly. Exactly one line on stderr says which and
//! why before the app starts. `ebb` then exits with the app's code: the guest's exit code
//! natively (or the monitor's code for a panic, fault or timeout, with its report on
//! stderr), the process's hosted (128 + the signal if it was killed, 124 if `--timeout`
//! expired).

use crate::cargo::{Cargo, Flavour};
use crate::error::CliError;
use crate::workspace::Workspace;
use ebb_vmm::image::Symbolizer;
use ebb_vmm::{Outcome, Vm, VmConfig, VmError};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Exit code when a hosted app outlives `--timeout` (the same as the monitor's).
pub const EXIT_TIMEOUT: i32 = 124;

/// Which runtime the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requested {
    /// Native if KVM is usable, else hosted.
    Auto,
    /// Native or fail.
    Native,
    /// Hosted.
    Hosted,
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Cores: vCPUs natively, `EBB_CPUS` hosted.
    pub cpus: u32,
    /// Guest memory in bytes (native only).
    pub mem: u64,
    /// End the app after this long.
    pub timeout: Option<Duration>,
    /// The app's arguments (natively: its command line, joined with spaces).
    pub args: Vec<String>,
}

/// Runs `app` — an existing file (an image, or with `--hosted` a Linux executable) or an
/// app of the workspace, built first — and returns its exit code. `workspace` is called
/// only when an app must be built.
pub fn run(
    app: &str,
    requested: Requested,
    options: &RunOptions,
    workspace: impl FnOnce() -> Result<Workspace, CliError>,
    cargo: &Cargo,
) -> Result<i32, CliError> {
    let as_file = Path::new(app);
    if as_file.is_file() {
        let name = as_file
            .file_name()
            .map_or_else(|| app.to_string(), |n| n.to_string_lossy().into_owned());
        return match requested {
            Requested::Hosted => {
                eprintln!(
                    "ebb: running {name} hosted ({}; --hosted)",
                    cores(options.cpus)
                );
                run_hosted(as_file, &name, options)
            }
            Requested::Native => boot(as_file, &name, options, "--native"),
            Requested::Auto => boot(as_file, &name, options, "an image file"),
        };
    }
    let ws = workspace()?;
    ws.require_app(app)?;
    let (flavour, why) = match requested {
        Requested::Hosted => (Flavour::Hosted, "--hosted".to_string()),
        Requested::Native => {
            ebb_vmm::kvm_usable().map_err(|e| CliError::kvm_unusable(&e))?;
            (Flavour::Native, "--native".to_string())
        }
        Requested::Auto => match ebb_vmm::kvm_usable() {
            Ok(()) => (Flavour::Native, "/dev/kvm is usable".to_string()),
            Err(e) => (Flavour::Hosted, format!("/dev/kvm unusable ({e})")),
        },
    };
    let executable = cargo.build(&ws, app, flavour)?;
    match flavour {
        Flavour::Native => boot(&executable, app, options, &why),
        Flavour::Hosted => {
            if requested == Requested::Auto {
                eprintln!("ebb: {why}: running {app} hosted ({})", cores(options.cpus));
            } else {
                eprintln!("ebb: running {app} hosted ({}; {why})", cores(options.cpus));
            }
            run_hosted(&executable, app, options)
        }
    }
}

fn cores(n: u32) -> String {
    if n == 1 {
        "1 core".to_string()
    } else {
        format!("{n} cores")
    }
}

/// Boots `image` in this process and ends the process with the monitor's exit code for the
/// outcome; errors before the guest runs are returned.
fn boot(image: &Path, name: &str, options: &RunOptions, why: &str) -> Result<i32, CliError> {
    let image_error = |source: VmError| CliError::image(image, source);
    let bytes = ebb_vmm::image::read(image).map_err(|e| image_error(e.into()))?;
    let config = VmConfig {
        mem_size: options.mem,
        cpus: options.cpus,
        cmdline: options.args.join(" "),
        timeout: options.timeout,
        pin: false,
        net: None,
        kvm_fd: None,
    };
    // `Vm::new` validates the image before it opens /dev/kvm, so a bad image is reported
    // as such even where KVM is unusable.
    let vm = Vm::new(&bytes, config, Box::new(std::io::stdout())).map_err(|e| match e {
        VmError::OpenKvm(_) | VmError::CreateVm(_) => CliError::kvm_unusable(&e),
        e => image_error(e),
    })?;
    let vcpus = if options.cpus == 1 { "vCPU" } else { "vCPUs" };
    eprintln!(
        "ebb: running {name} natively ({} {vcpus}, {} MiB; {why})",
        options.cpus,
        options.mem >> 20
    );
    let (outcome, remains) = vm.run_keeping_vm().map_err(image_error)?;
    let _ = std::io::stdout().flush();
    let code = outcome.exit_code();
    if code != 0 || !matches!(outcome, Outcome::Exited { .. }) {
        eprint!("{}", outcome.report(&Symbolizer::new(&bytes)));
    }
    // The guest is done and its output is out: end the process here rather than wait
    // ≈ 10 ms for KVM to destroy the VM (ebb-vmm's binary does the same).
    remains.exit_process(code as u8)
}

/// Runs a hosted executable with `EBB_CPUS` and the arguments; returns its exit code.
fn run_hosted(executable: &Path, name: &str, options: &RunOptions) -> Result<i32, CliError> {
    let spawn_error = |source| CliError::HostedSpawn {
        path: executable.to_path_buf(),
        source,
    };
    let mut child = Command::new(executable)
        .args(&options.args)
        .env("EBB_CPUS", options.cpus.to_string())
        .spawn()
        .map_err(spawn_error)?;
    let status = match options.timeout {
        None => child.wait().map_err(spawn_error)?,
        Some(limit) => {
            let deadline = Instant::now() + limit;
            loop {
                if let Some(status) = child.try_wait().map_err(spawn_error)? {
                    break status;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    eprintln!("ebb: {name} timed out after {limit:?} and was killed");
                    return Ok(EXIT_TIMEOUT);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Builds `app` and returns its executable (for `ebb build`).
pub fn build(
    ws: &Workspace,
    app: &str,
    flavour: Flavour,
    cargo: &Cargo,
) -> Result<PathBuf, CliError> {
    ws.require_app(app)?;
    cargo.build(ws, app, flavour)
}
