//! ebb-net's own TCP/IP stack in the process, over a TAP device or over an existing
//! interface through AF_XDP sockets: the hosted platform's part of [`ebb_netstack`].
//!
//! Everything about running the stack — the poll policy, timers, steering between cores,
//! DHCP lease sharing, the [`NetStack`] API — is platform independent and lives in
//! `ebb-netstack`. What is hosted is here: the TAP queues (crate `ebb-tap`) and AF_XDP
//! sockets (crate `ebb-xdp`), how a queue reports readiness (its descriptor registered
//! with the core's epoll [`reactor`], edge-triggered for reading and writing) and where
//! the TCP initial-sequence-number secret comes from (the standard library's per-process
//! random keys). [`start`] opens the TAP queues and starts the stack, [`start_xdp`] the
//! AF_XDP sockets.
//!
//! The same application code runs over Linux sockets ([`crate::tcp`]) or over ebb-net:
//! [`NetStack::listen`] and [`NetStack::connect`] have the shape of [`crate::tcp::listen`]
//! and [`crate::tcp::connect`], and connections implement `ebb_core::net::TcpConnection`
//! with `ebb_core::net::TcpHandler`s, so handlers are written once.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::AsFd;
use std::rc::Rc;

use ebb_core::Instant;
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, DeviceError, DeviceReady, NetDevice, PlatformDevice,
    Readiness, RxFrame, TxFrame,
};
use rustix::event::epoll::EventFlags;

use crate::reactor::{self, PolledSource, PolledToken, Source, Token};
use ebb_tap::{TapConfig, TapDevice, TapError};
use ebb_xdp::{RxProbe, XdpConfig, XdpDevice, XdpError};

pub use ebb_netstack::{
    AddressConfig, CoreNetStack, FaultSetting, MAX_ROUNDS, MAX_STEERED_WAITING, NetListener,
    NetStack, NetStackCounters, NetStackError, NetStackRef, Placement, RunnerCounters, TcpConn,
};

/// Everything [`start`] needs: the TAP device and the stack's settings.
#[derive(Clone, Debug)]
pub struct TapNetStackConfig {
    /// The TAP device to create (name, MTU).
    pub tap: TapConfig,
    /// Our MAC address on the link.
    pub mac: EthernetAddress,
    /// Static address or DHCP.
    pub address: AddressConfig,
    /// Faults to inject, if any.
    pub faults: Option<FaultSetting>,
    /// TCP settings. [`TapNetStackConfig::new`] puts a fresh random ISN seed in.
    pub tcp: ebb_net::tcp::TcpConfig,
    /// TAP queues, one core each (see `ebb_netstack`, "Several cores"). Default 1.
    pub queues: usize,
}

impl TapNetStackConfig {
    /// TAP device `tap_name` (MTU 1500) with checksum and segmentation offload and large
    /// receive (a virtio-net header, as the native device offers), the MAC `02:eb:b0:00:00:01`,
    /// `address`, no faults, default TCP settings with a random ISN seed.
    pub fn new(tap_name: impl Into<String>, address: AddressConfig) -> Self {
        let stack = ebb_netstack::NetStackConfig::new(address, random_seed());
        Self {
            tap: TapConfig {
                vnet_hdr: true,
                large_receive: true,
                ..TapConfig::new(tap_name)
            },
            mac: stack.mac,
            address,
            faults: None,
            tcp: stack.tcp,
            queues: 1,
        }
    }
}

/// Two unpredictable words from the standard library's per-process random hash keys
/// (the ISN secret RFC 6528 asks for; ebb-net, being `no_std`, cannot make one).
pub fn random_seed() -> [u64; 2] {
    let state = std::collections::hash_map::RandomState::new();
    let mut a = state.build_hasher();
    a.write_u64(0x6562_625f_6973_6e30);
    let mut b = state.build_hasher();
    b.write_u64(0x6562_625f_6973_6e31);
    [a.finish(), b.finish()]
}

