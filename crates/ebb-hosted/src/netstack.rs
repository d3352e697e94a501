//! [`NetStack`]: ebb-net's own TCP/IP stack running on the calling core of the hosted
//! runtime, over a TAP device (optionally through a seeded fault injector).
//!
//! The same application code runs over Linux sockets ([`crate::tcp`]) or over ebb-net:
//! [`NetStack::listen`] and [`NetStack::connect`] have the shape of [`crate::tcp::listen`]
//! and [`crate::tcp::connect`], and connections implement `ebb_core::net::TcpConnection`
//! with `ebb_core::net::TcpHandler`s, so handlers are written once.
//!
//! # How the stack is driven
//!
//! `ebb_net::stack::Stack::poll(now)` does all the stack's work and returns when it wants
//! to be called again. Three event sources call it, all on the core that started the
//! stack, and none of them spins when there is nothing to do:
//!
//! * **the TAP descriptor**, registered with the core's [`reactor`] edge-triggered for
//!   reading and writing. A readable edge polls at once. A writable edge polls only when
//!   the device pushed back on transmit (frames left in the interface's queue): then the
//!   driver stops polling from the idle handler and waits for that edge instead of
//!   retrying in a loop (with a 1 ms timer as a backstop, since the fault injector can
//!   hold frames back without the descriptor being full);
//! * **a timer task** (`spawn_local` + `sleep_until`) sleeping until the stack's next
//!   deadline (TCP retransmission, delayed ACK, ARP, DHCP, the fault injector's held
//!   frames). After every poll the driver records the new deadline and wakes the task if
//!   it is earlier than the one it sleeps on; a later one is picked up when it fires
//!   (an early poll is harmless: it finds nothing due and re-arms);
//! * **an idle handler** that polls when the application acted on a connection outside a
//!   stack call (TCP's *polling contract*: `TcpLayer::needs_poll()`), and when the last
//!   poll left work (a receive burst longer than one poll takes). It reports
//!   [`IdleStatus::Busy`] only while such work remains, so an idle core sleeps in epoll.
//!
//! # Invariants
//!
//! * Everything lives on one core: the stack, its connections and every callback. The
//!   handle is `!Send`.
//! * The `Stack` is borrowed only inside the driver's poll (and the short accessors
//!   below). Application callbacks run inside `poll` (TCP delivers events at the end of
//!   its calls), so they must not call methods that need the stack borrowed — they get
//!   [`NetStackError::Busy`] (counters) instead of a panic. `listen`, `connect` and every
//!   connection method go through a separate `TcpLayer` handle and are always allowed.
//! * A poll runs at most [`MAX_ROUNDS`] rounds back to back; work left after that is
//!   picked up by the idle handler on the next loop iteration, so other tasks and
//!   devices on the core still get their turn.
//! * After [`NetStack::shutdown`] the descriptor is deregistered, the idle handler
//!   removed and the timer task finished; the device closes when the `NetStack` drops.
//!
//! # Several cores
//!
//! With [`NetStackConfig::queues`] `= n > 1` the TAP device is opened with `n` queues and
//! the stack runs on `n` cores: the calling core (the *home* core, which also runs UDP)
//! and the next `n − 1`. Each core drives its own queue with its own `Stack` — interface,
//! ARP cache, TCP layer, timers — exactly as above; what they share is an
//! `ebb_net::dispatch::FlowDirectory`: which core owns each connection (an RCU hash map
//! read without locks on every received frame) and how each listening port places new
//! connections ([`Placement`]). Every frame a queue receives is *steered* before the
//! interface sees it: frames of a connection owned elsewhere (or UDP, for the home core)
//! are batched per destination and sent to their core as one `spawn_on` message per
//! batch and poll, zero copy (the `IOBuf`s move); ARP replies are copied to every core.
//! The per-core drivers are the representatives of a `MulticoreEbb`, which is how a
//! message finds the driver of the core it runs on.
//! Linux steers a flow to the queue that last transmitted it, so after a connection's
//! first segment from its owner, its frames arrive at the owner's queue and nothing is
//! forwarded (the counters in [`DriverCounters`] show it).
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
//! # Not done
//!
//! UDP and ping are reached through [`NetStack::with_interface`] on the home core,
//! without their own futures.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ebb_core::ebb::{EbbRef, MulticoreEbb};
use ebb_core::event::{self, IdleId, IdleStatus, Sleep};
use ebb_core::future::{Promise, promise};
use ebb_core::net::TcpErrorKind;
use ebb_core::{CoreId, IOBuf, IOBufChain, Instant};
use ebb_net::dispatch::{FlowDirectory, Steer};
use ebb_net::iface::{Interface, InterfaceConfig, InterfaceCounters, Ipv4Cidr};
use ebb_net::phy::{
    DeviceCapabilities, DeviceCounters, FaultConfig, FaultInjector, FaultStats, NetDevice,
};
use ebb_net::stack::{FrameSteering, Stack};
use ebb_net::tcp::{TcpConfig, TcpCounters, TcpLayer};
use ebb_net::wire::EthernetAddress;
use rustix::event::epoll::EventFlags;

