//! Running an app or image: choosing native or hosted, then booting the image in this
//! process through the ebb-vmm library, or starting the hosted executable.
//!
//! The choice: `--hosted` runs hosted; `--native` runs natively or fails with
//! [`CliError::KvmUnusable`]; with neither, an app runs natively when
//! [`ebb_vmm::kvm_usable`] says KVM works and hosted otherwise, and an image file (which
//! can only run natively) is booted directly. Exactly one line on stderr says which and
//! why before the app starts. `ebb` then exits with the app's code: the guest's exit code
//! natively (or the monitor's code for a panic, fault or timeout, with its report on
//! stderr, and after a guest's crash one line saying its memory is lost), the process's
//! hosted (128 + the signal if it was killed, 124 if `--timeout`
//! expired).

use crate::cargo::{Cargo, Flavour};
use crate::error::CliError;
use crate::workspace::{AppNetwork, Workspace};
use ebb_vmm::image::Symbolizer;
use ebb_vmm::net_options::net_config;
use ebb_vmm::virtio::PortForward;
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
    /// Where `cpus` came from when the app's own flag set it (`-t 1`): said in the
    /// start line.
    pub cpus_from: Option<String>,
    /// Whether `cpus` is only the default (neither `--cpus` nor the app's flag): natively
    /// a VM with a network device then gets [`default_vcpus`] instead.
    pub cpus_defaulted: bool,
    /// Guest memory in bytes (native only).
    pub mem: u64,
    /// End the app after this long.
    pub timeout: Option<Duration>,
    /// The app's arguments (natively: its command line, joined with spaces).
    pub args: Vec<String>,
    /// The network options as given.
    pub net: NetRequest,
    /// An inherited open /dev/kvm to boot with (`--kvm-fd`); KVM counts as usable then.
    pub kvm_fd: Option<i32>,
}

/// `--net`, `-p` and `--net-faults` as the user gave them.
#[derive(Clone, Debug, Default)]
pub struct NetRequest {
    /// `--net`: `user`, `passt`, `tap=NAME`, `xdp=IFACE` or `none`.
    pub backend: Option<String>,
    /// `-p` forwards.
    pub publish: Vec<PortForward>,
    /// `--net-faults`.
    pub faults: Option<String>,
}

/// The network a run gets: the options given, else the app's manifest's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
struct Network {
    /// `--net`, or `user` for a network app.
    backend: Option<String>,
    forwards: Vec<PortForward>,
    faults: Option<String>,
}

impl Network {
    /// What `request` and the app's manifest (`None` for an image file) ask for.
    fn resolve(request: &NetRequest, app: Option<&AppNetwork>) -> Network {
        if request.backend.as_deref() == Some("none") {
            return Network::default();
        }
        let wants_network = request.backend.is_some()
            || !request.publish.is_empty()
            || request.faults.is_some()
            || app.is_some_and(|a| a.network);
        if !wants_network {
            return Network::default();
        }
        let backend = request
            .backend
            .clone()
            .unwrap_or_else(|| "user".to_string());
        let forwards = if !request.publish.is_empty() || !is_user_mode(&backend) {
            request.publish.clone()
        } else {
            app.map(|a| a.publish.clone()).unwrap_or_default()
        };
        Network {
            backend: Some(backend),
            forwards,
            faults: request.faults.clone(),
        }
    }

    /// The monitor's device for it (`None`: no network). `user`: the forwards
    /// terminated in the monitor by `ebb-usernet`, passt behind them for the rest;
    /// `passt`: passt for everything, forwards included (the monitor's own `--net user`).
    fn device(&self) -> Result<Option<ebb_vmm::vm::VmNetwork>, CliError> {
        let backend = match self.backend.as_deref() {
            None => return Ok(None),
            Some("passt") => Some("user"),
            other => other,
        };
        let Some(mut net) = net_config(backend, &self.forwards, self.faults.as_deref())? else {
            return Ok(None);
        };
        if self.backend.as_deref() == Some("user") {
            let factory = ebb_usernet::UserNetFactory::new(self.forwards.clone());
            net.link = ebb_vmm::vm::HostLinkConfig::External(
                factory.into_link("in-monitor forwards (ebb-usernet)".to_string()),
            );
        }
        Ok(Some(net))
    }

