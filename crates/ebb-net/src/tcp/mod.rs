//! TCP (RFC 9293): connections, listeners and the EbbRT-style application interface.
//!
//! [`TcpLayer`] is one core's TCP: it implements [`TcpInput`] for the IP layer, which hands
//! it every received segment and calls [`TcpInput::poll`] when [`TcpInput::poll_at`] is due;
//! segments leave through the [`TcpOutput`] lent to those calls. Nothing here reads a clock
//! or owns a device (sans-IO), so tests drive time and inspect every segment.
//!
//! # Layout
//!
//! * this module — configuration, counters, the demux table keyed by [`FourTuple`],
//!   listeners, the handle types [`TcpLayer`] and [`TcpConn`], and event dispatch;
//! * `state` — the TCB and the per-state segment processing (RFC 9293 §3.10.7);
//! * `send` — segmentation, ACK processing, limited transmit, fast and early retransmit,
//!   NewReno recovery guided by the peer's SACK blocks, retransmission, tail-loss-probe and
//!   persist timers, the send-side application calls;
//! * `recv` — out-of-order reassembly and SACK blocks;
//! * `timers` — RFC 6298 RTO estimation (Karn) and per-connection deadlines (keepalive
//!   among them);
//! * `congestion` — NewReno and CUBIC windows;
//! * `isn` — RFC 6528 initial sequence numbers from a seeded key.
//!
//! # The application interface and its invariant
//!
//! Connections implement [`ebb_core::net::TcpConnection`]; handlers are
//! [`ebb_core::net::TcpHandler`]s installed with [`TcpConn::set_handler`]. The stack keeps no
//! receive buffer: in-order data is handed to `receive` as zero-copy slices of the received
//! frames. The advertised window is the application's choice: open, it is
//! [`TcpConfig::receive_window`]; closed (`set_receive_window_open(false)`), it is zero
//! (data already inside the advertised window is held, never delivered while closed, and
//! the right edge never moves left); reopening sends a window update.
//!
//! **Borrow invariant.** Layer state (`Inner::state`, `Inner::counters`) and each TCB are
//! borrowed only inside the layer's own calls (`receive`, `poll`, `listen`, `connect`) and
//! inside connection methods, and never while application code runs. Segment processing
//! only *queues* application events on the TCB; [`TcpInput::receive`] and
//! [`TcpInput::poll`] deliver them at their end, after every borrow is released, one event
//! at a time with the handler taken out of its slot. Hence:
//!
//! * connection methods (send, close, abort, set_receive_window_open, set_handler) and
//!   [`TcpLayer::connect`]/[`TcpLayer::listen`] may be called from inside any callback
//!   without a `RefCell` conflict;
//! * callbacks never nest: dispatch is guarded by a flag, and events caused by a callback
//!   (for example `closed(Aborted)` after `abort()`) are queued and delivered after it
//!   returns, by the same dispatch loop;
//! * methods never send segments themselves (they have no [`TcpOutput`]): they mark the
//!   layer as needing a poll.
//!
//! **Polling contract.** After the application acted on a connection outside the stack's
//! own calls, [`TcpInput::poll_at`] returns `Some(Instant::ZERO)` (and
//! [`TcpLayer::needs_poll`] is true) until the driver calls [`TcpInput::poll`]; events
//! caused outside callbacks are delivered by that poll too.
//!
//! **ACKs after delivery.** In-order data handed to a handler is acknowledged on the
//! [`TcpInput::poll`] the driver runs after the batch of received segments (the stack
//! always does), not inside `receive`: what the application sends from its `receive`
//! callback then carries the ACK (ping-pong: two segments per round trip, not four), and
//! a batch of segments costs fewer ACKs. At most two full segments wait so (RFC 5681
//! §4.2); out-of-order data, FINs and data nobody can take yet are acknowledged at once.
//!
//! **Transmit back-pressure.** Before each segment TCP asks the output for room
//! ([`TcpOutput::transmit_room`]); when the interface's queue is full it stops (nothing is
//! lost or counted as an error), files the connection on a blocked list, and
//! [`TcpInput::transmit_blocked`] tells the driver to poll again once the device has
//! taken frames.
//!
//! **Batching.** Nagle is off by default (every `send` goes out as soon as the windows
//! allow). [`TcpConn::set_nodelay(false)`](TcpConn::set_nodelay) turns it on: while data
//! is in flight, a sub-MSS segment waits for the ACK, so small sends coalesce.
//!
//! **Header prediction.** A received segment that is exactly what an ESTABLISHED
//! connection expects — an option-less ACK or ACK+PSH at `rcv_nxt` inside the window,
//! acknowledging new data or carrying data, the peer's window unchanged, no loss
//! recovery, no out-of-order data (`Tcb::predicts`) — is read straight from its 20
//! header bytes (`wire::tcp::PlainHeader`) and processed by `Tcb::on_predicted`, which
//! does what the general path does for it, minus the branches the prediction decided.
//! Segments without options go out the same way: the header is a template filled with
//! sequence, ACK, window and flags ([`TcpOutput::send_tcp_plain`]). Anything else takes
//! the general path. `tcp/tests/fast_path.rs` checks that a layer with the fast path and one
//! without ([`TcpLayer::set_fast_path`]) send the same segments and events.
//!
//! # Bounds
//!
//! Total connections ([`TcpConfig::max_connections`]), half-open (SYN-RECEIVED) connections
//! per listener ([`TcpConfig::max_half_open_per_listener`]; further SYNs are dropped and
//! counted), established connections not yet given a handler per listener (the `backlog`
//! of [`TcpLayer::listen`]; a completing handshake waits in SYN-RECEIVED while it is full),
//! out-of-order bytes per connection ([`TcpConfig::max_out_of_order_bytes`]), and the
//! in-order data the layer holds for applications that cannot take it now — a closed
//! receive window still admits what the last window advertised — over all connections
//! ([`TcpConfig::max_held_bytes`]; past it such data is dropped unacknowledged, and data
//! held is kept compact, see `Tcb::push_event`). Queued
//! send data is the application's (`send` never drops; `try_send` and `send_window` let
//! it bound itself).
//!
//! # Multi-core
//!
//! A `TcpLayer` is per core and `!Send`: each connection lives on the core whose layer
//! created it. The demux is [`FourTuple`] → connection, private to this module's
//! `ConnTable`. A multi-core stack gives each core's layer a [`ConnectionDirectory`]
//! ([`TcpLayer::set_directory`], implemented by [`crate::steering::CoreClaims`]): the
//! table claims a four-tuple there before the connection's first segment leaves, and
//! releases it when the connection leaves the table — `ConnTable::claim` and
//! `ConnTable::remove` are the only two places. A passive open whose claim fails (the
//! tuple is another core's) drops the SYN; an active open tries another port. The
//! directory steers every received segment to its owner (see [`crate::steering`]).
//!
//! # Not done
//!
//! Timestamps (RFC 7323) are parsed but not negotiated; no RACK or D-SACK; no urgent
//! data.
//!
//! # Cost
//!
//! `poll` visits only the connections the application touched since the last poll (a
//! dirty list), those blocked on a full transmit queue, and those whose earliest timer is
//! due (`deadlines::DeadlineHeap`, an indexed min-heap ordered by `(deadline, FourTuple)`,
//! updated in place after every change); `poll_at` reads the heap's first entry. Demux is a hash-map lookup
//! (seeded hash, see `demux`) behind a one-entry cache of the last connection found. The lists are reused from
//! poll to poll (no allocation); segmenting the send queue resumes from a cursor
//! (`send::QueueCursor`) instead of walking the queue from its front for every segment.

