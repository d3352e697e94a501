//! # ebb-netstack — ebb-net on an Ebbflow event loop, on any platform
//!
//! [`NetStack`] runs ebb-net's own TCP/IP stack on the cores of an Ebbflow runtime, over
//! whatever queue pairs the platform has: TAP queues hosted (`ebb-hosted`), virtio-net
//! queue pairs natively (`ebb-native`), or `ebb_net_driver::Link` ends in tests. The
//! platform supplies each queue pair as a [`PlatformDevice`] (from `ebb-net-driver`): a
//! `NetDevice` that can report its readiness on its core. Everything else — the poll policy,
//! the deadline timer, the idle handler, forwarding frames between cores, DHCP lease sharing,
//! listening on every core — is here, once, on top of `ebb_core::event`, like embassy-net's
//! `Stack::run` apart from its device drivers.
//!
//! Connections implement `ebb_core::net::TcpConnection` with `ebb_core::net::TcpHandler`s,
//! so handlers written for Linux sockets run over ebb-net unchanged.
//!
//! # How the stack is driven
//!
//! `ebb_net::stack::Stack::poll(now)` does all the stack's work and returns when it wants
//! to be called again. Three event sources call it, all on the core that started the
//! stack, and none of them spins when there is nothing to do:
//!
//! * **the device's readiness** ([`PlatformDevice::watch`]): an epoll edge on the TAP
//!   descriptor hosted, a used ring that moved natively. A readable report polls at once.
//!   A writable report polls only when the device pushed back on transmit (frames left in
//!   the interface's queue): then the runner stops polling from the idle handler and
//!   waits for that report instead of retrying in a loop (with a 1 ms timer as a
//!   backstop, since the fault injector can hold frames back without the device being
//!   full);
//! * **a timer task** (`spawn_local` + `sleep_until`) sleeping until the stack's next
//!   deadline (TCP retransmission, delayed ACK, ARP, DHCP, the fault injector's held
//!   frames). After every poll the runner records the new deadline and wakes the task if
//!   it is earlier than the one it sleeps on; a later one is picked up when it fires
//!   (an early poll is harmless: it finds nothing due and re-arms);
//! * **an idle handler** that polls when the application acted on a connection outside a
//!   stack call (TCP's *polling contract*: `TcpLayer::needs_poll()`), and when the last
//!   poll left work (a receive burst longer than one poll takes). It reports
//!   [`IdleStatus::Busy`](ebb_core::event::IdleStatus::Busy) only while such work remains, so an idle core sleeps (in epoll hosted, in the WAIT hypercall natively).
//!
//! # Invariants
//!
//! * Everything lives on one core: the stack, its connections and every callback. The
//!   handle is `!Send`.
//! * The `Stack` is borrowed only inside the runner's poll (and the short accessors
//!   below). Application callbacks run inside `poll` (TCP delivers events at the end of
//!   its calls), so they must not call methods that need the stack borrowed — they get
//!   [`NetStackError::Busy`] (counters) instead of a panic. `listen`, `connect` and every
//!   connection method go through a separate `TcpLayer` handle and are always allowed.
//! * A poll runs at most [`MAX_ROUNDS`] rounds back to back; work left after that is
//!   picked up by the idle handler on the next loop iteration, so other tasks and
//!   devices on the core still get their turn.
//! * After [`NetStack::shutdown`] the device is unwatched, the idle handler removed and
//!   the timer task finished; the device closes when the `NetStack` drops.
//!
//! # Several cores
//!
//! Given `n > 1` devices (queue pairs of one NIC) the stack runs on `n` cores: the calling core (the *home* core, which also runs UDP)
//! and the next `n − 1`. Each core drives its own queue with its own `Stack` — interface,
//! ARP cache, TCP layer, timers — exactly as above; what they share is an
//! `ebb_net::steering::FlowDirectory`: which core owns each connection (an RCU hash map
//! read without locks on every received frame) and how each listening port places new
//! connections ([`Placement`]). Every frame a queue receives is *steered* before the
//! interface sees it: frames of a connection owned elsewhere (or UDP, for the home core)
//! are batched per destination and sent to their core as one `spawn_on` message per
//! batch and poll, zero copy (the `IOBuf`s move); ARP replies are copied to every core.
//! The per-core runners are the representatives of a `MulticoreEbb`, which is how a
//! message finds the runner of the core it runs on.
//! Linux's TAP steers a flow to the queue that last transmitted it, so after a
//! connection's first segment from its owner, its frames arrive at the owner's queue and
//! nothing is forwarded (the counters in [`RunnerCounters`] show it).
//!
//! * [`NetStack::listen_on_every_core`] listens on every core; the [`Placement`] decides
//!   the owner of each accepted connection (default: the core that received the SYN),
//!   and `on_accept` runs there. [`NetStack::listen`] on a multi-core stack places every
//!   connection on the home core.
//! * [`NetStack::connect`] connects from the home core; [`NetStackRef::on_this_core`]
//!   gives any core of the stack its own [`CoreNetStack`] to connect from (the
//!   connection is owned by that core).
//! * With DHCP, only the home core runs the client (its UDP frames are steered there);
//!   each time the lease's address or gateway changes, the home core sends it to the
//!   other cores, whose interfaces are `Managed` (`Interface::set_address`).
//!
//! # Tests
//!
//! `tests/` runs this crate without root and in virtual time: ebb-core's `TestPlatform`
//! drives the cores, and `tests/common` supplies queue pairs over `ebb_net_driver::Link`
//! ends whose readiness reaches their core as an injected device event. One core: the
//! poll policy, sleeping, the deadline timer, transmit push-back, shutdown
//! (`tests/single_core.rs`); two cores: placement, steering and its bound
//! (`tests/multicore.rs`).
//!
//! # Not done
//!
//! UDP and ping are reached through [`NetStack::with_interface`] on the home core,
//! without their own futures.

