//! [`Forwarder`]: the endpoint stack, the host listeners and sockets under one epoll
//! descriptor, and the splices between them; [`Forwarder::pump`] is one round.
//!
//! Two kinds of splice: a host connection accepted on a forward's listener, spliced to
//! a connection the endpoint opens to the guest; and a guest connection accepted by the
//! endpoint on a guest forward's port, spliced to a host connection the forwarder opens
//! (non-blocking: `Splice::connecting`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::time::Duration;

use ebb_core::Instant;
use ebb_net::iface::{InterfaceConfig, InterfaceCounters, Ipv4Cidr, Limits};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpConn, TcpLayer};
use ebb_net::wire::EthernetAddress;
use rustix::event::epoll;

use crate::port::EndpointPort;
use crate::splice::{GuestSide, Next, ReadBuffer, Splice, SpliceHandler};
use crate::{UserNetConfig, UserNetCounters, UserNetError};

/// Epoll tokens: listeners are `0..n`, splices `SPLICE_BASE + id`, the rest's socket
/// [`REST_TOKEN`].
const SPLICE_BASE: u64 = 1 << 32;
pub(crate) const REST_TOKEN: u64 = u64::MAX;
/// The endpoint's ephemeral ports (49152-65535): at most this many connections in
/// TIME-WAIT.
const EPHEMERAL_PORTS: usize = 16384;
/// Rounds of (service, stack poll) per pump while either has work for the other.
const ROUNDS: usize = 8;
/// How soon the endpoint's timers are looked at again while the queue toward the guest
/// is full (the guest's receive kick normally comes first).
const BLOCKED_RETRY: Duration = Duration::from_millis(1);
/// The endpoint's maximum segment lifetime: TIME-WAIT (2 MSL) holds the endpoint's
/// four-tuple after the host closed first. The link to the guest is one memory copy
/// long, where no segment wanders for 30 s: a TIME-WAIT of 2 s keeps its duplicate
/// protection and frees ephemeral ports 30x sooner for clients that reconnect often.
const ENDPOINT_MSL: Duration = Duration::from_secs(1);

/// A forward's listener.
struct Listener {
    socket: TcpListener,
    guest: SocketAddrV4,
    /// Edge-triggered: accept until `WouldBlock`.
    ready: bool,
}

/// Guest connections accepted on guest forwards, with the host address each is for,
/// waiting for [`Forwarder::pump`] to connect them (filled by the endpoint's listeners).
type Incoming = Rc<RefCell<Vec<(TcpConn, SocketAddrV4)>>>;

/// Guest connections that may wait, established, for the forwarder to take them.
const GUEST_FORWARD_BACKLOG: usize = 128;

/// What the endpoint's connections may hold to send toward the guest, in flight and
/// queued, all together — when they are open before they fill: each connection's send
/// buffer is this shared out among the open ones, within [`SEND_BUFFER_MIN`,
/// `SEND_BUFFER_MAX`], and a share lowered later is not taken back from what a
/// connection queued already (filled one after another as they open, 1,024 connections
/// hold at most the sum of their shares at opening, about 330 MiB). Without it a guest that
/// advertises a large window, acknowledges until the congestion window is large and then
/// stops would have the monitor queue that window for every connection (a scaled window
/// reaches 1 GiB).
const ENDPOINT_SEND_BUDGET: usize = 64 << 20;
/// The smallest share: enough for a window's worth at the guest's default window.
const SEND_BUFFER_MIN: usize = 64 << 10;
/// The largest (a lone bulk connection): 4 MiB, as ebb-net's default send buffer; a
/// 1 MiB share moved 0.7x as much to a native node as 4 MiB (docs/benchmarks.md).
const SEND_BUFFER_MAX: usize = 4 << 20;

/// After an accept failed for want of descriptors or memory (the connection waits in the
/// backlog, and no new edge may come for it), when to try again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// The part of `max_connections` one side (host clients, or the guest through its guest
/// forwards) cannot take from the other: an eighth, when both kinds of forward exist.
fn reserved_for_the_other_side(max_connections: usize, both_sides: bool) -> usize {
    if both_sides { max_connections / 8 } else { 0 }
}

