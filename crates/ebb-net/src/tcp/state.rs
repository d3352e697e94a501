//! The transmission control block (TCB) of one connection and the RFC 9293 state machine
//! that processes each arriving segment (§3.10.7).
//!
//! States: SYN-SENT, SYN-RECEIVED, ESTABLISHED, FIN-WAIT-1, FIN-WAIT-2, CLOSE-WAIT,
//! CLOSING, LAST-ACK, TIME-WAIT and CLOSED live here; LISTEN is a listener entry in the
//! layer ([`super::TcpLayer::listen`]), which creates a TCB in SYN-RECEIVED per SYN.
//!
//! A TCB never calls the application. What the application must learn is pushed onto
//! [`Tcb::events`] and delivered by the layer once no borrow of the TCB or the layer is
//! held (see the invariant in [`super`]). Segments go straight to the [`TcpOutput`] in the
//! [`Ctx`] the layer lends for the duration of one call.
//!
//! Sequence-space layout: the SYN occupies `iss`; data starts at `iss + 1`. `queue` holds
//! every byte from `snd_una` on — in flight (`snd_una..snd_nxt`) then unsent — and the FIN,
//! once requested, follows the last queued byte.

use alloc::collections::VecDeque;
use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::Cell;
use core::net::SocketAddrV4;

use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpErrorKind};

use super::config::{Keepalive, TcpConfig};
use super::congestion::Congestion;
use super::counters::TcpCounters;
use super::recv::Reassembly;
use super::send_queue::QueueCursor;
use super::timers::{self, RttEstimator, Timers};
use crate::transport::TcpOutput;
use crate::wire::tcp::{Control, PlainHeader, Repr, SeqNumber};

/// The RFC 9293 connection states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No connection (the TCB is about to be removed).
    Closed,
    /// Waiting for a SYN (a listener; TCBs are never in this state).
    Listen,
    /// Our SYN is out; waiting for the peer's.
    SynSent,
    /// Both SYNs seen; waiting for the ACK of ours.
    SynReceived,
    /// Open both ways.
    Established,
    /// We sent FIN; it is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer sent FIN; we may still send.
    CloseWait,
    /// Both sent FIN (simultaneous close); ours is not yet acknowledged.
    Closing,
    /// The peer closed first and we sent FIN; waiting for its ACK.
    LastAck,
    /// Both FINs acknowledged; waiting 2 × MSL for stray segments.
    TimeWait,
}

impl State {
    /// Whether the handshake completed (RFC 9293's "synchronized" states).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// Whether keepalive runs in this state: the peer's liveness matters and nothing
    /// else (a retransmitted FIN, TIME-WAIT's clock) ends the connection on its own.
    pub(crate) fn has_keepalive(self) -> bool {
        matches!(
            self,
            State::Established | State::CloseWait | State::FinWait2
        )
    }
}

/// What the application is told, in order, once the layer releases its borrows.
#[derive(Debug)]
pub(crate) enum AppEvent {
    /// The handshake completed: the accept or connect callback runs.
    Connected,
    /// An active open failed.
    ConnectFailed(TcpErrorKind),
    /// In-order data.
    Receive(IOBuf),
    /// The peer's FIN, after all its data.
    PeerClosed,
    /// Room opened after the application met back-pressure.
    SendWindowIncreased,
    /// The connection is gone (delivered exactly once).
    Closed(CloseReason),
}

/// What the layer lends a TCB for one call.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) out: &'a mut dyn TcpOutput,
    pub(crate) counters: &'a mut TcpCounters,
    pub(crate) config: &'a TcpConfig,
    /// Header prediction and the send template are on (see `TcpLayer::set_fast_path`).
    pub(crate) fast_path: bool,
}

/// A whole receive window delivered within this grows it (autotuning,
/// [`Tcb::grow_window_if_limiting`]): 1 MiB in 10 ms is 100 MB/s.
pub(crate) const WINDOW_GROWTH_TIME: core::time::Duration = core::time::Duration::from_millis(10);

/// The transmission control block.
#[derive(Debug)]
pub(crate) struct Tcb {
    pub(crate) state: State,
    pub(crate) local: SocketAddrV4,
    pub(crate) remote: SocketAddrV4,
    /// Created by a listener (passive open).
    pub(crate) passive: bool,

    // Send sequence space (RFC 9293 §3.3.1).
    pub(crate) iss: SeqNumber,
    pub(crate) snd_una: SeqNumber,
    pub(crate) snd_nxt: SeqNumber,
    /// The highest sequence number sent (`snd_nxt` moves back on a timeout).
    pub(crate) snd_max: SeqNumber,
    /// The peer's window, scaled, in bytes.
    pub(crate) snd_wnd: u32,
    pub(crate) max_snd_wnd: u32,
    pub(crate) snd_wl1: SeqNumber,
    pub(crate) snd_wl2: SeqNumber,
    /// The peer's window scale shift (0 unless both sides sent the option).
    pub(crate) snd_shift: u8,
    /// Our window scale shift (0 unless both sides sent the option).
    pub(crate) rcv_shift: u8,
    /// Largest payload we send (the peer's MSS option capped by our path).
    pub(crate) send_mss: usize,
    /// The MSS we advertised.
    pub(crate) our_mss: usize,
    /// Both sides sent SACK-permitted.
    pub(crate) sack_ok: bool,
    /// Whether the peer's SYN carried window scale / SACK-permitted (for our SYN-ACK).
    pub(crate) peer_offered_ws: bool,
    pub(crate) peer_offered_sack: bool,
    /// Data from `snd_una` on.
    pub(crate) queue: IOBufChain,
    /// Where the next slice of `queue` starts looking (see [`QueueCursor`]).
    pub(crate) queue_cursor: QueueCursor,
    /// The application closed: FIN after the queue.
    pub(crate) fin_requested: bool,
    /// Where our FIN sits, once sent.
    pub(crate) fin_seq: Option<SeqNumber>,
    /// Nagle off (the default).
    pub(crate) nodelay: bool,
    /// The SYN went out (an active open sends it on the first poll).
    pub(crate) syn_sent: bool,