#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod counters;
mod error;
mod forwarding;
mod runner;

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::future::Future;
use core::net::{Ipv4Addr, SocketAddrV4};

use ebb_core::ebb::MulticoreEbb;
use ebb_core::event;
use ebb_core::future::promise;
use ebb_core::net::TcpErrorKind;
use ebb_core::{CoreId, Instant};
use ebb_net::iface::{Interface, InterfaceConfig, Ipv4Cidr};
use ebb_net::steering::FlowDirectory;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::PlatformDevice;
use ebb_net_driver::{FaultConfig, FaultInjector};

pub use counters::{NetStackCounters, RunnerCounters};
pub use ebb_net::steering::Placement;
pub use ebb_net::tcp::TcpConn;

pub use error::NetStackError;
pub use runner::{MAX_ROUNDS, MAX_STEERED_WAITING};

use runner::{CorePart, CoreRunner, MultiCore, NO_PART_HERE, StackParts, local_runner};

/// Connections that may wait for a handler per listener (the `backlog` of
/// `TcpLayer::listen`).
const LISTEN_BACKLOG: usize = 128;

/// A device as [`NetStack::start`] takes it: `Send`, because every device but the home
/// core's moves to the core that will drive it. A device becomes tied to its core only
/// when the runtime calls [`PlatformDevice::watch`] there (a hosted one registers with
/// that core's reactor, a native one with its poll list).
pub type SendableDevice = Box<dyn PlatformDevice + Send>;

/// How the interface gets its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressConfig {
    /// A fixed address and prefix, and optionally a default gateway.
    Static {
        /// Our address and subnet.
        cidr: Ipv4Cidr,
        /// The default gateway, if any.
        gateway: Option<Ipv4Addr>,
    },
    /// A lease from a DHCP server (see [`NetStack::wait_for_address`]).
    Dhcp,
}

/// Seeded fault injection on every queue pair: `config` applies to both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultSetting {
    /// The faults, on received and on transmitted frames alike.
    pub config: FaultConfig,
    /// Fixes every random choice: the same seed and traffic make the same faults.
    pub seed: u64,
}

/// Everything [`NetStack::start`] needs besides its devices.
#[derive(Clone, Debug)]
pub struct NetStackConfig {
    /// Our MAC address on the link.
    pub mac: EthernetAddress,
    /// Static address or DHCP.
    pub address: AddressConfig,
    /// Faults to inject, if any.
    pub faults: Option<FaultSetting>,
    /// TCP settings; `tcp.isn_seed` should be secret and fresh for every stack (RFC
    /// 6528): the platform makes it, since this crate cannot.
    pub tcp: TcpConfig,
}

