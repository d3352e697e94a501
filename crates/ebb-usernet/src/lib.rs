//! # ebb-usernet — published ports terminated inside the monitor
//!
//! Rootless port forwards for a guest under Ebbflow's monitor without a user-mode
//! network process on the data path: host TCP sockets on one side, the guest's TCP on
//! the other, and between them a user-mode TCP/IP endpoint built from ebb-net, speaking
//! to the guest over the virtio-net device's frames in the monitor's own I/O thread.
//!
//! ```text
//!  host client ──TCP──▶ listener 127.0.0.1:P ─┐            monitor process
//!                                              ▼
//!               Splice (bytes, back-pressure) ◀──▶ ebb-net endpoint 10.0.2.3
//!                                                        │ frames (EndpointPort)
//!   guest 10.0.2.15 ◀── virtio-net ◀── UserNet (demux) ◀─┘
//!                                          └──── every other frame ──▶ passt (outbound, DNS, DHCP)
//! ```
//!
//! [`UserNet`] is a host link of the monitor ([`ebb_vmm::virtio::HostLink`]): frames
//! the guest sends come in through [`NetDevice::transmit`], frames for the guest leave
//! through [`NetDevice::receive`]. Inside:
//!
//! * a **demux** (`demux`): ARP about the endpoint's address and IPv4 to it go to the
//!   endpoint; every other frame goes to the *rest* — passt, which keeps what it does
//!   well (outbound connections, DNS, the guest's DHCP) and gets no `-t` for the ports
//!   forwarded here — or is dropped and counted when there is no rest;
//! * the **endpoint**: one ebb-net [`Stack`](ebb_net::stack::Stack) at its own address in
//!   the guest's subnet (10.0.2.3 by default, not passt's gateway 10.0.2.2), on an
//!   in-memory device of two bounded frame queues (`port`);
//! * the **forwards** (`forwarder`): a non-blocking host listener per forward; each
//!   accepted host connection opens a connection from the endpoint to the guest's port
//!   and is spliced to it (`splice`: both ways, back-pressure, half-close, reset);
//! * the **guest forwards** (QEMU's `guestfwd`, [`GuestForward`]): the endpoint listens
//!   on a port of its own address; each connection the guest opens there makes the
//!   monitor connect a non-blocking host socket to the forward's host address, and the
//!   two are spliced exactly as above (the same bounded buffers, half-close and reset).
//!   A host connect that fails (refused, unreachable) resets the guest's connection.
//!   This is how a native node reaches a host service — its front end's Messenger —
//!   without passt;
//! * one **epoll descriptor** holding the listeners, the host sockets and the rest's
//!   socket: [`UserNet::fd`], which the monitor's I/O thread sleeps on like any
//!   backend's descriptor, with [`NetDevice::poll_at`] the endpoint's next TCP timer.
//!
//! ## Cost
//!
//! A request through a forward costs the host socket's own system calls — a `recv` for
//! the request, a `send` (`writev`) for the reply, plus one `epoll_wait` of the inner
//! descriptor per I/O-thread round — and no system call per frame: frames between the
//! endpoint and the guest are memory copies in the I/O thread (the virtio device's
//! gather and scatter). passt is only on the path of the traffic it serves.
//!
//! ## Invariants
//!
//! * Nothing buffers without bound: toward the guest, at most one read chunk per
//!   connection waits for the send window (`splice::READ_CHUNK`), and the endpoint's
//!   frame queue toward the guest is bounded (its TCP stops on transmit back-pressure);
//!   toward the host, past `splice::TO_HOST_HIGH` bytes a connection's receive window
//!   closes; frames from the guest wait in a bounded queue (drops counted).
//! * The guest is untrusted: the demux reads each field only after a length check and
//!   counts frames too short to route; everything for the endpoint is parsed by
//!   ebb-net's checked views (its drops are in [`UserNet::endpoint_counters`]).
//! * The I/O thread never spins on an idle forwarder: [`NetDevice::poll_at`] is "now"
//!   only while work is left that no event will announce (a host socket with more to
//!   read than one round takes, frames the endpoint has not processed, TCP output the
//!   application side asked for), else the endpoint's next timer.
//! * `UserNet` is `Send` (a host link moves to the I/O thread) though ebb-net is
//!   `Rc`-based: it is built on one thread and moved once, whole (`movable`, the crate's
//!   only `unsafe`).
//!
//! ## Without passt
//!
//! The forwards need nothing of passt: an Ebbflow image configures 10.0.2.15/24 via
//! 10.0.2.2 statically (`ebb::net`'s default), so with no rest the forwards work and
//! every other frame (outbound traffic, DHCP) is dropped and counted
//! ([`UserNetCounters::guest_unrouted`]).

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod demux;
mod forwarder;
#[allow(unsafe_code)] // the one module with `unsafe`: see its docs
mod movable;
mod port;
mod splice;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::BorrowedFd;