use crate::reactor::{self, Source, Token};
use crate::tap::{TapConfig, TapDevice, TapError};

pub use ebb_net::dispatch::Placement;
pub use ebb_net::tcp::TcpConn;

/// Frames steered from other cores that may wait for this core's next poll.
pub const MAX_STEERED_WAITING: usize = 4096;

/// Back-to-back `Stack::poll` rounds in one driver poll before yielding to the loop.
pub const MAX_ROUNDS: usize = 8;

/// While transmission is blocked, poll again after this long even without a writable
/// edge: the push-back may come from the fault injector holding frames rather than from
/// the descriptor, and then no edge would come.
const TX_BLOCKED_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

/// Connections that may wait for a handler per listener (the `backlog` of
/// `TcpLayer::listen`).
const LISTEN_BACKLOG: usize = 128;

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

/// Seeded fault injection on the TAP device: `config` applies to both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultSetting {
    /// The faults, on received and on transmitted frames alike.
    pub config: FaultConfig,
    /// Fixes every random choice: the same seed and traffic make the same faults.
    pub seed: u64,
}

/// Everything [`NetStack::start`] needs.
#[derive(Clone, Debug)]
pub struct NetStackConfig {
    /// The TAP device to create (name, MTU).
    pub tap: TapConfig,
    /// Our MAC address on the link.
    pub mac: EthernetAddress,
    /// Static address or DHCP.
    pub address: AddressConfig,
    /// Faults to inject, if any.
    pub faults: Option<FaultSetting>,
    /// TCP settings. [`NetStackConfig::new`] puts a fresh random ISN seed in.
    pub tcp: TcpConfig,
    /// TAP queues, one core each (see the module docs, "Several cores"). Default 1.
    pub queues: usize,
}

impl NetStackConfig {
    /// TAP device `tap_name` (MTU 1500), the MAC `02:eb:b0:00:00:01`, `address`, no
    /// faults, default TCP settings with a random ISN seed.
    pub fn new(tap_name: impl Into<String>, address: AddressConfig) -> Self {
        let tcp = TcpConfig {
            isn_seed: random_seed(),
            ..TcpConfig::default()
        };
        Self {
            tap: TapConfig::new(tap_name),
            mac: EthernetAddress([0x02, 0xeb, 0xb0, 0, 0, 1]),
            address,
            faults: None,
            tcp,
            queues: 1,
        }
    }
}

/// Two unpredictable words from the standard library's per-process random hash keys
/// (the ISN secret RFC 6528 asks for; ebb-net, being `no_std`, cannot make one).
fn random_seed() -> [u64; 2] {
    let state = std::collections::hash_map::RandomState::new();
    let mut a = state.build_hasher();
    a.write_u64(0x6562_625f_6973_6e30);
    let mut b = state.build_hasher();
    b.write_u64(0x6562_625f_6973_6e31);
    [a.finish(), b.finish()]
}

