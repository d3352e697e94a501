//! The layer's state and each connection's record: the types every other part of TCP
//! works on, the layer's public calls ([`TcpLayer::listen`], [`TcpLayer::connect`], ...)
//! and the bookkeeping after a TCB was processed ([`TcpLayer::settle`]).
//!
//! The layer ([`Inner`]) and its connections ([`ConnRecord`]) point at each other (a
//! connection keeps a weak reference to wake its layer), so they are defined together;
//! what is done with them is in `input` (segments in), `events` (events out to the
//! application) and `conn` (the application's calls on a connection).

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::rc::{Rc, Weak};
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::fmt;
use core::net::SocketAddrV4;

use ebb_core::Instant;
use ebb_core::net::{TcpErrorKind, TcpHandler};

use super::config::TcpConfig;
use super::conn_table::{ConnTable, ConnectionDirectory, FourTuple, Keyed};
use super::counters::TcpCounters;
use super::deadline_wheel::{self, DeadlineWheel, InWheel};
use super::deadlines::{self, Filed};
use super::isn::IsnGenerator;
use super::state::{State, Tcb};
#[cfg(test)]
use crate::wire::tcp::SeqNumber;

/// The accept callback of a listener.
pub(super) type AcceptFn = Rc<RefCell<dyn FnMut(TcpConn)>>;
/// The result callback of an active open.
pub(super) type ConnectFn = Box<dyn FnOnce(Result<TcpConn, TcpErrorKind>)>;

/// A LISTEN entry.
pub(super) struct Listener {
    pub(super) backlog: usize,
    /// Connections in SYN-RECEIVED.
    pub(super) half_open: usize,
    /// Established connections not yet given a handler.
    pub(super) waiting: usize,
    pub(super) accept: AcceptFn,
}

/// How a passive connection counts against its listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Accounting {
    None,
    HalfOpen,
    Waiting,
}

pub(super) struct LayerState {
    pub(super) conns: ConnTable<ConnRecord>,
    /// Every connection's next timer deadline, earliest first.
    pub(super) deadlines: DeadlineWheel<ConnRecord>,
    pub(super) listeners: BTreeMap<SocketAddrV4, Listener>,
    pub(super) isn: IsnGenerator,
    /// RFC 6056 algorithm 3's counter: ports tried so far.
    pub(super) next_port: u32,
}

pub(super) struct Inner {
    pub(super) config: TcpConfig,
    pub(super) state: RefCell<LayerState>,
    pub(super) counters: RefCell<TcpCounters>,
    pub(super) needs_poll: Cell<bool>,
    /// Bytes held in connections' undelivered events and out-of-order stores (every
    /// TCB's share summed; shared with them, see `Tcb::held_gauge`).
    pub(super) held: Rc<Cell<usize>>,
    /// Connections with events to deliver.
    pub(super) ready: RefCell<VecDeque<Rc<ConnRecord>>>,
    /// Connections the application acted on since the last poll.
    pub(super) dirty: RefCell<Vec<Rc<ConnRecord>>>,
    /// Connections whose output stopped on a full transmit queue, visited by the next
    /// poll (see [`TcpInput::transmit_blocked`]).
    pub(super) blocked: RefCell<Vec<Rc<ConnRecord>>>,
    /// The list `poll` works through, kept between polls for its allocation (swapped
    /// with `dirty`, so marking a connection dirty does not allocate either).
    pub(super) poll_list: RefCell<Vec<Rc<ConnRecord>>>,
    /// Set while events are being delivered, so deliveries never nest.
    pub(super) delivering: Cell<bool>,
    /// Header prediction and the send template (on unless a test turned them off).
    pub(super) fast_path: Cell<bool>,
    /// Segments header prediction took (tests check it is not vacuous).
    #[cfg(test)]
    pub(super) predicted: Cell<u64>,
}