use ebb_core::Instant;
use ebb_net::iface::InterfaceCounters;
use ebb_net_driver::{DeviceCapabilities, DeviceCounters, NetDevice, RxFrame, TxFrame};
use ebb_vmm::virtio::{HostLink, PortForward};

/// The monitor's host-link trait, which [`UserNet`] implements and its rest must: named
/// here for code that links another build of `ebb-vmm` (the monitor's own unit tests run
/// their hostile-guest cases over a `UserNet`).
pub use ebb_vmm::virtio::HostLink as MonitorLink;

use demux::Route;
use forwarder::Forwarder;
use movable::Movable;

/// The endpoint's default address: in the guest's subnet, not passt's gateway (.2).
pub const ENDPOINT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// The endpoint's default MAC address (locally administered).
pub const ENDPOINT_MAC: [u8; 6] = [0x02, 0xeb, 0xb0, 0x00, 0x02, 0x03];
/// The guest's default address (what `ebb::net` configures natively).
pub const GUEST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);

/// Frames from the guest kept for a rest backend that could not take them yet, at most.
const REST_BACKLOG: usize = 256;

/// What a [`UserNet`] forwards and where its endpoint sits.
#[derive(Clone, Debug)]
pub struct UserNetConfig {
    /// The forwards: host address and port (0: any free port, see
    /// [`UserNet::listening`]) to the guest's port.
    pub forwards: Vec<PortForward>,
    /// The guest's address.
    pub guest: Ipv4Addr,
    /// The endpoint's address and prefix length.
    pub endpoint: Ipv4Addr,
    /// The prefix length of the guest's subnet.
    pub prefix_len: u8,
    /// The endpoint's MAC address.
    pub endpoint_mac: [u8; 6],
    /// Guest-to-host forwards: the guest connects to the endpoint's address at a port,
    /// the monitor to a host address.
    pub guest_forwards: Vec<GuestForward>,
    /// Most forwarded connections at once (both kinds); more wait in the listeners'
    /// backlogs, and a guest connection beyond them is reset.
    pub max_connections: usize,
    /// Secret for the endpoint's initial sequence numbers (RFC 6528).
    pub isn_seed: [u64; 2],
}

impl UserNetConfig {
    /// `forwards` to a guest at [`GUEST_ADDR`], the endpoint at [`ENDPOINT_ADDR`]/24,
    /// 1024 connections, an ISN secret from the clock and the process id.
    pub fn new(forwards: Vec<PortForward>) -> UserNetConfig {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        UserNetConfig {
            forwards,
            guest: GUEST_ADDR,
            endpoint: ENDPOINT_ADDR,
            prefix_len: 24,
            endpoint_mac: ENDPOINT_MAC,
            guest_forwards: Vec::new(),
            max_connections: 1024,
            isn_seed: [
                t,
                u64::from(std::process::id()).rotate_left(32) ^ t.rotate_left(17),
            ],
        }
    }
}

/// A guest-to-host forward (QEMU's `guestfwd`): a connection the guest opens to the
/// endpoint's address (10.0.2.3 by default) at `endpoint_port` is spliced to a new host
/// connection to `host`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestForward {
    /// The port on the endpoint's address the guest connects to.
    pub endpoint_port: u16,
    /// Where the monitor connects on the host.
    pub host: SocketAddrV4,
}

impl std::str::FromStr for GuestForward {
    type Err = String;
    /// `PORT:HOST_ADDR:HOST_PORT` (as QEMU's `guestfwd=tcp:10.0.2.3:PORT-tcp:ADDR:PORT`).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not ENDPOINT_PORT:HOST_ADDR:HOST_PORT");
        let (port, host) = s.split_once(':').ok_or_else(bad)?;
        Ok(GuestForward {
            endpoint_port: port.parse().map_err(|_| bad())?,
            host: host.parse().map_err(|_| bad())?,
        })
    }
}