    // Receive sequence space.
    pub(crate) irs: SeqNumber,
    pub(crate) rcv_nxt: SeqNumber,
    /// The right edge of the window we advertised: never moves left.
    pub(crate) rcv_adv: SeqNumber,
    /// `rcv_nxt` as of our last ACK.
    pub(crate) rcv_acked: SeqNumber,
    pub(crate) reassembly: Reassembly,
    /// A FIN that arrived out of order, at this sequence number.
    pub(crate) ooo_fin: Option<SeqNumber>,
    /// The application's receive window switch.
    pub(crate) receive_open: bool,
    /// A handler is installed (data can be delivered now).
    pub(crate) has_handler: bool,
    /// The window advertised while the application keeps it open: the layer's
    /// `receive_window` at first, grown up to `max_receive_window` (autotuning, see
    /// [`grow_window_if_limiting`](Self::grow_window_if_limiting)).
    pub(crate) rcv_window: usize,
    /// [`TcpConfig::send_buffer`](super::TcpConfig::send_buffer): what the application is
    /// offered room for stays within it.
    pub(crate) send_buffer: usize,
    /// The current measure of [`grow_window_if_limiting`](Self::grow_window_if_limiting):
    /// the sequence number a window's worth of data reaches, and when it started;
    /// `None` until data comes that the application takes (and once the window is at
    /// its largest).
    pub(crate) window_measure: Option<(SeqNumber, Instant)>,
    /// Bytes in `Receive` events not yet delivered.
    pub(crate) held_bytes: usize,
    /// The layer's sum of every TCB's `held_bytes` and out-of-order memory
    /// (`reassembly.occupied()`); a TCB of no layer has its own. Changed only with
    /// those, and given back when the TCB is dropped.
    pub(crate) held_gauge: Rc<Cell<usize>>,
    /// An ACK must go out on the next output.
    pub(crate) ack_now: bool,

    // Timers, RTT, congestion.
    pub(crate) timers: Timers,
    pub(crate) rtt: RttEstimator,
    /// The segment being timed: its end and when it left (Karn: never a retransmission).
    pub(crate) rtt_probe: Option<(SeqNumber, Instant)>,
    /// Consecutive expirations of the retransmission timer.
    pub(crate) retries: u32,
    pub(crate) persist_backoff: u32,
    pub(crate) cc: Congestion,
    pub(crate) dup_acks: u32,
    pub(crate) in_recovery: bool,
    /// RFC 6582's `recover`: the highest sequence sent when recovery began.
    pub(crate) recover: SeqNumber,
    /// The peer's SACK blocks above `snd_una`: sorted, disjoint, non-adjacent.
    pub(crate) sacked: Vec<(SeqNumber, SeqNumber)>,
    /// During recovery, where the search for the next hole to resend starts.
    pub(crate) rexmit_next: SeqNumber,
    /// Bytes limited transmit (RFC 3042) lets out beyond the congestion window.
    pub(crate) limited_transmit: u32,
    /// A tail loss probe went out for the current flight (one per flight).
    pub(crate) tail_probe_sent: bool,
    /// Keepalive settings (`None`: off).
    pub(crate) keepalive: Option<Keepalive>,
    /// When we last heard from the peer (an acceptable segment): keepalive's idle clock.
    pub(crate) last_received: Instant,
    /// Keepalive probes sent since the peer was last heard from.
    pub(crate) keepalive_probes: u32,

    // Application interface.
    pub(crate) events: VecDeque<AppEvent>,
    /// The application met back-pressure and waits for `send_window_increased`.
    pub(crate) window_blocked: bool,
    /// The connection was handed to the application (`Connected` was queued).
    pub(crate) exposed: bool,
    /// `Closed`/`ConnectFailed` was queued.
    pub(crate) close_reported: bool,
    /// ACKs left for unacceptable segments in the current interval, and when it began.
    pub(crate) ack_budget: u32,
    pub(crate) ack_budget_since: Instant,
    /// Why it closed, for `send` on a dead connection.
    pub(crate) close_reason: Option<CloseReason>,
    /// `abort` asked for a RST on the next poll.
    pub(crate) rst_pending: bool,
    /// Output stopped because the interface's transmit queue was full (back-pressure):
    /// the layer files the connection to be polled again and clears this.
    pub(crate) tx_blocked: bool,
    /// `output` was held back until the application has seen the data just received
    /// (see `on_segment_synchronized`); the layer runs it after delivering events.
    pub(crate) output_after_delivery: bool,
}

/// Where a segment starts, how long it is, and its window, read once.
pub(crate) struct Incoming<'a> {
    pub(crate) repr: &'a Repr<'a>,
    pub(crate) payload: IOBuf,
}

/// The smallest buffer held data is compacted into (see [`Tcb::push_event`]).
/// (2 KiB in all with the region's header: one allocator size class.)
const HELD_CHUNK: usize = 2048 - ebb_core::iobuf::REGION_OVERHEAD;

impl Drop for Tcb {
    fn drop(&mut self) {
        // What it still holds leaves the layer's sum with it.
        self.release_held(self.held_bytes);
        self.clear_reassembly();
    }
}