/// One connection as the layer keeps it: its TCB, its application side (handler,
/// connect callback) and its place in the layer's lists, listener accounting and
/// deadline heap. [`TcpConn`] is the application's handle on it.
pub(super) struct ConnRecord {
    pub(super) layer: Weak<Inner>,
    pub(super) tuple: FourTuple,
    pub(super) tcb: RefCell<Tcb>,
    pub(super) handler: RefCell<Option<Box<dyn TcpHandler>>>,
    pub(super) on_connect: RefCell<Option<ConnectFn>>,
    pub(super) listener: Option<SocketAddrV4>,
    pub(super) accounting: Cell<Accounting>,
    pub(super) in_ready: Cell<bool>,
    pub(super) in_dirty: Cell<bool>,
    pub(super) in_blocked: Cell<bool>,
    /// The deadline this connection is filed under in `LayerState::deadlines`.
    pub(super) deadline: Cell<Option<Instant>>,
    /// Its index in the far deadlines' heap of `LayerState::deadlines`
    /// (`deadlines::NOT_FILED` when not there).
    pub(super) heap_slot: Cell<usize>,
    /// Its node in the ring of `LayerState::deadlines` (`deadline_wheel::NO_NODE` when
    /// not there).
    pub(super) wheel_node: Cell<u32>,
}

/// A connection of no layer, established, with default settings: for the tests of the
/// structures that hold connections (the demultiplexing table, the deadline heap).
#[cfg(test)]
pub(super) fn detached_conn(tuple: FourTuple) -> Rc<ConnRecord> {
    let config = TcpConfig::default();
    let tcb = Tcb::new(
        &config,
        tuple.local,
        tuple.remote,
        SeqNumber(0),
        State::Established,
    );
    Rc::new(ConnRecord::new(
        Weak::new(),
        tuple,
        tcb,
        None,
        Accounting::None,
    ))
}

/// First ephemeral port (IANA dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

/// One core's TCP. Cheap to clone (a shared handle); `!Send`.
#[derive(Clone)]
pub struct TcpLayer(pub(super) Rc<Inner>);