/// Why the network stack could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum NetStackError {
    /// The TAP device could not be created.
    #[error(transparent)]
    Tap(#[from] TapError),
    /// Not called on a hosted Ebbflow core, or epoll refused the descriptor.
    #[error("cannot watch the TAP device: {0}")]
    Reactor(#[source] std::io::Error),
    /// Called from inside a connection callback, while the stack is being polled.
    #[error("the stack is being polled (called from inside a callback)")]
    Busy,
    /// The stack was shut down before the address was configured.
    #[error("the network stack was shut down")]
    ShutDown,
    /// More queues than the runtime has cores, or zero.
    #[error("{queues} queues asked for, but the runtime has {cores} cores (one queue per core)")]
    TooManyQueues {
        /// Queues asked for.
        queues: usize,
        /// Cores of the runtime.
        cores: usize,
    },
    /// The calling core runs no queue of this stack.
    #[error("core {0} runs no queue of this network stack")]
    NotOnThisCore(u32),
    /// The stack's per-core Ebb could not be created (no Ebb id left on this node).
    #[error("cannot create the stack's per-core Ebb: {0}")]
    Ebb(#[source] ebb_core::ebb::EbbError),
}

/// The TAP device, directly or through the fault injector.
enum TapLink {
    Plain(TapDevice),
    // Boxed: the injector is four times the size of the device.
    Faulty(Box<FaultInjector<TapDevice>>),
}

impl TapLink {
    fn tap(&self) -> &TapDevice {
        match self {
            TapLink::Plain(tap) => tap,
            TapLink::Faulty(injector) => injector.inner(),
        }
    }

    fn fault_stats(&self) -> Option<FaultStats> {
        match self {
            TapLink::Plain(_) => None,
            TapLink::Faulty(injector) => Some(injector.stats()),
        }
    }
}

impl NetDevice for TapLink {
    fn capabilities(&self) -> DeviceCapabilities {
        match self {
            TapLink::Plain(d) => d.capabilities(),
            TapLink::Faulty(d) => d.capabilities(),
        }
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<IOBuf>, max: usize) -> usize {
        match self {
            TapLink::Plain(d) => d.receive(now, out, max),
            TapLink::Faulty(d) => d.receive(now, out, max),
        }
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<IOBufChain>) -> usize {
        match self {
            TapLink::Plain(d) => d.transmit(now, frames),
            TapLink::Faulty(d) => d.transmit(now, frames),
        }
    }
    fn poll_at(&self) -> Option<Instant> {
        match self {
            TapLink::Plain(d) => d.poll_at(),
            TapLink::Faulty(d) => d.poll_at(),
        }
    }
    fn counters(&self) -> DeviceCounters {
        match self {
            TapLink::Plain(d) => d.counters(),
            TapLink::Faulty(d) => d.counters(),
        }
    }
}

/// How often each event source drove the stack: shows that an idle stack sleeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// `Stack::poll` calls.
    pub polls: u64,
    /// Readable edges on the TAP descriptor.
    pub readable_events: u64,
    /// Writable edges that found transmission blocked (and polled).
    pub writable_events: u64,
    /// Timer expiries.
    pub timer_fires: u64,
    /// Polls from the idle handler (application acted, or work was left over).
    pub idle_polls: u64,
    /// Polls after which the device pushed back on transmit.
    pub tx_blocked: u64,
    /// Received frames this core steered to the core owning them (several cores only).
    pub steered_out: u64,
    /// Frames other cores steered to this one.
    pub steered_in: u64,
    /// Received frames copied to every core (ARP replies).
    pub steered_everywhere: u64,
    /// Steered frames lost because the destination core refused the message (it was
    /// shutting down).
    pub steer_failures: u64,
    /// Frames other cores steered here and this core dropped: its inbox already held
    /// [`MAX_STEERED_WAITING`] frames (overload, as a full device ring).
    pub steered_dropped: u64,
}

/// A snapshot of every counter of the stack.
#[derive(Clone, Debug)]
pub struct NetStackCounters {
    /// The IP layer: frames per protocol, drops by reason.
    pub interface: InterfaceCounters,
    /// TCP: segments, retransmissions, connections.
    pub tcp: TcpCounters,
    /// The device (with injected drops when faults are on).
    pub device: DeviceCounters,
    /// What the fault injector did, when it is on.
    pub faults: Option<FaultStats>,
    /// Reads and writes on the TAP descriptor that failed unexpectedly.
    pub tap_io_errors: u64,
    /// How the stack was driven.
    pub driver: DriverCounters,
}

/// An interface's address and gateway, or none: what a multi-core stack's home core
/// hands the others when its DHCP lease changes.
type LeasedAddress = Option<(Ipv4Cidr, Option<Ipv4Addr>)>;

/// The shared state of the three event sources; see the module docs. One per core of
/// the stack.
struct Driver {
    /// The stack's per-core parts, where this driver is this core's.
    id: StackParts,
    /// The core this driver runs on.
    core: CoreId,
    stack: RefCell<Stack<TapLink, TcpLayer>>,
    /// Frames other cores steered here, injected at the next poll.
    inbox: RefCell<Vec<IOBuf>>,
    /// The reactor registration and idle handler, until [`Driver::stop`].
    registration: Cell<Option<(Token, IdleId)>>,
    /// A second handle on the stack's TCP layer, usable while the stack is borrowed.
    tcp: TcpLayer,
    /// The last poll left work to do now (not counting blocked transmission).
    work_left: Cell<bool>,
    /// The device refused frames: wait for a writable edge.
    tx_blocked: Cell<bool>,
    /// When the stack next wants a poll (strictly in the future when set).
    deadline: Cell<Option<Instant>>,
    /// The timer task, to wake when the deadline moves earlier (or at shutdown).
    timer_waker: RefCell<Option<Waker>>,
    /// The deadline the timer task sleeps on.
    timer_armed: Cell<Option<Instant>>,
    /// The address once configured (static, or leased).
    address: Cell<Option<Ipv4Cidr>>,
    /// Multi-core: the stack this driver is part of.
    multi: Option<MultiCore>,
    /// Home core of a multi-core stack: the address (and gateway) last sent to the
    /// other cores (`None`: nothing sent yet).
    shared_address: Cell<Option<LeasedAddress>>,
    address_waiters: RefCell<Vec<Promise<Result<Ipv4Cidr, NetStackError>>>>,
    stopped: Cell<bool>,
    /// Shared with the steering hook, which counts what it forwards.
    counters: Rc<Cell<DriverCounters>>,
}

impl Driver {
    fn count(&self, f: impl FnOnce(&mut DriverCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }

    /// Polls the stack until it has nothing due now (at most [`MAX_ROUNDS`] rounds),
    /// then records what is left and arms the timer.
    fn poll_now(&self) {
        if self.stopped.get() {
            return;
        }
        let Ok(mut stack) = self.stack.try_borrow_mut() else {
            // Re-entered from a callback inside `poll`: the running poll covers it.
            return;
        };
        {
            let mut inbox = self.inbox.borrow_mut();
            if !inbox.is_empty() {
                stack.inject(inbox.drain(..));
            }
        }
        let mut rounds = 0;
        let (now, next, tx_blocked) = loop {
            let now = event::now();
            let next = stack.poll(now);
            rounds += 1;
            self.count(|c| c.polls += 1);
            let tx_blocked = !stack.iface_mut().transmit_queue().is_empty();
            let due_now = next.is_some_and(|at| at <= now);
            if !due_now || tx_blocked || rounds >= MAX_ROUNDS {
                break (now, next, tx_blocked);
            }
        };
        // The address comes from the interface itself (static, bound, renewed, dropped);
        // DHCP events are drained so they do not pile up.
        while stack.iface_mut().next_dhcp_event().is_some() {}
        let address = stack.iface().ipv4_cidr();
        let gateway = stack.iface().gateway();
        let runs_dhcp = stack.iface().dhcp_state().is_some();
        drop(stack);
        if runs_dhcp {
            self.share_address(address.map(|cidr| (cidr, gateway)));
        }

        self.tx_blocked.set(tx_blocked);
        if tx_blocked {
            self.count(|c| c.tx_blocked += 1);
        }
        self.work_left
            .set(!tx_blocked && next.is_some_and(|at| at <= now));
        let next = if tx_blocked {
            Some(now + TX_BLOCKED_RETRY)
        } else {
            next.filter(|&at| at > now)
        };
        self.arm(next);
        self.address.set(address);
        if let Some(cidr) = address {
            for waiter in self.address_waiters.take() {
                let _ = waiter.set(Ok(cidr));
            }
        }
    }

    /// On the home core of a multi-core stack whose interface runs DHCP: when the lease's
    /// address or gateway changes, sends it to every other core's interface (which is
    /// [`InterfaceConfig::new_managed`]), so all cores answer on the leased address.
    fn share_address(&self, address: LeasedAddress) {
        let Some(multi) = &self.multi else { return };
        if self.core != multi.directory.home() || self.shared_address.get() == Some(address) {
            return;
        }
        self.shared_address.set(Some(address));
        for &core in &multi.directory.cores()[1..] {
            let id = multi.id;
            let sent = event::spawn_on(core, move || {
                if let Some(driver) = local_driver(id) {
                    driver.take_address(address);
                }
            });
            if sent.is_err() {
                log::warn!("core {} did not take the stack's new address", core.0);
            }
        }
    }

    /// The home core's DHCP lease changed (see [`Driver::share_address`]).
    fn take_address(&self, address: LeasedAddress) {
        if let Ok(mut stack) = self.stack.try_borrow_mut() {
            stack.iface_mut().set_address(address);
        }
        self.poll_now();
    }

    /// Records the next deadline; wakes the timer task if it must wake earlier.
    fn arm(&self, deadline: Option<Instant>) {
        self.deadline.set(deadline);
        let Some(at) = deadline else { return };
        if self.timer_armed.get().is_none_or(|armed| at < armed)
            && let Some(waker) = self.timer_waker.borrow().as_ref()
        {
            waker.wake_by_ref();
        }
    }

    /// The idle handler: poll when the application acted or work was left.
    fn idle(&self) -> IdleStatus {
        if self.stopped.get() || self.tx_blocked.get() {
            // Blocked transmission waits for the writable edge, not a spin.
            return IdleStatus::Idle;
        }
        if self.work_left.get() || self.tcp.needs_poll() {
            self.count(|c| c.idle_polls += 1);
            self.poll_now();
        }
        if !self.tx_blocked.get() && (self.work_left.get() || self.tcp.needs_poll()) {
            IdleStatus::Busy
        } else {
            IdleStatus::Idle
        }
    }

    fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        let stack = self.stack.try_borrow().map_err(|_| NetStackError::Busy)?;
        Ok(NetStackCounters {
            interface: stack.iface().counters(),
            tcp: self.tcp.counters(),
            device: stack.device().counters(),
            faults: stack.device().fault_stats(),
            tap_io_errors: stack.device().tap().io_errors(),
            driver: self.counters.get(),
        })
    }
}

/// What a driver on a core of a multi-core stack needs besides its queue.
#[derive(Clone)]
struct MultiCore {
    /// The stack's per-core parts (as in [`Driver::id`]).
    id: StackParts,
    directory: Arc<FlowDirectory>,
}

/// A stack's per-core parts: a multicore Ebb whose representative on each core holds
/// that core's driver (none on a core that runs no queue of the stack, or after
/// shutdown). The handle is `Copy + Send`, so steered frames and cross-core requests
/// carry it and reach the driver of whichever core runs them; each rep is touched only
/// by its own core.
type StackParts = EbbRef<MulticoreEbb<CorePart>>;

/// One core's representative of [`StackParts`].
struct CorePart(RefCell<Option<Rc<Driver>>>);

/// The error code a cross-core request reports when the target core runs no part of the
/// stack (it failed to start, or the stack was shut down): `ENODEV`.
const NO_PART_HERE: i32 = libc::ENODEV;

/// The calling core's driver of the stack `parts`, if it runs a queue of it.
fn local_driver(parts: StackParts) -> Option<Rc<Driver>> {
    parts.try_rep().ok()?.0.borrow().clone()
}

impl Driver {
    /// Builds a driver of stack `id` for `device` on the calling core, starts its three
    /// event sources and installs it as this core's part of `id`; with `multi`, makes it
    /// that multi-core stack's part on this core (claims, steering).
    fn start(
        id: StackParts,
        device: TapLink,
        iface: InterfaceConfig,
        tcp_config: TcpConfig,
        multi: Option<MultiCore>,
    ) -> Result<Rc<Driver>, NetStackError> {
        let core = event::core_id();
        let tcp = TcpLayer::new(tcp_config);
        let mut stack = Stack::new(device, iface, tcp.clone());
        let counters = Rc::new(Cell::new(DriverCounters::default()));
        if let Some(multi) = &multi {
            tcp.set_directory(Rc::new(multi.directory.claims_for(core)));
            stack.set_steering(Box::new(CoreSteering {
                here: core,
                multi: multi.clone(),
                outboxes: vec![Vec::new(); multi.directory.cores().len()],
                counters: counters.clone(),
            }));
        }
        let driver = Rc::new(Driver {
            id,
            core,
            stack: RefCell::new(stack),
            inbox: RefCell::new(Vec::new()),
            registration: Cell::new(None),
            tcp,
            work_left: Cell::new(true),
            tx_blocked: Cell::new(false),
            deadline: Cell::new(None),
            timer_waker: RefCell::new(None),
            timer_armed: Cell::new(None),
            address: Cell::new(None),
            multi: multi.clone(),
            shared_address: Cell::new(None),
            address_waiters: RefCell::new(Vec::new()),
            stopped: Cell::new(false),
            counters,
        });
        let token = {
            let stack = driver.stack.borrow();
            reactor::register(
                stack.device().tap().as_fd(),
                EventFlags::IN | EventFlags::OUT,
                driver.clone(),
            )
            .map_err(NetStackError::Reactor)?
        };
        let idle_driver = driver.clone();
        let idle = event::add_idle_handler(move || idle_driver.idle());
        driver.registration.set(Some((token, idle)));
        drop(event::spawn_local(DeadlineTimer {
            driver: driver.clone(),
            sleep: None,
        }));
        if let Ok(part) = id.try_rep() {
            *part.0.borrow_mut() = Some(driver.clone());
        }
        // The first poll sends the gratuitous ARP (static) or the DHCP DISCOVER.
        driver.poll_now();
        Ok(driver)
    }

    /// Stops this core's part: one last poll to send what is queued, then the
    /// descriptor leaves the reactor, the idle handler goes and the timer task ends.
    /// Idempotent.
    fn stop(&self) {
        if self.stopped.get() {
            return;
        }
        self.poll_now();
        self.stopped.set(true);
        if let Some((token, idle)) = self.registration.take() {
            if let Ok(stack) = self.stack.try_borrow() {
                let _ = reactor::deregister(stack.device().tap().as_fd(), token);
            }
            event::remove_idle_handler(idle);
        }
        if let Some(waker) = self.timer_waker.take() {
            waker.wake();
        }
        for waiter in self.address_waiters.take() {
            let _ = waiter.set(Err(NetStackError::ShutDown));
        }
        if let Ok(part) = self.id.try_rep() {
            part.0.borrow_mut().take();
        }
    }

    /// Frames steered here by another core: processed by a poll now. The inbox is
    /// bounded like a device ring: what would overflow [`MAX_STEERED_WAITING`] is
    /// dropped and counted (a core flooded by another's steering cannot grow it without
    /// bound).
    fn receive_steered(&self, frames: Vec<IOBuf>) {
        if self.stopped.get() {
            return;
        }
        let n = frames.len() as u64;
        self.count(|c| c.steered_in += n);
        let dropped = admit(&mut self.inbox.borrow_mut(), frames, MAX_STEERED_WAITING);
        if dropped > 0 {
            self.count(|c| c.steered_dropped += dropped);
        }
        self.poll_now();
    }

    /// Connects from this core (which owns the connection); see [`NetStack::connect`].
    fn connect(
        &self,
        remote: SocketAddrV4,
    ) -> impl Future<Output = Result<TcpConn, TcpErrorKind>> + 'static {
        let started = match self.address.get() {
            None => Err(TcpErrorKind::AddressNotAvailable),
            Some(cidr) => {
                let (tx, rx) = promise();
                self.tcp
                    .connect(
                        SocketAddrV4::new(cidr.address(), 0),
                        remote,
                        move |result| {
                            let _ = tx.set(result);
                        },
                    )
                    .map(|()| rx)
            }
        };
        async move {
            // A dropped promise means the stack dropped the connection attempt unanswered.
            started?.await.unwrap_or(Err(TcpErrorKind::Other(0)))
        }
    }
}

