//! The network options: [`NetConfig`], from an app's command line
//! ([`NetConfig::from_args`], [`server_options`]). The options every platform shares are
//! parsed here; the platform's own (hosted: `--addr`, `--tap`, ...) by its
//! `BackendOptions`, which natively refuses them.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use ebb_core::net::Ipv4Addr;
use ebb_net::iface::Ipv4Cidr;
use ebb_netstack::{AddressConfig, FaultSetting};

use super::error::NetConfigError;
use crate::platform::network::{Backend, BackendOptions, default_backend};

/// The address ebb-net takes natively without `--ip` or `--dhcp`: QEMU's user-network
/// guest address (the monitor's `--net user` hands out the same).
pub const NATIVE_DEFAULT_ADDRESS: AddressConfig = AddressConfig::Static {
    cidr: match Ipv4Cidr::new(Ipv4Addr::new(10, 0, 2, 15), 24) {
        Some(cidr) => cidr,
        None => panic!("10.0.2.15/24 is a valid prefix"),
    },
    gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
};

/// An app's network, decided once (see [`NetConfig::from_args`] for the options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// What carries the connections.
    pub backend: Backend,
    /// ebb-net's address (ignored by Linux sockets).
    pub address: AddressConfig,
    /// Seeded faults between ebb-net and its device, both directions (ebb-net only).
    pub faults: Option<FaultSetting>,
}

impl Default for NetConfig {
    /// Hosted: Linux sockets on 127.0.0.1. Native: virtio-net at 10.0.2.15/24.
    fn default() -> Self {
        Self {
            backend: default_backend(),
            address: NATIVE_DEFAULT_ADDRESS,
            faults: None,
        }
    }
}

/// The network options [`NetConfig::from_args`] understands, for an app's usage text.
pub const OPTIONS_HELP: &str = "\
network options (the same hosted and native):
  --ip A.B.C.D/P      ebb-net's address (native default 10.0.2.15/24)
  --gateway A.B.C.D   ebb-net's default gateway, with --ip (native default 10.0.2.2)
  --dhcp              ebb-net takes its address from a DHCP server
  --faults SPEC       seeded faults on ebb-net's device, e.g. drop=0.01,reorder=0.01,seed=7
hosted only:
  --addr IP           Linux sockets: the address to listen on (default 127.0.0.1)
  --tap NAME          run ebb-net on TAP device NAME instead of Linux sockets
  --xdp IFACE         run ebb-net on interface IFACE through AF_XDP (root), one socket
                      per queue; ebb-net owns the interface's traffic
  --queues N          TAP or interface queues, one core each (default 1)
  --mtu N             the TAP device's or ebb-net's IP MTU on IFACE (default 1500)
  --offload on|off    TAP checksum and TCP segmentation offload (default on)";

impl NetConfig {
    /// Takes the network options (see [`OPTIONS_HELP`]) out of `args`, as `--opt VALUE`
    /// or `--opt=VALUE`, starting from the default; returns the config and the arguments
    /// it did not recognize, in order, for the app to parse.
    pub fn from_args(args: &[String]) -> Result<(NetConfig, Vec<String>), NetConfigError> {
        let mut config = NetConfig::default();
        let mut rest = Vec::new();
        let mut ip: Option<Ipv4Cidr> = None;
        let mut gateway: Option<Ipv4Addr> = None;
        let mut dhcp = false;
        let mut platform = BackendOptions::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) if name.starts_with("--") => (name, Some(value.to_string())),
                _ => (arg.as_str(), None),
            };
            let takes_value = matches!(
                name,
                "--ip"
                    | "--gateway"
                    | "--faults"
                    | "--addr"
                    | "--tap"
                    | "--xdp"
                    | "--queues"
                    | "--mtu"
                    | "--offload"
            );
            if !takes_value && name != "--dhcp" {
                rest.push(arg.clone());
                continue;
            }
            let value = if takes_value {
                match inline.or_else(|| args.next().cloned()) {
                    Some(v) => v,
                    None => return Err(NetConfigError::MissingValue(name.to_string())),
                }
            } else {
                String::new()
            };
            let bad = |expected: &'static str| NetConfigError::BadValue {
                option: name.to_string(),
                value: value.clone(),
                expected,
            };
            match name {
                "--ip" => ip = Some(parse_cidr(&value).ok_or_else(|| bad("A.B.C.D/P"))?),
                "--gateway" => gateway = Some(value.parse().map_err(|_| bad("A.B.C.D"))?),
                "--dhcp" => dhcp = true,
                "--faults" => {
                    let (faults, seed) = ebb_net_driver::parse_fault_spec(&value)
                        .map_err(|_| bad("KIND=FRACTION,... with drop|duplicate|corrupt|reorder|delay, and seed=N"))?;
                    config.faults = Some(FaultSetting {
                        config: faults,
                        seed,
                    });
                }
                "--addr" | "--tap" | "--xdp" | "--queues" | "--mtu" | "--offload" => {
                    platform.set(name, &value, bad)?
                }
                _ => unreachable!("every option matched above is handled"),
            }
        }
        if gateway.is_some() && ip.is_none() {
            return Err(NetConfigError::GatewayWithoutIp);
        }
        if let Some(cidr) = ip {
            config.address = AddressConfig::Static { cidr, gateway };
        } else if dhcp {
            config.address = AddressConfig::Dhcp;
        }
        config.backend = platform.backend(ip.is_some(), dhcp, config.faults.is_some())?;
        Ok((config, rest))
    }
}

