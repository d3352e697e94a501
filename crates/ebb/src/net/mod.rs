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
//! | [`Backend::Xdp`] (`--xdp IFACE`) | hosted | ebb-net on an existing interface through AF_XDP sockets (one per queue and core with `--queues`; root) |
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
use alloc::string::String;
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

pub(crate) mod error;
mod options;

pub use crate::platform::network::{Backend, DeviceError};
pub use error::NetConfigError;
pub use options::{NATIVE_DEFAULT_ADDRESS, NetConfig, OPTIONS_HELP, server_options};

use crate::platform::network::{self as platform, SocketConn, SocketListener, Sockets, Started};

/// How long [`start`] waits for a DHCP lease.
pub const ADDRESS_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the network could not start.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The device could not be opened or the stack not started on it (hosted: the TAP
    /// device; native: the virtio-net device).
    #[error(transparent)]
    Device(#[from] DeviceError),
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
    /// Linux sockets (hosted only; natively `Sockets` is an empty type).
    Linux(Sockets),
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
    let (stack, device) = match platform::start(config.backend, config.address, config.faults)? {
        Started::Sockets(sockets) => {
            return Ok(Network {
                inner: NetworkKind::Linux(sockets),
            });
        }
        Started::Ebb { stack, device } => (stack, device),
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
            NetworkKind::Linux(sockets) => sockets
                .listen(port, move |conn| {
                    on_accept(Connection(ConnectionKind::Socket(conn)))
                })
                .map(|l| ListenStart::Ready(Listener(ListenerKind::Socket(l)))),
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
                NetworkKind::Linux(sockets) => {
                    let fut = sockets.connect(remote);
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
            NetworkKind::Linux(_) => None,
            NetworkKind::Ebb { stack, .. } => Some(stack),
        }
    }

    /// Our address: the listening address with Linux sockets, ebb-net's interface
    /// address otherwise.
    pub fn local_ip(&self) -> core::net::IpAddr {
        match &self.inner {
            NetworkKind::Linux(sockets) => sockets.local_ip(),
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
            NetworkKind::Linux(_) => f.write_str("Linux sockets"),
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
    Ready(Listener),
    Pending(core::pin::Pin<Box<dyn Future<Output = Result<Listener, TcpErrorKind>>>>),
}

/// A TCP connection on any backend; stays on the core that owns it (`!Send`).
pub struct Connection(ConnectionKind);

enum ConnectionKind {
    Socket(SocketConn),
    Ebb(ebb_net::tcp::TcpConn),
    /// Not TCP: a front end and its in-process node's shared window ([`crate::shm`]).
    Shared(crate::shm::SharedConn),
}

/// A shared-memory connection ([`crate::shm`]) runs wherever a TCP one does.
impl From<crate::shm::SharedConn> for Connection {
    fn from(conn: crate::shm::SharedConn) -> Connection {
        Connection(ConnectionKind::Shared(conn))
    }
}

impl Connection {
    /// Installs the handler that gets this connection's data and events from now on
    /// (events that came before wait for it).
    pub fn set_handler(&self, handler: impl TcpHandler) {
        match &self.0 {
            ConnectionKind::Socket(c) => c.set_handler(handler),
            ConnectionKind::Ebb(c) => c.set_handler(handler),
            ConnectionKind::Shared(c) => c.set_handler(handler),
        }
    }

    fn inner(&self) -> &dyn TcpConnection {
        match &self.0 {
            ConnectionKind::Socket(c) => c,
            ConnectionKind::Ebb(c) => c,
            ConnectionKind::Shared(c) => c,
        }
    }
}

impl TcpConnection for Connection {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        self.inner().send(data)
    }
    fn send_from(&self, data: &mut IOBufChain) -> Result<(), SendError> {
        self.inner().send_from(data)
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
            ListenerKind::Socket(l) => l.local_addr(),
            ListenerKind::Ebb { listener, address } => {
                SocketAddr::V4(SocketAddrV4::new(*address, listener.local_addr().port()))
            }
        }
    }

    /// Stops accepting on every core; established connections are not affected.
    pub fn close(&self) {
        match &self.0 {
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