/// Appends `frames` to `inbox` up to `limit` frames in all; returns how many were
/// dropped for want of room (the newest, as a full device ring drops arrivals).
fn admit(inbox: &mut Vec<IOBuf>, mut frames: Vec<IOBuf>, limit: usize) -> u64 {
    let room = limit.saturating_sub(inbox.len());
    let dropped = frames.len().saturating_sub(room);
    frames.truncate(room);
    inbox.extend(frames);
    dropped as u64
}

/// One core's steering (see the module docs, "Several cores"): asks the directory about
/// every received frame and sends other cores theirs, one message per core per batch.
struct CoreSteering {
    here: CoreId,
    multi: MultiCore,
    /// Frames for each core of the stack (by position in `directory.cores()`), reused.
    outboxes: Vec<Vec<IOBuf>>,
    counters: Rc<Cell<DriverCounters>>,
}

impl CoreSteering {
    fn outbox(&mut self, core: CoreId) -> Option<&mut Vec<IOBuf>> {
        let index = self
            .multi
            .directory
            .cores()
            .iter()
            .position(|&c| c == core)?;
        self.outboxes.get_mut(index)
    }

    fn count(&self, f: impl FnOnce(&mut DriverCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }
}

impl FrameSteering for CoreSteering {
    fn steer(&mut self, frames: &mut Vec<IOBuf>) {
        let directory = self.multi.directory.clone();
        let (mut out, mut everywhere) = (0, 0);
        frames.retain(|frame| match directory.steer(self.here, frame.as_slice()) {
            Steer::Here => true,
            Steer::To(core) => match self.outbox(core) {
                Some(outbox) => {
                    outbox.push(frame.clone());
                    out += 1;
                    false
                }
                None => true,
            },
            Steer::Everywhere => {
                for &core in directory.cores() {
                    if core != self.here
                        && let Some(outbox) = self.outbox(core)
                    {
                        outbox.push(frame.clone());
                    }
                }
                everywhere += 1;
                true
            }
        });
        self.count(|c| {
            c.steered_out += out;
            c.steered_everywhere += everywhere;
        });
        for (index, &core) in directory.cores().iter().enumerate() {
            let Some(outbox) = self.outboxes.get_mut(index) else {
                continue;
            };
            if outbox.is_empty() {
                continue;
            }
            let batch = std::mem::take(outbox);
            let n = batch.len() as u64;
            let id = self.multi.id;
            let sent = event::spawn_on(core, move || {
                if let Some(driver) = local_driver(id) {
                    driver.receive_steered(batch);
                }
            });
            if sent.is_err() {
                self.count(|c| c.steer_failures += n);
            }
        }
    }
}

impl Source for Driver {
    fn ready(self: Rc<Self>, flags: EventFlags) {
        let readable = flags.intersects(EventFlags::IN | EventFlags::ERR | EventFlags::HUP);
        let writable = flags.contains(EventFlags::OUT) && self.tx_blocked.get();
        if readable {
            self.count(|c| c.readable_events += 1);
        }
        if writable {
            self.count(|c| c.writable_events += 1);
        }
        if readable || writable {
            self.poll_now();
        }
    }
}

/// The timer task's future: sleeps until the driver's deadline, polls, repeats; ends at
/// shutdown.
struct DeadlineTimer {
    driver: Rc<Driver>,
    sleep: Option<Sleep>,
}

impl Future for DeadlineTimer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            let driver = &this.driver;
            if driver.stopped.get() {
                driver.timer_waker.take();
                return Poll::Ready(());
            }
            *driver.timer_waker.borrow_mut() = Some(cx.waker().clone());
            let Some(want) = driver.deadline.get() else {
                this.sleep = None;
                driver.timer_armed.set(None);
                return Poll::Pending;
            };
            let armed = driver.timer_armed.get();
            if this.sleep.is_none() || armed.is_none_or(|armed| want < armed) {
                this.sleep = Some(event::sleep_until(want));
                driver.timer_armed.set(Some(want));
            }
            let Some(sleep) = this.sleep.as_mut() else {
                return Poll::Pending;
            };
            match Pin::new(sleep).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    this.sleep = None;
                    driver.timer_armed.set(None);
                    driver.deadline.set(None);
                    driver.count(|c| c.timer_fires += 1);
                    driver.poll_now();
                }
            }
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

