//! # ebb-cli — the `ebb` command
//!
//! Builds Ebbflow apps for either runtime and runs them, natively under KVM when it can:
//!
//! ```text
//! ebb build [--native|--hosted] APP          # prints the executable's path; default native
//! ebb run APP|IMAGE [--cpus N] [--mem SIZE] [--timeout S] [--native|--hosted]
//!         [--net user|passt|tap=NAME|xdp=IFACE|none] [-p [ADDR:]HOST:GUEST]... [--net-faults SPEC] [-- ARGS]
//! ```
//!
//! A network app (`[package.metadata.ebb] network = true` in its manifest) gets `--net
//! user` by default — rootless user-mode networking with the host ports its manifest
//! publishes forwarded to it, terminated in the monitor by `ebb-usernet` (host sockets
//! spliced to the guest's TCP through an ebb-net endpoint), passt behind them for
//! everything else (outbound connections); `--net passt` sends everything, forwards
//! included, through passt (the older, slower path, kept for comparison); `-p` replaces
//! the forwards, `--net tap=NAME` (root) puts
//! it on a TAP device instead, `--net xdp=IFACE` (root) on an existing interface through
//! AF_XDP, `--net none` runs it without a network.
//!
//! * [`workspace`] finds the workspace (from the current directory upwards, or
//!   `--manifest-path`) and its apps (the packages under `apps/`);
//! * [`cargo`] runs `cargo build --release -p APP` (plus `--target x86_64-unknown-none`
//!   for native) from the workspace root and reads the executable's path from cargo's
//!   JSON messages; before a native build it adds the native target to the toolchain
//!   when it is missing ([`ebb_toolchain`], one stderr line says so);
//! * [`launch`] picks the runtime (one stderr line says which and why), boots images in
//!   this process through the `ebb-vmm` library, or starts the hosted executable with
//!   `EBB_CPUS` set;
//! * [`error`] is every failure as a value, with the message the user sees.
//!
//! ## Invariants
//!
//! * `ebb run` exits with the app's exit code; its own failures print `ebb: error: ...`
//!   and exit with [`EXIT_CLI_ERROR`] (clap's usage errors exit with 2).
//! * Nothing is built when `APP` names an existing file: the file is run as it is (what a
//!   boot benchmark times).
//! * No `unsafe`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cargo;
pub mod error;
pub mod launch;
pub mod workspace;

pub use error::CliError;