impl Tcb {
    /// A TCB for `local`/`remote` in `state` with initial send sequence `iss`.
    pub(crate) fn new(
        config: &TcpConfig,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: SeqNumber,
        state: State,
    ) -> Tcb {
        Tcb {
            state,
            local,
            remote,
            passive: false,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: SeqNumber(0),
            snd_wl2: iss,
            snd_shift: 0,
            rcv_shift: 0,
            send_mss: DEFAULT_MSS,
            our_mss: DEFAULT_MSS,
            sack_ok: false,
            peer_offered_ws: false,
            peer_offered_sack: false,
            queue: IOBufChain::new(),
            queue_cursor: QueueCursor::default(),
            fin_requested: false,
            fin_seq: None,
            nodelay: true,
            syn_sent: false,
            irs: SeqNumber(0),
            rcv_nxt: SeqNumber(0),
            rcv_adv: SeqNumber(0),
            rcv_acked: SeqNumber(0),
            reassembly: Reassembly::default(),
            ooo_fin: None,
            receive_open: true,
            has_handler: false,
            rcv_window: config.receive_window,
            send_buffer: config.send_buffer,
            window_measure: None,
            held_bytes: 0,
            held_gauge: Rc::new(Cell::new(0)),
            ack_now: false,
            timers: Timers::default(),
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            rtt_probe: None,
            retries: 0,
            persist_backoff: 0,
            cc: Congestion::new(
                config.congestion,
                DEFAULT_MSS,
                config.initial_window_segments,
            ),
            dup_acks: 0,
            in_recovery: false,
            recover: iss,
            sacked: Vec::new(),
            rexmit_next: iss,
            limited_transmit: 0,
            tail_probe_sent: false,
            keepalive: config.keepalive,
            last_received: Instant::ZERO,
            keepalive_probes: 0,
            events: VecDeque::new(),
            window_blocked: false,
            exposed: false,
            close_reported: false,
            close_reason: None,
            ack_budget: ACK_BUDGET,
            ack_budget_since: Instant::ZERO,
            rst_pending: false,
            tx_blocked: false,
            output_after_delivery: false,
        }
    }

    /// Replaces the initial send sequence number (before the SYN went out).
    pub(crate) fn set_iss(&mut self, iss: SeqNumber) {
        self.iss = iss;
        self.snd_una = iss;
        self.snd_nxt = iss;
        self.snd_max = iss;
        self.snd_wl2 = iss;
        self.recover = iss;
    }

    /// Our window scale shift: the smallest that lets `max_receive_window` be advertised.
    pub(crate) fn our_shift(config: &TcpConfig) -> u8 {
        let mut shift = 0u8;
        while shift < 14 && (config.max_receive_window >> shift) > usize::from(u16::MAX) {
            shift += 1;
        }
        shift
    }

    /// Applies the options of the peer's SYN (RFC 9293 §3.7.1, RFC 7323 §2.2, RFC 2018).
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    pub(crate) fn apply_syn_options(&mut self, config: &TcpConfig, syn: &Repr<'_>) {
        self.peer_offered_ws = syn.window_scale.is_some();
        self.peer_offered_sack = syn.sack_permitted;
        if let Some(shift) = syn.window_scale {
            // RFC 7323 §2.3: a shift above 14 is used as 14.
            self.snd_shift = shift.min(14);
            self.rcv_shift = Tcb::our_shift(config);
        } else {
            self.snd_shift = 0;
            self.rcv_shift = 0;
        }
        self.sack_ok = syn.sack_permitted;
        let peer_mss = syn.max_seg_size.map_or(DEFAULT_MSS, usize::from).max(64);
        self.send_mss = peer_mss.min(self.our_mss);
        self.cc
            .set_mss(self.send_mss, config.initial_window_segments);
        // The window in a SYN is never scaled.
        self.snd_wnd = u32::from(syn.window_len);
        self.max_snd_wnd = self.snd_wnd;
    }

    /// The window to advertise now, in bytes: the application's choice, never moving the
    /// right edge left (RFC 9293 §3.8.6.2.2), and representable with our shift.
    pub(crate) fn receive_window(&self) -> u32 {
        let wanted = if !self.receive_open {
            0
        } else if self.has_handler {
            self.rcv_window
        } else {
            // Undelivered data counts against the window until a handler takes it.
            self.rcv_window.saturating_sub(self.held_bytes)
        };
        let wanted = u32::try_from(wanted).unwrap_or(u32::MAX);
        let current = u32::try_from((self.rcv_adv - self.rcv_nxt).max(0)).unwrap_or(0);
        let limit = u32::from(u16::MAX) << self.rcv_shift;
        wanted.max(current).min(limit)
    }

    /// Receive-window autotuning, after in-order data arrived: once a whole window's
    /// worth has come in since the last check, taken by the application as it came, in
    /// at most [`WINDOW_GROWTH_TIME`], the window doubles, up to `max_receive_window`
    /// (see [`TcpConfig::max_receive_window`]); the new size goes out with the next ACK.
    /// A window delivered that fast is a bulk stream the window may be holding back
    /// (on a long round trip it is); request-response traffic never delivers one that
    /// fast. An application not taking data when the measure ends, or a segment out of
    /// order (a loss: a wider window would only hold more out-of-order data), starts the
    /// measure again.
    #[inline]
    fn grow_window_if_limiting(&mut self, ctx: &mut Ctx<'_>) {
        // Every in-order segment comes here: one comparison until a window's worth is in.
        if let Some((end, _)) = self.window_measure
            && self.rcv_nxt < end
        {
            return;
        }
        if self.rcv_window < ctx.config.max_receive_window {
            self.window_measure_done(ctx);
        }
    }