mod congestion;
mod deadlines;
mod demux;
mod isn;
mod recv;
mod send;
mod state;
mod timers;

#[cfg(test)]
mod tests;

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::rc::{Rc, Weak};
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::fmt;
use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;

use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, SendError, TcpConnection, TcpErrorKind, TcpHandler};

pub use congestion::CongestionAlgorithm;
pub use state::State;

use deadlines::DeadlineHeap;
use demux::{TupleHashBuilder, TupleKey};
use hashbrown::HashMap;
use isn::IsnGenerator;
use state::{AppEvent, Ctx, Incoming, Tcb};

use crate::transport::{TcpIcmpError, TcpInput, TcpOutput};
use crate::wire::checksum::ChecksumCapabilities;
use crate::wire::tcp::{
    Control, HEADER_LEN as TCP_HEADER_LEN, MAX_HEADER_LEN, Packet, PlainHeader, Repr, SeqNumber,
};

/// Settings of one layer (and every connection it makes).
#[derive(Debug, Clone)]
pub struct TcpConfig {
    /// Secret for initial sequence numbers (RFC 6528). Supply an unpredictable one.
    pub isn_seed: [u64; 2],
    /// Maximum segment lifetime; TIME-WAIT lasts twice this. Default 30 s.
    pub msl: Duration,
    /// The window advertised while the application keeps it open. Default 1 MiB: with
    /// 256 KiB a native guest's streaming echo moved 0.7x as much (on one CPU each round
    /// of the monitor's device thread carried one window, then the sender waited for an
    /// ACK), while 2 and 4 MiB added nothing measurable
    /// (docs/benchmarks.md, "Seventh run"). Data a handler has not taken counts
    /// against it, so a connection never holds more than this undelivered.
    pub receive_window: usize,
    /// The largest window the window-scale shift must express (sets the shift we offer).
    /// Default 4 MiB (shift 7).
    pub max_receive_window: usize,
    /// Lower bound on the RTO. Default 200 ms (RFC 6298 says 1 s; 200 ms is what Linux
    /// uses and suits data-centre round trips).
    pub min_rto: Duration,
    /// Upper bound on the RTO, also on the persist interval. Default 60 s.
    pub max_rto: Duration,
    /// RTO before the first RTT sample. Default 1 s (RFC 6298).
    pub initial_rto: Duration,
    /// Consecutive timeouts of data or FIN before the connection is `TimedOut`. Default 12.
    pub max_retransmissions: u32,
    /// SYN or SYN-ACK retransmissions before giving up. Default 6.
    pub max_syn_retransmissions: u32,
    /// Delayed ACK: `Some(delay)` acknowledges every second full segment or after
    /// `delay`; `None` acknowledges every segment at once. Default `Some(40 ms)`.
    pub delayed_ack: Option<Duration>,
    /// NewReno or CUBIC. Default NewReno.
    pub congestion: CongestionAlgorithm,
    /// Tail loss probes (RFC 8985 §7): about two round trips after the last send with no
    /// ACK, resend the last segment so a lost tail is repaired by fast recovery instead of
    /// the RTO. Default on.
    pub tail_loss_probe: bool,
    /// Initial congestion window in segments (RFC 6928). Default 10.
    pub initial_window_segments: u32,
    /// Connections in the table, all states. Default 4096.
    pub max_connections: usize,
    /// SYN-RECEIVED connections per listener. Default 128.
    pub max_half_open_per_listener: usize,
    /// Out-of-order bytes kept per connection. Default 1 MiB, as the receive window:
    /// below it, one loss at the front of a full window makes the rest be dropped and
    /// sent again (a 1 MiB window over 256 KiB here: 26,854 retransmissions instead of
    /// 665 in the 1 % loss, all-faults cell of `tests/simulation.rs`). Raise it with
    /// `receive_window`.
    pub max_out_of_order_bytes: usize,
    /// Data the layer holds, over all its connections: in-order data for applications
    /// that cannot take it now (a closed receive window, whose last advertised part a
    /// peer may still fill, or no handler yet), and out-of-order data, counted by the
    /// receive buffers its pieces keep alive. Past it, such data is dropped without an
    /// ACK and the sender resends it later; in-order data that can be delivered at once
    /// is never dropped for it. Default 8 MiB per layer (one per core): without a bound, 128
    /// connections whose applications paused with a 1 MiB window open fill a 128 MiB
    /// guest.
    pub max_held_bytes: usize,
    /// Keepalive for every connection of the layer (each can change it with
    /// [`TcpConn::set_keepalive`]). Default off, as for sockets.
    pub keepalive: Option<Keepalive>,
}

/// Keepalive (RFC 9293 §3.8.4, RFC 1122 §4.2.3.6): once a connection has heard nothing
/// from the peer for `idle` with nothing of ours unacknowledged (data in flight has the
/// retransmission timer watching it), send a probe — an empty segment one below the
/// next sequence number, which a live peer must answer with an ACK — every `interval`;
/// after `probes` unanswered probes the connection is closed `TimedOut`. Anything heard
/// from the peer starts the idle time again. Runs in ESTABLISHED, CLOSE-WAIT and
/// FIN-WAIT-2 (so a peer that vanished while we wait for its FIN is noticed too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Silence before the first probe.
    pub idle: Duration,
    /// Between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before giving up (at least 1).
    pub probes: u32,
}

impl Default for Keepalive {
    /// Linux's defaults: 2 hours, 75 s, 9 probes.
    fn default() -> Self {
        Keepalive {
            idle: Duration::from_secs(7200),
            interval: Duration::from_secs(75),
            probes: 9,
        }
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            isn_seed: [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210],
            msl: Duration::from_secs(30),
            receive_window: 1024 * 1024,
            max_receive_window: 4 * 1024 * 1024,
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            initial_rto: Duration::from_secs(1),
            max_retransmissions: 12,
            max_syn_retransmissions: 6,
            delayed_ack: Some(Duration::from_millis(40)),
            congestion: CongestionAlgorithm::NewReno,
            tail_loss_probe: true,
            initial_window_segments: 10,
            max_connections: 4096,
            max_half_open_per_listener: 128,
            max_out_of_order_bytes: 1024 * 1024,
            max_held_bytes: 8 << 20,
            keepalive: None,
        }
    }
}

