//! Networking: EbbRT's event-driven TCP interface, one API on every runtime.
//!
//! An app describes its network once — a [`NetConfig`], usually taken from its command
//! line with [`NetConfig::from_args`] — and [`start`]s it; the result, a [`Network`],
//! listens and connects the same way whatever carries the bytes. The backend is chosen
//! once, at start:
//!
//! | backend | runtime | what moves the bytes |
//! |---|---|---|
//! | [`Backend::LinuxSockets`] (hosted default) | hosted | Linux's TCP, one `SO_REUSEPORT` socket per core |
//! | [`Backend::Tap`] (`--tap NAME`) | hosted | ebb-net, our own TCP/IP stack, on a TAP device (one queue per core with `--queues`) |
//! | [`Backend::Virtio`] (the only one) | native | ebb-net on the VM's virtio-net device, one queue pair per core |
//!
//! Connections are [`Connection`]s whatever the backend; an app installs a
//! [`TcpHandler`] on each (`conn.set_handler(..)`), which gets the received data as
//! IOBufs (no stack buffering) and window events, and runs on the core that owns the
//! connection. [`Network::listen`] listens on every core of the network; each connection
//! is owned by the core that accepted it.
//!
//! The addresses: Linux sockets listen on `--addr` (default 127.0.0.1). ebb-net has its
//! own address: `--ip A/P [--gateway G]` or `--dhcp`; natively the default is
//! 10.0.2.15/24 via 10.0.2.2, the address QEMU's user network and the monitor's
//! `--net user` (passt) give the guest, so an image runs under both without options.
//!
//! ## Invariants
//!
//! * One backend per [`Network`]; nothing here switches at run time.
//! * Every connection and its handler stay on the core that owns the connection.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use core::future::Future;
use core::time::Duration;

pub use ebb_core::iobuf::{IOBuf, IOBufChain};
pub use ebb_core::net::{
    CloseReason, Ipv4Addr, SendError, SocketAddr, SocketAddrV4, TcpConnection, TcpErrorKind,
    TcpHandler,
};
pub use ebb_net::iface::Ipv4Cidr;
pub use ebb_netstack::{AddressConfig, FaultSetting, NetStack, NetStackCounters, Placement};

#[cfg(not(target_os = "none"))]
use ebb_hosted::tcp::{SocketConn, SocketListener};

/// How long [`start`] waits for a DHCP lease.
pub const ADDRESS_TIMEOUT: Duration = Duration::from_secs(60);

/// The address ebb-net takes natively without `--ip` or `--dhcp`: QEMU's user-network
/// guest address (the monitor's `--net user` hands out the same).
pub const NATIVE_DEFAULT_ADDRESS: AddressConfig = AddressConfig::Static {
    cidr: match Ipv4Cidr::new(Ipv4Addr::new(10, 0, 2, 15), 24) {
        Some(cidr) => cidr,
        None => panic!("10.0.2.15/24 is a valid prefix"),
    },
    gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
};

/// What carries an app's TCP connections (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Linux's TCP through sockets, listening on `addr`.
    #[cfg(not(target_os = "none"))]
    LinuxSockets {
        /// The address [`Network::listen`] binds.
        addr: core::net::IpAddr,
    },
    /// ebb-net on a TAP device the app creates (needs CAP_NET_ADMIN).
    #[cfg(not(target_os = "none"))]
    Tap {
        /// The TAP device's name.
        name: String,
        /// Queues, one core each (at most the runtime's cores).
        queues: usize,
        /// The device's IP MTU.
        mtu: usize,
        /// Checksum and segmentation offload through a virtio-net header on every frame
        /// (`ebb_hosted::tap::TapConfig::vnet_hdr`), as the native virtio-net device
        /// has by default.
        offload: bool,
    },
    /// ebb-net on the VM's virtio-net device, one queue pair per core.
    #[cfg(target_os = "none")]
    Virtio,
}

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
            #[cfg(not(target_os = "none"))]
            backend: Backend::LinuxSockets {
                addr: core::net::IpAddr::V4(Ipv4Addr::LOCALHOST),
            },
            #[cfg(target_os = "none")]
            backend: Backend::Virtio,
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
  --queues N          TAP queues, one core each (default 1)
  --mtu N             the TAP device's IP MTU (default 1500)
  --offload on|off    TAP checksum and TCP segmentation offload (default on)";