/// Why a [`UserNet`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum UserNetError {
    /// A forward's host port cannot be bound.
    #[error("cannot listen on {addr}:{port}: {source}")]
    Bind {
        /// The host address.
        addr: Ipv4Addr,
        /// The host port.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// The epoll descriptor could not be made or fed.
    #[error("epoll: {0}")]
    Epoll(std::io::Error),
    /// The endpoint cannot listen for a guest forward (port 0, or given twice).
    #[error("guest forward on the endpoint's port {port}: {reason}")]
    GuestForward {
        /// The endpoint's port.
        port: u16,
        /// Why.
        reason: String,
    },
    /// The endpoint's address and prefix length do not make a subnet.
    #[error("{0}/{1} is not a valid endpoint address")]
    Address(Ipv4Addr, u8),
}

/// What a [`UserNet`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserNetCounters {
    /// Host connections accepted.
    pub accepted: u64,
    /// Guest connections that could not be opened (refused, timed out, no resources).
    pub connect_failed: u64,
    /// Host sockets closed with a reset (a failure carried over from the guest side).
    pub host_resets: u64,
    /// Guest connections accepted on a guest forward.
    pub guest_accepted: u64,
    /// Host connects for a guest forward that failed (refused, unreachable, no
    /// descriptor, or over the connection limit): each reset its guest connection.
    pub host_connect_failed: u64,
    /// Frames from the guest for the endpoint.
    pub guest_to_endpoint: u64,
    /// Frames from the guest for the rest (passt).
    pub guest_to_rest: u64,
    /// Frames from the guest too short to route: dropped.
    pub guest_malformed: u64,
    /// Frames from the guest for the rest when there is none: dropped.
    pub guest_unrouted: u64,
    /// Reads of the forwarder's epoll descriptor (host sockets' and passt's events): one
    /// a round, or, on readiness (`HostLink::read_on_readiness`), after the device
    /// thread saw it readable and after a read that found events.
    pub event_reads: u64,
    /// Those of them that found no event.
    pub event_reads_empty: u64,
}

/// The forwarder as a host link: see the crate docs.
pub struct UserNet {
    inner: Movable<Inner>,
}

struct Inner {
    fwd: Forwarder,
    rest: Option<Box<dyn HostLink>>,
    /// Frames from the guest for the rest that it could not take yet.
    rest_out: VecDeque<TxFrame>,
    endpoint: Ipv4Addr,
    /// Alternates which side's frames the guest gets first (neither starves).
    rest_first: bool,
    counters: DeviceCounters,
}

impl Inner {
    /// Tells the rest that its socket was reported readable, if the forwarder's epoll
    /// said so since the last call.
    fn pass_rest_readiness(&mut self) {
        if std::mem::take(&mut self.fwd.rest_readable)
            && let Some(rest) = self.rest.as_mut()
        {
            rest.readable();
        }
    }
}

impl UserNet {
    /// Listens on every forward's host port and builds the endpoint; `rest` (passt,
    /// without `-t` for these ports) gets every frame that is not the endpoint's.
    pub fn new(
        config: &UserNetConfig,
        rest: Option<Box<dyn HostLink>>,
    ) -> Result<UserNet, UserNetError> {
        let fwd = Forwarder::new(config)?;
        let mut rest = rest;
        if let Some(rest) = &mut rest {
            fwd.watch_rest(rest.fd())?;
            // The forwarder's epoll holds the rest's socket and is read every round:
            // the rest reads its socket when that reports input, not blindly each round.
            rest.read_on_readiness();
        }
        Ok(UserNet {
            inner: Movable::new(Inner {
                fwd,
                rest,
                rest_out: VecDeque::new(),
                endpoint: config.endpoint,
                rest_first: false,
                counters: DeviceCounters::default(),
            }),
        })
    }

    /// The host addresses the forwards listen on, in the configuration's order.
    pub fn listening(&self) -> Vec<SocketAddrV4> {
        self.inner.get().fwd.listening()
    }

    /// What the forwarder did.
    pub fn forwarder_counters(&self) -> UserNetCounters {
        self.inner.get().fwd.counters
    }