/// What the layer counted. Drops are by reason; a segment is counted in at most one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Segments handed to `receive`.
    pub segments_in: u64,
    /// Segments handed to the output (including RSTs).
    pub segments_out: u64,
    /// Segments resent (timeouts, fast retransmits, partial ACKs, SYN/FIN resends).
    pub retransmissions: u64,
    /// Fast retransmits (three duplicate ACKs).
    pub fast_retransmits: u64,
    /// Retransmission-timer expirations.
    pub timeouts: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Tail loss probes sent (RFC 8985 §7).
    pub tail_loss_probes: u64,
    /// Keepalive probes sent.
    pub keepalive_probes: u64,
    /// ICMP errors acted on: a connect ended by unreachability, a segment size shrunk
    /// to the path MTU.
    pub icmp_errors: u64,
    /// ICMP errors ignored: no such connection, a sequence number not in flight (RFC
    /// 5927 §4.1), or a soft error on a synchronized connection.
    pub icmp_errors_ignored: u64,
    /// RSTs sent.
    pub resets_sent: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// ACKs for unacceptable segments not sent: over the per-connection budget (RFC 5961
    /// §7: 10 per 100 ms).
    pub acks_rate_limited: u64,
    /// Segments the output refused (treated as lost).
    pub output_errors: u64,
    /// Times a connection stopped sending because the interface's transmit queue was full
    /// (back-pressure: it resumes on a later poll; nothing is lost or counted as an error).
    pub transmit_blocked: u64,
    /// Dropped: no connection and no listener (a RST was sent unless it was a RST).
    pub dropped_no_listener: u64,
    /// Dropped: outside the receive window or acknowledging unsent data (an ACK was sent).
    pub dropped_out_of_window: u64,
    /// Dropped: a SYN while the listener's half-open table was full.
    pub dropped_syn_queue_full: u64,
    /// Dropped: a handshake-completing ACK while the listener's backlog was full.
    pub dropped_backlog_full: u64,
    /// Dropped: a SYN while the connection table was full.
    pub dropped_table_full: u64,
    /// Segments whose out-of-order data exceeded the per-connection bound (partly dropped).
    pub dropped_out_of_order_bound: u64,
    /// Dropped unacknowledged while the layer holds [`TcpConfig::max_held_bytes`]:
    /// in-order data for an application that cannot take it now, or out-of-order data.
    pub dropped_held_bound: u64,
    /// Dropped: malformed header or options (bad option length, port 0, SYN+FIN, ...).
    pub dropped_bad_options: u64,
    /// Dropped: a SYN for a four-tuple another core's layer holds (multi-core only; a
    /// retransmitted SYN that reached this core before the owner's claim was visible).
    pub dropped_owned_elsewhere: u64,
    /// Connections that reached ESTABLISHED.
    pub connections_opened: u64,
    /// Connections closed gracefully (both FINs).
    pub connections_closed: u64,
    /// Connections reset by the peer (or refused).
    pub connections_reset: u64,
    /// Connections that timed out (including half-open ones, connects and keepalive).
    pub connections_timed_out: u64,
    /// Connections aborted locally.
    pub connections_aborted: u64,
}

/// A connection's identity: our address and the peer's. The demux key, and the key a
/// multi-core steering maps to the owning core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddrV4,
    /// The peer's address and port.
    pub remote: SocketAddrV4,
}

/// Where a multi-core stack records which core owns each connection (see
/// [`crate::steering`]). A layer claims a four-tuple before the connection's first segment
/// leaves (so a peer's answer, arriving on any core, finds the owner) and releases it when
/// the connection leaves the table.
pub trait ConnectionDirectory {
    /// Records that this layer holds `tuple`. False if another core holds it: then this
    /// layer does not create the connection (a passive open drops the SYN, counted in
    /// [`TcpCounters::dropped_owned_elsewhere`]; an active open tries another port or
    /// fails with `AddressInUse`).
    fn claim(&self, tuple: &FourTuple) -> bool;
    /// This layer no longer holds `tuple`.
    fn release(&self, tuple: &FourTuple);
}

/// The demux table: four-tuple to connection, mirrored in the multi-core directory when
/// there is one (`claim` before a connection's first segment, `remove` releases).
///
/// A `hashbrown` map under a seeded hash (see `demux` for the choice of hash); nothing
/// iterates it, so its lack of order loses nothing. `last` caches the connection the
/// previous lookup found (a burst of segments usually belongs to one connection, and with
/// one connection the cache answers every lookup without hashing). Invariant: when set,
/// it is the entry `map` holds for its tuple — `insert` and `remove`, the only writers of
/// `map`, clear it for their tuple.
#[derive(Default)]
struct ConnTable {
    map: HashMap<TupleKey, Rc<Conn>, TupleHashBuilder>,
    last: Option<Rc<Conn>>,
    directory: Option<Rc<dyn ConnectionDirectory>>,
}