impl NetStackConfig {
    /// The MAC `02:eb:b0:00:00:01`, `address`, no faults, default TCP settings with
    /// `isn_seed`.
    pub fn new(address: AddressConfig, isn_seed: [u64; 2]) -> Self {
        Self {
            mac: EthernetAddress([0x02, 0xeb, 0xb0, 0, 0, 1]),
            address,
            faults: None,
            tcp: TcpConfig {
                isn_seed,
                ..TcpConfig::default()
            },
        }
    }
}

/// A listening port on the ebb-net stack.
#[derive(Debug)]
pub struct NetListener {
    addr: SocketAddrV4,
    tcp: TcpLayer,
    /// For a listener on every core: the stack, to close it on each.
    everywhere: Option<(MultiCore, Vec<CoreId>)>,
}

impl core::fmt::Debug for MultiCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MultiCore")
            .field("id", &self.id)
            .field("directory", &self.directory)
            .finish()
    }
}

impl NetListener {
    /// The address listened on (`0.0.0.0:port`: every address of the interface).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Stops accepting (on every core, for [`NetStack::listen_on_every_core`]; the other
    /// cores stop when their next event runs). Established connections are not affected.
    pub fn close(&self) {
        self.tcp.unlisten(self.addr);
        if let Some((multi, cores)) = &self.everywhere {
            multi.directory.clear_placement(self.addr.port());
            for &core in cores {
                let (id, addr) = (multi.id, self.addr);
                let _ = event::spawn_on(core, move || {
                    if let Some(runner) = local_runner(id) {
                        runner.tcp.unlisten(addr);
                    }
                });
            }
        }
    }
}

/// ebb-net on the platform's devices, driven by the calling core's event loop (and, with
/// several queue pairs, the next cores'): see the crate docs.
pub struct NetStack {
    /// The home core's runner.
    runner: Rc<CoreRunner>,
    multi: Option<MultiCore>,
}

/// A handle on a [`NetStack`] that any core can hold (`Send + Sync`): it finds the
/// calling core's part of the stack.
#[derive(Clone, Debug)]
pub struct NetStackRef {
    id: StackParts,
    home: CoreId,
}

impl NetStackRef {
    /// The calling core's part of the stack, to connect from (or
    /// [`NetStackError::NotOnThisCore`]). On a single-queue stack only the home core
    /// has one; none is left after [`NetStack::shutdown`].
    pub fn on_this_core(&self) -> Result<CoreNetStack, NetStackError> {
        local_runner(self.id)
            .map(|runner| CoreNetStack { runner })
            .ok_or(NetStackError::NotOnThisCore(event::core_id().0))
    }

    /// The home core.
    pub fn home(&self) -> CoreId {
        self.home
    }
}

/// One core's part of a multi-core [`NetStack`] (`!Send`: it stays on its core).
pub struct CoreNetStack {
    runner: Rc<CoreRunner>,
}

impl CoreNetStack {
    /// Connects from this core: the connection is owned by it, and its handler runs
    /// here. As [`NetStack::connect`].
    pub fn connect(
        &self,
        remote: SocketAddrV4,
    ) -> impl Future<Output = Result<TcpConn, TcpErrorKind>> + 'static {
        self.runner.connect(remote)
    }

    /// This core's counters ([`NetStackError::Busy`] inside a callback).
    pub fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        self.runner.counters()
    }

    /// The core.
    pub fn core(&self) -> CoreId {
        self.runner.core
    }
}