/// Whether the failure after `so_far` earlier ones gets a log line: the 1st, 2nd, 4th,
/// 8th... — a guest or a client that provokes failures in a loop cannot flood the log.
fn worth_a_line(so_far: u64) -> bool {
    (so_far + 1).is_power_of_two()
}

/// Each connection's share of [`ENDPOINT_SEND_BUDGET`] when `open` are open.
fn send_share(open: usize) -> usize {
    (ENDPOINT_SEND_BUDGET / open.max(1)).clamp(SEND_BUFFER_MIN, SEND_BUFFER_MAX)
}

/// See the module docs.
pub(crate) struct Forwarder {
    incoming: Incoming,
    pub(crate) stack: Stack<EndpointPort, TcpLayer>,
    epoll: OwnedFd,
    listeners: Vec<Listener>,
    splices: HashMap<u64, Splice>,
    next_id: u64,
    /// Splices whose guest connection had events (filled by the handlers).
    touched: Rc<RefCell<Vec<u64>>>,
    /// Splices to service in the next round (host socket events, more to read).
    pending: Vec<u64>,
    endpoint: SocketAddrV4,
    max_connections: usize,
    /// Of them, what either side may hold ([`reserved_for_the_other_side`]).
    side_limit: usize,
    /// Splices opened by host clients, and by the guest.
    host_opened: usize,
    guest_opened: usize,
    /// An accept failed for want of resources: try the listeners again then.
    accept_retry_at: Option<Instant>,
    /// Each guest connection's send buffer now ([`send_share`] of the splices open);
    /// read by the connect callbacks too.
    send_buffer: Rc<std::cell::Cell<usize>>,
    pub(crate) counters: UserNetCounters,
    /// When the next pump is due (`None`: only on an event).
    pub(crate) next_at: Option<Instant>,
    /// The `now` of the last pump that read the epoll descriptor: one read per round of
    /// the I/O thread, which may pump more than once with the same `now`.
    events_read_at: Option<Instant>,
    /// The epoll descriptor reported the rest's (passt's) socket readable since
    /// `UserNet` last passed that on (see `HostLink::read_on_readiness`).
    pub(crate) rest_readable: bool,
    /// Read the epoll descriptor only after `events_reported` (the device thread saw it
    /// readable: `HostLink::read_on_readiness`), not once every round.
    pub(crate) collect_on_readiness: bool,
    /// The epoll descriptor was reported readable since it was last read (starts true).
    pub(crate) events_reported: bool,
    /// Kept between pumps for their allocations (the steady state allocates nothing
    /// here).
    events: Vec<epoll::Event>,
    work: Vec<u64>,
    again: Vec<u64>,
    /// Where host sockets are read into (one buffer for every splice).
    reads: ReadBuffer,
}