/// An application's handle on one connection (what accept and connect callbacks get).
#[derive(Clone)]
pub struct TcpConn(pub(super) Rc<ConnRecord>);

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
                deadlines: DeadlineWheel::default(),
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
            delivering: Cell::new(false),
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

    /// Bytes the connections hold to send, in flight and not sent yet, over all of them
    /// (each within its [`TcpConfig::send_buffer`] unless its application used `send`).
    /// A walk over the table: for diagnostics and tests, not a hot path.
    pub fn send_queued_bytes(&self) -> usize {
        let state = self.0.state.borrow();
        state.conns.iter().map(|c| c.tcb.borrow().queue.len()).sum()
    }

    /// The memory the connections' send queues keep alive: each queued buffer's whole
    /// region (headroom, bytes and tailroom), so a few bytes viewed in a large buffer
    /// count as the buffer. A region two queued views share counts twice (an upper
    /// bound). A walk over the table and the queues: for diagnostics and tests.
    pub fn send_queued_memory(&self) -> usize {
        let state = self.0.state.borrow();
        state
            .conns
            .iter()
            .map(|c| {
                let tcb = c.tcb.borrow();
                tcb.queue
                    .iter()
                    .map(ebb_core::IOBuf::occupied)
                    .sum::<usize>()
            })
            .sum()
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
        let conn = Rc::new(ConnRecord::new(
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

    /// After a TCB was processed: listener accounting, removal of closed connections, and
    /// queueing for event delivery.
    pub(super) fn settle(inner: &Inner, state: &mut LayerState, conn: &Rc<ConnRecord>) {
        let (tcb_state, has_handler, has_events, rst_pending, tx_blocked, next) = {
            let mut tcb = conn.tcb.borrow_mut();
            // The deadline to file, unless an ACK waits for the application: then
            // `receive` marks the connection dirty right after delivery and the `poll`
            // that follows settles it again after its output, which moves the timers
            // once more (in a request/response exchange the delayed ACK is armed here
            // and cleared by the response). Filing only then saves a wheel update per
            // received segment; until then the wheel may hold the older deadline, which
            // can only make `poll` visit the connection early, and `poll_at` is `ZERO`
            // while it is dirty.
            let next = if tcb.state == State::Closed {
                Some(None)
            } else if tcb.output_after_delivery {
                None
            } else {
                Some(tcb.timers.next())
            };
            (
                tcb.state,
                tcb.has_handler,
                !tcb.events.is_empty(),
                tcb.rst_pending,
                core::mem::take(&mut tcb.tx_blocked),
                next,
            )
        };
        if let Some(next) = next {
            state.deadlines.set(conn, next);
        }
        if tx_blocked && !conn.in_blocked.replace(true) {
            inner.blocked.borrow_mut().push(conn.clone());
        }
        // Only a connection still counted against its listener (half-open or waiting for
        // a handler) has accounting to update: skip the listener lookup for the rest.
        if conn.accounting.get() != Accounting::None {
            Self::update_accounting(state, conn, tcb_state, has_handler);
        }
        if tcb_state == State::Closed && !rst_pending {
            Self::remove_closed(state, conn);
        }
        if has_events {
            inner.mark_ready(conn);
        }
    }

    /// [`settle`](Self::settle)'s listener accounting, for a connection still counted
    /// against its listener (out of line: an established connection never is, and
    /// `settle` runs twice a request).
    #[cold]
    #[inline(never)]
    fn update_accounting(
        state: &mut LayerState,
        conn: &Rc<ConnRecord>,
        tcb_state: State,
        has_handler: bool,
    ) {
        let Some(listener) = conn.listener.and_then(|key| state.listeners.get_mut(&key)) else {
            return;
        };
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

    /// [`settle`](Self::settle) of a connection that reached CLOSED: it leaves the
    /// deadline wheel and the table.
    #[cold]
    #[inline(never)]
    fn remove_closed(state: &mut LayerState, conn: &Rc<ConnRecord>) {
        state.deadlines.forget(conn);
        if state
            .conns
            .get(&conn.tuple)
            .is_some_and(|c| Rc::ptr_eq(c, conn))
        {
            state.conns.remove(&conn.tuple);
        }
    }

    /// Files `conn` under its TCB's next deadline (or none).
    pub(super) fn file_deadline(deadlines: &mut DeadlineWheel<ConnRecord>, conn: &Rc<ConnRecord>) {
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
}

impl Inner {
    /// Notes that the application acted on `conn`: the next poll visits it.
    pub(super) fn mark_dirty(&self, conn: &Rc<ConnRecord>) {
        self.needs_poll.set(true);
        if !conn.in_dirty.replace(true) {
            self.dirty.borrow_mut().push(conn.clone());
        }
    }

    /// Queues `conn` for event delivery (once).
    pub(super) fn mark_ready(&self, conn: &Rc<ConnRecord>) {
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
    pub(super) fn ephemeral(
        &mut self,
        local: SocketAddrV4,
        remote: SocketAddrV4,
    ) -> Option<FourTuple> {
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

impl ConnRecord {
    /// A connection of `layer` for `tuple` in `tcb`'s state, of the listener `listener`
    /// (a passive open) or none, counted as `accounting`: no handler yet, in no list,
    /// filed under no deadline.
    pub(super) fn new(
        layer: Weak<Inner>,
        tuple: FourTuple,
        mut tcb: Tcb,
        listener: Option<SocketAddrV4>,
        accounting: Accounting,
    ) -> ConnRecord {
        if let Some(inner) = layer.upgrade() {
            tcb.held_gauge = inner.held.clone();
        }
        ConnRecord {
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
            wheel_node: Cell::new(deadline_wheel::NO_NODE),
        }
    }

    /// Tells the layer the application acted: poll soon, deliver any new events.
    pub(super) fn wake(self: &Rc<Self>) {
        if let Some(inner) = self.layer.upgrade() {
            inner.mark_dirty(self);
            if !self.tcb.borrow().events.is_empty() {
                inner.mark_ready(self);
            }
        }
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

impl Keyed for ConnRecord {
    #[inline]
    fn tuple(&self) -> &FourTuple {
        &self.tuple
    }
}

impl Filed for ConnRecord {
    #[inline]
    fn deadline(&self) -> &Cell<Option<Instant>> {
        &self.deadline
    }
    #[inline]
    fn heap_slot(&self) -> &Cell<usize> {
        &self.heap_slot
    }
}

impl InWheel for ConnRecord {
    #[inline]
    fn wheel_node(&self) -> &Cell<u32> {
        &self.wheel_node
    }
}
