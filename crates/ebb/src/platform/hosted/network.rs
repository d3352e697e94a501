//! What `ebb::net` needs of the hosted platform: the backends (Linux sockets, or ebb-net on
//! a TAP device or on an interface through AF_XDP), the options that pick one, and
//! starting it.
//!
//! The same names as `platform/native/network.rs`: [`Backend`], [`DeviceError`],
//! `default_backend`, `BackendOptions`, `Started`, `start`, `Sockets`, `SocketConn` and
//! `SocketListener`.

use alloc::string::String;
use core::future::Future;
use core::net::IpAddr;

use ebb_core::net::{Ipv4Addr, SocketAddr, TcpErrorKind};
use ebb_netstack::{AddressConfig, FaultSetting, NetStack};

use crate::net::error::NetConfigError;

pub(crate) use ebb_hosted::tcp::{SocketConn, SocketListener};

/// What carries an app's TCP connections (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Linux's TCP through sockets, listening on `addr`.
    LinuxSockets {
        /// The address [`Network::listen`](crate::net::Network::listen) binds.
        addr: IpAddr,
    },
    /// ebb-net on a TAP device the app creates (needs CAP_NET_ADMIN).
    Tap {
        /// The TAP device's name.
        name: String,
        /// Queues, one core each (at most the runtime's cores).
        queues: usize,
        /// The device's IP MTU.
        mtu: usize,
        /// Checksum and segmentation offload through a virtio-net header on every frame
        /// (`ebb_tap::TapConfig::vnet_hdr`), as the native virtio-net device
        /// has by default.
        offload: bool,
    },
    /// ebb-net on an existing interface through AF_XDP (`ebb_xdp`), one socket per
    /// queue, each on its own core (needs root: CAP_NET_ADMIN and CAP_BPF). The
    /// interface's frames are ebb-net's: Linux no longer sees what arrives on it.
    Xdp {
        /// The interface's name.
        interface: String,
        /// Its queues used, one socket and one core each (at most the runtime's cores).
        queues: usize,
        /// ebb-net's IP MTU on it (`ebb_xdp::XdpDevice::open` refuses one whose frames
        /// would not fit a UMEM chunk).
        mtu: usize,
    },
}

/// The device could not be opened or the stack not started on it.
pub type DeviceError = ebb_hosted::netstack::HostedStartError;

/// The backend without options: Linux sockets on 127.0.0.1.
pub(crate) fn default_backend() -> Backend {
    Backend::LinuxSockets {
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
    }
}

/// The hosted-only network options (`--addr`, `--tap`, `--xdp`, `--queues`, `--mtu`,
/// `--offload`),
/// gathered while `NetConfig::from_args` walks the arguments.
pub(crate) struct BackendOptions {
    addr: Option<IpAddr>,
    tap: Option<String>,
    xdp: Option<String>,
    queues: usize,
    mtu: usize,
    offload: bool,
}

impl BackendOptions {
    pub(crate) fn new() -> Self {
        Self {
            addr: None,
            tap: None,
            xdp: None,
            queues: 1,
            mtu: 1500,
            offload: true,
        }
    }

    /// Takes one hosted-only option `name` with its `value`; `bad(expected)` is the error
    /// for a value that does not parse.
    pub(crate) fn set(
        &mut self,
        name: &str,
        value: &str,
        bad: impl Fn(&'static str) -> NetConfigError,
    ) -> Result<(), NetConfigError> {
        match name {
            "--addr" => self.addr = Some(value.parse().map_err(|_| bad("an IP address"))?),
            "--tap" => self.tap = Some(value.into()),
            "--xdp" => self.xdp = Some(value.into()),
            "--queues" => {
                self.queues = value
                    .parse()
                    .ok()
                    .filter(|&q| q > 0)
                    .ok_or_else(|| bad("a queue count from 1"))?
            }
            "--mtu" => {
                self.mtu = value
                    .parse()
                    .ok()
                    .filter(|&m| (576..=9000).contains(&m))
                    .ok_or_else(|| bad("an MTU from 576 to 9000"))?
            }
            "--offload" => {
                self.offload = match value {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad("on or off")),
                }
            }
            _ => unreachable!("NetConfig::from_args passes only the hosted-only options"),
        }
        Ok(())
    }