/// The command line of a server that takes only a port and the network options
/// (`[--port N] [network options]`, `--help`): the port (default `default_port`) and the
/// network, or the message to print (`usage` and [`OPTIONS_HELP`] for `--help` and for a
/// mistake).
pub fn server_options(
    args: &[String],
    default_port: u16,
    usage: &str,
) -> Result<(u16, NetConfig), String> {
    let (net, rest) = NetConfig::from_args(args).map_err(|e| alloc::format!("{e}\n{usage}"))?;
    let mut port = default_port;
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        let value = match arg.split_once('=') {
            Some(("--port", v)) => Some(v.to_string()),
            _ if arg == "--port" => rest.next().cloned(),
            _ if arg == "--help" || arg == "-h" => {
                return Err(alloc::format!("{usage}\n{OPTIONS_HELP}"));
            }
            _ => return Err(alloc::format!("unexpected argument {arg:?}\n{usage}")),
        };
        let value = value.ok_or_else(|| alloc::format!("--port needs a value\n{usage}"))?;
        port = value
            .parse()
            .map_err(|_| alloc::format!("bad --port {value:?}\n{usage}"))?;
    }
    Ok((port, net))
}

/// `A.B.C.D/P`.
fn parse_cidr(s: &str) -> Option<Ipv4Cidr> {
    let (addr, prefix) = s.split_once('/')?;
    Ipv4Cidr::new(addr.parse().ok()?, prefix.parse().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn default_is_linux_sockets_on_loopback_and_unknown_options_pass_through() {
        let (config, rest) = NetConfig::from_args(&args("--port 80 --once x")).unwrap();
        assert_eq!(config, NetConfig::default());
        assert_eq!(
            config.backend,
            Backend::LinuxSockets {
                addr: "127.0.0.1".parse().unwrap()
            }
        );
        assert_eq!(rest, args("--port 80 --once x"));
        let (config, rest) = NetConfig::from_args(&args("--addr=0.0.0.0 --port 1")).unwrap();
        assert_eq!(
            config.backend,
            Backend::LinuxSockets {
                addr: "0.0.0.0".parse().unwrap()
            }
        );
        assert_eq!(rest, args("--port 1"));
    }

    #[test]
    fn tap_takes_an_address_queues_mtu_and_faults() {
        let (config, rest) = NetConfig::from_args(&args(
            "--tap ebb0 --ip 10.1.0.2/24 --gateway 10.1.0.1 --queues 2 --mtu 9000 --echo \
             --faults drop=0.01,seed=3",
        ))
        .unwrap();
        assert_eq!(
            config.backend,
            Backend::Tap {
                name: "ebb0".into(),
                queues: 2,
                mtu: 9000,
                offload: true,
            }
        );
        assert_eq!(
            config.address,
            AddressConfig::Static {
                cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 1, 0, 2), 24).unwrap(),
                gateway: Some(Ipv4Addr::new(10, 1, 0, 1)),
            }
        );
        assert_eq!(config.faults.map(|f| f.seed), Some(3));
        assert_eq!(rest, vec![String::from("--echo")]);
        let (config, _) = NetConfig::from_args(&args("--tap=t --dhcp")).unwrap();
        assert_eq!(config.address, AddressConfig::Dhcp);
        let (config, _) = NetConfig::from_args(&args("--tap=t --dhcp --offload off")).unwrap();
        assert!(matches!(
            config.backend,
            Backend::Tap { offload: false, .. }
        ));
        assert!(NetConfig::from_args(&args("--tap=t --dhcp --offload maybe")).is_err());
    }

    #[test]
    fn xdp_takes_an_address_queues_mtu_and_faults_but_no_offload() {
        let (config, rest) = NetConfig::from_args(&args(
            "--xdp veth0 --ip 10.1.0.2/24 --queues 2 --mtu 1400 --faults drop=0.01,seed=3 -x",
        ))
        .unwrap();
        assert_eq!(
            config.backend,
            Backend::Xdp {
                interface: "veth0".into(),
                queues: 2,
                mtu: 1400,
            }
        );
        assert_eq!(config.faults.map(|f| f.seed), Some(3));
        assert_eq!(rest, vec![String::from("-x")]);
        let (config, _) = NetConfig::from_args(&args("--xdp=v --dhcp")).unwrap();
        assert_eq!(config.address, AddressConfig::Dhcp);
        assert_eq!(
            NetConfig::from_args(&args("--xdp v")).unwrap_err(),
            NetConfigError::NeedsAddress("--xdp")
        );
        assert_eq!(
            NetConfig::from_args(&args("--xdp v --tap t --dhcp")).unwrap_err(),
            NetConfigError::TapAndXdp
        );
        assert_eq!(
            NetConfig::from_args(&args("--xdp v --dhcp --offload off")).unwrap_err(),
            NetConfigError::TapOnly("--offload")
        );
        assert_eq!(
            NetConfig::from_args(&args("--xdp v --dhcp --addr 0.0.0.0")).unwrap_err(),
            NetConfigError::SocketsOnly("--addr")
        );
        assert!(NetConfig::from_args(&args("--xdp")).is_err());
    }

    #[test]
    fn a_server_takes_a_port_and_the_network_options() {
        let (port, net) = server_options(&args("--port 81 --addr 0.0.0.0"), 80, "u").unwrap();
        assert_eq!(port, 81);
        assert!(matches!(net.backend, Backend::LinuxSockets { .. }));
        assert_eq!(server_options(&args("--port=82"), 80, "u").unwrap().0, 82);
        assert_eq!(server_options(&[], 80, "u").unwrap().0, 80);
        assert!(server_options(&args("--port"), 80, "u").is_err());
        assert!(server_options(&args("--port x"), 80, "u").is_err());
        assert!(
            server_options(&args("--once"), 80, "u")
                .unwrap_err()
                .contains("--once")
        );
        assert!(
            server_options(&args("-h"), 80, "u")
                .unwrap_err()
                .contains("network options")
        );
    }

    #[test]
    fn bad_and_misplaced_options_are_refused_with_their_name() {
        let refused = |s: &str| NetConfig::from_args(&args(s)).unwrap_err().to_string();
        assert!(
            refused("--ip 10.0.0.2").contains("--ip"),
            "{}",
            refused("--ip 10.0.0.2")
        );
        assert!(refused("--ip 10.0.0.2/33").contains("A.B.C.D/P"));
        assert!(refused("--tap t").contains("--tap needs --ip"));
        assert!(refused("--ip 10.0.0.2/24").contains("add --tap"));
        assert!(refused("--dhcp").contains("add --tap"));
        assert!(refused("--tap t --dhcp --queues 0").contains("--queues"));
        assert!(refused("--tap t --dhcp --mtu 100").contains("--mtu"));
        assert!(refused("--offload off").contains("--offload"));
        assert!(refused("--tap t --dhcp --faults lose=1").contains("--faults"));
        assert!(refused("--tap t --dhcp --gateway 10.0.0.1").contains("--gateway goes with --ip"));
        assert!(refused("--tap").contains("--tap needs a value"));
        assert!(refused("--addr nowhere").contains("--addr"));
    }
}