    /// [`grow_window_if_limiting`](Self::grow_window_if_limiting) past the end of a
    /// measure, or with none running: grows the window if the measure qualifies, and
    /// starts the next one.
    #[cold]
    fn window_measure_done(&mut self, ctx: &mut Ctx<'_>) {
        // No larger than the window-scale shift lets us say (a peer without window
        // scaling: 64 KiB).
        let sayable = usize::from(u16::MAX) << self.rcv_shift;
        let max = ctx.config.max_receive_window.min(sayable);
        if self.rcv_window >= max {
            self.window_measure = None;
            return;
        }
        let measuring = self.takes_data_now() && self.reassembly.is_empty();
        if let Some((_, start)) = self.window_measure
            && measuring
            && ctx.now - start <= WINDOW_GROWTH_TIME
        {
            self.rcv_window = self.rcv_window.saturating_mul(2).min(max);
            ctx.counters.windows_grown += 1;
        }
        self.window_measure = measuring.then(|| (self.rcv_nxt + self.rcv_window, ctx.now));
    }

    /// The part of the advertised window still open: RCV.WND for the acceptability test.
    pub(crate) fn rcv_wnd(&self) -> u32 {
        u32::try_from((self.rcv_adv - self.rcv_nxt).max(0)).unwrap_or(0)
    }

    /// Whether the application takes data as it comes now (else it is held).
    pub(crate) fn takes_data_now(&self) -> bool {
        self.has_handler && self.receive_open
    }

    /// Queues an event for the application. Data the application cannot take now is
    /// kept compact: a piece that occupies much more buffer than bytes (a few bytes in a
    /// frame-sized receive buffer) is copied to the tail of the data held before it, so
    /// a peer filling a closed window with tiny segments pins about what it sent, not a
    /// receive buffer per segment.
    pub(crate) fn push_event(&mut self, event: AppEvent) {
        let AppEvent::Receive(buf) = event else {
            self.events.push_back(event);
            return;
        };
        self.hold(buf.len());
        if self.takes_data_now() || !buf.wasteful() {
            self.events.push_back(AppEvent::Receive(buf));
            return;
        }
        if let Some(AppEvent::Receive(last)) = self.events.back_mut()
            && last.is_unique()
            && last.tailroom() >= buf.len()
            && last.extend_from_slice(buf.as_slice()).is_ok()
        {
            return;
        }
        let mut copy = IOBuf::with_capacity(buf.len().max(HELD_CHUNK));
        // Cannot fail: a fresh buffer with the room.
        let copied = copy.extend_from_slice(buf.as_slice());
        debug_assert!(copied.is_ok());
        self.events.push_back(AppEvent::Receive(copy));
    }

    /// Counts `len` more bytes held, here and in the layer's sum.
    fn hold(&mut self, len: usize) {
        self.held_bytes += len;
        self.held_gauge.set(self.held_gauge.get() + len);
    }

    /// Runs `change` on the out-of-order store, keeping the layer's sum in step with the
    /// memory it holds.
    fn reassemble<T>(&mut self, change: impl FnOnce(&mut Reassembly) -> T) -> T {
        let before = self.reassembly.occupied();
        let result = change(&mut self.reassembly);
        let after = self.reassembly.occupied();
        let gauge = self.held_gauge.get();
        self.held_gauge.set((gauge + after).saturating_sub(before));
        result
    }

    /// Drops the out-of-order store.
    fn clear_reassembly(&mut self) {
        self.reassemble(|r| *r = Reassembly::default());
    }

    /// Counts `len` bytes delivered or dropped.
    pub(crate) fn release_held(&mut self, len: usize) {
        let len = len.min(self.held_bytes);
        self.held_bytes -= len;
        self.held_gauge
            .set(self.held_gauge.get().saturating_sub(len));
    }