impl std::fmt::Debug for MultiCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
                    if let Some(driver) = local_driver(id) {
                        driver.tcp.unlisten(addr);
                    }
                });
            }
        }
    }
}

/// ebb-net on a TAP device, driven by the calling core's event loop (and, with several
/// queues, the next cores'): see the module docs.
pub struct NetStack {
    /// The home core's driver.
    driver: Rc<Driver>,
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
        local_driver(self.id)
            .map(|driver| CoreNetStack { driver })
            .ok_or(NetStackError::NotOnThisCore(event::core_id().0))
    }

    /// The home core.
    pub fn home(&self) -> CoreId {
        self.home
    }
}

/// One core's part of a multi-core [`NetStack`] (`!Send`: it stays on its core).
pub struct CoreNetStack {
    driver: Rc<Driver>,
}

impl CoreNetStack {
    /// Connects from this core: the connection is owned by it, and its handler runs
    /// here. As [`NetStack::connect`].
    pub fn connect(
        &self,
        remote: SocketAddrV4,
    ) -> impl Future<Output = Result<TcpConn, TcpErrorKind>> + 'static {
        self.driver.connect(remote)
    }

    /// This core's counters ([`NetStackError::Busy`] inside a callback).
    pub fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        self.driver.counters()
    }

    /// The core.
    pub fn core(&self) -> CoreId {
        self.driver.core
    }
}

