//! The command-line choice of network backend, shared by `sink` and `httpd`: Linux
//! sockets by default, or ebb-net on a TAP device with `--tap NAME` and either
//! `--ip A/P [--gateway G]` or `--dhcp`, optionally with `--faults SPEC`.
//!
//! A fault spec is a comma-separated list of `KIND=FRACTION` with KIND one of `drop`,
//! `duplicate`, `corrupt`, `reorder`, `delay`, and `seed=N` (default 1); for example
//! `drop=0.01,reorder=0.01,duplicate=0.005,corrupt=0.001,seed=7`. Faults apply to both
//! directions; reordered frames wait at most 1 ms for the next one, delayed frames 1–5 ms.

use std::net::Ipv4Addr;

use clap::Args;
use ebb_hosted::netstack::{AddressConfig, FaultSetting, NetStackConfig};
use ebb_net::iface::Ipv4Cidr;

/// Network backend options (flatten into an app's arguments).
#[derive(Args, Debug, Clone, Default)]
pub struct NetArgs {
    /// Run ebb-net on this TAP device (created by the app) instead of Linux sockets.
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,
    /// Static address and prefix on the TAP device, e.g. 10.0.0.2/24.
    #[arg(long, value_name = "A/P", requires = "tap", conflicts_with = "dhcp")]
    pub ip: Option<String>,
    /// Default gateway with --ip.
    #[arg(long, value_name = "G", requires = "ip")]
    pub gateway: Option<Ipv4Addr>,
    /// Get the address by DHCP.
    #[arg(long, requires = "tap")]
    pub dhcp: bool,
    /// Inject faults on the TAP device (see the module docs of `sink::net_args`).
    #[arg(long, value_name = "SPEC", requires = "tap")]
    pub faults: Option<String>,
    /// IP MTU of the TAP device.
    #[arg(long, default_value_t = 1500, requires = "tap")]
    pub mtu: usize,
    /// TAP queues, one core each: connections are spread over the cores Linux delivers
    /// their first frame to.
    #[arg(long, default_value_t = 1, requires = "tap")]
    pub queues: usize,
}

/// A bad backend option.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetArgsError {
    /// `--tap` without `--ip` or `--dhcp`.
    #[error("--tap needs --ip A/P or --dhcp")]
    NoAddress,
    /// `--ip` is not `A.B.C.D/P`.
    #[error("bad --ip {0:?}: expected A.B.C.D/P with P at most 32")]
    BadCidr(String),
    /// A fault spec item is not `KIND=VALUE` with a known kind and a fraction in [0, 1].
    #[error("bad fault {0:?}: expected drop|duplicate|corrupt|reorder|delay=FRACTION or seed=N")]
    BadFault(String),
}

impl NetArgs {
    /// The ebb-net configuration, or `None` for Linux sockets.
    pub fn netstack_config(&self) -> Result<Option<NetStackConfig>, NetArgsError> {
        let Some(tap) = &self.tap else {
            return Ok(None);
        };
        let address = match (&self.ip, self.dhcp) {
            (Some(ip), _) => AddressConfig::Static {
                cidr: parse_cidr(ip)?,
                gateway: self.gateway,
            },
            (None, true) => AddressConfig::Dhcp,
            (None, false) => return Err(NetArgsError::NoAddress),
        };
        let mut config = NetStackConfig::new(tap.clone(), address);
        config.tap.mtu = self.mtu;
        config.faults = self.faults.as_deref().map(parse_faults).transpose()?;
        config.queues = self.queues.max(1);
        Ok(Some(config))
    }
}

/// Runs an app's `main` on the hosted runtime over the backend `net` selects:
/// `over_tap(args, config)` on one core per TAP queue (`--queues`, default 1), or
/// `over_linux(args)` on `cores` cores (default: all). Errors are printed as `NAME: error`; returns the
/// process exit code.
pub fn run_app<A, T, L, TF, LF>(
    name: &str,
    net: &NetArgs,
    cores: Option<usize>,
    args: A,
    over_tap: T,
    over_linux: L,
) -> std::process::ExitCode
where
    A: Send + 'static,
    T: FnOnce(A, NetStackConfig) -> TF + Send + 'static,
    L: FnOnce(A) -> LF + Send + 'static,
    TF: std::future::Future<Output = Result<(), String>>,
    LF: std::future::Future<Output = Result<(), String>>,
{
    let tap = match net.netstack_config() {
        Ok(tap) => tap,
        Err(e) => {
            eprintln!("{name}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut config = ebb_hosted::Config::default();
    if let Some(tap) = &tap {
        config.cores = tap.queues;
    } else if let Some(cores) = cores {
        config.cores = cores;
    }
    let result = ebb_hosted::run(config, move || async move {
        match tap {
            Some(tap) => over_tap(args, tap).await,
            None => over_linux(args).await,
        }
    });
    let error = match result {
        Ok(Ok(())) => return std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => e,
        Err(e) => e.to_string(),
    };
    eprintln!("{name}: {error}");
    std::process::ExitCode::FAILURE
}

/// `A.B.C.D/P`.
pub fn parse_cidr(s: &str) -> Result<Ipv4Cidr, NetArgsError> {
    let bad = || NetArgsError::BadCidr(s.to_string());
    let (addr, prefix) = s.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    Ipv4Cidr::new(addr, prefix).ok_or_else(bad)
}

/// A fault spec (see the module docs).
pub fn parse_faults(spec: &str) -> Result<FaultSetting, NetArgsError> {
    let (config, seed) = ebb_net::phy::parse_fault_spec(spec).map_err(NetArgsError::BadFault)?;
    Ok(FaultSetting { config, seed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_net::phy::Probability;

    #[test]
    fn fault_specs_parse_and_bad_ones_are_refused() {
        let f =
            parse_faults("drop=0.01,reorder=0.01,duplicate=0.005,corrupt=0.001,seed=7").unwrap();
        assert_eq!(f.seed, 7);
        assert_eq!(f.config.drop, Probability::from_ppm(10_000));
        assert_eq!(f.config.duplicate, Probability::from_ppm(5_000));
        assert_eq!(f.config.corrupt, Probability::from_ppm(1_000));
        assert_eq!(f.config.reorder, Probability::from_ppm(10_000));
        assert!(parse_faults("drop=2").is_err());
        assert!(parse_faults("lose=0.1").is_err());
        assert!(parse_faults("drop").is_err());
        assert_eq!(parse_cidr("10.0.0.2/24").unwrap().prefix_len(), 24);
        assert!(parse_cidr("10.0.0.2/33").is_err());
        assert!(parse_cidr("10.0.0.2").is_err());
    }
}