impl ConnTable {
    /// An empty table hashing with constants drawn from `secret`.
    fn new(secret: [u64; 2]) -> ConnTable {
        ConnTable {
            map: HashMap::with_hasher(TupleHashBuilder::new(secret)),
            last: None,
            directory: None,
        }
    }
    fn get(&self, tuple: &FourTuple) -> Option<&Rc<Conn>> {
        self.map.get(&TupleKey(*tuple))
    }
    /// [`get`](Self::get) through the one-entry cache, which it updates.
    #[inline]
    fn lookup(&mut self, tuple: &FourTuple) -> Option<Rc<Conn>> {
        if let Some(last) = &self.last
            && last.tuple == *tuple
        {
            return Some(last.clone());
        }
        let conn = self.map.get(&TupleKey(*tuple))?.clone();
        self.last = Some(conn.clone());
        Some(conn)
    }
    /// Forgets the cached connection if it is `tuple`'s.
    fn uncache(&mut self, tuple: &FourTuple) {
        if self.last.as_ref().is_some_and(|c| c.tuple == *tuple) {
            self.last = None;
        }
    }
    /// Whether `tuple` may become a connection here: free in this table and claimed in
    /// the directory (if any).
    fn claim(&self, tuple: &FourTuple) -> bool {
        !self.map.contains_key(&TupleKey(*tuple))
            && self.directory.as_ref().is_none_or(|d| d.claim(tuple))
    }
    /// Inserts a connection whose tuple was claimed.
    fn insert(&mut self, conn: Rc<Conn>) {
        self.uncache(&conn.tuple);
        self.map.insert(TupleKey(conn.tuple), conn);
    }
    fn remove(&mut self, tuple: &FourTuple) -> Option<Rc<Conn>> {
        self.uncache(tuple);
        let removed = self.map.remove(&TupleKey(*tuple));
        if removed.is_some()
            && let Some(directory) = &self.directory
        {
            directory.release(tuple);
        }
        removed
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Where [`TcpLayer::receive_general`] took a segment.
enum Received {
    /// To this connection.
    Conn(Rc<Conn>),
    /// To the listeners (or answered with a RST).
    NoConn,
    /// Nowhere: malformed (counted).
    Malformed,
}

/// The accept callback of a listener.
type AcceptFn = Rc<RefCell<dyn FnMut(TcpConn)>>;
/// The result callback of an active open.
type ConnectFn = Box<dyn FnOnce(Result<TcpConn, TcpErrorKind>)>;

/// A LISTEN entry.
struct Listener {
    backlog: usize,
    /// Connections in SYN-RECEIVED.
    half_open: usize,
    /// Established connections not yet given a handler.
    waiting: usize,
    accept: AcceptFn,
}

/// How a passive connection counts against its listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accounting {
    None,
    HalfOpen,
    Waiting,
}

struct LayerState {
    conns: ConnTable,
    /// Every connection's next timer deadline, earliest first.
    deadlines: DeadlineHeap,
    listeners: BTreeMap<SocketAddrV4, Listener>,
    isn: IsnGenerator,
    /// RFC 6056 algorithm 3's counter: ports tried so far.
    next_port: u32,
}

struct Inner {
    config: TcpConfig,
    state: RefCell<LayerState>,
    counters: RefCell<TcpCounters>,
    needs_poll: Cell<bool>,
    /// Bytes held in connections' undelivered events and out-of-order stores (every
    /// TCB's share summed; shared with them, see `Tcb::held_gauge`).
    held: Rc<Cell<usize>>,
    /// Connections with events to deliver.
    ready: RefCell<VecDeque<Rc<Conn>>>,
    /// Connections the application acted on since the last poll.
    dirty: RefCell<Vec<Rc<Conn>>>,
    /// Connections whose output stopped on a full transmit queue, visited by the next
    /// poll (see [`TcpInput::transmit_blocked`]).
    blocked: RefCell<Vec<Rc<Conn>>>,
    /// The list `poll` works through, kept between polls for its allocation (swapped
    /// with `dirty`, so marking a connection dirty does not allocate either).
    poll_list: RefCell<Vec<Rc<Conn>>>,
    dispatching: Cell<bool>,
    /// Header prediction and the send template (on unless a test turned them off).
    fast_path: Cell<bool>,
    /// Segments header prediction took (tests check it is not vacuous).
    #[cfg(test)]
    predicted: Cell<u64>,
}

/// One connection: its TCB and its application side.
struct Conn {
    layer: Weak<Inner>,
    tuple: FourTuple,
    tcb: RefCell<Tcb>,
    handler: RefCell<Option<Box<dyn TcpHandler>>>,
    on_connect: RefCell<Option<ConnectFn>>,
    listener: Option<SocketAddrV4>,
    accounting: Cell<Accounting>,
    in_ready: Cell<bool>,
    in_dirty: Cell<bool>,
    in_blocked: Cell<bool>,
    /// The deadline this connection is filed under in `LayerState::deadlines`.
    deadline: Cell<Option<Instant>>,
    /// Its index in `LayerState::deadlines` (`deadlines::NOT_FILED` when not there).
    heap_slot: Cell<usize>,
}

/// A connection of no layer, established, with default settings: for the tests of the
/// structures that hold connections (the demultiplexing table, the deadline heap).
#[cfg(test)]
fn detached_conn(tuple: FourTuple) -> Rc<Conn> {
    let config = TcpConfig::default();
    let tcb = state::Tcb::new(
        &config,
        tuple.local,
        tuple.remote,
        SeqNumber(0),
        state::State::Established,
    );
    Rc::new(Conn::new(Weak::new(), tuple, tcb, None, Accounting::None))
}

/// First ephemeral port (IANA dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

/// One core's TCP. Cheap to clone (a shared handle); `!Send`.
#[derive(Clone)]
pub struct TcpLayer(Rc<Inner>);

/// An application's handle on one connection (what accept and connect callbacks get).
#[derive(Clone)]
pub struct TcpConn(Rc<Conn>);

/// What an accept callback receives.
pub type NewConn = TcpConn;

impl TcpLayer {
    /// A layer with no listeners or connections.
    pub fn new(config: TcpConfig) -> TcpLayer {
        let isn = IsnGenerator::new(config.isn_seed);
        let conns = ConnTable::new(config.isn_seed);
        TcpLayer(Rc::new(Inner {
            config,
            state: RefCell::new(LayerState {
                conns,
                deadlines: DeadlineHeap::default(),
                listeners: BTreeMap::new(),
                isn,
                next_port: 0,
            }),
            counters: RefCell::new(TcpCounters::default()),
            needs_poll: Cell::new(false),
            held: Rc::new(Cell::new(0)),
            ready: RefCell::new(VecDeque::new()),
            dirty: RefCell::new(Vec::new()),
            blocked: RefCell::new(Vec::new()),
            poll_list: RefCell::new(Vec::new()),
            dispatching: Cell::new(false),
            fast_path: Cell::new(true),
            #[cfg(test)]
            predicted: Cell::new(0),
        }))
    }

    /// Turns header prediction and the send template off (`false`) or on (the
    /// default). Either way the layer behaves identically — the fast path only skips
    /// work the general path would find unnecessary — and tests use this switch to
    /// check exactly that; it is not a tuning knob.
    #[doc(hidden)]
    pub fn set_fast_path(&self, on: bool) {
        self.0.fast_path.set(on);
    }