    /// The backend the options chose, given whether ebb-net's own options (`--ip`,
    /// `--dhcp`, `--faults`) were given: those need `--tap` or `--xdp`, which need an
    /// address; `--offload` is TAP's, `--addr` Linux sockets'.
    pub(crate) fn backend(
        self,
        ip: bool,
        dhcp: bool,
        faults: bool,
    ) -> Result<Backend, NetConfigError> {
        if self.tap.is_some() && self.xdp.is_some() {
            return Err(NetConfigError::TapAndXdp);
        }
        if let Some(interface) = self.xdp {
            if !ip && !dhcp {
                return Err(NetConfigError::NeedsAddress("--xdp"));
            }
            if !self.offload {
                return Err(NetConfigError::TapOnly("--offload"));
            }
            if self.addr.is_some() {
                return Err(NetConfigError::SocketsOnly("--addr"));
            }
            return Ok(Backend::Xdp {
                interface,
                queues: self.queues,
                mtu: self.mtu,
            });
        }
        match self.tap {
            Some(name) => {
                if !ip && !dhcp {
                    return Err(NetConfigError::TapNeedsAddress);
                }
                Ok(Backend::Tap {
                    name,
                    queues: self.queues,
                    mtu: self.mtu,
                    offload: self.offload,
                })
            }
            None => {
                for (given, option) in [
                    (ip, "--ip"),
                    (dhcp, "--dhcp"),
                    (faults, "--faults"),
                    (self.queues != 1, "--queues"),
                    (self.mtu != 1500, "--mtu"),
                    (!self.offload, "--offload"),
                ] {
                    if given {
                        return Err(NetConfigError::NeedsEbbNet(option));
                    }
                }
                Ok(match self.addr {
                    Some(addr) => Backend::LinuxSockets { addr },
                    None => default_backend(),
                })
            }
        }
    }
}

/// A started backend: Linux sockets, or ebb-net's stack on a device (named for
/// `Network`'s `Display`).
pub(crate) enum Started {
    Sockets(Sockets),
    Ebb { stack: NetStack, device: String },
}

/// Starts `backend`: nothing to start for Linux sockets; for ebb-net, opens the TAP device
/// and starts the stack on one core per queue.
pub(crate) fn start(
    backend: Backend,
    address: AddressConfig,
    faults: Option<FaultSetting>,
) -> Result<Started, DeviceError> {
    match backend {
        Backend::LinuxSockets { addr } => Ok(Started::Sockets(Sockets { addr })),
        Backend::Tap {
            name,
            queues,
            mtu,
            offload,
        } => {
            let mut tap = ebb_hosted::netstack::TapNetStackConfig::new(name, address);
            tap.tap.mtu = mtu;
            tap.tap.vnet_hdr = offload;
            tap.tap.large_receive = offload;
            tap.queues = queues;
            tap.faults = faults;
            let device = alloc::format!("TAP device {}", tap.tap.name);
            Ok(Started::Ebb {
                stack: ebb_hosted::netstack::start(tap)?,
                device,
            })
        }
        Backend::Xdp {
            interface,
            queues,
            mtu,
        } => {
            let mut xdp = ebb_hosted::netstack::XdpNetStackConfig::new(interface, address);
            xdp.queues = queues;
            xdp.mtu = mtu;
            xdp.faults = faults;
            let device = alloc::format!("interface {} (AF_XDP)", xdp.interface);
            Ok(Started::Ebb {
                stack: ebb_hosted::netstack::start_xdp(xdp)?,
                device,
            })
        }
    }
}

/// Linux sockets on one address.
pub(crate) struct Sockets {
    addr: IpAddr,
}

impl Sockets {
    /// Listens on `port` of our address on every core (port 0: a free port).
    pub(crate) fn listen(
        &self,
        port: u16,
        on_accept: impl Fn(SocketConn) + Send + Sync + 'static,
    ) -> Result<SocketListener, TcpErrorKind> {
        ebb_hosted::tcp::listen(SocketAddr::new(self.addr, port), on_accept)
    }

    /// Connects to `remote` from the calling core.
    pub(crate) fn connect(
        &self,
        remote: SocketAddr,
    ) -> impl Future<Output = Result<SocketConn, TcpErrorKind>> + 'static {
        ebb_hosted::tcp::connect(remote)
    }

    /// The address we listen on.
    pub(crate) fn local_ip(&self) -> IpAddr {
        self.addr
    }
}