    /// The endpoint's interface counters (frames it dropped as malformed among them).
    pub fn endpoint_counters(&self) -> InterfaceCounters {
        self.inner.get().fwd.endpoint_counters()
    }

    /// Forwarded connections open now.
    pub fn active_connections(&self) -> usize {
        self.inner.get().fwd.active()
    }

    /// Bytes the splices hold now, both directions (bounded: see the crate docs).
    pub fn buffered_bytes(&self) -> usize {
        self.inner.get().fwd.buffered()
    }

    /// Frames the endpoint queued for the guest that the device has not taken yet, and
    /// the most it queues (past that its TCP waits on back-pressure).
    pub fn frames_for_guest(&self) -> (usize, usize) {
        (
            self.inner.get().fwd.stack.device().to_guest.len(),
            port::TO_GUEST_LIMIT,
        )
    }

    /// Bytes the endpoint's TCP holds for connections that cannot take them now.
    pub fn endpoint_held_bytes(&self) -> usize {
        self.inner.get().fwd.stack.tcp().held_bytes()
    }

    /// The endpoint's TCP counters.
    pub fn endpoint_tcp_counters(&self) -> ebb_net::tcp::TcpCounters {
        self.inner.get().fwd.stack.tcp().counters()
    }

    /// Connections in the endpoint's TCP table (TIME-WAIT included).
    pub fn endpoint_connections(&self) -> usize {
        self.inner.get().fwd.stack.tcp().connection_count()
    }
}

impl NetDevice for UserNet {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::ETHERNET
    }

    /// Frames for the guest: the endpoint's and the rest's. Each call first runs the
    /// forwarder (host events, the endpoint stack, the splices), as does each
    /// `transmit`; the epoll descriptor is read once per distinct `now`.
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let inner = self.inner.get_mut();
        inner.fwd.pump(now);
        inner.pass_rest_readiness();
        inner.rest_first = !inner.rest_first;
        let mut taken = 0;
        for rest_turn in [inner.rest_first, !inner.rest_first] {
            if rest_turn {
                if let Some(rest) = inner.rest.as_mut() {
                    taken += rest.receive(now, out, max - taken);
                }
            } else {
                let to_guest = &mut inner.fwd.stack.device_mut().to_guest;
                let n = (max - taken).min(to_guest.len());
                for buf in to_guest.drain(..n) {
                    inner.counters.record_rx(buf.len());
                    out.push(RxFrame::new(buf));
                }
                taken += n;
            }
        }
        taken
    }

    /// Frames from the guest, routed by the demux. Endpoint frames are always taken
    /// (dropped and counted when its queue is full); the rest's wait here, bounded.
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let inner = self.inner.get_mut();
        let mut taken = 0;
        while let Some(frame) = frames.front() {
            let route = demux::route_chain(&frame.chain, inner.endpoint);
            let c = &mut inner.fwd.counters;
            match route {
                Route::Endpoint => {
                    c.guest_to_endpoint += 1;
                    let Some(frame) = frames.pop_front() else {
                        break;
                    };
                    inner.counters.record_tx(frame.len());
                    match port::contiguous(frame.into_complete()) {
                        Ok(buf) => {
                            inner.fwd.stack.device_mut().push_from_guest(buf);
                        }
                        // No memory for the copy: dropped like a frame a full queue
                        // refuses (counted); the guest's TCP sends it again.
                        Err(_) => inner.fwd.stack.device_mut().drop_from_guest(),
                    }
                }
                Route::Rest if inner.rest.is_some() => {
                    if inner.rest_out.len() >= REST_BACKLOG {
                        break; // back-pressure: the rest stays with the caller
                    }
                    c.guest_to_rest += 1;
                    if let Some(frame) = frames.pop_front() {
                        inner.rest_out.push_back(frame);
                    }
                }
                Route::Rest => {
                    c.guest_unrouted += 1;
                    frames.pop_front();
                }
                Route::Malformed => {
                    c.guest_malformed += 1;
                    frames.pop_front();
                }
            }
            taken += 1;
        }
        if let Some(rest) = inner.rest.as_mut() {
            rest.transmit(now, &mut inner.rest_out);
        }
        // The endpoint's frames are processed now, not only when the caller next asks
        // for frames (a fault injector in between may not ask while it holds enough).
        inner.fwd.pump(now);
        taken
    }

    fn poll_at(&self) -> Option<Instant> {
        let inner = self.inner.get();
        let rest = inner.rest.as_ref().and_then(|r| r.poll_at());
        [inner.fwd.next_at, rest].into_iter().flatten().min()
    }

    fn counters(&self) -> DeviceCounters {
        self.inner.get().counters
    }
}