    /// One phrase for the start line: `, network: passt forwarding 127.0.0.1:8080 → port
    /// 80` and the like (empty without a network).
    fn describe(&self) -> String {
        let forwards = || {
            if self.forwards.is_empty() {
                return "no ports forwarded".to_string();
            }
            let forwards: Vec<String> = self
                .forwards
                .iter()
                .map(|f| format!("{}:{} → port {}", f.host_addr, f.host_port, f.guest_port))
                .collect();
            forwards.join(", ")
        };
        match self.backend.as_deref() {
            None => String::new(),
            Some("user") if passt_installed() => format!(
                "; network: user-mode (forwards in the monitor, passt for the rest), {}",
                forwards()
            ),
            Some("user") => format!(
                "; network: user-mode (forwards in the monitor; passt is not installed, so \
                 nothing else reaches the network), {}",
                forwards()
            ),
            Some("passt") => format!("; network: user-mode (passt), {}", forwards()),
            Some(tap) => format!("; network: TAP device {}", tap.trim_start_matches("tap=")),
        }
    }

    /// Hosted there is no monitor between the app and the network: the app listens on
    /// the host port itself (`--addr ADDR --port HOST` are added to its arguments).
    fn hosted_args(&self) -> Result<Vec<String>, CliError> {
        let hosted_only = |what: &str| {
            CliError::BadArgument(format!(
                "{what} applies natively; a hosted app reaches the network through Linux                  sockets (or its own --tap NAME --ip A/P options)"
            ))
        };
        match self.backend.as_deref() {
            None => Ok(Vec::new()),
            Some(tap) if !is_user_mode(tap) => Err(hosted_only(&format!("--net {tap}"))),
            Some(_) if self.faults.is_some() => Err(hosted_only("--net-faults")),
            Some(_) => match self.forwards.as_slice() {
                [] => Ok(Vec::new()),
                [f] => Ok(vec![
                    "--addr".to_string(),
                    f.host_addr.to_string(),
                    "--port".to_string(),
                    f.host_port.to_string(),
                ]),
                _ => Err(CliError::BadArgument(
                    "a hosted app listens on one port: give at most one -p".to_string(),
                )),
            },
        }
    }
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
        let network = Network::resolve(&options.net, None);
        return match requested {
            Requested::Hosted => {
                eprintln!(
                    "ebb: running {name} hosted ({}; --hosted)",
                    cores(options.cpus, &options.cpus_from)
                );
                run_hosted(as_file, &name, options, &network)
            }
            Requested::Native => boot(as_file, &name, options, &network, "--native", None),
            Requested::Auto => boot(as_file, &name, options, &network, "an image file", None),
        };
    }
    let ws = workspace()?;
    ws.require_app(app)?;
    let app_network = ws.app_network(app)?;
    if app_network.front_end {
        return run_front_end(&ws, app, requested, options, cargo);
    }
    let network = Network::resolve(&options.net, Some(&app_network));
    // The app's suggestion holds for its default forwards only.
    let hint = app_network.hint.filter(|_| {
        options.net.publish.is_empty() && network.backend.as_deref().is_some_and(is_user_mode)
    });
    let (flavour, why) = match requested {
        Requested::Hosted => (Flavour::Hosted, "--hosted".to_string()),
        Requested::Native => {
            if options.kvm_fd.is_none() {
                ebb_vmm::kvm_usable().map_err(|e| CliError::kvm_unusable(&e))?;
            }
            (Flavour::Native, "--native".to_string())
        }
        Requested::Auto => match options.kvm_fd.map_or_else(ebb_vmm::kvm_usable, |_| Ok(())) {
            Err(e) => (Flavour::Hosted, format!("/dev/kvm unusable ({e})")),
            // `--net passt` is passt for everything; without it the app could not be
            // reached, so a run falls back to hosted rather than fail. (`--net user`
            // needs no passt for its forwards: the image's address is static.)
            Ok(()) if network.backend.as_deref() == Some("passt") && !passt_installed() => (
                Flavour::Hosted,
                "passt is not installed (native user-mode networking needs it: apt-get \
                 install passt)"
                    .to_string(),
            ),
            Ok(()) => (Flavour::Native, "/dev/kvm is usable".to_string()),
        },
    };
    // Refuse a network the runtime cannot give before building anything.
    match flavour {
        Flavour::Native => drop(network.device()?),
        Flavour::Hosted => drop(network.hosted_args()?),
    }
    let executable = cargo.build(&ws, app, flavour)?;
    match flavour {
        Flavour::Native => boot(&executable, app, options, &network, &why, hint.as_deref()),
        Flavour::Hosted => {
            let listens = match network.forwards.as_slice() {
                [f] => format!("; it listens on {}:{} itself", f.host_addr, f.host_port),
                _ => String::new(),
            };
            if requested == Requested::Auto {
                eprintln!(
                    "ebb: {why}: running {app} hosted ({}{listens})",
                    cores(options.cpus, &options.cpus_from)
                );
            } else {
                eprintln!(
                    "ebb: running {app} hosted ({}; {why}{listens})",
                    cores(options.cpus, &options.cpus_from)
                );
            }
            if let Some(hint) = &hint {
                eprintln!("ebb: try: {hint}");
            }
            run_hosted(&executable, app, options, &network)
        }
    }
}