    /// The layer's settings.
    pub fn config(&self) -> &TcpConfig {
        &self.0.config
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> TcpCounters {
        self.0.counters.borrow().clone()
    }

    /// Bytes held now: in-order data applications have not taken, and the buffers
    /// out-of-order pieces keep (see [`TcpConfig::max_held_bytes`]).
    pub fn held_bytes(&self) -> usize {
        self.0.held.get()
    }

    /// Connections in the table (every state but CLOSED, TIME-WAIT included).
    pub fn connection_count(&self) -> usize {
        self.0.state.borrow().conns.len()
    }

    /// Makes this layer one core's part of a multi-core stack: every connection it
    /// creates is claimed in `directory` first and released when it leaves the table
    /// (see [`ConnectionDirectory`]). Set it before the first connection.
    pub fn set_directory(&self, directory: Rc<dyn ConnectionDirectory>) {
        self.0.state.borrow_mut().conns.directory = Some(directory);
    }

    /// Whether the application acted since the last poll (then `poll_at` is `ZERO`).
    pub fn needs_poll(&self) -> bool {
        self.0.needs_poll.get()
    }

    /// Listens on `local` (an unspecified address listens on every address). Each
    /// connection that completes the handshake is passed to `accept`, which installs its
    /// handler with [`TcpConn::set_handler`] (now or later); at most `backlog` connections
    /// may wait for a handler.
    pub fn listen(
        &self,
        local: SocketAddrV4,
        backlog: usize,
        accept: impl FnMut(NewConn) + 'static,
    ) -> Result<(), TcpErrorKind> {
        if local.port() == 0 {
            return Err(TcpErrorKind::AddressNotAvailable);
        }
        let mut state = self.0.state.borrow_mut();
        if state.listeners.contains_key(&local) {
            return Err(TcpErrorKind::AddressInUse);
        }
        state.listeners.insert(
            local,
            Listener {
                backlog: backlog.max(1),
                half_open: 0,
                waiting: 0,
                accept: Rc::new(RefCell::new(accept)),
            },
        );
        Ok(())
    }

    /// Stops listening on `local`. Connections it accepted are unaffected; half-open ones
    /// are reset when they complete.
    pub fn unlisten(&self, local: SocketAddrV4) {
        self.0.state.borrow_mut().listeners.remove(&local);
    }

    /// Opens a connection from `local` (port 0: an ephemeral port) to `remote`. The SYN
    /// goes out on the next poll; `on_result` gets the connection once established, or
    /// `ConnectionRefused` (RST), `TimedOut` (no answer after the SYN retries). Immediate
    /// failures (`AddressInUse`, `OutOfResources`, `AddressNotAvailable`) are returned and
    /// `on_result` is not called.
    pub fn connect(
        &self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        on_result: impl FnOnce(Result<TcpConn, TcpErrorKind>) + 'static,
    ) -> Result<(), TcpErrorKind> {
        if remote.port() == 0 || remote.ip().is_unspecified() || local.ip().is_unspecified() {
            return Err(TcpErrorKind::AddressNotAvailable);
        }
        let inner = &self.0;
        let mut state = inner.state.borrow_mut();
        if state.conns.len() >= inner.config.max_connections {
            return Err(TcpErrorKind::OutOfResources);
        }
        let tuple = if local.port() != 0 {
            let tuple = FourTuple { local, remote };
            if !state.conns.claim(&tuple) {
                return Err(TcpErrorKind::AddressInUse);
            }
            tuple
        } else {
            state
                .ephemeral(local, remote)
                .ok_or(TcpErrorKind::AddressInUse)?
        };
        // Provisional: the first poll, which sends the SYN, picks the ISN with its clock.
        let iss = state.isn.isn(&tuple, Instant::ZERO);
        let tcb = Tcb::new(
            &inner.config,
            tuple.local,
            tuple.remote,
            iss,
            State::SynSent,
        );
        let conn = Rc::new(Conn::new(
            Rc::downgrade(inner),
            tuple,
            tcb,
            None,
            Accounting::None,
        ));
        *conn.on_connect.borrow_mut() = Some(Box::new(on_result));
        inner.mark_dirty(&conn);
        state.conns.insert(conn);
        Ok(())
    }

    /// Header prediction: processes `segment` if it is the option-less ACK (+PSH) an
    /// established connection expects (see `Tcb::predicts`), without parsing it into a
    /// [`Repr`]; returns the connection it went to, or the segment untouched for
    /// [`receive_general`](Self::receive_general).
    #[inline]
    fn receive_predicted(
        inner: &Rc<Inner>,
        counters: &mut TcpCounters,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        segment: IOBuf,
        out: &mut dyn TcpOutput,
    ) -> Result<Rc<Conn>, IOBuf> {
        if !inner.fast_path.get() {
            return Err(segment);
        }
        let Some(header) = PlainHeader::parse(segment.as_slice()) else {
            return Err(segment);
        };
        let tuple = FourTuple {
            local: SocketAddrV4::new(dst, header.dst_port),
            remote: SocketAddrV4::new(src, header.src_port),
        };
        let mut state = inner.state.borrow_mut();
        let Some(conn) = state.conns.lookup(&tuple) else {
            return Err(segment);
        };
        let payload_len = segment.len() - TCP_HEADER_LEN;
        if !conn.tcb.borrow().predicts(&header, payload_len) {
            return Err(segment);
        }
        let mut payload = segment;
        if payload.trim_front(TCP_HEADER_LEN).is_err() {
            return Err(payload); // Unreachable: `parse` saw the 20 bytes.
        }
        let mut ctx = Ctx {
            now,
            out,
            counters,
            config: &inner.config,
            fast_path: true,
        };
        conn.tcb
            .borrow_mut()
            .on_predicted(&mut ctx, &header, payload);
        #[cfg(test)]
        inner.predicted.set(inner.predicted.get() + 1);
        TcpLayer::settle(inner, &mut state, &conn);
        Ok(conn)
    }

    /// Every segment header prediction did not take: parsed into a [`Repr`] and
    /// processed by the connection's RFC 9293 state machine, or by the listeners.
    fn receive_general(
        inner: &Rc<Inner>,
        counters: &mut TcpCounters,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        segment: IOBuf,
        out: &mut dyn TcpOutput,
    ) -> Received {
        let Ok(packet) = Packet::new_checked(segment.as_slice()) else {
            counters.dropped_bad_options += 1;
            return Received::Malformed;
        };
        // The header is parsed from a copy (at most 60 bytes), so the segment itself
        // can become the payload without a clone of its buffer (a reference-count
        // increment and decrement, both atomic). The copy's `repr.payload` is empty;
        // the connection path reads the payload from `Incoming::payload`.
        let header_len = usize::from(packet.header_len()).min(MAX_HEADER_LEN);
        let mut header = [0u8; MAX_HEADER_LEN];
        header[..header_len].copy_from_slice(&segment.as_slice()[..header_len]);
        let header_packet = Packet::new_unchecked(&header[..header_len]);
        let Ok(repr) = Repr::parse(&header_packet, src, dst, &ChecksumCapabilities::ALL) else {
            counters.dropped_bad_options += 1;
            return Received::Malformed;
        };
        let mut payload = segment;
        if payload.trim_front(header_len).is_err() {
            return Received::Malformed;
        }
        let tuple = FourTuple {
            local: SocketAddrV4::new(dst, repr.dst_port),
            remote: SocketAddrV4::new(src, repr.src_port),
        };
        let mut state = inner.state.borrow_mut();
        let mut ctx = Ctx {
            now,
            out,
            counters,
            config: &inner.config,
            fast_path: inner.fast_path.get(),
        };
        match state.conns.lookup(&tuple) {
            Some(conn) => {
                let backlog_full = conn.accounting.get() == Accounting::HalfOpen
                    && conn
                        .listener
                        .and_then(|key| state.listeners.get(&key))
                        .is_some_and(|l| l.waiting >= l.backlog);
                conn.tcb.borrow_mut().on_segment(
                    &mut ctx,
                    Incoming {
                        repr: &repr,
                        payload,
                    },
                    backlog_full,
                );
                TcpLayer::settle(inner, &mut state, &conn);
                Received::Conn(conn)
            }
            None => {
                // With its payload: a RST answering it acknowledges all of it.
                let repr = Repr {
                    payload: payload.as_slice(),
                    ..repr
                };
                TcpLayer::no_connection(inner, &mut state, &mut ctx, tuple, &repr);
                Received::NoConn
            }
        }
    }

    /// Delivers queued application events; see the module's borrow invariant.
    fn dispatch(&self) {
        let inner = &self.0;
        if inner.dispatching.replace(true) {
            return;
        }
        loop {
            let next = inner.ready.borrow_mut().pop_front();
            let Some(conn) = next else { break };
            conn.in_ready.set(false);
            conn.deliver(inner);
        }
        inner.dispatching.set(false);
    }

    /// After a TCB was processed: listener accounting, removal of closed connections, and
    /// queueing for event delivery.
    fn settle(inner: &Inner, state: &mut LayerState, conn: &Rc<Conn>) {
        TcpLayer::file_deadline(&mut state.deadlines, conn);
        let (tcb_state, has_handler, has_events, rst_pending, tx_blocked) = {
            let mut tcb = conn.tcb.borrow_mut();
            (
                tcb.state,
                tcb.has_handler,
                !tcb.events.is_empty(),
                tcb.rst_pending,
                core::mem::take(&mut tcb.tx_blocked),
            )
        };
        if tx_blocked && !conn.in_blocked.replace(true) {
            inner.blocked.borrow_mut().push(conn.clone());
        }
        // Only a connection still counted against its listener (half-open or waiting for
        // a handler) has accounting to update: skip the listener lookup for the rest.
        if conn.accounting.get() != Accounting::None
            && let Some(key) = conn.listener
            && let Some(listener) = state.listeners.get_mut(&key)
        {
            let mut accounting = conn.accounting.get();
            if accounting == Accounting::HalfOpen && tcb_state != State::SynReceived {
                listener.half_open = listener.half_open.saturating_sub(1);
                accounting = if tcb_state.is_synchronized() && !has_handler {
                    listener.waiting += 1;
                    Accounting::Waiting
                } else {
                    Accounting::None
                };
            }
            if accounting == Accounting::Waiting && (has_handler || tcb_state == State::Closed) {
                listener.waiting = listener.waiting.saturating_sub(1);
                accounting = Accounting::None;
            }
            conn.accounting.set(accounting);
        }
        if tcb_state == State::Closed && !rst_pending {
            state.deadlines.set(conn, None);
            if state
                .conns
                .get(&conn.tuple)
                .is_some_and(|c| Rc::ptr_eq(c, conn))
            {
                state.conns.remove(&conn.tuple);
            }
        }
        if has_events {
            inner.mark_ready(conn);
        }
    }

    /// Files `conn` under its TCB's next deadline (or none).
    fn file_deadline(deadlines: &mut DeadlineHeap, conn: &Rc<Conn>) {
        let next = {
            let tcb = conn.tcb.borrow();
            if tcb.state == State::Closed {
                None
            } else {
                tcb.timers.next()
            }
        };
        deadlines.set(conn, next);
    }

    /// Handles a segment for which no connection exists.
    fn no_connection(
        inner: &Rc<Inner>,
        state: &mut LayerState,
        ctx: &mut Ctx<'_>,
        tuple: FourTuple,
        repr: &Repr<'_>,
    ) {
        let listener_key = [
            tuple.local,
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, tuple.local.port()),
        ]
        .into_iter()
        .find(|key| state.listeners.contains_key(key));
        let Some(key) = listener_key else {
            ctx.counters.dropped_no_listener += 1;
            send_reset_for(ctx, tuple, repr);
            return;
        };
        match (repr.control, repr.ack_number) {
            (Control::Rst, _) => {}
            (_, Some(_)) => send_reset_for(ctx, tuple, repr),
            (Control::Syn, None) => {
                let Some(listener) = state.listeners.get_mut(&key) else {
                    return;
                };
                if listener.half_open >= ctx.config.max_half_open_per_listener {
                    ctx.counters.dropped_syn_queue_full += 1;
                    return;
                }
                if state.conns.len() >= ctx.config.max_connections {
                    ctx.counters.dropped_table_full += 1;
                    return;
                }
                if !state.conns.claim(&tuple) {
                    ctx.counters.dropped_owned_elsewhere += 1;
                    return;
                }
                listener.half_open += 1;
                let iss = state.isn.isn(&tuple, ctx.now);
                let mut tcb = Tcb::new(
                    ctx.config,
                    tuple.local,
                    tuple.remote,
                    iss,
                    State::SynReceived,
                );
                tcb.passive = true;
                tcb.irs = repr.seq_number;
                tcb.rcv_nxt = repr.seq_number + 1u32;
                tcb.rcv_adv = tcb.rcv_nxt;
                tcb.rcv_acked = tcb.rcv_nxt;
                tcb.our_mss = ctx.out.max_segment_size(*tuple.remote.ip()).max(64);
                tcb.apply_syn_options(ctx.config, repr);
                tcb.snd_wl1 = repr.seq_number;
                tcb.send_syn(ctx);
                let conn = Rc::new(Conn::new(
                    Rc::downgrade(inner),
                    tuple,
                    tcb,
                    Some(key),
                    Accounting::HalfOpen,
                ));
                TcpLayer::file_deadline(&mut state.deadlines, &conn);
                state.conns.insert(conn);
            }
            _ => {}
        }
    }
}

impl Inner {
    /// Notes that the application acted on `conn`: the next poll visits it.
    fn mark_dirty(&self, conn: &Rc<Conn>) {
        self.needs_poll.set(true);
        if !conn.in_dirty.replace(true) {
            self.dirty.borrow_mut().push(conn.clone());
        }
    }