impl NetStack {
    /// Starts the stack on the calling core (which must be an Ebbflow core) over
    /// `devices[0]` and, given several devices (queue pairs of one NIC), on the next
    /// cores too, one device each: they start when their loops next run, before any later
    /// cross-core request such as [`listen_on_every_core`](Self::listen_on_every_core).
    /// With `config.faults`, each device is wrapped in a fault injector (seed + queue).
    pub fn start(
        devices: Vec<SendableDevice>,
        config: NetStackConfig,
    ) -> Result<NetStack, NetStackError> {
        let queues = devices.len();
        let cores = event::num_cores();
        if queues == 0 {
            return Err(NetStackError::NoDevice);
        }
        if queues > cores {
            return Err(NetStackError::TooManyQueues { queues, cores });
        }
        let iface = match config.address {
            AddressConfig::Static { cidr, gateway } => {
                InterfaceConfig::new_static(config.mac, cidr, gateway)
            }
            AddressConfig::Dhcp => InterfaceConfig::new_dhcp(config.mac),
        };
        let link = |device: SendableDevice, queue: u64| -> SendableDevice {
            match config.faults {
                None => device,
                Some(faults) => Box::new(
                    FaultInjector::new(device, faults.seed.wrapping_add(queue))
                        .with_rx_faults(faults.config)
                        .with_tx_faults(faults.config),
                ),
            }
        };
        let mut devices = devices.into_iter();
        let home = event::core_id();
        let id: StackParts =
            MulticoreEbb::create(|_| CorePart(RefCell::new(None))).map_err(NetStackError::Ebb)?;
        let multi = (queues > 1).then(|| {
            let others = (0..cores as u32).map(CoreId).filter(|&c| c != home);
            let stack_cores = core::iter::once(home).chain(others).take(queues).collect();
            let domain = event::Handle::current()
                .map(|h| h.rcu().clone())
                .unwrap_or_else(|| unreachable!("event::core_id() ran, so this is a core"));
            MultiCore {
                id,
                directory: Arc::new(FlowDirectory::new(domain, stack_cores)),
            }
        });
        let first = devices
            .next()
            .unwrap_or_else(|| unreachable!("there is at least one device"));
        let runner =
            CoreRunner::start(id, link(first, 0), iface, config.tcp.clone(), multi.clone())?;
        if let Some(multi) = &multi {
            for (queue, (device, &core)) in devices.zip(&multi.directory.cores()[1..]).enumerate() {
                let device = link(device, queue as u64 + 1);
                // With DHCP only the home core runs the client; the others take the
                // address it leases (see `CoreRunner::share_address`).
                let iface = match config.address {
                    AddressConfig::Dhcp => InterfaceConfig::new_managed(config.mac),
                    AddressConfig::Static { .. } => iface,
                };
                let (tcp, part) = (config.tcp.clone(), multi.clone());
                let sent = event::spawn_on(core, move || {
                    if let Err(e) = CoreRunner::start(id, device, iface, tcp, Some(part)) {
                        log::error!("network stack queue {} on core {}: {e}", queue + 1, core.0);
                    }
                });
                if sent.is_err() {
                    runner.stop();
                    return Err(NetStackError::NotOnThisCore(core.0));
                }
            }
        }
        Ok(NetStack { runner, multi })
    }

    /// The home core's device name (the TAP interface, the virtio queue pair).
    pub fn device_name(&self) -> Result<alloc::string::String, NetStackError> {
        let stack = self
            .runner
            .stack
            .try_borrow()
            .map_err(|_| NetStackError::Busy)?;
        Ok(stack.device().name())
    }

    /// Our address, once configured.
    pub fn address(&self) -> Option<Ipv4Cidr> {
        self.runner.address.get()
    }

    /// The cores running a queue, home core first.
    pub fn cores(&self) -> Vec<CoreId> {
        match &self.multi {
            Some(multi) => multi.directory.cores().to_vec(),
            None => vec![self.runner.core],
        }
    }

    /// A handle any core can use to reach its part of the stack.
    pub fn handle(&self) -> NetStackRef {
        NetStackRef {
            id: self.runner.id,
            home: self.runner.core,
        }
    }