/// The environment variable naming the native image a front end's nodes boot.
pub const NODE_IMAGE_ENV: &str = "EBB_NODE_IMAGE";

/// Runs a distributed application's front end: hosted, with its own native build in
/// [`NODE_IMAGE_ENV`] for the nodes it boots (which need KVM).
fn run_front_end(
    ws: &Workspace,
    app: &str,
    requested: Requested,
    options: &RunOptions,
    cargo: &Cargo,
) -> Result<i32, CliError> {
    if requested == Requested::Native {
        return Err(CliError::BadArgument(format!(
            "{app} is a distributed application's front end: it runs hosted and boots its \
             nodes natively (run it without --native)"
        )));
    }
    if options.kvm_fd.is_none() {
        ebb_vmm::kvm_usable().map_err(|e| CliError::kvm_unusable(&e))?;
    }
    let image = cargo.build(ws, app, Flavour::Native)?;
    let executable = cargo.build(ws, app, Flavour::Hosted)?;
    eprintln!(
        "ebb: running {app} hosted as the front end of a distributed application ({}); its \
         native nodes boot from {}",
        cores(options.cpus, &options.cpus_from),
        image.display()
    );
    let network = Network::resolve(&options.net, None);
    run_hosted_with(
        &executable,
        app,
        options,
        &network,
        &[(NODE_IMAGE_ENV, image.as_os_str())],
    )
}

/// Whether `backend` is user-mode networking with forwards: `user` (forwards in the
/// monitor) or `passt` (all through passt).
fn is_user_mode(backend: &str) -> bool {
    matches!(backend, "user" | "passt")
}

/// Whether `passt` is on `PATH` (what `--net passt` runs, and `--net user` behind its
/// forwards).
fn passt_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join("passt")).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

fn cores(n: u32, from: &Option<String>) -> String {
    let cores = if n == 1 {
        "1 core".to_string()
    } else {
        format!("{n} cores")
    };
    match from {
        Some(flag) => format!("{cores}: the app's {flag}"),
        None => cores,
    }
}

/// The vCPUs a networked VM gets unless told, on a host with `host_cpus` CPUs: one CPU
/// fewer, at least one. The monitor's device thread moves every frame and needs a CPU of
/// its own: measured on a 2-CPU host (docs/benchmarks.md, "One vCPU or two"), memcached
/// with one vCPU served 0.59x memcached-on-Linux's throughput at half the median latency,
/// with two 0.47x — its two vCPUs and the device thread took turns on two CPUs.
pub fn default_vcpus(host_cpus: u32) -> u32 {
    host_cpus.saturating_sub(1).max(1)
}