impl HostLink for UserNet {
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.get().fwd.fd()
    }

    fn drain(&mut self) {
        let inner = self.inner.get_mut();
        inner.pass_rest_readiness();
        if let Some(rest) = inner.rest.as_mut() {
            rest.drain();
        }
    }

    /// The forwarder's epoll descriptor is read when the device thread saw it readable,
    /// not every round (its host sockets and passt's socket are all behind it).
    fn read_on_readiness(&mut self) -> bool {
        self.inner.get_mut().fwd.collect_on_readiness = true;
        true
    }

    fn readable(&mut self) {
        self.inner.get_mut().fwd.events_reported = true;
    }

    fn has_pending_output(&self) -> bool {
        let inner = self.inner.get();
        !inner.rest_out.is_empty() || inner.rest.as_ref().is_some_and(|r| r.has_pending_output())
    }
}

/// The monitor's way to open a [`UserNet`] ([`HostLinkConfig::External`]): the forwards
/// in the monitor, passt (started without `-t`) behind them for every other frame, or
/// no rest when passt is not installed.
///
/// [`HostLinkConfig::External`]: ebb_vmm::vm::HostLinkConfig::External
#[derive(Clone, Debug)]
pub struct UserNetFactory {
    /// The forwarder's configuration.
    pub config: UserNetConfig,
    /// Start passt for the rest (when installed).
    pub passt: bool,
}

impl UserNetFactory {
    /// The link for `ebb run`: `forwards` in the monitor, passt for the rest.
    pub fn new(forwards: Vec<PortForward>) -> UserNetFactory {
        UserNetFactory {
            config: UserNetConfig::new(forwards),
            passt: true,
        }
    }

    /// As the monitor's configuration wants it.
    pub fn into_link(self, name: String) -> ebb_vmm::vm::ExternalLink {
        ebb_vmm::vm::ExternalLink {
            name,
            factory: std::sync::Arc::new(self),
        }
    }
}

impl ebb_vmm::vm::HostLinkFactory for UserNetFactory {
    fn open(
        &self,
        guest_mac: [u8; 6],
    ) -> Result<Box<dyn HostLink>, ebb_vmm::virtio::HostLinkError> {
        use ebb_vmm::virtio::HostLinkError;
        let rest: Option<Box<dyn HostLink>> = if self.passt {
            match ebb_vmm::virtio::host_link::Passt::start(&[], guest_mac) {
                Ok(passt) => Some(Box::new(passt)),
                Err(HostLinkError::PasstMissing) => {
                    log::info!(
                        "ebb-usernet: passt is not installed: the forwards work, other \
                         traffic from the guest is dropped"
                    );
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        UserNet::new(&self.config, rest)
            .map(|link| Box::new(link) as Box<dyn HostLink>)
            .map_err(|e| match e {
                UserNetError::Bind { addr, port, source } => HostLinkError::PortUnavailable {
                    addr,
                    port,
                    reason: match source.kind() {
                        std::io::ErrorKind::AddrInUse => "the port is in use by another \
                             program; pick another with -p HOST:GUEST"
                            .to_string(),
                        std::io::ErrorKind::PermissionDenied => {
                            "ports below 1024 need root; pick a higher host port".to_string()
                        }
                        _ => source.to_string(),
                    },
                },
                e => HostLinkError::External(format!("--net user: {e}")),
            })
    }

    /// Every fault toward the endpoint and the guest: ebb-net on both ends recovers from
    /// drops, reordering, duplication and corruption. (passt behind the forwarder sees
    /// the same faults on the frames it gets, and does not recover from all of them —
    /// see `ebb_vmm`'s `passt_faults` — but the forwarded traffic never crosses it.)
    fn faults(
        &self,
        faults: ebb_net_driver::FaultConfig,
    ) -> (ebb_net_driver::FaultConfig, ebb_net_driver::FaultConfig) {
        (faults, faults)
    }
}
