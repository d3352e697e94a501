//! `ebb-vmm IMAGE [--cpus N] [--mem SIZE] [--timeout S] [--pin] [-- ARGS...]`: boots a
//! native Ebbflow image and exits with the guest's exit code (see `ebb_vmm::report` for
//! the codes the monitor itself uses).

use clap::Parser;
use ebb_vmm::image::{self, Symbolizer};
use ebb_vmm::net_options;
use ebb_vmm::option_values::{parse_seconds, parse_size};
use ebb_vmm::{Vm, VmConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Boot a native Ebbflow image (a static x86_64 ELF linked with ebb-native) under KVM.
#[derive(Parser, Debug)]
#[command(name = "ebb-vmm", version, args_override_self = true)]
struct Args {
    /// The ELF image.
    image: PathBuf,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    cpus: u32,
    /// Guest memory: bytes, or with a K, M or G suffix (a multiple of 2M).
    #[arg(long, default_value = "128M", value_parser = parse_size)]
    mem: u64,
    /// Kill the guest after this many seconds (fractions allowed) and report its registers.
    #[arg(long, value_parser = parse_seconds)]
    timeout: Option<Duration>,
    /// Pin vCPU i to host CPU i.
    #[arg(long)]
    pin: bool,
    /// A virtio-net device: `tap=NAME` (a TAP device, one queue per vCPU; root),
    /// `xdp=IFACE` (an existing interface of one queue through AF_XDP; root) or
    /// `user` (passt user-mode networking with `-p` port forwards; no root).
    #[arg(long)]
    net: Option<String>,
    /// With `--net user`: forward host TCP port HOST (on ADDR, default 127.0.0.1) to the
    /// guest's port GUEST. Repeatable.
    #[arg(short = 'p', long = "publish", value_name = "[ADDR:]HOST:GUEST")]
    publish: Vec<ebb_vmm::virtio::PortForward>,
    /// Seeded faults between guest and backend: `drop=P,reorder=P,duplicate=P,corrupt=P,seed=N`.
    #[arg(long, value_name = "SPEC")]
    net_faults: Option<String>,
    /// Checksum offload on the virtio-net device with a TAP backend (VIRTIO_NET_F_CSUM and
    /// GUEST_CSUM through the TAP's virtio-net header) and, without --net-faults, TCP
    /// segmentation offload on transmit (HOST_TSO4): `on` (the default) or `off`.
    #[arg(long, value_name = "on|off", value_parser = net_options::parse_on_off,
          default_value = "on", action = clap::ArgAction::Set)]
    net_offload: bool,
    /// The guest's free memory on transparent huge pages (MADV_HUGEPAGE): `on` (the
    /// default) or `off` (4 KiB pages, for comparison).
    #[arg(long, value_name = "on|off", value_parser = net_options::parse_on_off,
          default_value = "on", action = clap::ArgAction::Set)]
    huge_pages: bool,
    /// Use this inherited descriptor of an open /dev/kvm instead of opening it (a parent
    /// allowed to open /dev/kvm can so run the monitor as a user that is not).
    #[arg(long, value_name = "FD")]
    kvm_fd: Option<i32>,
    /// Arguments for the guest, passed as its command line (joined with spaces).
    #[arg(last = true)]
    args: Vec<String>,
}

fn main() -> ExitCode {
    let started = std::time::Instant::now();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(move |buf, record| {
            use std::io::Write;
            let ms = started.elapsed().as_secs_f64() * 1e3;
            writeln!(buf, "[{ms:8.3} ms {}] {}", record.level(), record.args())
        })
        .init();
    log::debug!("monitor started");
    let args = Args::parse();
    let net = match net_options::net_config(
        args.net.as_deref(),
        &args.publish,
        args.net_faults.as_deref(),
    ) {
        Ok(net) => net.map(|net| ebb_vmm::vm::VmNetwork {
            offload: args.net_offload,
            ..net
        }),
        Err(e) => {
            eprintln!("ebb-vmm: {e}");
            return ExitCode::from(2);
        }
    };
    let config = VmConfig {
        net,
        mem_size: args.mem,
        cpus: args.cpus,
        cmdline: args.args.join(" "),
        timeout: args.timeout,
        pin: args.pin,
        kvm_fd: args.kvm_fd,
        huge_pages: args.huge_pages,
        shared_window: 0,
        vcpu_avoid_cpu: None,
    };
    let bytes = match image::read(&args.image) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ebb-vmm: {e}");
            return ExitCode::from(1);
        }
    };
    let (outcome, remains) =
        match Vm::new(&bytes, config, Box::new(std::io::stdout())).and_then(Vm::run_keeping_vm) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("ebb-vmm: {}: {e}", args.image.display());
                return ExitCode::from(1);
            }
        };
    let code = outcome.exit_code();
    if code != 0 || !matches!(outcome, ebb_vmm::Outcome::Exited { .. }) {
        eprint!("{}", outcome.report(&Symbolizer::new(&bytes)));
    }
    log::debug!("exiting");
    // The guest is done and its output is out: exit without waiting for KVM's teardown.
    remains.exit_process(code as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_default_on_and_switch_off() {
        let args = Args::try_parse_from(["ebb-vmm", "img"]).unwrap();
        assert!(args.huge_pages);
        let args = Args::try_parse_from(["ebb-vmm", "--huge-pages", "off", "img"]).unwrap();
        assert!(!args.huge_pages);
        assert!(Args::try_parse_from(["ebb-vmm", "--huge-pages", "maybe", "img"]).is_err());
    }
}