    /// Queues `conn` for event delivery (once).
    fn mark_ready(&self, conn: &Rc<Conn>) {
        if !conn.in_ready.replace(true) {
            self.ready.borrow_mut().push_back(conn.clone());
        }
    }
}

impl LayerState {
    /// A free four-tuple with an ephemeral local port, searched after RFC 6056's
    /// algorithm 3: from a keyed hash of the addresses (so ports are unpredictable
    /// off-path) plus a counter that moves one step per port tried (so consecutive
    /// connections to the same peer do not retry the same ports).
    fn ephemeral(&mut self, local: SocketAddrV4, remote: SocketAddrV4) -> Option<FourTuple> {
        let span = u32::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        let offset = self.isn.port_offset(local.ip(), &remote);
        for _ in 0..span {
            let step = self.next_port;
            self.next_port = self.next_port.wrapping_add(1);
            let port = EPHEMERAL_FIRST + (offset.wrapping_add(step) % span) as u16;
            let tuple = FourTuple {
                local: SocketAddrV4::new(*local.ip(), port),
                remote,
            };
            let listened = self.listeners.keys().any(|l| l.port() == port);
            if !listened && self.conns.claim(&tuple) {
                return Some(tuple);
            }
        }
        None
    }
}

/// The RST answering a segment that matches no connection (RFC 9293 §3.10.7.1): from its
/// ACK if it had one, else acknowledging it. Nothing answers a RST.
fn send_reset_for(ctx: &mut Ctx<'_>, tuple: FourTuple, repr: &Repr<'_>) {
    if repr.control == Control::Rst {
        return;
    }
    let (seq, ack) = match repr.ack_number {
        Some(ack) => (ack, None),
        None => (SeqNumber(0), Some(repr.seq_number + repr.segment_len())),
    };
    send::emit_reset(ctx, tuple.local, tuple.remote, seq, ack);
}

impl Conn {
    /// A connection of `layer` for `tuple` in `tcb`'s state, of the listener `listener`
    /// (a passive open) or none, counted as `accounting`: no handler yet, in no list,
    /// filed under no deadline.
    fn new(
        layer: Weak<Inner>,
        tuple: FourTuple,
        mut tcb: Tcb,
        listener: Option<SocketAddrV4>,
        accounting: Accounting,
    ) -> Conn {
        if let Some(inner) = layer.upgrade() {
            tcb.held_gauge = inner.held.clone();
        }
        Conn {
            layer,
            tuple,
            tcb: RefCell::new(tcb),
            handler: RefCell::new(None),
            on_connect: RefCell::new(None),
            listener,
            accounting: Cell::new(accounting),
            in_ready: Cell::new(false),
            in_dirty: Cell::new(false),
            in_blocked: Cell::new(false),
            deadline: Cell::new(None),
            heap_slot: Cell::new(deadlines::NOT_FILED),
        }
    }