impl NetStack {
    /// Creates the TAP device and starts the stack on the calling core (which must be a
    /// hosted Ebbflow core) and, with [`NetStackConfig::queues`] `> 1`, on the next
    /// cores too (they start when their loops next run, before any later cross-core
    /// request such as [`listen_on_every_core`](Self::listen_on_every_core)). The Linux
    /// side of the device still has to be configured (`ip link set NAME up`, an
    /// address, or moved into a namespace).
    pub fn start(config: NetStackConfig) -> Result<NetStack, NetStackError> {
        let queues = config.queues;
        let cores = event::num_cores();
        if queues == 0 || queues > cores {
            return Err(NetStackError::TooManyQueues { queues, cores });
        }
        let mut tap_config = config.tap.clone();
        tap_config.queues = queues;
        let mut taps = TapDevice::open_queues(&tap_config)?.into_iter();
        let iface = match config.address {
            AddressConfig::Static { cidr, gateway } => {
                InterfaceConfig::new_static(config.mac, cidr, gateway)
            }
            AddressConfig::Dhcp => InterfaceConfig::new_dhcp(config.mac),
        };
        let link = |tap: TapDevice, queue: u64| match config.faults {
            None => TapLink::Plain(tap),
            Some(faults) => TapLink::Faulty(Box::new(
                FaultInjector::new(tap, faults.seed.wrapping_add(queue))
                    .with_rx_faults(faults.config)
                    .with_tx_faults(faults.config),
            )),
        };
        let home = event::core_id();
        let id: StackParts =
            MulticoreEbb::create(|_| CorePart(RefCell::new(None))).map_err(NetStackError::Ebb)?;
        let multi = (queues > 1).then(|| {
            let others = (0..cores as u32).map(CoreId).filter(|&c| c != home);
            let stack_cores = std::iter::once(home).chain(others).take(queues).collect();
            let domain = event::Handle::current()
                .map(|h| h.rcu().clone())
                .unwrap_or_else(|| unreachable!("event::core_id() ran, so this is a core"));
            MultiCore {
                id,
                directory: Arc::new(FlowDirectory::new(domain, stack_cores)),
            }
        });
        let first = taps
            .next()
            .unwrap_or_else(|| unreachable!("open_queues opens at least one queue"));
        let driver = Driver::start(id, link(first, 0), iface, config.tcp.clone(), multi.clone())?;
        if let Some(multi) = &multi {
            for (queue, (tap, &core)) in taps.zip(&multi.directory.cores()[1..]).enumerate() {
                let device = link(tap, queue as u64 + 1);
                // With DHCP only the home core runs the client; the others take the
                // address it leases (see `Driver::share_address`).
                let iface = match config.address {
                    AddressConfig::Dhcp => InterfaceConfig::new_managed(config.mac),
                    AddressConfig::Static { .. } => iface,
                };
                let (tcp, part) = (config.tcp.clone(), multi.clone());
                let sent = event::spawn_on(core, move || {
                    if let Err(e) = Driver::start(id, device, iface, tcp, Some(part)) {
                        log::error!("network stack queue {} on core {}: {e}", queue + 1, core.0);
                    }
                });
                if sent.is_err() {
                    driver.stop();
                    return Err(NetStackError::NotOnThisCore(core.0));
                }
            }
        }
        Ok(NetStack { driver, multi })
    }

