//! What `ebb::net` needs of the native platform: one backend, ebb-net on the VM's
//! virtio-net device.
//!
//! The same names as `platform/hosted/network.rs`: [`Backend`], [`DeviceError`],
//! `default_backend`, `BackendOptions`, `Started`, `start`, `Sockets`, `SocketConn` and
//! `SocketListener`. There are no Linux sockets natively: the last three are empty types,
//! so `ebb::net`'s socket arms cannot be reached and cost nothing.

use alloc::string::String;
use core::net::IpAddr;

use ebb_core::iobuf::IOBufChain;
use ebb_core::net::{SendError, SocketAddr, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_netstack::{AddressConfig, FaultSetting, NetStack};

use crate::net::error::NetConfigError;

/// What carries an app's TCP connections (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// ebb-net on the VM's virtio-net device, one queue pair per core.
    Virtio,
}

/// The virtio-net device is missing or the stack could not start on it.
#[derive(Debug, thiserror::Error)]
#[error("{0} (does the VM have a network? ebb run APP --net user)")]
pub struct DeviceError(#[from] ebb_native::netstack::VirtioStartError);

/// The backend without options (the only one).
pub(crate) fn default_backend() -> Backend {
    Backend::Virtio
}

/// The hosted-only network options, refused natively: the monitor attaches the network.
const HOSTED_ONLY: [&str; 6] = ["--addr", "--tap", "--xdp", "--queues", "--mtu", "--offload"];

/// The hosted-only network options: natively each is refused.
pub(crate) struct BackendOptions;

impl BackendOptions {
    pub(crate) fn new() -> Self {
        Self
    }

    /// Refuses hosted-only option `name` (the monitor attaches the network).
    pub(crate) fn set(
        &mut self,
        name: &str,
        _value: &str,
        _bad: impl Fn(&'static str) -> NetConfigError,
    ) -> Result<(), NetConfigError> {
        let option = HOSTED_ONLY
            .into_iter()
            .find(|&option| option == name)
            .unwrap_or_else(|| unreachable!("NetConfig::from_args passes only these"));
        Err(NetConfigError::HostedOnly(option))
    }

    /// The only backend: every ebb-net option applies.
    pub(crate) fn backend(
        self,
        _ip: bool,
        _dhcp: bool,
        _faults: bool,
    ) -> Result<Backend, NetConfigError> {
        Ok(Backend::Virtio)
    }
}

/// A started backend: always ebb-net's stack natively.
pub(crate) enum Started {
    #[allow(dead_code)] // `ebb::net` matches it on both platforms; never built natively
    Sockets(Sockets),
    Ebb {
        stack: NetStack,
        device: String,
    },
}

/// Starts ebb-net on the virtio-net device, one queue pair per core.
pub(crate) fn start(
    backend: Backend,
    address: AddressConfig,
    faults: Option<FaultSetting>,
) -> Result<Started, DeviceError> {
    match backend {
        Backend::Virtio => Ok(Started::Ebb {
            stack: ebb_native::netstack::start(address, faults)?,
            device: String::from("virtio-net"),
        }),
    }
}

/// Linux sockets: none natively.
pub(crate) enum Sockets {}

impl Sockets {
    pub(crate) fn listen(
        &self,
        _port: u16,
        _on_accept: impl Fn(SocketConn) + Send + Sync + 'static,
    ) -> Result<SocketListener, TcpErrorKind> {
        match *self {}
    }

    pub(crate) fn connect(
        &self,
        _remote: SocketAddr,
    ) -> core::future::Ready<Result<SocketConn, TcpErrorKind>> {
        match *self {}
    }

    pub(crate) fn local_ip(&self) -> IpAddr {
        match *self {}
    }
}

/// A Linux socket connection: none natively.
pub(crate) enum SocketConn {}

impl SocketConn {
    pub(crate) fn set_handler(&self, _handler: impl TcpHandler) {
        match *self {}
    }
}

impl TcpConnection for SocketConn {
    fn send(&self, _data: IOBufChain) -> Result<(), SendError> {
        match *self {}
    }
    fn try_send(&self, _data: IOBufChain) -> Result<IOBufChain, SendError> {
        match *self {}
    }
    fn send_window(&self) -> usize {
        match *self {}
    }
    fn queued_bytes(&self) -> usize {
        match *self {}
    }
    fn set_receive_window_open(&self, _open: bool) {
        match *self {}
    }
    fn close(&self) {
        match *self {}
    }
    fn abort(&self) {
        match *self {}
    }
    fn peer_addr(&self) -> SocketAddr {
        match *self {}
    }
    fn local_addr(&self) -> SocketAddr {
        match *self {}
    }
}

/// A Linux socket listener: none natively.
pub(crate) enum SocketListener {}

impl SocketListener {
    pub(crate) fn local_addr(&self) -> SocketAddr {
        match *self {}
    }

    pub(crate) fn close(&self) {
        match *self {}
    }
}