impl Forwarder {
    pub(crate) fn new(config: &UserNetConfig) -> Result<Forwarder, UserNetError> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| UserNetError::Epoll(e.into()))?;
        let mut listeners = Vec::new();
        for (i, f) in config.forwards.iter().enumerate() {
            let socket = TcpListener::bind((f.host_addr, f.host_port)).map_err(|source| {
                UserNetError::Bind {
                    addr: f.host_addr,
                    port: f.host_port,
                    source,
                }
            })?;
            socket.set_nonblocking(true).map_err(UserNetError::Epoll)?;
            epoll::add(
                &epoll,
                &socket,
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::IN | epoll::EventFlags::ET,
            )
            .map_err(|e| UserNetError::Epoll(e.into()))?;
            listeners.push(Listener {
                socket,
                guest: SocketAddrV4::new(config.guest, f.guest_port),
                ready: true,
            });
        }
        let cidr = Ipv4Cidr::new(config.endpoint, config.prefix_len)
            .ok_or(UserNetError::Address(config.endpoint, config.prefix_len))?;
        // The first connections after boot all wait for the guest's MAC address: a burst
        // of clients (a benchmark's 32 connections) must not lose SYNs to ARP's default
        // 8-packet queue and wait a second for their retransmission.
        let mut limits = Limits::default();
        limits.arp_pending_per_destination = config.max_connections.max(8);
        limits.arp_pending_total = config.max_connections.max(64);
        let iface = InterfaceConfig::new_static(EthernetAddress(config.endpoint_mac), cidr, None)
            .with_limits(limits);
        let tcp = TcpLayer::new(TcpConfig {
            isn_seed: config.isn_seed,
            msl: ENDPOINT_MSL,
            // Open connections plus every four-tuple TIME-WAIT may hold: the endpoint
            // closes first when the host client does, and a client that connects and
            // closes in a loop (memcached's churn test: 10,000) leaves one TIME-WAIT
            // per connection for 2 s. Ephemeral ports bound those anyway.
            max_connections: config.max_connections + EPHEMERAL_PORTS,
            send_buffer: SEND_BUFFER_MAX,
            ..TcpConfig::default()
        });
        let incoming: Incoming = Rc::new(RefCell::new(Vec::new()));
        for g in &config.guest_forwards {
            let to = g.host;
            let queue = incoming.clone();
            tcp.listen(
                SocketAddrV4::new(config.endpoint, g.endpoint_port),
                GUEST_FORWARD_BACKLOG,
                move |conn| queue.borrow_mut().push((conn, to)),
            )
            .map_err(|kind| UserNetError::GuestForward {
                port: g.endpoint_port,
                reason: format!("{kind:?}"),
            })?;
        }
        Ok(Forwarder {
            incoming,
            stack: Stack::new(EndpointPort::default(), iface, tcp),
            epoll,
            listeners,
            splices: HashMap::new(),
            next_id: 0,
            touched: Rc::new(RefCell::new(Vec::new())),
            pending: Vec::new(),
            endpoint: SocketAddrV4::new(config.endpoint, 0),
            max_connections: config.max_connections,
            side_limit: config.max_connections
                - reserved_for_the_other_side(
                    config.max_connections,
                    !config.forwards.is_empty() && !config.guest_forwards.is_empty(),
                ),
            host_opened: 0,
            guest_opened: 0,
            accept_retry_at: None,
            send_buffer: Rc::new(std::cell::Cell::new(SEND_BUFFER_MAX)),
            counters: UserNetCounters::default(),
            next_at: Some(Instant::ZERO),
            events_read_at: None,
            rest_readable: false,
            collect_on_readiness: false,
            events_reported: true,
            events: Vec::with_capacity(64),
            work: Vec::new(),
            again: Vec::new(),
            reads: ReadBuffer::new(),
        })
    }

    /// Adds the rest-of-network backend's descriptor, so its frames wake the same
    /// sleeper as the host sockets.
    pub(crate) fn watch_rest(&self, fd: BorrowedFd<'_>) -> Result<(), UserNetError> {
        epoll::add(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(REST_TOKEN),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )
        .map_err(|e| UserNetError::Epoll(e.into()))
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// The host addresses the forwards listen on (port 0 in the configuration: the
    /// port the kernel picked).
    pub(crate) fn listening(&self) -> Vec<SocketAddrV4> {
        self.listeners
            .iter()
            .filter_map(|l| match l.socket.local_addr() {
                Ok(std::net::SocketAddr::V4(a)) => Some(a),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn active(&self) -> usize {
        self.splices.len()
    }

    pub(crate) fn buffered(&self) -> usize {
        self.splices.values().map(Splice::buffered).sum()
    }

    pub(crate) fn buffered_memory(&self) -> usize {
        self.splices.values().map(Splice::buffered_memory).sum()
    }

    pub(crate) fn endpoint_counters(&self) -> InterfaceCounters {
        self.stack.iface().counters()
    }

    /// Takes every event the epoll descriptor holds (so the edge-triggered watch on it
    /// fires again for the next), marking sockets ready.
    fn collect_events(&mut self) -> usize {
        let mut found = 0;
        let mut events = std::mem::take(&mut self.events);
        events.reserve(64);
        loop {
            events.clear();
            let zero = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let n = match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&zero),
            ) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => 0,
            };
            found += n;
            for event in &events {
                let token = event.data.u64();
                let flags = event.flags;
                if token == REST_TOKEN {
                    // Handed to the rest by `UserNet`, which reads its socket then only.
                    self.rest_readable = true;
                    continue;
                }
                if token < SPLICE_BASE {
                    if let Some(l) = self.listeners.get_mut(token as usize) {
                        l.ready = true;
                    }
                    continue;
                }
                let id = token - SPLICE_BASE;
                if let Some(s) = self.splices.get_mut(&id) {
                    let problem = epoll::EventFlags::ERR | epoll::EventFlags::HUP;
                    if flags.intersects(epoll::EventFlags::IN | epoll::EventFlags::RDHUP | problem)
                    {
                        s.readable = true;
                    }
                    if flags.intersects(epoll::EventFlags::RDHUP | problem) {
                        s.hangup_seen = true;
                    }
                    if flags.intersects(epoll::EventFlags::OUT | problem) {
                        s.writable = true;
                    }
                    self.pending.push(id);
                }
            }
            if n < events.capacity() {
                break;
            }
        }
        self.events = events;
        found
    }

    /// Whether host clients may open another connection now.
    fn host_may_open(&self) -> bool {
        self.splices.len() < self.max_connections && self.host_opened < self.side_limit
    }

    /// Accepts what the ready listeners hold, up to the connection limit, and opens a
    /// guest connection for each.
    fn accept(&mut self, now: Instant) {
        if self.accept_retry_at.is_some_and(|at| at <= now) {
            self.accept_retry_at = None;
            for listener in &mut self.listeners {
                listener.ready = true;
            }
        }
        for l in 0..self.listeners.len() {
            while self.listeners[l].ready && self.host_may_open() {
                match self.listeners[l].socket.accept() {
                    Ok((host, _)) => {
                        let guest = self.listeners[l].guest;
                        self.start(host, guest);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.listeners[l].ready = false,
                    // Interrupted, or a client that went away before we took it
                    // (ECONNABORTED; EPROTO on some kernels): the next one may be there.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                        ) || e.raw_os_error()
                            == Some(rustix::io::Errno::PROTO.raw_os_error()) => {}
                    Err(e) => {
                        // Out of descriptors, say: the connection waits in the backlog,
                        // and no new edge may come for it: try again in a while.
                        if worth_a_line(self.counters.accept_failed) {
                            log::warn!(
                                "ebb-usernet: accept: {e} (trying again in {ACCEPT_RETRY:?})"
                            );
                        }
                        self.counters.accept_failed += 1;
                        self.accept_retry_at = Some(now + ACCEPT_RETRY);
                        self.listeners[l].ready = false;
                    }
                }
            }
        }
    }

    /// Splices `host` to a new connection to `guest`.
    fn start(&mut self, host: std::net::TcpStream, guest: SocketAddrV4) {
        self.counters.accepted += 1;
        let id = self.next_id;
        self.next_id += 1;
        let side = Rc::new(RefCell::new(GuestSide::default()));
        let splice = Splice::new(host, side.clone());
        let registered = splice.host.set_nonblocking(true).is_ok()
            && epoll::add(
                &self.epoll,
                &splice.host,
                epoll::EventData::new_u64(SPLICE_BASE + id),
                epoll::EventFlags::IN
                    | epoll::EventFlags::OUT
                    | epoll::EventFlags::RDHUP
                    | epoll::EventFlags::ET,
            )
            .is_ok();
        let _ = splice.host.set_nodelay(true);
        if !registered {
            splice.reset_host();
            self.counters.host_resets += 1;
            return;
        }
        let touched = self.touched.clone();
        let callback_side = side.clone();
        let send_buffer = self.send_buffer.clone();
        let connected = self
            .stack
            .tcp()
            .connect(self.endpoint, guest, move |result| {
                match result {
                    Ok(conn) => {
                        conn.set_send_buffer(send_buffer.get());
                        conn.set_handler(SpliceHandler {
                            id,
                            side: callback_side.clone(),
                            touched: touched.clone(),
                        });
                        callback_side.borrow_mut().conn = Some(conn);
                    }
                    Err(kind) => callback_side.borrow_mut().failed = Some(kind),
                }
                touched.borrow_mut().push(id);
            });
        if let Err(kind) = connected {
            if worth_a_line(self.counters.connect_failed) {
                log::warn!(
                    "ebb-usernet: cannot connect to the guest's {guest}: {kind:?} ({} so far)",
                    self.counters.connect_failed + 1
                );
            }
            splice.reset_host();
            self.counters.connect_failed += 1;
            self.counters.host_resets += 1;
            return;
        }
        self.splices.insert(id, splice);
        self.host_opened += 1;
        self.share_send_budget();
    }

    /// Gives every guest connection its share of [`ENDPOINT_SEND_BUDGET`] after the
    /// number of splices changed (only when the share did). A connection over its new
    /// share is offered no room until the guest acknowledges below it.
    fn share_send_budget(&mut self) {
        let share = send_share(self.splices.len());
        if share == self.send_buffer.replace(share) {
            return;
        }
        for splice in self.splices.values() {
            if let Some(conn) = &splice.guest.borrow().conn {
                conn.set_send_buffer(share);
            }
        }
    }

    /// Takes the guest connections the endpoint accepted on guest forwards: connects a
    /// host socket for each and splices the two (their ids go to `work`). A connection
    /// over the limit, or whose host socket cannot even start connecting, is reset.
    fn start_incoming(&mut self, work: &mut Vec<u64>) {
        let incoming = std::mem::take(&mut *self.incoming.borrow_mut());
        for (conn, host_addr) in incoming {
            self.counters.guest_accepted += 1;
            if self.splices.len() >= self.max_connections || self.guest_opened >= self.side_limit {
                if worth_a_line(self.counters.host_connect_failed) {
                    log::warn!(
                        "ebb-usernet: guest forward to {host_addr}: too many connections ({} \
                         refused or failed so far)",
                        self.counters.host_connect_failed + 1
                    );
                }
                self.counters.host_connect_failed += 1;
                ebb_core::net::TcpConnection::abort(&conn);
                continue;
            }
            let host = match connect_nonblocking(host_addr) {
                Ok(host) => host,
                Err(e) => {
                    log::debug!("ebb-usernet: guest forward: cannot connect to {host_addr}: {e}");
                    self.counters.host_connect_failed += 1;
                    ebb_core::net::TcpConnection::abort(&conn);
                    continue;
                }
            };
            let id = self.next_id;
            self.next_id += 1;
            let side = Rc::new(RefCell::new(GuestSide::default()));
            conn.set_handler(SpliceHandler {
                id,
                side: side.clone(),
                touched: self.touched.clone(),
            });
            conn.set_send_buffer(self.send_buffer.get());
            side.borrow_mut().conn = Some(conn.clone());
            let splice = Splice::connecting(host, side);
            let registered = epoll::add(
                &self.epoll,
                &splice.host,
                epoll::EventData::new_u64(SPLICE_BASE + id),
                epoll::EventFlags::IN
                    | epoll::EventFlags::OUT
                    | epoll::EventFlags::RDHUP
                    | epoll::EventFlags::ET,
            )
            .is_ok();
            if !registered {
                self.counters.host_connect_failed += 1;
                splice.guest.borrow_mut().conn = None;
                ebb_core::net::TcpConnection::abort(&conn);
                continue;
            }
            let _ = splice.host.set_nodelay(true);
            self.splices.insert(id, splice);
            self.guest_opened += 1;
            self.share_send_budget();
            work.push(id);
        }
    }

    /// Services splice `id`; drops it when it is finished.
    fn service(&mut self, id: u64, again: &mut Vec<u64>) {
        let Some(splice) = self.splices.get_mut(&id) else {
            return;
        };
        match splice.service(&mut self.reads) {
            Next::Wait => {}
            Next::Again => again.push(id),
            next @ (Next::Done | Next::Reset) => {
                let connect_failed = splice.connect_failed;
                if let Some(splice) = self.splices.remove(&id) {
                    if splice.from_guest {
                        self.guest_opened -= 1;
                    } else {
                        self.host_opened -= 1;
                    }
                    let mut side = splice.guest.borrow_mut();
                    if side.failed.is_some() {
                        self.counters.connect_failed += 1;
                    }
                    if splice.connect_failed {
                        self.counters.host_connect_failed += 1;
                    }
                    // Breaks the cycle connection → handler → side → connection.
                    side.conn = None;
                    let _ = epoll::delete(&self.epoll, &splice.host);
                }
                if next == Next::Reset && !connect_failed {
                    self.counters.host_resets += 1;
                }
                self.share_send_budget();
            }
        }
    }

    /// One round: host events, accepts, the endpoint stack and the splices, until
    /// neither has work for the other (at most [`ROUNDS`]). Sets [`next_at`](Self::next_at).
    pub(crate) fn pump(&mut self, now: Instant) {
        let collect = if self.collect_on_readiness {
            std::mem::take(&mut self.events_reported)
        } else {
            self.events_read_at != Some(now)
        };
        if collect {
            self.events_read_at = Some(now);
            self.counters.event_reads += 1;
            let found = self.collect_events();
            if found == 0 {
                self.counters.event_reads_empty += 1;
            }
            // While reads find events (a busy host side), read again next round without
            // waiting for a report: the device thread, busy too, reads its own epoll only
            // when it runs out of work, and host input would wait for that (measured:
            // 0.5x memcached's closed-loop throughput where reading every round gave
            // 0.6x). A read that finds nothing stops it until the next report.
            if self.collect_on_readiness {
                self.events_reported = found > 0;
            }
        }
        self.accept(now);
        let mut work = std::mem::take(&mut self.work);
        work.append(&mut self.pending);
        let mut again = std::mem::take(&mut self.again);
        let mut next = None;
        for _ in 0..ROUNDS {
            work.sort_unstable();
            work.dedup();
            for id in work.drain(..) {
                self.service(id, &mut again);
            }
            next = self.stack.poll(now);
            self.start_incoming(&mut work);
            work.append(&mut self.touched.borrow_mut());
            if work.is_empty() && !self.stack.tcp().needs_poll() {
                break;
            }
        }
        // Touched after the last round: serviced first thing next time.
        self.pending.append(&mut work);
        self.pending.append(&mut again);
        self.work = work;
        self.again = again;
        let busy = !self.pending.is_empty()
            || !self.incoming.borrow().is_empty()
            || !self.stack.device().from_guest.is_empty()
            || self.stack.tcp().needs_poll()
            || self.listeners.iter().any(|l| l.ready) && self.host_may_open();
        // With the queue toward the guest full, the stack's TCP is held by back-pressure
        // and reports its transmit as due "now" every round: asking to be polled then
        // spun the device thread on a CPU the guest needed to take those frames
        // (measured under overload: 100,000 empty rounds a second, the guest starved,
        // throughput collapsed). What frees the queue is the guest re-posting receive
        // buffers, a kick the device asks for; the timer stays only as a safety net.
        let held_by_guest = self.stack.device().to_guest_full();
        self.next_at = if busy {
            Some(now)
        } else if held_by_guest {
            next.map(|at| at.max(now + BLOCKED_RETRY))
        } else {
            next
        };
        if let Some(retry) = self.accept_retry_at {
            self.next_at = Some(self.next_at.map_or(retry, |at| at.min(retry)));
        }
    }
}

impl Drop for Forwarder {
    /// The monitor stops (the VM ended, or the program): every forwarded connection
    /// still open is reset, so a host client sees its connection broken, not a clean
    /// end of stream in the middle of a reply.
    fn drop(&mut self) {
        for splice in self.splices.values() {
            splice.reset_host();
        }
    }
}

/// A TCP socket to `addr`, non-blocking, its connect started (completion is reported by
/// epoll: writable, or an error).
fn connect_nonblocking(addr: SocketAddrV4) -> std::io::Result<std::net::TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let socket = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    match rustix::net::connect(&socket, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => Ok(std::net::TcpStream::from(socket)),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_budget_is_shared_within_its_bounds() {
        assert_eq!(send_share(0), SEND_BUFFER_MAX);
        assert_eq!(send_share(1), SEND_BUFFER_MAX);
        assert_eq!(send_share(16), SEND_BUFFER_MAX);
        assert_eq!(send_share(64), 1 << 20);
        assert_eq!(send_share(1024), SEND_BUFFER_MIN);
        assert_eq!(send_share(100_000), SEND_BUFFER_MIN);
        // Whatever the count, the shares add up to the budget or the floor's total.
        for open in [1, 3, 17, 200, 1000, 5000] {
            let total = send_share(open) * open;
            assert!(total <= ENDPOINT_SEND_BUDGET.max(SEND_BUFFER_MIN * open));
        }
    }
}