/// Boots `image` in this process and ends the process with the monitor's exit code for the
/// outcome; errors before the guest runs are returned.
fn boot(
    image: &Path,
    name: &str,
    options: &RunOptions,
    network: &Network,
    why: &str,
    hint: Option<&str>,
) -> Result<i32, CliError> {
    let image_error = |source: VmError| CliError::image(image, source);
    let net = network.device()?;
    let bytes = ebb_vmm::image::read(image).map_err(|e| image_error(e.into()))?;
    let (cpus, cpus_from) = match (&net, options.cpus_defaulted) {
        (Some(_), true) if default_vcpus(options.cpus) != options.cpus => (
            default_vcpus(options.cpus),
            Some(format!(
                "one CPU of {} left to the network device's thread",
                options.cpus
            )),
        ),
        _ => (
            options.cpus,
            options
                .cpus_from
                .as_ref()
                .map(|flag| format!("the app's {flag}")),
        ),
    };
    let config = VmConfig {
        mem_size: options.mem,
        cpus,
        cmdline: options.args.join(" "),
        timeout: options.timeout,
        pin: false,
        net,
        kvm_fd: options.kvm_fd,
        huge_pages: true,
        shared_window: 0,
        vcpu_avoid_cpu: None,
    };
    // `Vm::new` validates the image before it opens /dev/kvm, so a bad image is reported
    // as such even where KVM is unusable.
    let vm = Vm::new(&bytes, config, Box::new(std::io::stdout())).map_err(|e| match e {
        VmError::OpenKvm(_) | VmError::CreateVm(_) => CliError::kvm_unusable(&e),
        VmError::Net(e) => CliError::Network(e),
        e => image_error(e),
    })?;
    let vcpus = if cpus == 1 { "vCPU" } else { "vCPUs" };
    let from = cpus_from.map_or_else(String::new, |why| format!(": {why}"));
    eprintln!(
        "ebb: running {name} natively ({cpus} {vcpus}{from}, {} MiB; {why}{})",
        options.mem >> 20,
        network.describe()
    );
    if let Some(hint) = hint {
        eprintln!("ebb: try: {hint}");
    }
    let (outcome, remains) = vm.run_keeping_vm().map_err(image_error)?;
    let _ = std::io::stdout().flush();
    let code = outcome.exit_code();
    if code != 0 || !matches!(outcome, Outcome::Exited { .. }) {
        eprint!("{}", outcome.report(&Symbolizer::new(&bytes)));
    }
    if let Some(line) = memory_lost(name, &outcome) {
        eprintln!("{line}");
    }
    // The guest is done and its output is out: end the process here rather than wait
    // ≈ 10 ms for KVM to destroy the VM (ebb-vmm's binary does the same).
    remains.exit_process(code as u8)
}

/// The line `ebb run` adds after the monitor's report when the guest crashed — panicked,
/// faulted or broke the hypercall ABI — saying what that costs: the app's memory went with
/// its VM. Not for an exit (a clean one or with a code: the app chose it), a stop by
/// signal or a `--timeout` (the user chose those), nor a monitor error (the monitor's own
/// report says what failed).
fn memory_lost(name: &str, outcome: &Outcome) -> Option<String> {
    let what = match outcome {
        Outcome::Panicked { .. } => "panicked",
        Outcome::Fault { .. } => "faulted",
        Outcome::AbiViolation { .. } => "broke the hypercall ABI",
        Outcome::Exited { .. }
        | Outcome::Timeout { .. }
        | Outcome::Stopped { .. }
        | Outcome::MonitorError { .. } => return None,
    };
    Some(format!(
        "ebb: the guest {what} (exit status {}): everything {name} held in memory is lost \
         (whatever it stored, every open connection)",
        outcome.exit_code()
    ))
}

/// Runs a hosted executable with `EBB_CPUS` and the arguments; returns its exit code.
fn run_hosted(
    executable: &Path,
    name: &str,
    options: &RunOptions,
    network: &Network,
) -> Result<i32, CliError> {
    run_hosted_with(executable, name, options, network, &[])
}