    /// The TAP device's interface name.
    pub fn tap_name(&self) -> Result<String, NetStackError> {
        let stack = self
            .driver
            .stack
            .try_borrow()
            .map_err(|_| NetStackError::Busy)?;
        Ok(stack.device().tap().name().to_string())
    }

    /// Our address, once configured.
    pub fn address(&self) -> Option<Ipv4Cidr> {
        self.driver.address.get()
    }

    /// The cores running a queue, home core first.
    pub fn cores(&self) -> Vec<CoreId> {
        match &self.multi {
            Some(multi) => multi.directory.cores().to_vec(),
            None => vec![self.driver.core],
        }
    }

    /// A handle any core can use to reach its part of the stack.
    pub fn handle(&self) -> NetStackRef {
        NetStackRef {
            id: self.driver.id,
            home: self.driver.core,
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
                let running = event::run_on(core, move || local_driver(id).is_some())
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
        let known = self.driver.address.get();
        let waiting = known.is_none().then(|| {
            let (tx, rx) = promise();
            self.driver.address_waiters.borrow_mut().push(tx);
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
    /// (`conn.set_handler(..)`), as with [`crate::tcp::listen`]. On a multi-core stack
    /// every connection to `port` is placed on the home core, where `on_accept` runs
    /// (see [`listen_on_every_core`](Self::listen_on_every_core) to spread them).
    pub fn listen(
        &self,
        port: u16,
        on_accept: impl FnMut(TcpConn) + 'static,
    ) -> Result<NetListener, TcpErrorKind> {
        let addr = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
        self.driver.tcp.listen(addr, LISTEN_BACKLOG, on_accept)?;
        if let Some(multi) = &self.multi {
            multi
                .directory
                .set_placement(port, Placement::Core(self.driver.core));
        }
        Ok(NetListener {
            addr,
            tcp: self.driver.tcp.clone(),
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
        let home_tcp = self.driver.tcp.clone();
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
                let listened = event::run_on(core, move || match local_driver(id) {
                    None => Err(TcpErrorKind::Other(NO_PART_HERE)),
                    Some(driver) => driver
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
                            if let Some(driver) = local_driver(id) {
                                driver.tcp.unlisten(addr);
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
        self.driver.connect(remote)
    }

    /// The home core's TCP layer (its configuration, connection count, `listen` with an
    /// exact address).
    pub fn tcp(&self) -> &TcpLayer {
        &self.driver.tcp
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
                .driver
                .stack
                .try_borrow_mut()
                .map_err(|_| NetStackError::Busy)?;
            f(event::now(), stack.iface_mut())
        };
        self.driver.poll_now();
        Ok(result)
    }

    /// Every counter of the home core: interface, TCP, device, faults, driver. Not from
    /// inside a connection callback ([`NetStackError::Busy`]).
    pub fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        self.driver.counters()
    }

    /// Every core's counters, home core first.
    pub fn counters_per_core(
        &self,
    ) -> impl Future<Output = Vec<(CoreId, Result<NetStackCounters, NetStackError>)>> + 'static
    {
        let multi = self.multi.clone();
        let home = self.driver.clone();
        async move {
            let Some(multi) = multi else {
                return vec![(home.core, home.counters())];
            };
            let mut all = Vec::new();
            for &core in multi.directory.cores() {
                let id = multi.id;
                let counters = event::run_on(core, move || match local_driver(id) {
                    Some(driver) => driver.counters(),
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
    pub fn driver_counters(&self) -> DriverCounters {
        self.driver.counters.get()
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
        let driver = &self.driver;
        if driver.stopped.get() {
            return Err(NetStackError::ShutDown);
        }
        driver.poll_now();
        let counters = driver.counters()?;
        driver.stop();
        if let Some(multi) = &self.multi {
            for &core in &multi.directory.cores()[1..] {
                let id = multi.id;
                let _ = event::spawn_on(core, move || {
                    if let Some(driver) = local_driver(id) {
                        driver.stop();
                    }
                });
            }
        }
        Ok(counters)
    }
}

impl std::fmt::Debug for NetStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetStack")
            .field("address", &self.driver.address.get())
            .field("driver", &self.driver.counters.get())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(tags: std::ops::Range<u8>) -> Vec<IOBuf> {
        tags.map(|t| IOBuf::copy_from_slice(&[t])).collect()
    }

    #[test]
    fn the_steered_inbox_is_bounded_and_drops_the_newest() {
        let mut inbox = Vec::new();
        assert_eq!(admit(&mut inbox, frames(0..3), 5), 0);
        assert_eq!(admit(&mut inbox, frames(3..7), 5), 2, "two over the bound");
        let kept: Vec<u8> = inbox.iter().map(|f| f.as_slice()[0]).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4], "the oldest kept, in order");
        assert_eq!(admit(&mut inbox, frames(7..9), 5), 2, "full: all dropped");
        inbox.clear();
        assert_eq!(
            admit(&mut inbox, frames(0..2), 5),
            0,
            "room again once drained"
        );
    }
}