    /// Tells the layer the application acted: poll soon, deliver any new events.
    fn wake(self: &Rc<Self>) {
        if let Some(inner) = self.layer.upgrade() {
            inner.mark_dirty(self);
            if !self.tcb.borrow().events.is_empty() {
                inner.mark_ready(self);
            }
        }
    }

    /// Runs `f` with the handler taken out of its slot, so the callback may call any
    /// method of this connection (including `set_handler`, whose handler then wins).
    fn with_handler(self: &Rc<Self>, f: impl FnOnce(&mut dyn TcpHandler, &TcpConn)) {
        let taken = self.handler.borrow_mut().take();
        let Some(mut handler) = taken else { return };
        f(&mut *handler, &TcpConn(self.clone()));
        let mut slot = self.handler.borrow_mut();
        if slot.is_none() {
            *slot = Some(handler);
        }
    }

    /// Delivers this connection's deliverable events, one at a time, no borrow held
    /// across a callback. Data waits while the receive window is closed; everything but
    /// the open/failed notifications waits for a handler.
    fn deliver(self: &Rc<Self>, inner: &Rc<Inner>) {
        loop {
            let event = {
                let mut tcb = self.tcb.borrow_mut();
                let has_handler = tcb.has_handler;
                let deliverable = match tcb.events.front() {
                    None => false,
                    Some(AppEvent::Connected | AppEvent::ConnectFailed(_)) => true,
                    Some(AppEvent::Receive(_) | AppEvent::PeerClosed) => {
                        has_handler && tcb.receive_open
                    }
                    Some(_) => has_handler,
                };
                let event = if deliverable {
                    tcb.events.pop_front()
                } else if has_handler && !tcb.receive_open {
                    // A closed receive window holds data back, not the send side's news:
                    // an application that closed its window until its own output drains
                    // (an echo under back-pressure) reopens it on exactly this event, so
                    // it must not wait behind the data it holds back.
                    tcb.events
                        .iter()
                        .position(|e| matches!(e, AppEvent::SendWindowIncreased))
                        .and_then(|at| tcb.events.remove(at))
                } else {
                    None
                };
                let Some(event) = event else {
                    return;
                };
                if let AppEvent::Receive(buf) = &event {
                    tcb.release_held(buf.len());
                }
                event
            };
            match event {
                AppEvent::Connected => {
                    if self.listener.is_some() {
                        self.accept(inner);
                    } else if let Some(callback) = self.on_connect.borrow_mut().take() {
                        callback(Ok(TcpConn(self.clone())));
                    }
                }
                AppEvent::ConnectFailed(kind) => {
                    if let Some(callback) = self.on_connect.borrow_mut().take() {
                        callback(Err(kind));
                    }
                }
                AppEvent::Receive(buf) => self.with_handler(|h, c| h.receive(c, buf)),
                AppEvent::PeerClosed => self.with_handler(|h, c| h.peer_closed(c)),
                AppEvent::SendWindowIncreased => {
                    self.with_handler(|h, c| h.send_window_increased(c))
                }
                AppEvent::Closed(reason) => {
                    let handler = self.handler.borrow_mut().take();
                    self.tcb.borrow_mut().has_handler = false;
                    if let Some(mut handler) = handler {
                        handler.closed(reason);
                    }
                    return;
                }
            }
        }
    }

    /// Hands a passive connection to its listener's accept callback (or resets it if the
    /// listener is gone).
    fn accept(self: &Rc<Self>, inner: &Rc<Inner>) {
        let accept = self.listener.and_then(|key| {
            inner
                .state
                .borrow()
                .listeners
                .get(&key)
                .map(|l| l.accept.clone())
        });
        match accept {
            Some(accept) => {
                if let Ok(mut accept) = accept.try_borrow_mut() {
                    accept(TcpConn(self.clone()));
                }
            }
            None => TcpConn(self.clone()).abort(),
        }
    }
}

impl TcpConn {
    /// Installs the connection's handler (replacing any previous one). Events that waited
    /// for a handler (data, FIN, close) are delivered to it on the layer's next dispatch.
    pub fn set_handler(&self, handler: impl TcpHandler) {
        let conn = &self.0;
        *conn.handler.borrow_mut() = Some(Box::new(handler));
        let closed = {
            let mut tcb = conn.tcb.borrow_mut();
            if tcb.close_reported && !tcb.events.iter().any(|e| matches!(e, AppEvent::Closed(_))) {
                true
            } else {
                tcb.has_handler = true;
                false
            }
        };
        if closed {
            // `closed` was already delivered; there is nothing more to tell.
            conn.handler.borrow_mut().take();
            return;
        }
        let held = {
            let tcb = conn.tcb.borrow();
            !tcb.events.is_empty() || tcb.held_bytes > 0
        };
        if let Some(inner) = conn.layer.upgrade() {
            if let Ok(mut state) = inner.state.try_borrow_mut() {
                TcpLayer::settle(&inner, &mut state, conn);
            }
            if held {
                // Held events go to the new handler, and the window they shrank reopens.
                inner.mark_dirty(conn);
                inner.mark_ready(conn);
            }
        }
    }

    /// Nagle's algorithm off (`true`, the default: send at once) or on (`false`: while
    /// data is in flight, hold back a segment smaller than the MSS so sends coalesce).
    pub fn set_nodelay(&self, nodelay: bool) {
        self.0.tcb.borrow_mut().nodelay = nodelay;
        self.0.wake();
    }

    /// Turns keepalive on with `keepalive`'s settings, or off with `None` (see
    /// [`Keepalive`]); the idle time counts from when the peer was last heard from.
    pub fn set_keepalive(&self, keepalive: Option<Keepalive>) {
        {
            let mut tcb = self.0.tcb.borrow_mut();
            tcb.keepalive = keepalive;
            tcb.arm_keepalive();
        }
        self.0.wake();
    }

    /// The connection's RFC 9293 state.
    pub fn state(&self) -> State {
        self.0.tcb.borrow().state
    }

    /// Whether the connection has ended (TIME-WAIT counts as ended for the application).
    pub fn is_closed(&self) -> bool {
        matches!(self.state(), State::Closed | State::TimeWait)
    }

    /// The connection's addresses.
    pub fn four_tuple(&self) -> FourTuple {
        self.0.tuple
    }
}

impl TcpConnection for TcpConn {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        self.0.tcb.borrow_mut().app_send(data)?;
        self.0.wake();
        Ok(())
    }

    fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError> {
        let rest = self.0.tcb.borrow_mut().app_try_send(data)?;
        self.0.wake();
        Ok(rest)
    }

    fn send_window(&self) -> usize {
        self.0.tcb.borrow().send_window()
    }

    fn queued_bytes(&self) -> usize {
        self.0.tcb.borrow().unsent()
    }

    fn set_receive_window_open(&self, open: bool) {
        let changed = {
            let mut tcb = self.0.tcb.borrow_mut();
            let was = tcb.receive_open;
            tcb.receive_open = open;
            was != open
        };
        if changed && open {
            // Held data is delivered, and the peer hears about the window on the poll.
            self.0.wake();
            if let Some(inner) = self.0.layer.upgrade() {
                inner.mark_ready(&self.0);
            }
        }
    }

    fn close(&self) {
        let changed = self.0.tcb.borrow_mut().app_close();
        if changed {
            self.0.wake();
        }
    }

    fn abort(&self) {
        let aborted = {
            let mut tcb = self.0.tcb.borrow_mut();
            match tcb.state {
                State::Closed => false,
                State::TimeWait => {
                    tcb.state = State::Closed;
                    tcb.timers.clear();
                    false
                }
                state => {
                    tcb.rst_pending = state != State::SynSent;
                    tcb.state = State::Closed;
                    tcb.timers.clear();
                    tcb.queue = IOBufChain::new();
                    tcb.queue_cursor = Default::default();
                    tcb.report_closed(CloseReason::Aborted);
                    true
                }
            }
        };
        if let Some(inner) = self.0.layer.upgrade() {
            if aborted {
                inner.counters.borrow_mut().connections_aborted += 1;
            }
            inner.mark_dirty(&self.0);
            inner.mark_ready(&self.0);
        }
    }

    fn peer_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.0.tuple.remote)
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.0.tuple.local)
    }
}

impl TcpInput for TcpLayer {
    fn receive(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        segment: IOBuf,
        out: &mut dyn TcpOutput,
    ) {
        let inner = &self.0;
        let delivered_to = {
            let mut counters = inner.counters.borrow_mut();
            counters.segments_in += 1;
            match TcpLayer::receive_predicted(inner, &mut counters, now, src, dst, segment, out) {
                Ok(conn) => Some(conn),
                Err(segment) => {
                    match TcpLayer::receive_general(
                        inner,
                        &mut counters,
                        now,
                        src,
                        dst,
                        segment,
                        out,
                    ) {
                        Received::Conn(conn) => Some(conn),
                        Received::NoConn => None,
                        // Dropped before any processing: nothing to dispatch.
                        Received::Malformed => return,
                    }
                }
            }
        };
        self.dispatch();
        // In-order data was delivered before it was acknowledged: the ACK goes out on
        // the poll the driver runs after this batch of segments — one per batch, carried
        // by whatever the application sends from its callbacks (see `TcpInput`).
        if let Some(conn) = delivered_to
            && core::mem::take(&mut conn.tcb.borrow_mut().output_after_delivery)
        {
            inner.mark_dirty(&conn);
        }
    }

    fn icmp_error(&mut self, now: Instant, error: TcpIcmpError, out: &mut dyn TcpOutput) {
        let inner = &self.0;
        {
            let mut counters = inner.counters.borrow_mut();
            let mut state = inner.state.borrow_mut();
            let tuple = FourTuple {
                local: error.local,
                remote: error.remote,
            };
            let Some(conn) = state.conns.get(&tuple).cloned() else {
                counters.icmp_errors_ignored += 1;
                return;
            };
            let mut ctx = Ctx {
                now,
                out,
                counters: &mut counters,
                config: &inner.config,
                fast_path: inner.fast_path.get(),
            };
            let acted = conn.tcb.borrow_mut().on_icmp_error(&mut ctx, error);
            if acted {
                ctx.counters.icmp_errors += 1;
            } else {
                ctx.counters.icmp_errors_ignored += 1;
            }
            TcpLayer::settle(inner, &mut state, &conn);
        }
        self.dispatch();
    }

    fn poll(&mut self, now: Instant, out: &mut dyn TcpOutput) {
        let inner = &self.0;
        inner.needs_poll.set(false);
        {
            let mut counters = inner.counters.borrow_mut();
            let mut state = inner.state.borrow_mut();
            let mut ctx = Ctx {
                now,
                out,
                counters: &mut counters,
                config: &inner.config,
                fast_path: inner.fast_path.get(),
            };
            // Visit what the application touched and what has a timer due — not every
            // connection.
            // `in_dirty` stays set while collecting, so a connection is visited once.
            // Only `poll` uses `poll_list`, so it stays borrowed for the whole visit.
            let mut conns = inner.poll_list.borrow_mut();
            core::mem::swap(&mut *conns, &mut *inner.dirty.borrow_mut());
            if !inner.blocked.borrow().is_empty() {
                for conn in core::mem::take(&mut *inner.blocked.borrow_mut()) {
                    conn.in_blocked.set(false);
                    if !conn.in_dirty.replace(true) {
                        conns.push(conn);
                    }
                }
            }
            // A connection in the heap is in the table: it leaves the heap (`settle`,
            // CLOSED) before it leaves the table.
            while let Some(conn) = state.deadlines.pop_due(now) {
                if !conn.in_dirty.replace(true) {
                    conns.push(conn);
                }
            }
            for conn in conns.iter() {
                conn.in_dirty.set(false);
                {
                    let mut tcb = conn.tcb.borrow_mut();
                    if tcb.rst_pending {
                        tcb.rst_pending = false;
                        let (seq, ack) = (tcb.snd_nxt, tcb.rcv_nxt);
                        tcb.send_reset(&mut ctx, seq, Some(ack));
                    } else if tcb.state != State::Closed {
                        if tcb.state == State::SynSent && !tcb.syn_sent {
                            tcb.set_iss(state.isn.isn(&conn.tuple, now));
                        }
                        tcb.on_poll(&mut ctx);
                    }
                }
                TcpLayer::settle(inner, &mut state, conn);
            }
            conns.clear();
        }
        self.dispatch();
    }

    fn poll_at(&self) -> Option<Instant> {
        let inner = &self.0;
        if inner.needs_poll.get() || !inner.ready.borrow().is_empty() {
            return Some(Instant::ZERO);
        }
        inner.state.borrow().deadlines.first()
    }

    fn transmit_blocked(&self) -> bool {
        !self.0.blocked.borrow().is_empty()
    }
}

impl fmt::Debug for TcpLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.0.state.borrow();
        f.debug_struct("TcpLayer")
            .field("connections", &state.conns.len())
            .field("listeners", &state.listeners.len())
            .field("needs_poll", &self.0.needs_poll.get())
            .finish()
    }
}

impl fmt::Debug for TcpConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tcb = self.0.tcb.borrow();
        f.debug_struct("TcpConn")
            .field("local", &self.0.tuple.local)
            .field("remote", &self.0.tuple.remote)
            .field("state", &tcb.state)
            .field("queued", &tcb.queue.len())
            .finish()
    }
}