    /// Ends the connection: CLOSED, everything dropped, the application told once.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    pub(crate) fn finish(&mut self, ctx: &mut Ctx<'_>, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        let was = self.state;
        self.state = State::Closed;
        self.timers.clear();
        self.queue = IOBufChain::new();
        self.queue_cursor = QueueCursor::default();
        self.clear_reassembly();
        match reason {
            CloseReason::Normal => ctx.counters.connections_closed += 1,
            CloseReason::Reset => ctx.counters.connections_reset += 1,
            CloseReason::TimedOut => ctx.counters.connections_timed_out += 1,
            CloseReason::Aborted => ctx.counters.connections_aborted += 1,
            CloseReason::Error(_) => ctx.counters.connections_reset += 1,
        }
        if was == State::TimeWait {
            return; // Closed(Normal) was reported on entering TIME-WAIT.
        }
        self.report_closed(reason);
    }

    /// Queues `Closed` (or `ConnectFailed` for an active open never handed out) once.
    pub(crate) fn report_closed(&mut self, reason: CloseReason) {
        if self.close_reported {
            return;
        }
        self.close_reported = true;
        self.close_reason = Some(reason);
        if self.exposed {
            if reason != CloseReason::Normal {
                // Data not yet delivered is lost with the connection, as with a socket.
                self.events
                    .retain(|e| !matches!(e, AppEvent::Receive(_) | AppEvent::PeerClosed));
                self.release_held(self.held_bytes);
            }
            self.events.push_back(AppEvent::Closed(reason));
        } else if !self.passive {
            let kind = match reason {
                CloseReason::Reset => TcpErrorKind::ConnectionRefused,
                CloseReason::TimedOut => TcpErrorKind::TimedOut,
                CloseReason::Error(kind) => kind,
                CloseReason::Normal | CloseReason::Aborted => TcpErrorKind::ConnectionReset,
            };
            self.events.push_back(AppEvent::ConnectFailed(kind));
        }
    }

    /// Enters TIME-WAIT (2 × MSL) and tells the application the connection closed.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn enter_time_wait(&mut self, ctx: &mut Ctx<'_>) {
        self.state = State::TimeWait;
        self.timers.clear();
        self.timers.time_wait = Some(ctx.now + ctx.config.msl.saturating_mul(2));
        self.queue = IOBufChain::new();
        self.queue_cursor = QueueCursor::default();
        ctx.counters.connections_closed += 1;
        self.report_closed(CloseReason::Normal);
    }

    /// The handshake completed.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn establish(&mut self, ctx: &mut Ctx<'_>) {
        self.state = State::Established;
        self.retries = 0;
        self.timers.retransmit = None;
        self.last_received = ctx.now;
        self.arm_keepalive();
        self.exposed = true;
        ctx.counters.connections_opened += 1;
        self.events.push_back(AppEvent::Connected);
    }

    /// Processes one segment (RFC 9293 §3.10.7). `backlog_full` says whether the
    /// listener may take another connection (a completing passive open waits if not).
    pub(crate) fn on_segment(&mut self, ctx: &mut Ctx<'_>, seg: Incoming<'_>, backlog_full: bool) {
        match self.state {
            State::Closed | State::Listen => {}
            State::SynSent => self.on_segment_syn_sent(ctx, seg),
            _ => self.on_segment_synchronized(ctx, seg, backlog_full),
        }
    }

    /// §3.10.7.3: SYN-SENT.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn on_segment_syn_sent(&mut self, ctx: &mut Ctx<'_>, seg: Incoming<'_>) {
        let repr = seg.repr;
        let ack_ok = match repr.ack_number {
            Some(ack) => {
                if ack <= self.iss || ack > self.snd_max {
                    if repr.control != Control::Rst {
                        self.send_reset(ctx, ack, None);
                    }
                    ctx.counters.dropped_out_of_window += 1;
                    return;
                }
                true
            }
            None => false,
        };
        if repr.control == Control::Rst {
            // Only a RST that acknowledges our SYN refuses the connection.
            if ack_ok {
                self.finish(ctx, CloseReason::Reset);
            }
            return;
        }
        if repr.control != Control::Syn {
            return;
        }
        self.irs = repr.seq_number;
        self.rcv_nxt = repr.seq_number + 1u32;
        self.rcv_adv = self.rcv_nxt;
        self.rcv_acked = self.rcv_nxt;
        self.apply_syn_options(ctx.config, repr);
        self.snd_wl1 = repr.seq_number;
        if let (true, Some(ack)) = (ack_ok, repr.ack_number) {
            self.snd_wl2 = ack;
            self.take_rtt_sample(ctx.now, ack);
            self.snd_una = ack;
            self.establish(ctx);
            self.ack_now = true;
            self.output(ctx);
        } else {
            // Simultaneous open: answer with SYN-ACK from our ISS (§3.5, figure 8).
            self.state = State::SynReceived;
            self.snd_nxt = self.iss;
            self.send_syn(ctx);
        }
    }

    /// §3.10.7.4: every state after SYN-SENT.
    fn on_segment_synchronized(
        &mut self,
        ctx: &mut Ctx<'_>,
        seg: Incoming<'_>,
        backlog_full: bool,
    ) {
        let repr = seg.repr;
        let seq = repr.seq_number;
        let fin = repr.control == Control::Fin;
        let syn = repr.control == Control::Syn;
        let seg_len = seg.payload.len() + usize::from(fin) + usize::from(syn);

        if self.state == State::SynReceived && syn && seq == self.irs {
            match repr.ack_number {
                // The peer's SYN-ACK in a simultaneous open: it acknowledges our SYN.
                Some(ack) if ack == self.snd_nxt && !self.passive => {
                    self.snd_una = ack;
                    self.snd_wnd = u32::from(repr.window_len);
                    self.snd_wl1 = seq;
                    self.snd_wl2 = ack;
                    self.establish(ctx);
                    self.ack_now = true;
                    self.output(ctx);
                }
                // A retransmitted SYN: our SYN-ACK was lost. Resending it makes the
                // handshake's round trip ambiguous (Karn).
                None => {
                    self.rtt_probe = None;
                    self.snd_nxt = self.iss;
                    self.send_syn(ctx);
                }
                _ => self.send_ack(ctx),
            }
            return;
        }

        // First: sequence number acceptability (§3.10.7.4 table).
        let wnd = self.rcv_wnd();
        let in_window = |s: SeqNumber| self.rcv_nxt <= s && s < self.rcv_nxt + wnd;
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == self.rcv_nxt,
            (0, _) => in_window(seq),
            (_, 0) => false,
            (len, _) => in_window(seq) || in_window(seq + (len - 1)),
        };
        if !acceptable {
            if repr.control != Control::Rst {
                ctx.counters.dropped_out_of_window += 1;
                if self.state == State::TimeWait && fin {
                    // A retransmitted FIN: our last ACK was lost. Restart 2 × MSL.
                    self.timers.time_wait = Some(ctx.now + ctx.config.msl.saturating_mul(2));
                }
                if self.take_ack_of_old_segment(ctx, seq, repr.ack_number, syn) {
                    return;
                }
                if wnd == 0 && self.take_ack_past_a_closed_window(ctx, repr, &seg.payload, syn) {
                    return;
                }
                self.send_ack_limited(ctx);
            }
            return;
        }

        // The peer is alive: keepalive's idle time starts again (the timer is not moved
        // here, per segment; it looks at `last_received` when it fires).
        self.last_received = ctx.now;
        self.keepalive_probes = 0;

        // Second: RST (RFC 5961 §3: exact match resets, in-window challenges).
        if repr.control == Control::Rst {
            if seq == self.rcv_nxt {
                self.on_reset(ctx);
            } else {
                ctx.counters.challenge_acks += 1;
                self.send_ack_limited(ctx);
            }
            return;
        }

        // Fourth: a SYN in a synchronized state gets a challenge ACK (RFC 5961 §4).
        if syn {
            ctx.counters.challenge_acks += 1;
            self.send_ack_limited(ctx);
            return;
        }

        // Fifth: the ACK field.
        let Some(ack) = repr.ack_number else {
            return;
        };
        if self.state == State::SynReceived {
            if self.snd_una < ack && ack <= self.snd_nxt {
                if self.passive && backlog_full {
                    // The listener's backlog is full: stay half-open; the peer will
                    // retransmit the ACK (or its data) after our SYN-ACK retransmission.
                    ctx.counters.dropped_backlog_full += 1;
                    return;
                }
                self.take_rtt_sample(ctx.now, ack);
                self.snd_una = ack;
                self.snd_wnd = u32::from(repr.window_len) << self.snd_shift;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
                self.establish(ctx);
            } else {
                self.send_reset(ctx, ack, None);
                return;
            }
        }
        if !self.process_ack(ctx, repr, &seg.payload, ack) {
            return;
        }
        let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una > f);
        match self.state {
            State::FinWait1 if fin_acked => self.state = State::FinWait2,
            State::Closing if fin_acked => {
                self.enter_time_wait(ctx);
                return;
            }
            State::LastAck if fin_acked => {
                self.finish(ctx, CloseReason::Normal);
                return;
            }
            _ => {}
        }

        // Seventh and eighth: text and FIN.
        if matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            self.receive_text(ctx, seq, seg.payload, fin);
        }
        self.answer_segment(ctx);
    }

    /// An old segment — all of it left of the window, data we already have — whose ACK
    /// acknowledges something new: takes that ACK (`snd_una` moves, the retransmission
    /// timer and congestion window follow) and answers, as BSD does after trimming such a
    /// segment; returns whether it did. RFC 9293 drops an unacceptable segment whole, but
    /// a peer that went back to resend (passt rewinds to the last ACK it saw and resends
    /// everything after it) then carries its newest ACK only on segments we already
    /// have: dropping their ACKs stalled a connection for good whenever the peer had
    /// nothing new to send. RFC 5961 §5's checks still hold: the ACK must lie in
    /// `(snd_una, snd_max]`. The window is not taken (the segment is older than the one
    /// that set it).
    #[cold]
    fn take_ack_of_old_segment(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: SeqNumber,
        ack: Option<SeqNumber>,
        syn: bool,
    ) -> bool {
        let Some(ack) = ack else { return false };
        // Only while no FIN of ours is out: an ACK of it moves the state, which stays
        // with the general path.
        let open = matches!(self.state, State::Established | State::CloseWait);
        if syn
            || !open
            || self.fin_seq.is_some()
            || seq >= self.rcv_nxt
            || ack <= self.snd_una
            || ack > self.snd_max
        {
            return false;
        }
        self.on_new_ack(ctx, ack);
        self.ack_now = true;
        self.output(ctx);
        true
    }

    /// A segment that starts past our closed (zero) receive window and carries an ACK:
    /// takes its ACK field and window (RFC 9293 §3.10.7.4: "If the RCV.WND is zero, no
    /// segments will be acceptable, but special allowance should be made to accept
    /// valid ACKs"), not its data, and answers; returns whether it did.
    ///
    /// A peer that sent past the window before it closed (passt does, by a segment) has
    /// its send sequence ahead of our `rcv_nxt` from then on, so every segment it sends,
    /// pure ACKs included, starts outside a zero window. Dropping their ACKs deadlocked
    /// an echo through passt: our data stayed unacknowledged, so the echo's send queue
    /// never drained and it never reopened the window the peer waited on (2 to 10
    /// connections in 24). The ACK is checked as any other (RFC 5961 §5, in
    /// [`process_ack`](Self::process_ack)); the segment must start within a receive
    /// window's reach of `rcv_nxt`, so a blind one must guess both numbers.
    #[cold]
    fn take_ack_past_a_closed_window(
        &mut self,
        ctx: &mut Ctx<'_>,
        repr: &Repr<'_>,
        payload: &[u8],
        syn: bool,
    ) -> bool {
        let Some(ack) = repr.ack_number else {
            return false;
        };
        let seq = repr.seq_number;
        // As for old segments: a FIN of ours being acknowledged is the general path's.
        let open = matches!(self.state, State::Established | State::CloseWait);
        let reach = u32::try_from(ctx.config.max_receive_window.max(ctx.config.receive_window))
            .unwrap_or(u32::MAX);
        if syn
            || !open
            || self.fin_seq.is_some()
            || seq <= self.rcv_nxt
            || u32::try_from(seq - self.rcv_nxt).map_or(true, |ahead| ahead > reach)
        {
            return false;
        }
        if self.process_ack(ctx, repr, payload, ack) {
            self.ack_now = true;
            self.output(ctx);
        }
        true
    }

    /// Header prediction (Van Jacobson; RFC 9293 §3.10.7.4 for the common case): whether
    /// a segment with the option-less ACK (+PSH) header `h` and `payload_len` bytes of
    /// data is the one an ESTABLISHED connection expects, so that
    /// [`on_predicted`](Self::on_predicted) may process it. It is when it starts at
    /// `rcv_nxt` and fits the open window (so it is acceptable and nothing is trimmed),
    /// acknowledges something new or carries data (a pure duplicate ACK goes the
    /// general way), acknowledges nothing unsent or too old, leaves the peer's window
    /// as it was, and the connection is not recovering a loss, holds no out-of-order
    /// data and no out-of-order FIN. Anything else is processed by
    /// [`on_segment`](Self::on_segment).
    #[inline]
    pub(crate) fn predicts(&self, h: &PlainHeader, payload_len: usize) -> bool {
        let ack = h.ack_number;
        self.state == State::Established
            && h.seq_number == self.rcv_nxt
            && self.snd_una <= ack
            && ack <= self.snd_max
            && (ack > self.snd_una || payload_len > 0)
            && ack >= self.snd_una - self.max_snd_wnd.max(1)
            && u32::from(h.window_len) << self.snd_shift == self.snd_wnd
            && !self.in_recovery
            && self.reassembly.is_empty()
            && self.ooo_fin.is_none()
            && payload_len <= self.rcv_wnd() as usize
            // Data the application cannot take now takes the general path (the bound on
            // held data, compaction); a pure ACK does not care.
            && (payload_len == 0 || self.takes_data_now())
    }

    /// Processes a segment [`predicts`](Self::predicts) accepted: exactly what
    /// [`on_segment`](Self::on_segment) does for it, with the branches the prediction
    /// decided left out. The general path's steps for such a segment, in order: it is
    /// acceptable (`seq == rcv_nxt`, inside the window); the peer is alive; no RST or
    /// SYN; the ACK is new (`on_new_ack`) or equal to `snd_una` with data (no duplicate
    /// ACK); SACK's scoreboard is untouched (no SACK option); the window update test
    /// moves `snd_wl1`/`snd_wl2` but not the window (unchanged, so no
    /// `SendWindowIncreased` from it); ESTABLISHED has no FIN of ours to see acked; the
    /// data is in order with nothing to trim, reassemble or close, so it is delivered
    /// and the ACK scheduled; then the same answer as every segment.
    pub(crate) fn on_predicted(&mut self, ctx: &mut Ctx<'_>, h: &PlainHeader, payload: IOBuf) {
        let (seq, ack) = (h.seq_number, h.ack_number);
        self.last_received = ctx.now;
        self.keepalive_probes = 0;
        if ack > self.snd_una {
            self.on_new_ack(ctx, ack);
        }
        if self.snd_wl1 < seq || (self.snd_wl1 == seq && self.snd_wl2 <= ack) {
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
        }
        if !payload.is_empty() {
            self.rcv_nxt = self.rcv_nxt + payload.len();
            self.push_event(AppEvent::Receive(payload));
            self.grow_window_if_limiting(ctx);
            self.schedule_ack(ctx);
        }
        self.answer_segment(ctx);
    }

    /// The end of processing an acceptable segment: hold the answer until the
    /// application saw the data, or send what is due now.
    fn answer_segment(&mut self, ctx: &mut Ctx<'_>) {
        if self.state != State::Closed {
            let unacked = usize::try_from((self.rcv_nxt - self.rcv_acked).max(0)).unwrap_or(0);
            if self.has_handler
                && self.receive_open
                && matches!(self.events.back(), Some(AppEvent::Receive(_)))
                && unacked < 2 * self.our_mss
            {
                // The application gets the data before we answer, and the ACK waits for
                // the poll that follows this batch of segments: whatever the application
                // sends from its callback then carries it (one segment, not two). At
                // most two full segments wait so (RFC 5681 §4.2: an ACK for at least
                // every second full segment), which keeps a sender's slow start going.
                self.output_after_delivery = true;
            } else {
                self.output(ctx);
            }
        }
    }

    /// A valid RST in a synchronized state.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn on_reset(&mut self, ctx: &mut Ctx<'_>) {
        match self.state {
            // A passive open never handed out just goes away (back to LISTEN).
            State::SynReceived if self.passive => {
                self.state = State::Closed;
                self.timers.clear();
            }
            State::TimeWait => {
                self.state = State::Closed;
                self.timers.clear();
            }
            // Both FINs were exchanged and only the ACK of ours is missing: RFC 9293
            // §3.10.7.4 closes without telling the user "reset" (the peer's RST means it
            // closed too — for example it answered a retransmitted FIN after its own
            // TIME-WAIT, or a late duplicate after the ACK of our FIN was lost).
            State::Closing | State::LastAck => self.finish(ctx, CloseReason::Normal),
            _ => self.finish(ctx, CloseReason::Reset),
        }
    }

    /// Takes an RTT sample if the segment being timed is now acknowledged (Karn: the
    /// probe is cleared whenever anything is retransmitted).
    ///
    /// An ACK that arrives when a loss timer (tail probe or retransmission) is already due
    /// is not sampled either: the sender sat stalled, typically because an earlier ACK was
    /// lost, and the wait says nothing about the path. Sampling it would feed the stall
    /// back into SRTT, lengthen the next stall, and so on.
    pub(crate) fn take_rtt_sample(&mut self, now: Instant, ack: SeqNumber) {
        if let Some((end, sent_at)) = self.rtt_probe
            && ack >= end
        {
            self.rtt_probe = None;
            let stalled = timers::due(self.timers.tail_probe, now)
                || timers::due(self.timers.retransmit, now);
            if !stalled {
                self.rtt
                    .sample_nanos(now.as_nanos().saturating_sub(sent_at.as_nanos()));
            }
        }
    }

    /// The text of an acceptable segment: deliver in-order data, keep out-of-order data,
    /// handle FIN, and decide when to acknowledge.
    fn receive_text(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber, payload: IOBuf, fin: bool) {
        let mut seq = seq;
        let mut data = payload;
        let mut fin = fin;
        let had_data = !data.is_empty();
        // Trim what we already have.
        if seq < self.rcv_nxt {
            let old = usize::try_from(self.rcv_nxt - seq).unwrap_or(0);
            let cut = old.min(data.len());
            let _ = data.trim_front(cut);
            seq = seq + cut;
            if seq < self.rcv_nxt {
                fin = false; // The FIN itself is old.
            }
        }
        // Trim what lies beyond the window.
        let right = self.rcv_adv.max(self.rcv_nxt);
        let end = seq + data.len();
        if end > right {
            let over = usize::try_from(end - right).unwrap_or(0).min(data.len());
            let _ = data.trim_back(over);
            fin = false;
        }
        if data.is_empty() && !fin {
            if had_data {
                self.ack_now = true; // A duplicate: tell the peer where we are.
            }
            return;
        }
        if seq != self.rcv_nxt {
            let len = data.len();
            // What the layer may still hold: out-of-order data past it is ours to drop
            // (never acknowledged, so not reneging); the duplicate ACK still goes out.
            let budget = ctx
                .config
                .max_held_bytes
                .saturating_sub(self.held_gauge.get());
            // A window that grew (autotuning) past the configured one keeps as much
            // out-of-order data as it lets the peer send: a loss at its front would
            // otherwise cost the rest of it, dropped and sent again.
            let mut bound = ctx.config.max_out_of_order_bytes;
            if self.rcv_window > ctx.config.receive_window {
                bound = bound.max(self.rcv_window);
            }
            let (dropped, over_budget) =
                self.reassemble(|r| r.insert_within(seq, data, bound, budget));
            if over_budget {
                ctx.counters.dropped_held_bound += 1;
            } else if dropped > 0 {
                ctx.counters.dropped_out_of_order_bound += 1;
            }
            if fin {
                self.ooo_fin = Some(seq + len);
            }
            // Out of order: a duplicate ACK with SACK blocks, at once (RFC 5681 §4.2).
            self.ack_now = true;
            // A stream with losses is not one to widen (autotuning starts again).
            self.window_measure = None;
            return;
        }
        if !data.is_empty()
            && !self.takes_data_now()
            && self.held_gauge.get() + data.len() > ctx.config.max_held_bytes
        {
            // The layer holds all it may for applications that are not taking data:
            // not acknowledged, so the peer sends it again (its FIN too) later.
            ctx.counters.dropped_held_bound += 1;
            self.ack_now = true;
            return;
        }
        let filled_hole = !self.reassembly.is_empty();
        if !data.is_empty() {
            self.rcv_nxt = self.rcv_nxt + data.len();
            self.push_event(AppEvent::Receive(data));
            self.grow_window_if_limiting(ctx);
        }
        if filled_hole {
            loop {
                let rcv_nxt = self.rcv_nxt;
                let Some(more) = self.reassemble(|r| r.pop_ready(rcv_nxt)) else {
                    break;
                };
                self.rcv_nxt = self.rcv_nxt + more.len();
                self.push_event(AppEvent::Receive(more));
            }
        }
        if self.ooo_fin == Some(self.rcv_nxt) {
            fin = true;
            self.ooo_fin = None;
        }
        if fin {
            self.receive_fin(ctx);
            return;
        }
        if filled_hole || !self.reassembly.is_empty() {
            self.ack_now = true;
            return;
        }
        self.schedule_ack(ctx);
    }

    /// Delayed ACK (RFC 9293 §3.8.6.3, RFC 5681 §4.2): at once when disabled or when two
    /// full-sized segments' worth is unacknowledged, else within the configured delay.
    fn schedule_ack(&mut self, ctx: &mut Ctx<'_>) {
        let Some(delay) = ctx.config.delayed_ack else {
            self.ack_now = true;
            return;
        };
        let unacked = usize::try_from((self.rcv_nxt - self.rcv_acked).max(0)).unwrap_or(0);
        if unacked >= 2 * self.our_mss {
            self.ack_now = true;
        } else if self.timers.delayed_ack.is_none() {
            self.timers.delayed_ack = Some(ctx.now + delay);
        }
    }

    /// The peer's FIN, in order.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn receive_fin(&mut self, ctx: &mut Ctx<'_>) {
        self.rcv_nxt += 1u32;
        self.ack_now = true;
        self.events.push_back(AppEvent::PeerClosed);
        let fin_acked = self.fin_seq.is_some_and(|f| self.snd_una > f);
        match self.state {
            State::Established => self.state = State::CloseWait,
            State::FinWait1 if fin_acked => {
                self.send_ack(ctx);
                self.enter_time_wait(ctx);
            }
            State::FinWait1 => self.state = State::Closing,
            State::FinWait2 => {
                self.send_ack(ctx);
                self.enter_time_wait(ctx);
            }
            _ => {}
        }
    }
}

/// ACKs a connection sends per [`ACK_BUDGET_INTERVAL`] in answer to unacceptable segments,
/// challenges included (RFC 5961 §7): enough for any honest exchange, and it stops two
/// confused peers (or an attacker) from ping-ponging ACKs without end.
pub(crate) const ACK_BUDGET: u32 = 10;
/// See [`ACK_BUDGET`].
pub(crate) const ACK_BUDGET_INTERVAL: core::time::Duration = core::time::Duration::from_millis(100);

/// The MSS assumed when the peer sends none (RFC 9293 §3.7.1).
pub(crate) const DEFAULT_MSS: usize = 536;