    /// Resolves once every core's part runs (at once with one queue), or with the
    /// error of a core whose part did not start.
    pub fn ready(&self) -> impl Future<Output = Result<(), NetStackError>> + 'static {
        let multi = self.multi.clone();
        async move {
            let Some(multi) = multi else { return Ok(()) };
            for &core in multi.directory.cores() {
                let id = multi.id;
                let running = event::run_on(core, move || local_runner(id).is_some())
                    .await
                    .unwrap_or(false);
                if !running {
                    return Err(NetStackError::NotOnThisCore(core.0));
                }
            }
            Ok(())
        }
    }

    /// Resolves with our address: at once for a static one, when the lease is bound with
    /// DHCP (wrap it in `ebb_core::event::timeout` to bound the wait).
    pub fn wait_for_address(
        &self,
    ) -> impl Future<Output = Result<Ipv4Cidr, NetStackError>> + 'static {
        let known = self.runner.address.get();
        let waiting = known.is_none().then(|| {
            let (tx, rx) = promise();
            self.runner.address_waiters.borrow_mut().push(tx);
            rx
        });
        async move {
            match (known, waiting) {
                (Some(cidr), _) => Ok(cidr),
                (None, Some(rx)) => rx.await.unwrap_or(Err(NetStackError::ShutDown)),
                (None, None) => Err(NetStackError::ShutDown),
            }
        }
    }

    /// Listens on `port` of every address of the interface; `on_accept` gets each
    /// connection once its handshake completes and installs its handler
    /// (`conn.set_handler(..)`), as with the hosted runtime's `tcp::listen` over Linux sockets. On a multi-core stack
    /// every connection to `port` is placed on the home core, where `on_accept` runs
    /// (see [`listen_on_every_core`](Self::listen_on_every_core) to spread them).
    pub fn listen(
        &self,
        port: u16,
        on_accept: impl FnMut(TcpConn) + 'static,
    ) -> Result<NetListener, TcpErrorKind> {
        let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        self.runner.tcp.listen(addr, LISTEN_BACKLOG, on_accept)?;
        if let Some(multi) = &self.multi {
            multi
                .directory
                .set_placement(port, Placement::Core(self.runner.core));
        }
        Ok(NetListener {
            addr,
            tcp: self.runner.tcp.clone(),
            everywhere: None,
        })
    }

    /// Listens on `port` on every core of the stack. `placement` picks the core that
    /// owns each new connection; `on_accept` runs there (so it must be `Send + Sync`; it
    /// installs the connection's handler, which stays on that core). Resolves once every
    /// core listens. On a single-queue stack this is [`listen`](Self::listen).
    pub fn listen_on_every_core(
        &self,
        port: u16,
        placement: Placement,
        on_accept: impl Fn(TcpConn) + Send + Sync + 'static,
    ) -> impl Future<Output = Result<NetListener, TcpErrorKind>> + 'static {
        let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        let home_tcp = self.runner.tcp.clone();
        let multi = self.multi.clone();
        let on_accept = Arc::new(on_accept);
        async move {
            let Some(multi) = multi else {
                home_tcp.listen(addr, LISTEN_BACKLOG, move |conn| on_accept(conn))?;
                return Ok(NetListener {
                    addr,
                    tcp: home_tcp,
                    everywhere: None,
                });
            };
            multi.directory.set_placement(port, placement);
            let cores = multi.directory.cores().to_vec();
            for (listening, &core) in cores.iter().enumerate() {
                let (id, on_accept) = (multi.id, on_accept.clone());
                let listened = event::run_on(core, move || match local_runner(id) {
                    None => Err(TcpErrorKind::Other(NO_PART_HERE)),
                    Some(runner) => runner
                        .tcp
                        .listen(addr, LISTEN_BACKLOG, move |conn| on_accept(conn)),
                })
                .await
                .unwrap_or(Err(TcpErrorKind::Other(NO_PART_HERE)));
                if let Err(e) = listened {
                    // Undo what the cores before this one did.
                    multi.directory.clear_placement(port);
                    for &core in &cores[..listening] {
                        let id = multi.id;
                        let _ = event::spawn_on(core, move || {
                            if let Some(runner) = local_runner(id) {
                                runner.tcp.unlisten(addr);
                            }
                        });
                    }
                    return Err(e);
                }
            }
            let others = cores
                .into_iter()
                .filter(|&c| c != event::core_id())
                .collect();
            Ok(NetListener {
                addr,
                tcp: home_tcp,
                everywhere: Some((multi, others)),
            })
        }
    }

    /// Connects to `remote` from our address and an ephemeral port, owned by the home
    /// core. Resolves with the established connection, or `ConnectionRefused`,
    /// `TimedOut`; `AddressNotAvailable` while we have no address.
    pub fn connect(
        &self,
        remote: SocketAddrV4,
    ) -> impl Future<Output = Result<TcpConn, TcpErrorKind>> + 'static {
        self.runner.connect(remote)
    }

    /// Connections the stack's cores own, in every state (TIME-WAIT included): the flow
    /// directory's entries on a multi-core stack (every core's, as its owner claimed
    /// them), the TCP layer's connections on one core.
    pub fn owned_connections(&self) -> usize {
        match &self.multi {
            Some(multi) => multi.directory.connection_count(),
            None => self.runner.tcp.connection_count(),
        }
    }

    /// The home core's TCP layer (its configuration, connection count, `listen` with an
    /// exact address).
    pub fn tcp(&self) -> &TcpLayer {
        &self.runner.tcp
    }

    /// Runs `f` on the home core's interface (UDP sockets, ping, ARP cache), then polls
    /// so whatever it queued is sent. Not from inside a connection callback
    /// ([`NetStackError::Busy`]).
    pub fn with_interface<R>(
        &self,
        f: impl FnOnce(Instant, &mut Interface) -> R,
    ) -> Result<R, NetStackError> {
        let result = {
            let mut stack = self
                .runner
                .stack
                .try_borrow_mut()
                .map_err(|_| NetStackError::Busy)?;
            f(event::now(), stack.iface_mut())
        };
        self.runner.poll_now();
        Ok(result)
    }

    /// Every counter of the home core: interface, TCP, device, faults, runner. Not from
    /// inside a connection callback ([`NetStackError::Busy`]).
    pub fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        self.runner.counters()
    }

    /// Every core's counters, home core first.
    pub fn counters_per_core(
        &self,
    ) -> impl Future<Output = Vec<(CoreId, Result<NetStackCounters, NetStackError>)>> + 'static
    {
        let multi = self.multi.clone();
        let home = self.runner.clone();
        async move {
            let Some(multi) = multi else {
                return vec![(home.core, home.counters())];
            };
            let mut all = Vec::new();
            for &core in multi.directory.cores() {
                let id = multi.id;
                let counters = event::run_on(core, move || match local_runner(id) {
                    Some(runner) => runner.counters(),
                    None => Err(NetStackError::NotOnThisCore(core.0)),
                })
                .await
                .unwrap_or(Err(NetStackError::NotOnThisCore(core.0)));
                all.push((core, counters));
            }
            all
        }
    }

    /// How the home core drove the stack so far (always available).
    pub fn runner_counters(&self) -> RunnerCounters {
        *self.runner.counters.borrow()
    }

    /// Stops the stack in order: no more accepting, one last poll to send what is
    /// queued (FINs, ACKs), then the descriptor leaves the reactor and the idle handler
    /// and the timer task end (the TAP device closes when the `NetStack` is dropped; the
    /// counters can still be read until then). The other cores of a multi-core stack
    /// stop when their loops next run. Connections still open are abandoned without a
    /// reset: close them and wait for `closed` first for a clean end. Returns the home
    /// core's final counters.
    /// Call it once, not from inside a connection callback ([`NetStackError::Busy`],
    /// and nothing is stopped); a second call returns [`NetStackError::ShutDown`].
    pub fn shutdown(&self) -> Result<NetStackCounters, NetStackError> {
        let runner = &self.runner;
        if runner.stopped.get() {
            return Err(NetStackError::ShutDown);
        }
        // Refused from inside a callback before anything is stopped.
        runner.counters()?;
        // `stop` makes the last poll: the counters are read after it, so they are final.
        runner.stop();
        let counters = runner.counters()?;
        if let Some(multi) = &self.multi {
            for &core in &multi.directory.cores()[1..] {
                let id = multi.id;
                let _ = event::spawn_on(core, move || {
                    if let Some(runner) = local_runner(id) {
                        runner.stop();
                    }
                });
            }
        }
        Ok(counters)
    }
}

impl core::fmt::Debug for NetStack {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NetStack")
            .field("address", &self.runner.address.get())
            .field("runner", &*self.runner.counters.borrow())
            .finish()
    }
}
