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
//! ## Offloads
//!
//! The guest and the endpoint are two stacks in one address space, so the link between
//! them offers what a local TAP does ([`OFFLOAD`], through
//! `HostLinkFactory::offload`): checksum offload and TCP segmentation offload both ways.
//! The guest's driver then sends TCP frames of up to 64 KiB with partial checksums, and
//! the endpoint takes them whole and trusts their checksums, as Linux trusts a local
//! sender's; the endpoint's TCP sends such frames back (`port`), which the guest takes
//! whole when it negotiated large receive ([`HostLink::set_large_receive`]). For a guest
//! that did not, its frames are cut into MTU-sized segments with complete checksums here,
//! and the device completes partial checksums for a guest without GUEST_CSUM. passt,
//! behind, takes MTU-sized frames only: a TSO frame for it is cut first. A 1 MiB message
//! crosses the link in 16 frames instead of 718; without `--net-faults` only (the
//! injector's path carries no checksum states).
//!
//! ## Invariants
//!
//! * Nothing buffers without bound: toward the guest, at most one read chunk per
//!   connection waits for the send window (`splice::READ_CHUNK`); what the endpoint's
//!   connections hold in flight and queued is within each one's send buffer, a share of
//!   a 64 MiB budget among the open connections (64 KiB to 4 MiB each, whatever window
//!   the guest advertises; a share lowered later is not taken back from what is queued,
//!   so at most the sum of the shares at the connections' opening, about 330 MiB for
//!   1,024 connections filled one after another); and the endpoint's
//!   frame queue toward the guest is bounded in frames and in bytes (its TCP stops on
//!   transmit back-pressure);
//!   toward the host, past `splice::TO_HOST_HIGH` bytes a connection's receive window
//!   closes, and those bytes occupy about what they hold (a few bytes in a large guest
//!   frame are copied out, not kept as a view pinning the frame); frames from the guest
//!   wait in a bounded queue (drops counted).
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

use ebb_core::{IOBufChain, Instant};
use ebb_net::iface::InterfaceCounters;
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, ETHERNET_HEADER_LEN, NetDevice, RxFrame, Segmentation,
    TxFrame, segment_tcp_frame,
};
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

/// The offloads a [`UserNet`] honours (`HostLinkFactory::offload`, for a factory of
/// its own to return): checksum offload and TSO both ways. See the crate docs,
/// "Offloads".
pub const OFFLOAD: ebb_vmm::virtio::Offload = ebb_vmm::virtio::Offload::CHECKSUM_AND_TSO4;

/// Frames from the guest kept for a rest backend that could not take them yet, at most.
const REST_BACKLOG: usize = 256;
/// The guest's MTU (the virtio device's): a frame longer than it and an Ethernet header
/// is a TSO frame, cut for whoever cannot take it whole.
const GUEST_MTU: usize = 1500;

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
    /// Frames from the guest for the rest dropped because 256 frames
    /// already waited for it (passt not reading, or gone): as a NIC drops on a full
    /// ring, so that they never hold up the endpoint's frames behind them.
    pub guest_to_rest_dropped: u64,
    /// Accepts on a forward's host socket that failed for want of descriptors or memory
    /// (tried again 50 ms later).
    pub accept_failed: u64,
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
    /// The guest takes TSO frames whole (`HostLink::set_large_receive`); else the
    /// endpoint's are cut into `cut` first.
    large_receive: bool,
    /// Segments of an endpoint frame cut for a guest without large receive, not yet
    /// handed over.
    cut: VecDeque<TxFrame>,
    /// Scratch: the rest's frames as it hands them over, and frames as chains for
    /// `NetDevice::receive` (kept for their allocations).
    rest_frames: Vec<RxFrame>,
    chains: Vec<TxFrame>,
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

    /// Frames for the guest, up to `max`, appended to `out` as chains (see
    /// `HostLink::receive_chains`): the endpoint's and the rest's, alternating which
    /// goes first. Runs the forwarder first (host events, the endpoint stack, the
    /// splices), as does each `transmit`; the epoll descriptor is read once per
    /// distinct `now`.
    fn frames_for_guest(&mut self, now: Instant, out: &mut Vec<TxFrame>, max: usize) -> usize {
        self.fwd.pump(now);
        self.pass_rest_readiness();
        self.rest_first = !self.rest_first;
        let mut taken = 0;
        for rest_turn in [self.rest_first, !self.rest_first] {
            if rest_turn {
                if let Some(rest) = self.rest.as_mut() {
                    let frames = &mut self.rest_frames;
                    taken += rest.receive(now, frames, max - taken);
                    out.extend(frames.drain(..).map(|f| TxFrame {
                        chain: IOBufChain::from(f.buf),
                        checksum: f.checksum,
                    }));
                }
            } else {
                taken += self.endpoint_frames(out, max - taken);
            }
        }
        taken
    }

    /// Up to `max` of the endpoint's frames for the guest into `out`; how many. A TSO
    /// frame is cut into MTU-sized segments (checksums complete) unless the guest takes
    /// it whole.
    fn endpoint_frames(&mut self, out: &mut Vec<TxFrame>, max: usize) -> usize {
        let mut taken = 0;
        while taken < max {
            let frame = match self.cut.pop_front() {
                Some(segment) => segment,
                None => match self.fwd.stack.device_mut().pop_to_guest() {
                    Some(frame) => frame,
                    None => break,
                },
            };
            let frame = if self.large_receive {
                frame
            } else {
                match cut_for_mtu(frame) {
                    Cut::Whole(frame) => frame,
                    Cut::Segments(segments) => {
                        self.cut.extend(segments);
                        continue;
                    }
                    // The endpoint's own TCP frames are always well-formed; were one
                    // not, it is dropped and its TCP sends the bytes again.
                    Cut::Malformed => continue,
                }
            };
            self.counters.record_rx(frame.chain.len());
            out.push(frame);
            taken += 1;
        }
        taken
    }
}