/// Why [`start`] or [`start_xdp`] failed.
#[derive(Debug, thiserror::Error)]
pub enum HostedStartError {
    /// The TAP device could not be created.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// An AF_XDP socket could not be opened on the interface.
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The stack could not start on its devices.
    #[error(transparent)]
    Stack(#[from] NetStackError),
}

/// Creates the TAP device (with [`TapNetStackConfig::queues`] queues) and starts the stack
/// on the calling core, which must be a hosted Ebbflow core, and with several queues on
/// the next cores (see [`NetStack::start`]). The Linux side of the device still has to
/// be configured (`ip link set NAME up`, an address, or moved into a namespace).
pub fn start(config: TapNetStackConfig) -> Result<NetStack, HostedStartError> {
    let queues = config.queues;
    let cores = ebb_core::event::num_cores();
    if queues == 0 || queues > cores {
        return Err(NetStackError::TooManyQueues { queues, cores }.into());
    }
    let mut tap_config = config.tap.clone();
    tap_config.queues = queues;
    let devices = TapDevice::open_queues(&tap_config)?
        .into_iter()
        .map(|tap| Box::new(TapQueue { tap, token: None }) as ebb_netstack::SendableDevice)
        .collect();
    let stack = ebb_netstack::NetStackConfig {
        mac: config.mac,
        address: config.address,
        faults: config.faults,
        tcp: config.tcp,
    };
    Ok(NetStack::start(devices, stack)?)
}

/// One TAP queue as the runtime drives it: reports readiness through the core's reactor.
struct TapQueue {
    tap: TapDevice,
    /// The reactor registration while watched.
    token: Option<Token>,
}

/// The reactor's view of a watched queue: forwards epoll edges to the runtime.
struct TapSource(DeviceReady);

impl Source for TapSource {
    fn ready(self: Rc<Self>, flags: EventFlags) {
        self.0.ready(Readiness {
            readable: flags.intersects(EventFlags::IN | EventFlags::ERR | EventFlags::HUP),
            writable: flags.contains(EventFlags::OUT),
        });
    }
}

impl PlatformDevice for TapQueue {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        let token = reactor::register(
            self.tap.as_fd(),
            EventFlags::IN | EventFlags::OUT,
            Rc::new(TapSource(ready)),
        )
        .map_err(|e| DeviceError(format!("cannot watch TAP device {}: {e}", self.tap.name())))?;
        self.token = Some(token);
        Ok(())
    }

    fn unwatch(&mut self) {
        if let Some(token) = self.token.take() {
            let _ = reactor::deregister(self.tap.as_fd(), token);
        }
    }

    fn name(&self) -> String {
        self.tap.name().to_string()
    }

    fn io_errors(&self) -> u64 {
        self.tap.io_errors()
    }
}

impl NetDevice for TapQueue {
    fn capabilities(&self) -> DeviceCapabilities {
        self.tap.capabilities()
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.tap.receive(now, out, max)
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.tap.transmit(now, frames)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.tap.poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        self.tap.counters()
    }
}

/// Everything [`start_xdp`] needs: the interface, its queues and the stack's settings.
#[derive(Clone, Debug)]
pub struct XdpNetStackConfig {
    /// The interface (it must exist; a veth end, say).
    pub interface: String,
    /// Its queues used, `0..queues`, one AF_XDP socket and one core each. Default 1.
    pub queues: usize,
    /// ebb-net's IP MTU on it (at most what a UMEM chunk holds: `XdpDevice::open`
    /// says). Default 1500.
    pub mtu: usize,
    /// Static address or DHCP.
    pub address: AddressConfig,
    /// Faults to inject, if any.
    pub faults: Option<FaultSetting>,
    /// TCP settings. [`XdpNetStackConfig::new`] puts a fresh random ISN seed in.
    pub tcp: ebb_net::tcp::TcpConfig,
}

impl XdpNetStackConfig {
    /// Interface `interface`, one queue, MTU 1500, `address`, no faults, default TCP
    /// settings with a random ISN seed.
    pub fn new(interface: impl Into<String>, address: AddressConfig) -> Self {
        let stack = ebb_netstack::NetStackConfig::new(address, random_seed());
        Self {
            interface: interface.into(),
            queues: 1,
            mtu: 1500,
            address,
            faults: None,
            tcp: stack.tcp,
        }
    }
}