/// [`run_hosted`] with more environment variables for the app.
fn run_hosted_with(
    executable: &Path,
    name: &str,
    options: &RunOptions,
    network: &Network,
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<i32, CliError> {
    let net_args = network.hosted_args()?;
    let spawn_error = |source| CliError::HostedSpawn {
        path: executable.to_path_buf(),
        source,
    };
    let mut cmd = Command::new(executable);
    cmd.args(&net_args)
        .args(&options.args)
        .env("EBB_CPUS", options.cpus.to_string())
        .envs(env.iter().copied());
    // The app goes when `ebb` goes, killed or not (a test that killed `ebb run` left the
    // hosted app serving its port for good).
    ebb_vmm::die_with_the_monitor(&mut cmd);
    let mut child = cmd.spawn().map_err(spawn_error)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(backend: Option<&str>, publish: &[&str], faults: Option<&str>) -> NetRequest {
        NetRequest {
            backend: backend.map(String::from),
            publish: publish
                .iter()
                .map(|p| p.parse().expect("forward"))
                .collect(),
            faults: faults.map(String::from),
        }
    }

    #[test]
    fn only_a_guest_crash_says_the_memory_is_lost() {
        let panicked = Outcome::Panicked {
            core: 1,
            message: "oops".into(),
            backtrace: vec![],
        };
        assert_eq!(
            memory_lost("memcached", &panicked).as_deref(),
            Some(
                "ebb: the guest panicked (exit status 101): everything memcached held in \
                 memory is lost (whatever it stored, every open connection)"
            )
        );
        let fault = Outcome::Fault {
            core: 0,
            reason: "triple fault".into(),
            state: None,
        };
        let line = memory_lost("httpd", &fault).expect("a fault loses the memory too");
        assert!(
            line.starts_with("ebb: the guest faulted (exit status 102): everything httpd held"),
            "{line}"
        );
        let abi = Outcome::AbiViolation {
            core: 0,
            error: ebb_vmm::abi_error::AbiError::Unknown {
                nr: 99,
                addr: 0x1000,
            },
            state: None,
        };
        assert!(
            memory_lost("echo", &abi)
                .is_some_and(|l| l.contains("broke the hypercall ABI (exit status 103)"))
        );
        for chosen in [
            Outcome::Exited { code: 0 },
            Outcome::Exited { code: 3 },
            Outcome::Stopped {
                signal: libc::SIGINT,
            },
            Outcome::Timeout {
                after: Duration::from_secs(1),
                states: vec![],
            },
            Outcome::MonitorError {
                core: 0,
                message: "KVM_RUN failed".into(),
            },
        ] {
            assert_eq!(memory_lost("memcached", &chosen), None, "{chosen:?}");
        }
    }

    #[test]
    fn a_network_app_gets_user_networking_with_its_forwards_unless_told_otherwise() {
        let web = AppNetwork {
            network: true,
            publish: vec!["8080:80".parse().expect("forward")],
            hint: None,
            cores_flags: Vec::new(),
            front_end: false,
        };
        let quiet = AppNetwork::default();
        let default = Network::resolve(&request(None, &[], None), Some(&web));
        assert_eq!(default.backend.as_deref(), Some("user"));
        assert_eq!(default.forwards, web.publish);
        assert!(default.describe().contains("127.0.0.1:8080 → port 80"));
        assert_eq!(
            default.hosted_args().unwrap(),
            ["--addr", "127.0.0.1", "--port", "8080"]
        );
        let Some(net) = default.device().unwrap() else {
            panic!("a device")
        };
        assert!(
            matches!(net.link, ebb_vmm::vm::HostLinkConfig::External(_)),
            "--net user: the forwards in the monitor"
        );
        let passt = Network::resolve(&request(Some("passt"), &[], None), Some(&web));
        assert_eq!(passt.forwards, web.publish, "--net passt forwards too");
        assert!(
            passt
                .describe()
                .contains("user-mode (passt), 127.0.0.1:8080 → port 80")
        );
        let Some(net) = passt.device().unwrap() else {
            panic!("a device")
        };
        assert!(matches!(net.link, ebb_vmm::vm::HostLinkConfig::User(ref f) if *f == web.publish));
        assert_eq!(passt.hosted_args().unwrap(), default.hosted_args().unwrap());
        let replaced = Network::resolve(&request(None, &["9090:80"], None), Some(&web));
        assert_eq!(replaced.forwards[0].host_port, 9090);
        let none = Network::resolve(&request(Some("none"), &[], None), Some(&web));
        assert_eq!(none, Network::default());
        assert!(none.device().unwrap().is_none());
        assert!(none.hosted_args().unwrap().is_empty());
        let tap = Network::resolve(&request(Some("tap=ebb0"), &[], None), Some(&web));
        assert!(tap.forwards.is_empty(), "a TAP device takes no forwards");
        assert!(tap.device().unwrap().is_some());
        assert!(
            tap.hosted_args().is_err(),
            "a hosted app cannot use --net tap"
        );
        let app_without = Network::resolve(&request(None, &[], None), Some(&quiet));
        assert_eq!(app_without, Network::default());
        let asked = Network::resolve(&request(None, &[], Some("drop=0.1")), Some(&quiet));
        assert_eq!(asked.backend.as_deref(), Some("user"));
        assert!(asked.hosted_args().is_err(), "faults are the monitor's");
        let two = Network::resolve(&request(None, &["1:2", "3:4"], None), None);
        assert!(two.hosted_args().is_err());
        assert!(
            Network::resolve(&request(Some("bridge"), &[], None), None)
                .device()
                .is_err()
        );
    }
}