/// A bad network option.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetConfigError {
    /// An option that takes a value came last.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("bad {option} {value:?}: expected {expected}")]
    BadValue {
        /// The option.
        option: String,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An ebb-net option without ebb-net (hosted, without `--tap`).
    #[error("{0} applies to ebb-net: add --tap NAME")]
    NeedsEbbNet(&'static str),
    /// `--gateway` without `--ip`.
    #[error("--gateway goes with --ip A/P")]
    GatewayWithoutIp,
    /// `--tap` without `--ip` or `--dhcp`.
    #[error("--tap needs --ip A/P or --dhcp")]
    TapNeedsAddress,
    /// A hosted-only option in a native image.
    #[error("{0} does not apply natively: the monitor attaches the network (ebb run --net)")]
    HostedOnly(&'static str),
}

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
        #[cfg(not(target_os = "none"))]
        let (mut tap, mut queues, mut mtu, mut addr) = (None::<String>, 1usize, 1500usize, None);
        #[cfg(not(target_os = "none"))]
        let mut offload = true;
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
                    let (faults, seed) = ebb_net::phy::parse_fault_spec(&value)
                        .map_err(|_| bad("KIND=FRACTION,... with drop|duplicate|corrupt|reorder|delay, and seed=N"))?;
                    config.faults = Some(FaultSetting {
                        config: faults,
                        seed,
                    });
                }
                #[cfg(not(target_os = "none"))]
                "--addr" => addr = Some(value.parse().map_err(|_| bad("an IP address"))?),
                #[cfg(not(target_os = "none"))]
                "--tap" => tap = Some(value),
                #[cfg(not(target_os = "none"))]
                "--queues" => {
                    queues = value
                        .parse()
                        .ok()
                        .filter(|&q| q > 0)
                        .ok_or_else(|| bad("a queue count from 1"))?
                }
                #[cfg(not(target_os = "none"))]
                "--mtu" => {
                    mtu = value
                        .parse()
                        .ok()
                        .filter(|&m| (576..=9000).contains(&m))
                        .ok_or_else(|| bad("an MTU from 576 to 9000"))?
                }
                #[cfg(not(target_os = "none"))]
                "--offload" => {
                    offload = match value.as_str() {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                #[cfg(target_os = "none")]
                "--offload" => return Err(NetConfigError::HostedOnly("--offload")),
                #[cfg(target_os = "none")]
                "--addr" => return Err(NetConfigError::HostedOnly("--addr")),
                #[cfg(target_os = "none")]
                "--tap" => return Err(NetConfigError::HostedOnly("--tap")),
                #[cfg(target_os = "none")]
                "--queues" => return Err(NetConfigError::HostedOnly("--queues")),
                #[cfg(target_os = "none")]
                "--mtu" => return Err(NetConfigError::HostedOnly("--mtu")),
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
        #[cfg(not(target_os = "none"))]
        {
            match tap {
                Some(name) => {
                    if ip.is_none() && !dhcp {
                        return Err(NetConfigError::TapNeedsAddress);
                    }
                    config.backend = Backend::Tap {
                        name,
                        queues,
                        mtu,
                        offload,
                    };
                }
                None => {
                    for (given, option) in [
                        (ip.is_some(), "--ip"),
                        (dhcp, "--dhcp"),
                        (config.faults.is_some(), "--faults"),
                        (queues != 1, "--queues"),
                        (mtu != 1500, "--mtu"),
                        (!offload, "--offload"),
                    ] {
                        if given {
                            return Err(NetConfigError::NeedsEbbNet(option));
                        }
                    }
                    if let Some(addr) = addr {
                        config.backend = Backend::LinuxSockets { addr };
                    }
                }
            }
        }
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

/// Why the network could not start.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The TAP device could not be created or the stack not started on it.
    #[cfg(not(target_os = "none"))]
    #[error(transparent)]
    Tap(#[from] ebb_hosted::netstack::StartError),
    /// The virtio-net device is missing or the stack could not start on it.
    #[cfg(target_os = "none")]
    #[error("{0} (does the VM have a network? ebb run APP --net user)")]
    Virtio(#[from] ebb_native::netstack::StartError),
    /// The stack stopped, or a core's part of it did not start.
    #[error(transparent)]
    Stack(#[from] ebb_netstack::NetStackError),
    /// No DHCP lease within [`ADDRESS_TIMEOUT`].
    #[error("no DHCP lease within {} s", ADDRESS_TIMEOUT.as_secs())]
    NoLease,
}

/// A started network: listens and connects over the backend its [`NetConfig`] chose.
pub struct Network {
    inner: NetworkKind,
}

enum NetworkKind {
    #[cfg(not(target_os = "none"))]
    Linux { addr: core::net::IpAddr },
    Ebb {
        stack: NetStack,
        cidr: Ipv4Cidr,
        /// What the stack runs on, for [`Network`]'s `Display`.
        device: String,
    },
}

/// Starts `config`'s network on the calling core (core 0 in `ebb::main!`'s app): for
/// ebb-net, opens the device, starts the stack on one core per queue and waits for the
/// address (a DHCP lease: at most [`ADDRESS_TIMEOUT`]).
pub async fn start(config: NetConfig) -> Result<Network, NetError> {
    let (stack, device) = match config.backend {
        #[cfg(not(target_os = "none"))]
        Backend::LinuxSockets { addr } => {
            return Ok(Network {
                inner: NetworkKind::Linux { addr },
            });
        }
        #[cfg(not(target_os = "none"))]
        Backend::Tap {
            name,
            queues,
            mtu,
            offload,
        } => {
            let mut tap = ebb_hosted::netstack::NetStackConfig::new(name, config.address);
            tap.tap.mtu = mtu;
            tap.tap.vnet_hdr = offload;
            tap.tap.large_receive = offload;
            tap.queues = queues;
            tap.faults = config.faults;
            let device = alloc::format!("TAP device {}", tap.tap.name);
            (ebb_hosted::netstack::start(tap)?, device)
        }
        #[cfg(target_os = "none")]
        Backend::Virtio => (
            ebb_native::netstack::start(config.address, config.faults)?,
            String::from("virtio-net"),
        ),
    };
    let cidr = ebb_core::event::timeout(ADDRESS_TIMEOUT, stack.wait_for_address())
        .await
        .map_err(|_| NetError::NoLease)??;
    stack.ready().await?;
    Ok(Network {
        inner: NetworkKind::Ebb {
            stack,
            cidr,
            device,
        },
    })
}

impl Network {
    /// Listens on `port` on every core of the network; `on_accept` runs on the core that
    /// owns each new connection (the one that accepted it) and installs its handler.
    /// Port 0 picks a free port with Linux sockets ([`Listener::local_addr`] says which).
    pub fn listen(
        &self,
        port: u16,
        on_accept: impl Fn(Connection) + Send + Sync + 'static,
    ) -> impl Future<Output = Result<Listener, TcpErrorKind>> + 'static {
        let started: Result<ListenStart, TcpErrorKind> = match &self.inner {
            #[cfg(not(target_os = "none"))]
            NetworkKind::Linux { addr } => {
                ebb_hosted::tcp::listen(SocketAddr::new(*addr, port), move |conn| {
                    on_accept(Connection(ConnectionKind::Socket(conn)))
                })
                .map(|l| ListenStart::Ready(Listener(ListenerKind::Socket(l))))
            }
            NetworkKind::Ebb { stack, cidr, .. } => {
                let address = cidr.address();
                let listening =
                    stack.listen_on_every_core(port, Placement::AcceptingCore, move |conn| {
                        on_accept(Connection(ConnectionKind::Ebb(conn)))
                    });
                Ok(ListenStart::Pending(Box::pin(async move {
                    let listener = listening.await?;
                    Ok(Listener(ListenerKind::Ebb { listener, address }))
                })))
            }
        };
        async move {
            match started? {
                ListenStart::Ready(listener) => Ok(listener),
                ListenStart::Pending(fut) => fut.await,
            }
        }
    }

    /// Connects to `remote`; the connection is owned by the calling core with Linux
    /// sockets, by the network's home core (the one that started it) with ebb-net.
    /// ebb-net speaks IPv4 only (`AddressNotAvailable` for an IPv6 peer).
    pub fn connect(
        &self,
        remote: SocketAddr,
    ) -> impl Future<Output = Result<Connection, TcpErrorKind>> + 'static {
        let connecting: Result<Connecting, TcpErrorKind> =
            match &self.inner {
                #[cfg(not(target_os = "none"))]
                NetworkKind::Linux { .. } => {
                    let fut = ebb_hosted::tcp::connect(remote);
                    Ok(Box::pin(
                        async move { fut.await.map(|c| Connection(ConnectionKind::Socket(c))) },
                    ) as Connecting)
                }
                NetworkKind::Ebb { stack, .. } => match remote {
                    SocketAddr::V4(v4) => {
                        let fut = stack.connect(v4);
                        Ok(Box::pin(
                            async move { fut.await.map(|c| Connection(ConnectionKind::Ebb(c))) },
                        ) as Connecting)
                    }
                    SocketAddr::V6(_) => Err(TcpErrorKind::AddressNotAvailable),
                },
            };
        async move { connecting?.await }
    }

    /// The ebb-net stack, for its counters and UDP (`None` with Linux sockets).
    pub fn stack(&self) -> Option<&NetStack> {
        match &self.inner {
            #[cfg(not(target_os = "none"))]
            NetworkKind::Linux { .. } => None,
            NetworkKind::Ebb { stack, .. } => Some(stack),
        }
    }

    /// Our address: the listening address with Linux sockets, ebb-net's interface
    /// address otherwise.
    pub fn local_ip(&self) -> core::net::IpAddr {
        match &self.inner {
            #[cfg(not(target_os = "none"))]
            NetworkKind::Linux { addr } => *addr,
            NetworkKind::Ebb { cidr, .. } => core::net::IpAddr::V4(cidr.address()),
        }
    }

    /// Stops ebb-net (its device closes when the `Network` drops); returns the home
    /// core's counters. Nothing to do for Linux sockets.
    pub fn shutdown(&self) -> Option<NetStackCounters> {
        self.stack().and_then(|stack| stack.shutdown().ok())
    }
}

impl fmt::Display for Network {
    /// One phrase for a startup line: `Linux sockets`, or `ebb-net on virtio-net,
    /// 10.0.2.15/24, 2 queues` (one core each).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            #[cfg(not(target_os = "none"))]
            NetworkKind::Linux { .. } => f.write_str("Linux sockets"),
            NetworkKind::Ebb {
                stack,
                cidr,
                device,
            } => {
                let queues = stack.cores().len();
                let plural = if queues == 1 { "" } else { "s" };
                write!(f, "ebb-net on {device}, {cidr}, {queues} queue{plural}")
            }
        }
    }
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Network({self})")
    }
}

