//! ebb-net's own TCP/IP stack in the process, over a TAP device: the hosted platform's
//! part of [`ebb_netstack`].
//!
//! Everything about running the stack — the poll policy, timers, steering between cores,
//! DHCP lease sharing, the [`NetStack`] API — is platform independent and lives in
//! `ebb-netstack`. What is hosted is here: the TAP queues (crate `ebb-tap`), how a queue
//! reports readiness (its descriptor registered with the core's epoll [`reactor`],
//! edge-triggered for reading and writing) and where the TCP initial-sequence-number
//! secret comes from (the standard library's per-process random keys). [`start`] opens
//! the queues and starts the stack.
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

use crate::reactor::{self, Source, Token};
use ebb_tap::{TapConfig, TapDevice, TapError};

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

/// Why [`start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum TapStartError {
    /// The TAP device could not be created.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// The stack could not start on its devices.
    #[error(transparent)]
    Stack(#[from] NetStackError),
}

/// Creates the TAP device (with [`TapNetStackConfig::queues`] queues) and starts the stack
/// on the calling core, which must be a hosted Ebbflow core, and with several queues on
/// the next cores (see [`NetStack::start`]). The Linux side of the device still has to
/// be configured (`ip link set NAME up`, an address, or moved into a namespace).
pub fn start(config: TapNetStackConfig) -> Result<NetStack, TapStartError> {
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