/// What cutting a frame for an MTU-sized receiver gives ([`cut_for_mtu`]).
enum Cut {
    /// Not a TSO frame (it fits the guest's MTU, or is not TCP over IPv4): as it is.
    Whole(TxFrame),
    /// A TSO frame's segments, each with complete checksums.
    Segments(Vec<TxFrame>),
    /// A TSO frame whose headers do not say how to cut it.
    Malformed,
}

/// `frame` for a receiver that takes MTU-sized frames only (passt; a guest without large
/// receive): a TSO frame cut into segments with complete checksums (see
/// `ebb_net_driver::segment_tcp_frame`), any other frame as it is (a partial checksum
/// is the receiver's link's to complete).
fn cut_for_mtu(frame: TxFrame) -> Cut {
    if frame.chain.len() <= GUEST_MTU + ETHERNET_HEADER_LEN {
        return Cut::Whole(frame);
    }
    let cut = frame
        .chain
        .segments()
        .next()
        .and_then(|head| Segmentation::of(head, GUEST_MTU));
    let Some(cut) = cut else {
        return Cut::Whole(frame); // not TCPv4: the receiver drops what it cannot take
    };
    match segment_tcp_frame(&frame.chain, cut) {
        Some(segments) => Cut::Segments(
            segments
                .into_iter()
                .map(|s| TxFrame::new(IOBufChain::from(s)))
                .collect(),
        ),
        None => Cut::Malformed,
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
                large_receive: false,
                cut: VecDeque::new(),
                rest_frames: Vec::new(),
                chains: Vec::new(),
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

    /// The memory the splices' buffers keep alive for those bytes (a view of a few bytes
    /// in a large buffer keeps all of it).
    pub fn buffered_memory(&self) -> usize {
        self.inner.get().fwd.buffered_memory()
    }

    /// Frames the endpoint queued for the guest that the device has not taken yet, and
    /// whether the queue is full (by frames or by bytes: its TCP then waits on
    /// back-pressure).
    pub fn frames_for_guest(&self) -> (usize, bool) {
        let port = self.inner.get().fwd.stack.device();
        (port.to_guest_len(), port.to_guest_full())
    }

    /// Bytes the endpoint's connections hold to send to the guest, in flight and queued
    /// (each within its share of the endpoint's send budget).
    pub fn endpoint_send_queued_bytes(&self) -> usize {
        self.inner.get().fwd.stack.tcp().send_queued_bytes()
    }

    /// The memory the endpoint's send queues keep alive (see
    /// [`TcpLayer::send_queued_memory`](ebb_net::tcp::TcpLayer::send_queued_memory)):
    /// what host reads toward the guest occupy until the guest acknowledges them.
    pub fn endpoint_send_queued_memory(&self) -> usize {
        self.inner.get().fwd.stack.tcp().send_queued_memory()
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
        let mut chains = std::mem::take(&mut inner.chains);
        let taken = inner.frames_for_guest(now, &mut chains, max);
        for frame in chains.drain(..) {
            let checksum = frame.checksum;
            match port::contiguous(frame.chain) {
                Ok(buf) => out.push(RxFrame { buf, checksum }),
                // No memory for the copy: lost like a frame a full ring drops (counted);
                // the sender's TCP sends it again.
                Err(_) => inner
                    .counters
                    .rx_dropped
                    .record(ebb_net_driver::DropReason::QueueFull),
            }
        }
        inner.chains = chains;
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
                    // The checksum state goes with the frame (see `port`).
                    let checksum = frame.checksum;
                    match port::contiguous(frame.chain) {
                        Ok(buf) => {
                            let frame = RxFrame { buf, checksum };
                            inner.fwd.stack.device_mut().push_from_guest(frame);
                        }
                        // No memory for the copy: dropped like a frame a full queue
                        // refuses (counted); the guest's TCP sends it again.
                        Err(_) => inner.fwd.stack.device_mut().drop_from_guest(),
                    }
                }
                Route::Rest if inner.rest.is_some() => {
                    let Some(frame) = frames.pop_front() else {
                        break;
                    };
                    if inner.rest_out.len() >= REST_BACKLOG
                        && let Some(rest) = inner.rest.as_mut()
                    {
                        // Hand passt what waits first: a burst of TSO frames, each cut in
                        // dozens, fills the backlog within one call of a passt that keeps
                        // up.
                        rest.transmit(now, &mut inner.rest_out);
                    }
                    if inner.rest_out.len() >= REST_BACKLOG {
                        // passt does not keep up (or is gone). Not back-pressure: the
                        // frames behind this one (the forwards' among them) must not wait
                        // for passt.
                        c.guest_to_rest_dropped += 1;
                    } else {
                        match cut_for_mtu(frame) {
                            // Longer than the MTU and not a TSO frame it can cut (its
                            // headers say otherwise): passt takes MTU-sized frames only.
                            Cut::Whole(frame)
                                if frame.chain.len() > GUEST_MTU + ETHERNET_HEADER_LEN =>
                            {
                                c.guest_malformed += 1
                            }
                            Cut::Whole(frame) => {
                                c.guest_to_rest += 1;
                                inner.rest_out.push_back(frame);
                            }
                            Cut::Segments(segments) => {
                                c.guest_to_rest += 1;
                                inner.rest_out.extend(segments);
                            }
                            Cut::Malformed => c.guest_malformed += 1,
                        }
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

    /// On: the endpoint's TSO frames go to the guest whole (the device writes their
    /// GSO header); off: cut first. Either way the endpoint sends what it would.
    fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        self.inner.get_mut().large_receive = on;
        Ok(())
    }

    /// The endpoint's frames go to the guest as its stack built them: headers and
    /// payload pieces, copied once, into the guest's buffers.
    fn receive_chains(
        &mut self,
        now: Instant,
        out: &mut Vec<TxFrame>,
        max: usize,
    ) -> Option<usize> {
        Some(self.inner.get_mut().frames_for_guest(now, out, max))
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
        let mut config = self.config.clone();
        config.max_connections = fit_descriptors(config.max_connections);
        UserNet::new(&config, rest)
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

    fn offload(&self) -> ebb_vmm::virtio::Offload {
        OFFLOAD
    }
}

/// The highest soft descriptor limit asked for (Linux's default `nr_open` is 2^20).
const MOST_DESCRIPTORS: u64 = 1 << 20;

/// Descriptors the monitor needs beside one per forwarded connection (its own files,
/// passt's socket, the epoll descriptors, a TAP or two).
const DESCRIPTOR_SLACK: u64 = 256;

/// The connection limit the process's descriptor limit allows: raises the soft limit
/// to the hard one if `wanted` connections would not fit (each holds a host socket);
/// if they still do not, says so and returns what fits. Past the limit, `accept` fails
/// and clients wait in the backlog (tried again every 50 ms) — this keeps the forwarder
/// from counting on descriptors it cannot have.
fn fit_descriptors(wanted: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let (raise_to, _) = descriptor_plan(limit.current, limit.maximum, wanted);
    let mut soft = limit.current;
    if let Some(raised) = raise_to
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(raised),
                maximum: limit.maximum,
            },
        )
        .is_ok()
    {
        soft = Some(raised);
    }
    let (_, fits) = descriptor_plan(soft, soft, wanted);
    if fits < wanted {
        log::warn!(
            "ebb-usernet: {} open files allowed (ulimit -n): at most {fits} forwarded \
             connections instead of {wanted}",
            soft.unwrap_or(0)
        );
    }
    fits
}

/// For descriptor limits `soft` and `hard` (`None`: unlimited): the soft limit to ask
/// for, if a higher one would help, and the connections that fit in the soft limit now.
fn descriptor_plan(soft: Option<u64>, hard: Option<u64>, wanted: usize) -> (Option<u64>, usize) {
    let need = wanted as u64 + DESCRIPTOR_SLACK;
    let Some(soft) = soft else {
        return (None, wanted);
    };
    // To the hard limit, not just to `need`: descriptors already open, and other
    // networks in the same process (a front end runs several nodes), count too.
    let raise_to = (soft < need)
        .then(|| {
            hard.map_or(need.max(MOST_DESCRIPTORS), |hard| {
                hard.min(MOST_DESCRIPTORS)
            })
        })
        .filter(|&raised| raised > soft);
    let fits = usize::try_from(soft.saturating_sub(DESCRIPTOR_SLACK))
        .unwrap_or(usize::MAX)
        .min(wanted);
    (raise_to, fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_core::IOBuf;

    /// An Ethernet + IPv4 + TCP frame of `len` bytes (20-byte headers), protocol `proto`.
    fn frame(len: usize, proto: u8) -> TxFrame {
        let mut f = vec![0u8; len];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f[26..30].copy_from_slice(&[10, 0, 2, 15]);
        f[30..34].copy_from_slice(&[10, 0, 2, 2]);
        f[34 + 12] = 5 << 4;
        TxFrame {
            chain: IOBufChain::from(IOBuf::from_vec(f)),
            checksum: ebb_net_driver::FrameChecksum::Partial {
                start: 34,
                offset: 16,
            },
        }
    }

    /// A rest (passt) that takes no frame, as one that stopped reading or died.
    struct StuckRest {
        fd: std::os::fd::OwnedFd,
    }

    impl ebb_net_driver::NetDevice for StuckRest {
        fn capabilities(&self) -> ebb_net_driver::DeviceCapabilities {
            ebb_net_driver::DeviceCapabilities::ETHERNET
        }
        fn receive(&mut self, _now: Instant, _out: &mut Vec<RxFrame>, _max: usize) -> usize {
            0
        }
        fn transmit(&mut self, _now: Instant, _frames: &mut VecDeque<TxFrame>) -> usize {
            0
        }
        fn counters(&self) -> ebb_net_driver::DeviceCounters {
            ebb_net_driver::DeviceCounters::default()
        }
    }

    impl HostLink for StuckRest {
        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            use std::os::fd::AsFd;
            self.fd.as_fd()
        }
    }

    /// A rest that takes every frame (a passt that keeps up).
    struct EagerRest {
        fd: std::os::fd::OwnedFd,
        taken: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ebb_net_driver::NetDevice for EagerRest {
        fn capabilities(&self) -> ebb_net_driver::DeviceCapabilities {
            ebb_net_driver::DeviceCapabilities::ETHERNET
        }
        fn receive(&mut self, _now: Instant, _out: &mut Vec<RxFrame>, _max: usize) -> usize {
            0
        }
        fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
            let n = frames.len();
            frames.clear();
            self.taken
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            n
        }
        fn counters(&self) -> ebb_net_driver::DeviceCounters {
            ebb_net_driver::DeviceCounters::default()
        }
    }

    impl HostLink for EagerRest {
        fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            use std::os::fd::AsFd;
            self.fd.as_fd()
        }
    }

    #[test]
    fn a_burst_of_tso_frames_reaches_a_rest_that_keeps_up_whole() {
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let mut net = UserNet::new(
            &UserNetConfig::new(Vec::new()),
            Some(Box::new(EagerRest {
                fd,
                taken: taken.clone(),
            })),
        )
        .unwrap();
        // 100 TSO frames of 4,000 bytes (three segments each) to the internet, one call.
        let mut frames: VecDeque<TxFrame> = (0..100)
            .map(|_| {
                let mut f = frame(4000, 6);
                let mut bytes = f.chain.to_vec();
                bytes[30..34].copy_from_slice(&[1, 1, 1, 1]);
                f.chain = IOBufChain::from(IOBuf::from_vec(bytes));
                f
            })
            .collect();
        assert_eq!(net.transmit(Instant::from_nanos(1), &mut frames), 100);
        let c = net.forwarder_counters();
        assert_eq!((c.guest_to_rest, c.guest_to_rest_dropped), (100, 0));
        assert_eq!(taken.load(std::sync::atomic::Ordering::Relaxed), 300);
    }

    #[test]
    fn frames_for_a_stuck_rest_are_dropped_not_held_in_front_of_the_endpoints() {
        let fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let mut net = UserNet::new(
            &UserNetConfig::new(Vec::new()),
            Some(Box::new(StuckRest { fd })),
        )
        .unwrap();
        let to = |addr: [u8; 4]| {
            let mut f = frame(100, 17);
            let mut bytes = f.chain.to_vec();
            bytes[30..34].copy_from_slice(&addr);
            f.chain = IOBufChain::from(IOBuf::from_vec(bytes));
            f
        };
        // 300 frames for the internet, then one for the endpoint.
        let mut frames: VecDeque<TxFrame> = (0..300).map(|_| to([1, 1, 1, 1])).collect();
        frames.push_back(to(ENDPOINT_ADDR.octets()));
        let now = Instant::from_nanos(1);
        assert_eq!(net.transmit(now, &mut frames), 301, "every frame is taken");
        let c = net.forwarder_counters();
        assert_eq!(c.guest_to_rest, REST_BACKLOG as u64);
        assert_eq!(c.guest_to_rest_dropped, 300 - REST_BACKLOG as u64);
        assert_eq!(c.guest_to_endpoint, 1, "the endpoint's frame did not wait");
    }

    #[test]
    fn the_connection_limit_follows_the_descriptor_limit() {
        // Room enough: nothing to raise.
        assert_eq!(
            descriptor_plan(Some(65536), Some(65536), 1024),
            (None, 1024)
        );
        assert_eq!(descriptor_plan(None, None, 1024), (None, 1024));
        // The common 1024 soft limit under a higher hard one: raise it to the hard one.
        assert_eq!(
            descriptor_plan(Some(1024), Some(524288), 1024),
            (Some(524288), 768)
        );
        assert_eq!(
            descriptor_plan(Some(1024), None, 1024),
            (Some(1 << 20), 768)
        );
        assert_eq!(descriptor_plan(Some(1280), Some(1280), 1024), (None, 1024));
        // A hard limit too low: raise to it, and fewer connections fit.
        assert_eq!(
            descriptor_plan(Some(512), Some(1000), 1024),
            (Some(1000), 256)
        );
        assert_eq!(descriptor_plan(Some(1000), Some(1000), 1024), (None, 744));
        // Hardly any descriptors: no connection fits.
        assert_eq!(descriptor_plan(Some(100), Some(100), 1024), (None, 0));
    }

    #[test]
    fn passt_gets_a_tso_frame_cut_and_every_other_frame_as_it_is() {
        // 4,000 bytes: 3,946 of payload, in segments of 1,460.
        let Cut::Segments(cut) = cut_for_mtu(frame(4000, 6)) else {
            panic!("a well-formed TSO frame is cut");
        };
        assert_eq!(cut.len(), 3);
        for segment in &cut {
            assert!(segment.chain.len() <= GUEST_MTU + ETHERNET_HEADER_LEN);
            assert_eq!(segment.checksum, ebb_net_driver::FrameChecksum::Complete);
        }
        let payload: usize = cut.iter().map(|s| s.chain.len() - 54).sum();
        assert_eq!(payload, 4000 - 54);
        // An MTU-sized frame keeps its partial checksum: passt's link completes it.
        let Cut::Whole(small) = cut_for_mtu(frame(1514, 6)) else {
            panic!("an MTU-sized frame goes as it is");
        };
        assert!(matches!(
            small.checksum,
            ebb_net_driver::FrameChecksum::Partial { .. }
        ));
        // A large frame that is not TCP is not the device's to cut: passed on whole.
        assert!(matches!(cut_for_mtu(frame(4000, 17)), Cut::Whole(_)));
        // A TCP header that claims more than the frame holds: not cut, counted.
        let mut bad = frame(4000, 6);
        let mut bytes = bad.chain.to_vec();
        bytes[34 + 12] = 15 << 4; // 60-byte TCP header
        bytes.truncate(14 + 20 + 40);
        bytes.resize(4000, 0);
        bytes[16..18].copy_from_slice(&(4000u16 - 14).to_be_bytes());
        bad.chain = IOBufChain::from(IOBuf::from_vec(bytes));
        let _ = cut_for_mtu(bad); // whichever: it must not panic
    }
}