use crate::cargo::{Cargo, Flavour};
use crate::launch::{NetRequest, Requested, RunOptions};
use crate::workspace::Workspace;
use clap::{Args, Parser, Subcommand};
use ebb_vmm::option_values::{parse_seconds, parse_size};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit code of `ebb` when it fails itself (as ebb-vmm's for its own errors).
pub const EXIT_CLI_ERROR: i32 = 1;

/// Build and run Ebbflow apps, hosted or native.
#[derive(Parser, Debug)]
#[command(name = "ebb", version)]
pub struct Cli {
    /// The workspace's Cargo.toml (default: found from the current directory upwards).
    #[arg(long, global = true, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    /// Cargo's target directory (default: $CARGO_TARGET_DIR, else cargo's own).
    #[arg(long, global = true, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `ebb`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build an app (default: a native image) and print the executable's path.
    Build {
        /// The app: a package under apps/.
        app: String,
        /// Which runtime to build for.
        #[command(flatten)]
        runtime: RuntimeFlags,
    },
    /// Build an app if needed and run it: natively when /dev/kvm is usable, else hosted.
    Run {
        /// A package under apps/, or the path of an image to boot as it is.
        app: String,
        /// Cores: vCPUs natively, EBB_CPUS hosted (default: the count the app's own flag
        /// gives, for an app whose manifest names it (memcached's -t), else this machine's
        /// CPU count — natively with a network, one fewer: the network device's thread
        /// needs a CPU of its own).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=255))]
        cpus: Option<u32>,
        /// Guest memory, native only: bytes or with a K, M or G suffix (a multiple of 2M)
        /// (default: 128M, and 32M more for each vCPU past two).
        #[arg(long, value_parser = parse_size)]
        mem: Option<u64>,
        /// End the app after this many seconds (fractions allowed).
        #[arg(long, value_parser = parse_seconds)]
        timeout: Option<Duration>,
        /// Which runtime to run on (default: native if /dev/kvm is usable, else hosted).
        #[command(flatten)]
        runtime: RuntimeFlags,
        /// The network, native: `user` (no root; the default for network apps: forwards
        /// terminated in the monitor, passt for the rest), `passt` (everything through
        /// passt, forwards included), `tap=NAME` (a TAP device, one queue per vCPU; root),
        /// `xdp=IFACE` (an existing interface of one queue through AF_XDP; root) or `none`.
        #[arg(long, value_name = "user|passt|tap=NAME|xdp=IFACE|none")]
        net: Option<String>,
        /// With --net user or passt: forward host TCP port HOST (on ADDR, default 127.0.0.1) to the
        /// app's port GUEST. Repeatable; replaces the app's default forwards. Hosted, the
        /// app listens on ADDR:HOST itself (one forward at most).
        #[arg(short = 'p', long = "publish", value_name = "[ADDR:]HOST:GUEST")]
        publish: Vec<ebb_vmm::virtio::PortForward>,
        /// Native: seeded faults between the guest and the network,
        /// `drop=P,reorder=P,duplicate=P,corrupt=P,seed=N`.
        #[arg(long, value_name = "SPEC")]
        net_faults: Option<String>,
        /// Natively, use this inherited descriptor of an open /dev/kvm instead of opening
        /// it: a launcher that may open /dev/kvm can run `ebb` as a user that may not.
        #[arg(long, value_name = "FD")]
        kvm_fd: Option<i32>,
        /// Arguments for the app (natively: its command line, joined with spaces).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

/// `--native` / `--hosted`.
#[derive(Args, Debug, Clone, Copy)]
pub struct RuntimeFlags {
    /// The native runtime: an image booted under KVM.
    #[arg(long, conflicts_with = "hosted")]
    pub native: bool,
    /// The hosted runtime: a Linux process.
    #[arg(long)]
    pub hosted: bool,
}

impl RuntimeFlags {
    fn requested(self) -> Requested {
        match (self.native, self.hosted) {
            (true, _) => Requested::Native,
            (_, true) => Requested::Hosted,
            _ => Requested::Auto,
        }
    }
}

/// The guest memory `ebb run` gives `cpus` vCPUs unless told: 128 MiB for up to two, and
/// 32 MiB more for each past two — each core's network stack and runtime have their
/// share (memcached's default `-m 64` needs 16 MiB of network per core beside its
/// items, and refuses to start in a guest that cannot hold them).
pub fn default_guest_memory(cpus: u32) -> u64 {
    (128u64 << 20).max((64 + 32 * u64::from(cpus)) << 20)
}

impl Cli {
    /// Runs the command; the process's exit code (the app's, for `run`).
    pub fn execute(self) -> Result<i32, CliError> {
        let cargo = Cargo::from_env(self.target_dir.clone());
        let manifest_path = self.manifest_path.clone();
        let workspace = move || match &manifest_path {
            Some(path) => Workspace::from_manifest(path),
            None => {
                let here = std::env::current_dir().map_err(|e| {
                    CliError::BadArgument(format!("cannot read the current directory: {e}"))
                })?;
                Workspace::find_from(&here)
            }
        };
        match self.command {
            Command::Build { app, runtime } => {
                let flavour = if runtime.hosted {
                    Flavour::Hosted
                } else {
                    Flavour::Native
                };
                let path = launch::build(&workspace()?, &app, flavour, &cargo)?;
                println!("{}", path.display());
                Ok(0)
            }
            Command::Run {
                app,
                cpus,
                mem,
                timeout,
                runtime,
                net,
                publish,
                net_faults,
                kvm_fd,
                args,
            } => {
                // Without --cpus, an app that names its core-count flag in its manifest
                // (`cores_flags`: memcached's -t) gets the count its arguments give.
                let cpus_given = cpus;
                let from_app = match cpus {
                    Some(_) => None,
                    None if Path::new(&app).is_file() => None,
                    None => workspace()
                        .and_then(|ws| ws.app_network(&app))
                        .ok()
                        .and_then(|m| workspace::cores_from_args(&m.cores_flags, &args)),
                };
                let (cpus, cpus_from) = match (cpus, from_app) {
                    (Some(n), _) => (n, None),
                    (None, Some((n, flag))) => (n, Some(flag)),
                    (None, None) => (
                        std::thread::available_parallelism()
                            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(255).min(255)),
                        None,
                    ),
                };
                let cpus_defaulted = cpus_from.is_none() && cpus_given.is_none();
                let options = RunOptions {
                    cpus,
                    cpus_from,
                    cpus_defaulted,
                    mem: mem.unwrap_or_else(|| default_guest_memory(cpus)),
                    timeout,
                    args,
                    kvm_fd,
                    net: NetRequest {
                        backend: net,
                        publish,
                        faults: net_faults,
                    },
                };
                launch::run(&app, runtime.requested(), &options, workspace, &cargo)
            }
        }
    }
}

/// The `ebb` command: parses the arguments, runs, prints any error; the exit code.
pub fn main() -> i32 {
    match Cli::parse().execute() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ebb: error: {e}");
            EXIT_CLI_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_arguments_parse() {
        let cli = Cli::try_parse_from([
            "ebb",
            "run",
            "hello",
            "--cpus",
            "2",
            "--mem",
            "64M",
            "--timeout",
            "1.5",
            "--hosted",
            "--",
            "a",
            "--b",
        ])
        .expect("parses");
        let Command::Run {
            app,
            cpus,
            mem,
            timeout,
            runtime,
            args,
            ..
        } = cli.command
        else {
            panic!("not run");
        };
        assert_eq!(app, "hello");
        assert_eq!(cpus, Some(2));
        assert_eq!(mem, Some(64 << 20));
        assert_eq!(timeout, Some(Duration::from_millis(1500)));
        assert_eq!(runtime.requested(), Requested::Hosted);
        assert_eq!(args, ["a", "--b"]);
        assert!(Cli::try_parse_from(["ebb", "run", "x", "--native", "--hosted"]).is_err());
        assert!(Cli::try_parse_from(["ebb", "run", "x", "--cpus", "0"]).is_err());
        assert!(parse_size("99999999999999G").is_err());
        assert_eq!(default_guest_memory(1), 128 << 20);
        assert_eq!(default_guest_memory(2), 128 << 20);
        assert_eq!(default_guest_memory(8), 320 << 20);
        assert_eq!(launch::default_vcpus(1), 1);
        assert_eq!(launch::default_vcpus(2), 1);
        assert_eq!(launch::default_vcpus(8), 7);
        assert!(parse_seconds("-1").is_err());
    }
}