type Connecting = core::pin::Pin<Box<dyn Future<Output = Result<Connection, TcpErrorKind>>>>;

enum ListenStart {
    /// Linux sockets listen at once.
    #[cfg_attr(target_os = "none", allow(dead_code))]
    Ready(Listener),
    Pending(core::pin::Pin<Box<dyn Future<Output = Result<Listener, TcpErrorKind>>>>),
}

/// A TCP connection on any backend; stays on the core that owns it (`!Send`).
pub struct Connection(ConnectionKind);

enum ConnectionKind {
    #[cfg(not(target_os = "none"))]
    Socket(SocketConn),
    Ebb(ebb_net::tcp::TcpConn),
}

impl Connection {
    /// Installs the handler that gets this connection's data and events from now on
    /// (events that came before wait for it).
    pub fn set_handler(&self, handler: impl TcpHandler) {
        match &self.0 {
            #[cfg(not(target_os = "none"))]
            ConnectionKind::Socket(c) => c.set_handler(handler),
            ConnectionKind::Ebb(c) => c.set_handler(handler),
        }
    }

    fn inner(&self) -> &dyn TcpConnection {
        match &self.0 {
            #[cfg(not(target_os = "none"))]
            ConnectionKind::Socket(c) => c,
            ConnectionKind::Ebb(c) => c,
        }
    }
}