/// Opens one AF_XDP socket per queue of the interface and starts the stack on the calling
/// core, which must be a hosted Ebbflow core, and with several queues on the next cores
/// (see [`NetStack::start`]). ebb-net takes the interface's MAC address: Linux's peer
/// reaches it as it reached the interface. Every frame arriving on the interface goes to
/// the sockets (ebb-xdp's redirect program), so Linux no longer sees any.
pub fn start_xdp(config: XdpNetStackConfig) -> Result<NetStack, HostedStartError> {
    let queues = config.queues;
    let cores = ebb_core::event::num_cores();
    if queues == 0 || queues > cores {
        return Err(NetStackError::TooManyQueues { queues, cores }.into());
    }
    let mut devices: Vec<ebb_netstack::SendableDevice> = Vec::with_capacity(queues);
    for queue in 0..queues {
        let mut xdp = XdpConfig::new(&config.interface);
        xdp.queue = queue as u32;
        xdp.mtu = config.mtu;
        devices.push(Box::new(XdpQueue {
            xdp: XdpDevice::open(&xdp)?,
            token: None,
        }));
    }
    let mut stack = ebb_netstack::NetStackConfig::new(config.address, [0, 0]);
    stack.mac = interface_mac(&config.interface).unwrap_or(stack.mac);
    stack.faults = config.faults;
    stack.tcp = config.tcp;
    Ok(NetStack::start(devices, stack)?)
}

/// The MAC address of `interface` (from sysfs), if it has one.
fn interface_mac(interface: &str) -> Option<EthernetAddress> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{interface}/address")).ok()?;
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    (parts.next().is_none() && mac != [0; 6]).then_some(EthernetAddress(mac))
}

/// One AF_XDP socket as the runtime drives it: reports readiness through the core's
/// reactor, as a TAP queue does.
///
/// Its RX ring is also polled in memory ([`RxProbe`], a [`PolledSource`]): a core that
/// spins before sleeping sees arriving frames without asking epoll, which it then asks
/// only now and then (`platform::EPOLL_INTERVAL`). The socket stays in epoll for sleeps.
struct XdpQueue {
    xdp: XdpDevice,
    /// The reactor registrations while watched: epoll, and the memory poll.
    token: Option<(Token, PolledToken)>,
}

/// An AF_XDP queue's RX ring as its core polls it while spinning.
struct XdpRingSource {
    probe: RxProbe,
    ready: DeviceReady,
}

impl PolledSource for XdpRingSource {
    fn has_work(&self) -> bool {
        self.probe.has_received()
    }
    fn dispatch(self: Rc<Self>) {
        self.ready.ready(Readiness {
            readable: true,
            writable: false,
        });
    }
}

impl PlatformDevice for XdpQueue {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        let name = self.name();
        let token = reactor::register(
            self.xdp.as_fd(),
            EventFlags::IN | EventFlags::OUT,
            Rc::new(TapSource(ready.clone())),
        )
        .map_err(|e| DeviceError(format!("cannot watch AF_XDP socket {name}: {e}")))?;
        let ring = Rc::new(XdpRingSource {
            probe: self.xdp.rx_probe(),
            ready,
        });
        let polled = match reactor::register_polled(ring) {
            Ok(polled) => polled,
            Err(e) => {
                let _ = reactor::deregister(self.xdp.as_fd(), token);
                return Err(DeviceError(format!(
                    "cannot poll AF_XDP socket {name}'s ring: {e}"
                )));
            }
        };
        self.token = Some((token, polled));
        Ok(())
    }

    fn unwatch(&mut self) {
        if let Some((token, polled)) = self.token.take() {
            let _ = reactor::deregister(self.xdp.as_fd(), token);
            reactor::deregister_polled(polled);
        }
    }

    fn name(&self) -> String {
        self.xdp.interface().to_string()
    }

    fn io_errors(&self) -> u64 {
        self.xdp.io_errors()
    }
}

impl NetDevice for XdpQueue {
    fn capabilities(&self) -> DeviceCapabilities {
        self.xdp.capabilities()
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.xdp.receive(now, out, max)
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.xdp.transmit(now, frames)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.xdp.poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        self.xdp.counters()
    }
}