impl TcpConnection for Connection {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        self.inner().send(data)
    }
    fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError> {
        self.inner().try_send(data)
    }
    fn send_window(&self) -> usize {
        self.inner().send_window()
    }
    fn queued_bytes(&self) -> usize {
        self.inner().queued_bytes()
    }
    fn set_receive_window_open(&self, open: bool) {
        self.inner().set_receive_window_open(open)
    }
    fn close(&self) {
        self.inner().close()
    }
    fn abort(&self) {
        self.inner().abort()
    }
    fn peer_addr(&self) -> SocketAddr {
        self.inner().peer_addr()
    }
    fn local_addr(&self) -> SocketAddr {
        self.inner().local_addr()
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

/// A listening port on every core of a [`Network`].
pub struct Listener(ListenerKind);

enum ListenerKind {
    #[cfg(not(target_os = "none"))]
    Socket(SocketListener),
    Ebb {
        listener: ebb_netstack::NetListener,
        address: Ipv4Addr,
    },
}

impl Listener {
    /// Where it listens: the bound address with Linux sockets (the real port for port
    /// 0), ebb-net's interface address and the port otherwise.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.0 {
            #[cfg(not(target_os = "none"))]
            ListenerKind::Socket(l) => l.local_addr(),
            ListenerKind::Ebb { listener, address } => {
                SocketAddr::V4(SocketAddrV4::new(*address, listener.local_addr().port()))
            }
        }
    }

    /// Stops accepting on every core; established connections are not affected.
    pub fn close(&self) {
        match &self.0 {
            #[cfg(not(target_os = "none"))]
            ListenerKind::Socket(l) => l.close(),
            ListenerKind::Ebb { listener, .. } => listener.close(),
        }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Listener({})", self.local_addr())
    }
}

#[cfg(all(test, not(target_os = "none")))]
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
