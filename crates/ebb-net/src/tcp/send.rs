//! The send path: building segments, the send queue and segmentation, ACK processing with
//! fast retransmit and NewReno recovery (RFC 5681, RFC 6582), the retransmission and
//! persist timers, and the application's send-side calls.
//!
//! Retransmission is go-back-N from `snd_una` on a timeout (the window is one segment
//! then, so little is resent twice; the SACK scoreboard is dropped since the peer may
//! renege), and a single segment at `snd_una` on fast retransmit and on each partial ACK
//! (NewReno). With SACK, recovery also spends each further duplicate ACK on the next hole
//! below the highest SACKed byte instead of inflating the window — a simplified RFC 6675
//! that still sends one segment per segment that left the network.
//!
//! Every segment carries the current ACK and window, so sending anything settles a
//! pending (or delayed) ACK.

use ebb_core::iobuf::IOBufChain;
use ebb_core::net::{CloseReason, SendError, TcpErrorKind};

use super::send_queue::{slice_chain, slice_chain_from};
use super::state::{ACK_BUDGET, ACK_BUDGET_INTERVAL, AppEvent, Ctx, State, Tcb};
use super::timers::{after, due};

/// The shortest tail-loss-probe timeout.
const TLP_MIN: core::time::Duration = core::time::Duration::from_millis(10);
/// Added to the probe timeout when one segment is in flight (the peer may delay its ACK;
/// Linux's delayed ACK is 40 ms).
const TLP_DELAYED_ACK_ALLOWANCE: core::time::Duration = core::time::Duration::from_millis(50);
/// The smallest path MTU an ICMP "fragmentation needed" may shrink a connection to
/// (Linux's `min_pmtu`): a forged message cannot make segments arbitrarily small.
const MIN_PATH_MTU: u16 = 552;
use crate::transport::{IcmpErrorKind, TcpIcmpError, TcpSegment};
use crate::wire::tcp::{Control, MAX_SACK_BLOCKS, PlainHeader, Repr, SackBlocks, SeqNumber};

impl Tcb {
    /// Bytes in flight: sent and not acknowledged.
    pub(crate) fn in_flight(&self) -> u32 {
        u32::try_from((self.snd_nxt - self.snd_una).max(0)).unwrap_or(0)
    }

    /// The sequence number after the last queued byte.
    pub(crate) fn data_end(&self) -> SeqNumber {
        self.snd_una + self.queue.len()
    }

    /// Queued bytes not yet sent.
    pub(crate) fn unsent(&self) -> usize {
        usize::try_from((self.data_end() - self.snd_nxt).max(0)).unwrap_or(0)
    }

    /// Whether the application may still send.
    pub(crate) fn check_open_for_sending(&self) -> Result<(), SendError> {
        if let Some(reason) = self.close_reason
            && reason != CloseReason::Normal
        {
            return Err(SendError::Failed(reason));
        }
        match self.state {
            State::Established | State::CloseWait if !self.fin_requested => Ok(()),
            _ => Err(SendError::Closed),
        }
    }

    /// Room for new data: the smallest of the peer's window, the congestion window and
    /// the send buffer, less what is in flight or already queued.
    pub(crate) fn send_window(&self) -> usize {
        if self.check_open_for_sending().is_err() {
            return 0;
        }
        self.open_send_window()
    }

    /// [`send_window`](Self::send_window) once the caller checked that the application
    /// may send (the application's send calls check once, not twice).
    fn open_send_window(&self) -> usize {
        let window = (self.snd_wnd.min(self.cc.cwnd) as usize).min(self.send_buffer);
        window.saturating_sub(self.in_flight() as usize + self.unsent())
    }

    /// `TcpConnection::send`: queue everything.
    pub(crate) fn app_send(&mut self, mut data: IOBufChain) -> Result<(), SendError> {
        self.app_send_from(&mut data)
    }

    /// `TcpConnection::send_from`: queue everything `data` holds, leaving it empty.
    pub(crate) fn app_send_from(&mut self, data: &mut IOBufChain) -> Result<(), SendError> {
        if let Err(e) = self.check_open_for_sending() {
            drop(core::mem::take(data));
            return Err(e);
        }
        if data.len() > self.open_send_window() {
            self.window_blocked = true;
        }
        self.queue.append(data);
        Ok(())
    }

    /// `TcpConnection::try_send`: queue what the window takes, hand back the rest.
    pub(crate) fn app_try_send(&mut self, mut data: IOBufChain) -> Result<IOBufChain, SendError> {
        self.check_open_for_sending()?;
        let take = self.open_send_window().min(data.len());
        let mut head = data.split_to(take).unwrap_or_default();
        self.queue.append(&mut head);
        if !data.is_empty() {
            self.window_blocked = true;
        }
        Ok(data)
    }

    /// `TcpConnection::close`: FIN after the queued data. Returns whether anything
    /// changed.
    pub(crate) fn app_close(&mut self) -> bool {
        match self.state {
            State::Established | State::CloseWait | State::SynReceived if !self.fin_requested => {
                self.fin_requested = true;
                true
            }
            _ => false,
        }
    }

    /// Builds and sends one segment with the current ACK, window and options. Returns
    /// `false`, changing nothing, when the transmit queue has no room: the connection is
    /// marked [`tx_blocked`](Tcb::tx_blocked) and the caller stops (back-pressure, not
    /// loss — the layer polls it again once the queue drains).
    fn emit(
        &mut self,
        ctx: &mut Ctx<'_>,
        control: Control,
        seq: SeqNumber,
        payload: IOBufChain,
        push: bool,
    ) -> bool {
        if self.out_of_room(ctx) {
            return false;
        }
        self.emit_with_room(ctx, control, seq, payload, push);
        true
    }

    /// [`emit`](Self::emit) once the caller saw room in the transmit queue (`send_data`
    /// asks just before it slices the payload; asking again cost a virtual call per
    /// segment).
    fn emit_with_room(
        &mut self,
        ctx: &mut Ctx<'_>,
        control: Control,
        seq: SeqNumber,
        payload: IOBufChain,
        push: bool,
    ) {
        let syn = control == Control::Syn;
        if matches!(control, Control::None | Control::Fin)
            && ctx.fast_path
            && (!self.sack_ok || self.reassembly.is_empty())
        {
            // No options to send (no SYN options, no SACK blocks): the header template.
            self.emit_plain(ctx, control == Control::Fin, seq, payload, push);
            return;
        }
        let with_ack = !(syn && self.state == State::SynSent);
        let window = self.receive_window();
        let window_field = if syn {
            window.min(u32::from(u16::MAX)) as u16
        } else {
            (window >> self.rcv_shift).min(u32::from(u16::MAX)) as u16
        };
        let offer_ws = syn && (!self.passive || self.peer_offered_ws);
        let offer_sack = syn && (!self.passive || self.peer_offered_sack);
        let header = Repr {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            control,
            push,
            seq_number: seq,
            ack_number: with_ack.then_some(self.rcv_nxt),
            window_len: window_field,
            window_scale: offer_ws.then(|| Tcb::our_shift(ctx.config)),
            max_seg_size: syn.then(|| self.our_mss.min(usize::from(u16::MAX)) as u16),
            sack_permitted: offer_sack,
            sack_ranges: self.sack_blocks(syn),
            timestamp: None,
            payload: &[],
        };
        if with_ack {
            let advertised = if syn {
                u32::from(window_field)
            } else {
                u32::from(window_field) << self.rcv_shift
            };
            self.rcv_adv = self.rcv_adv.max(self.rcv_nxt + advertised);
            self.rcv_acked = self.rcv_nxt;
            self.ack_now = false;
            self.timers.delayed_ack = None;
        }
        ctx.counters.segments_out += 1;
        let segment = TcpSegment {
            src: *self.local.ip(),
            dst: *self.remote.ip(),
            header,
            payload,
        };
        if ctx.out.send_tcp(segment).is_err() {
            // Treated as a loss: the retransmission timer covers it.
            ctx.counters.output_errors += 1;
        }
    }

    /// [`emit`](Self::emit) for a segment without options (not a SYN, no SACK blocks
    /// due): the same fields, window bookkeeping and counting, but the header is the
    /// connection's [`PlainHeader`] template with sequence, acknowledgement, window and
    /// flags filled in, handed to [`TcpOutput::send_tcp_plain`](crate::transport::TcpOutput::send_tcp_plain)
    /// — no [`Repr`] and no option logic. The caller checked the transmit room.
    fn emit_plain(
        &mut self,
        ctx: &mut Ctx<'_>,
        fin: bool,
        seq: SeqNumber,
        payload: IOBufChain,
        push: bool,
    ) {
        let window = self.receive_window();
        let window_field = (window >> self.rcv_shift).min(u32::from(u16::MAX)) as u16;
        let header = PlainHeader {
            src_port: self.local.port(),
            dst_port: self.remote.port(),
            seq_number: seq,
            ack_number: self.rcv_nxt,
            window_len: window_field,
            flags: PlainHeader::ACK
                | if push { PlainHeader::PSH } else { 0 }
                | if fin { PlainHeader::FIN } else { 0 },
        };
        self.rcv_adv = self
            .rcv_adv
            .max(self.rcv_nxt + (u32::from(window_field) << self.rcv_shift));
        self.rcv_acked = self.rcv_nxt;
        self.ack_now = false;
        self.timers.delayed_ack = None;
        ctx.counters.segments_out += 1;
        if ctx
            .out
            .send_tcp_plain(*self.local.ip(), *self.remote.ip(), header, payload)
            .is_err()
        {
            // Treated as a loss: the retransmission timer covers it.
            ctx.counters.output_errors += 1;
        }
    }

    /// Whether the transmit queue is full; if so, marks the connection blocked.
    fn out_of_room(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if ctx.out.transmit_room() > 0 {
            return false;
        }
        if !self.tx_blocked {
            self.tx_blocked = true;
            ctx.counters.transmit_blocked += 1;
        }
        true
    }

    /// SACK blocks for our next segment (none on a SYN or without SACK-permitted).
    fn sack_blocks(&self, syn: bool) -> SackBlocks {
        if syn || !self.sack_ok || self.reassembly.is_empty() {
            [None; MAX_SACK_BLOCKS]
        } else {
            self.reassembly.sack_blocks()
        }
    }

    /// The largest payload that fits one segment beside the options it will carry.
    fn max_payload(&self) -> usize {
        if !self.sack_ok || self.reassembly.is_empty() {
            return self.send_mss.max(1); // No SACK blocks to make room for.
        }
        // As many blocks as `emit` writes: a data segment carries no other option, so
        // all MAX_SACK_BLOCKS (4) fit in the 40 option bytes.
        let sack_count = self.sack_blocks(false).iter().flatten().count();
        let options = if sack_count == 0 {
            0
        } else {
            (2 + 8 * sack_count + 3) & !3
        };
        self.send_mss.saturating_sub(options).max(1)
    }

    /// How much of the `unsent` new data, `usable` of it within the windows (both at
    /// least `max_payload`), to send as one frame:
    /// several segments' worth when the device cuts frames into segments itself (TCP
    /// segmentation offload, `TcpOutput::max_offload_payload`), else one segment.
    ///
    /// Whole segments only, so a frame ends short only where the data does: the device
    /// cuts it into `max_payload`-byte segments, which it can only do right for a
    /// connection whose MSS is the interface's (`ebb_net_driver::Segmentation`). New data only:
    /// retransmissions go segment by segment, as loss recovery counts them.
    ///
    /// 0 means wait: more data is queued than the windows (`window`, congestion and
    /// send) let out, what they let out is less than a third of them, and data is in
    /// flight, so ACKs will come and open a larger frame. Without the wait an ACK clock
    /// (an ACK every two segments) would cut a bulk stream into two-segment frames; Linux
    /// defers the same way (`tcp_tso_should_defer`, its `tcp_tso_win_divisor` is 3).
    fn offload_len(
        &self,
        ctx: &Ctx<'_>,
        unsent: usize,
        usable: usize,
        window: usize,
        max_payload: usize,
    ) -> usize {
        let options = self.send_mss.saturating_sub(max_payload);
        let limit = ctx
            .out
            .max_offload_payload(*self.remote.ip())
            .saturating_sub(options);
        if limit <= max_payload || self.send_mss != self.our_mss {
            return max_payload;
        }
        let len = unsent.min(usable).min(limit);
        if len == unsent {
            return len; // The rest of the data: its last segment may be short.
        }
        if len < limit.min(window / 3) && self.in_flight() > 0 {
            return 0;
        }
        len - len % max_payload
    }

    /// Sends (or resends) our SYN — or SYN-ACK in SYN-RECEIVED — at `iss`.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    pub(crate) fn send_syn(&mut self, ctx: &mut Ctx<'_>) {
        let first = !self.syn_sent;
        if first {
            self.our_mss = ctx.out.max_segment_size(*self.remote.ip()).max(64);
            self.syn_sent = true;
        }
        let iss = self.iss;
        self.emit(ctx, Control::Syn, iss, IOBufChain::new(), false);
        self.snd_nxt = iss + 1u32;
        self.snd_max = self.snd_max.max(self.snd_nxt);
        if self.timers.retransmit.is_none() {
            self.timers.retransmit = Some(after(ctx.now, self.rtt.rto_nanos()));
        }
        if first {
            // Only the first transmission is timed (Karn).
            self.rtt_probe = Some((self.snd_nxt, ctx.now));
        }
    }

    /// A pure ACK. It carries `snd_max`, not `snd_nxt`: after a timeout rewound `snd_nxt`,
    /// an ACK from the rewound point would fall left of the peer's window and be dropped
    /// (with an ACK back: an ACK war). BSD does the same.
    pub(crate) fn send_ack(&mut self, ctx: &mut Ctx<'_>) {
        let seq = self.snd_max.max(self.snd_nxt);
        self.emit(ctx, Control::None, seq, IOBufChain::new(), false);
    }

    /// An ACK answering an unacceptable segment or challenging one, within the
    /// per-connection budget (see [`ACK_BUDGET`]).
    // Cold (loss recovery, challenges, resets): out of line, off the common path.
    #[cold]
    pub(crate) fn send_ack_limited(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.now.saturating_duration_since(self.ack_budget_since) >= ACK_BUDGET_INTERVAL {
            self.ack_budget_since = ctx.now;
            self.ack_budget = ACK_BUDGET;
        }
        if self.ack_budget == 0 {
            ctx.counters.acks_rate_limited += 1;
            return;
        }
        self.ack_budget -= 1;
        self.send_ack(ctx);
    }

    /// A RST at `seq` (with an ACK of `ack` if given).
    // Cold (loss recovery, challenges, resets): out of line, off the common path.
    #[cold]
    pub(crate) fn send_reset(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber, ack: Option<SeqNumber>) {
        emit_reset(ctx, self.local, self.remote, seq, ack);
    }

    /// Sends what the windows allow: new or rewound data, then the FIN, then a pure ACK
    /// if one is owed; arms or disarms the retransmission and persist timers.
    pub(crate) fn output(&mut self, ctx: &mut Ctx<'_>) {
        if !self.state.is_synchronized() {
            return;
        }
        let can_send_data = matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        );
        if can_send_data {
            self.send_data(ctx);
        }
        if self.ack_now || self.window_update_due() {
            self.send_ack(ctx);
        }
        // Timers.
        if self.snd_max > self.snd_una && self.snd_nxt > self.snd_una {
            if self.timers.retransmit.is_none() {
                self.timers.retransmit = Some(after(ctx.now, self.rtt.rto_nanos()));
            }
        } else if self.snd_nxt == self.snd_una {
            self.timers.retransmit = None;
        }
        if can_send_data && self.snd_wnd == 0 && self.unsent() > 0 && self.in_flight() == 0 {
            if self.timers.persist.is_none() {
                self.arm_persist(ctx);
            }
        } else {
            self.timers.persist = None;
            self.persist_backoff = 0;
        }
    }

    /// Whether the window we could advertise grew enough past the one the peer knows that
    /// it should hear about it (receiver silly-window avoidance, RFC 9293 §3.8.6.2.2).
    fn window_update_due(&self) -> bool {
        if !matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            return false; // The peer's FIN came: it sends nothing more.
        }
        let window = self.receive_window() as usize;
        let known = self.rcv_wnd() as usize;
        let small = (2 * self.our_mss).min(self.rcv_window / 2).max(1);
        known < small && window.saturating_sub(known) >= small
    }

    /// Segments queued data into the usable window (sender silly-window avoidance and,
    /// if enabled, Nagle), then sends the FIN once everything before it is out.
    fn send_data(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            let unsent = self.unsent();
            let congestion = self.cc.cwnd.saturating_add(self.limited_transmit);
            let window = self.snd_wnd.min(congestion) as usize;
            let in_flight = self.in_flight() as usize;
            let usable = window.saturating_sub(in_flight);
            let max_payload = self.max_payload();
            if unsent > 0 {
                if usable == 0 {
                    break;
                }
                let mut len = unsent.min(usable).min(max_payload);
                if len == max_payload && self.snd_nxt >= self.snd_max {
                    len = self.offload_len(ctx, unsent, usable, window, max_payload);
                    if len == 0 {
                        break; // Deferred: the ACKs in flight will open a larger frame.
                    }
                }
                let partial = len < max_payload;
                if partial && len < unsent && in_flight > 0 && len < self.max_snd_wnd as usize / 2 {
                    // Sender silly-window avoidance (RFC 9293 §3.8.6.2.1): the window, not
                    // the data, is short; the ACK of what is in flight will open it.
                    break;
                }
                if partial && !self.nodelay && in_flight > 0 {
                    break; // Nagle: one small segment in flight at a time.
                }
                if self.out_of_room(ctx) {
                    break; // Back-pressure: resumed when the layer polls us again.
                }
                let offset = usize::try_from(self.snd_nxt - self.snd_una).unwrap_or(0);
                let payload = slice_chain_from(&self.queue, &mut self.queue_cursor, offset, len);
                let seq = self.snd_nxt;
                let last = len == unsent;
                if seq < self.snd_max {
                    ctx.counters.retransmissions += 1;
                } else {
                    if self.rtt_probe.is_none() {
                        self.rtt_probe = Some((seq + len, ctx.now));
                    }
                    self.arm_tail_probe(ctx, in_flight + len);
                }
                // `out_of_room` found room above, and nothing has queued a frame since.
                self.emit_with_room(ctx, Control::None, seq, payload, last);
                self.snd_nxt = seq + len;
                self.snd_max = self.snd_max.max(self.snd_nxt);
                continue;
            }
            if self.fin_requested && self.snd_nxt == self.data_end() {
                let seq = self.snd_nxt;
                if self.fin_seq.is_some_and(|f| f == seq) && seq < self.snd_max {
                    ctx.counters.retransmissions += 1;
                }
                if !self.emit(ctx, Control::Fin, seq, IOBufChain::new(), true) {
                    break;
                }
                self.fin_seq = Some(seq);
                self.snd_nxt = seq + 1u32;
                self.snd_max = self.snd_max.max(self.snd_nxt);
                match self.state {
                    State::Established => self.state = State::FinWait1,
                    State::CloseWait => self.state = State::LastAck,
                    _ => {}
                }
            }
            break;
        }
    }

    /// Resends one segment at `snd_una` (fast retransmit, partial ACK), stopping short of
    /// data the peer reported with SACK.
    // Cold (loss recovery, challenges, resets): out of line, off the common path.
    #[cold]
    fn retransmit_front(&mut self, ctx: &mut Ctx<'_>) {
        let seq = self.snd_una;
        // Only what was sent before: bytes past `snd_max` are new data, and an ACK for
        // them would look like an ACK of unsent data.
        let sent = usize::try_from((self.snd_max - seq).max(0)).unwrap_or(0);
        let len = match self.sacked.first() {
            Some((left, _)) => usize::try_from((*left - seq).max(0)).unwrap_or(0),
            None => sent,
        };
        let len = len.min(sent).min(self.queue.len()).min(self.max_payload());
        if len > 0 {
            self.retransmit_range(ctx, seq, len);
        } else if self.fin_seq == Some(seq) {
            ctx.counters.retransmissions += 1;
            self.rtt_probe = None;
            self.emit(ctx, Control::Fin, seq, IOBufChain::new(), true);
        }
        self.rexmit_next = self.rexmit_next.max(seq + len);
    }

    /// Resends `[seq, seq + len)` of the queue.
    // Cold (loss recovery, challenges, resets): out of line, off the common path.
    #[cold]
    fn retransmit_range(&mut self, ctx: &mut Ctx<'_>, seq: SeqNumber, len: usize) {
        ctx.counters.retransmissions += 1;
        self.rtt_probe = None; // Karn.
        let offset = usize::try_from((seq - self.snd_una).max(0)).unwrap_or(0);
        let payload = slice_chain(&self.queue, offset, len);
        self.emit(ctx, Control::None, seq, payload, false);
    }

    /// Records the peer's SACK blocks (RFC 2018) that lie inside what is outstanding;
    /// returns whether they reported data not SACKed before.
    fn update_scoreboard(&mut self, repr: &Repr<'_>) -> bool {
        if !self.sack_ok {
            return false;
        }
        let before = self.sacked_bytes();
        for &(left, right) in repr.sack_ranges.iter().flatten() {
            if left >= right || right <= self.snd_una || right > self.snd_max {
                continue; // Stale or bogus: ignore.
            }
            let mut block = (left.max(self.snd_una), right);
            // Merge with every overlapping or adjacent block, then insert in order.
            self.sacked.retain(|&(l, r)| {
                if r < block.0 || l > block.1 {
                    true
                } else {
                    block = (block.0.min(l), block.1.max(r));
                    false
                }
            });
            let at = self.sacked.partition_point(|&(l, _)| l < block.0);
            self.sacked.insert(at, block);
        }
        self.sacked_bytes() > before
    }

    /// Bytes the scoreboard holds.
    fn sacked_bytes(&self) -> usize {
        self.sacked
            .iter()
            .map(|&(l, r)| usize::try_from(r - l).unwrap_or(0))
            .sum()
    }

    /// Drops the scoreboard below `snd_una`.
    fn prune_scoreboard(&mut self) {
        let una = self.snd_una;
        self.sacked.retain(|&(_, r)| r > una);
        if let Some(first) = self.sacked.first_mut() {
            first.0 = first.0.max(una);
        }
    }

    /// The first hole at or after `from` below the highest SACKed byte (data known to be
    /// missing while later data arrived), as a segment to resend.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn next_hole(&self, from: SeqNumber) -> Option<(SeqNumber, usize)> {
        let mut at = from.max(self.snd_una);
        for &(left, right) in &self.sacked {
            if right <= at {
                continue;
            }
            if left <= at {
                at = right;
                continue;
            }
            let len = usize::try_from(left - at)
                .unwrap_or(0)
                .min(self.max_payload());
            return (len > 0).then_some((at, len));
        }
        None
    }

    /// The ACK field of an acceptable segment (§3.10.7.4, fifth check; RFC 5961 §5).
    /// Returns `false` if the segment is to be dropped.
    pub(crate) fn process_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        repr: &Repr<'_>,
        payload: &[u8],
        ack: SeqNumber,
    ) -> bool {
        if ack > self.snd_max {
            ctx.counters.dropped_out_of_window += 1;
            self.send_ack_limited(ctx);
            return false;
        }
        let oldest_acceptable = self.snd_una - self.max_snd_wnd.max(1);
        if ack < oldest_acceptable {
            ctx.counters.challenge_acks += 1;
            self.send_ack_limited(ctx);
            return false;
        }
        let window = u32::from(repr.window_len) << self.snd_shift;
        let new_sack = self.update_scoreboard(repr);
        if ack > self.snd_una {
            self.on_new_ack(ctx, ack);
        } else if ack == self.snd_una
            && payload.is_empty()
            && repr.control == Control::None
            // RFC 6675 §2: with SACK, newly SACKed data makes an ACK a duplicate even if
            // the window moved (Linux's receive-window tuning moves it often).
            && (window == self.snd_wnd || new_sack)
            && self.snd_max > self.snd_una
        {
            self.on_duplicate_ack(ctx);
        }
        let seq = repr.seq_number;
        if self.snd_wl1 < seq || (self.snd_wl1 == seq && self.snd_wl2 <= ack) {
            let opened = window > self.snd_wnd;
            self.snd_wnd = window;
            self.snd_wl1 = seq;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            if opened && self.window_blocked && self.send_window() > 0 {
                self.window_blocked = false;
                self.events.push_back(AppEvent::SendWindowIncreased);
            }
        }
        true
    }

    pub(crate) fn on_new_ack(&mut self, ctx: &mut Ctx<'_>, ack: SeqNumber) {
        let acked = u32::try_from(ack - self.snd_una).unwrap_or(0);
        let data_acked = (acked as usize).min(self.queue.len());
        let segments_before = self.queue.segment_count();
        let _ = self.queue.trim_front(data_acked);
        let removed = segments_before - self.queue.segment_count();
        self.queue_cursor.advance(removed, data_acked);
        self.snd_una = ack;
        if self.snd_nxt < self.snd_una {
            self.snd_nxt = self.snd_una;
        }
        self.prune_scoreboard();
        self.limited_transmit = 0;
        self.take_rtt_sample(ctx.now, ack);
        self.retries = 0;
        if self.in_recovery {
            if ack >= self.recover {
                self.in_recovery = false;
                let flight = u32::try_from((self.snd_max - self.snd_una).max(0)).unwrap_or(0);
                self.cc.exit_fast_recovery(flight);
            } else {
                // A partial ACK (RFC 6582 §3.2 step 5): the next hole is lost too.
                self.cc.partial_ack(acked);
                self.retransmit_front(ctx);
                self.timers.retransmit = Some(after(ctx.now, self.rtt.rto_nanos()));
            }
        } else {
            self.cc.on_ack(acked, ctx.now, self.rtt.srtt());
        }
        self.dup_acks = 0;
        self.timers.retransmit = if self.snd_una == self.snd_max {
            None
        } else {
            Some(after(ctx.now, self.rtt.rto_nanos()))
        };
        self.tail_probe_sent = false;
        self.timers.tail_probe = None;
        if self.snd_max > self.snd_una && !self.in_recovery {
            self.arm_tail_probe(ctx, self.in_flight() as usize);
        }
        if self.window_blocked && self.send_window() > 0 {
            self.window_blocked = false;
            self.events.push_back(AppEvent::SendWindowIncreased);
        }
    }

    // Cold (loss recovery, challenges, resets): out of line, off the common path.
    #[cold]
    fn on_duplicate_ack(&mut self, ctx: &mut Ctx<'_>) {
        self.dup_acks += 1;
        if self.in_recovery {
            // A segment left the network. With SACK, spend it on the next known hole;
            // without, inflate the window (RFC 5681 §3.2 step 4).
            match self.next_hole(self.rexmit_next) {
                Some((seq, len)) => {
                    self.retransmit_range(ctx, seq, len);
                    self.rexmit_next = seq + len;
                }
                None => self.cc.inflate(),
            }
            return;
        }
        // RFC 6582 §3.2 step 2: only a loss after the last recovery point starts another
        // — unless SACK shows three segments' worth arrived above the hole (RFC 6675's
        // loss test), which duplicates of data the peer already has cannot fake.
        let sacked = self.sacked_bytes();
        // Early retransmit (RFC 5827, with SACK): nothing is left to send and everything
        // after the hole has arrived, so no more duplicates will come — one is enough.
        let tail_sacked = self.unsent() == 0
            && self
                .sacked
                .last()
                .is_some_and(|&(_, right)| right >= self.data_end());
        let loss_evident =
            self.snd_una > self.recover || sacked >= 3 * self.send_mss || tail_sacked;
        let threshold = if tail_sacked { 1 } else { 3 };
        if self.dup_acks < 3 {
            // Limited transmit (RFC 3042): each of the first two duplicates lets one new
            // segment out beyond the congestion window, so a small window still yields
            // the three duplicates fast retransmit needs.
            self.limited_transmit = self.dup_acks * self.send_mss as u32;
        }
        if self.dup_acks >= threshold && loss_evident {
            self.limited_transmit = 0;
            self.timers.tail_probe = None;
            ctx.counters.fast_retransmits += 1;
            let flight = u32::try_from((self.snd_max - self.snd_una).max(0)).unwrap_or(0);
            self.in_recovery = true;
            self.recover = self.snd_max;
            self.rexmit_next = self.snd_una;
            self.cc.enter_fast_recovery(flight);
            self.retransmit_front(ctx);
            self.timers.retransmit = Some(after(ctx.now, self.rtt.rto_nanos()));
        }
    }

    /// Timers due at `ctx.now`, then any pending output (called from the layer's poll).
    pub(crate) fn on_poll(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.state == State::SynSent && !self.syn_sent {
            self.send_syn(ctx);
            return;
        }
        if due(self.timers.time_wait, now) {
            // 2 × MSL elapsed: the connection is gone (Closed was reported on entry).
            self.state = State::Closed;
            self.timers.clear();
            return;
        }
        if due(self.timers.retransmit, now) {
            self.timers.retransmit = None;
            self.on_retransmit_timeout(ctx);
            if self.state == State::Closed {
                return;
            }
        }
        if due(self.timers.tail_probe, now) {
            self.timers.tail_probe = None;
            self.on_tail_probe(ctx);
        }
        if due(self.timers.persist, now) {
            self.on_persist_timeout(ctx);
        }
        if due(self.timers.delayed_ack, now) {
            self.timers.delayed_ack = None;
            self.ack_now = true;
        }
        if due(self.timers.keepalive, now) {
            self.on_keepalive(ctx);
            if self.state == State::Closed {
                return;
            }
        }
        self.output(ctx);
    }

    /// An ICMP Destination Unreachable about this connection (RFC 1122 §4.2.3.9, RFC
    /// 5927, RFC 1191). Returns whether it was acted on: only errors quoting a segment
    /// that may be in flight (`SND.UNA <= SEQ < SND.MAX`, RFC 5927 §4.1) are; then
    /// unreachability ends a connection still opening (`SYN-SENT`: refused for port and
    /// protocol unreachable, unreachable otherwise) and is ignored once synchronized
    /// (a soft error, RFC 5927 §4), and "fragmentation needed" shrinks the segment size
    /// to the reported path MTU (never below 552, Linux's floor) and resends what is in
    /// flight in the smaller segments.
    #[cold]
    pub(crate) fn on_icmp_error(&mut self, ctx: &mut Ctx<'_>, error: TcpIcmpError) -> bool {
        if !(self.snd_una <= error.seq && error.seq < self.snd_max) {
            return false;
        }
        match error.kind {
            IcmpErrorKind::FragmentationNeeded { next_hop_mtu } => {
                if next_hop_mtu == 0 || !self.state.is_synchronized() {
                    // An RFC 792 router that does not say its MTU: no guess here.
                    return false;
                }
                let mss = usize::from(next_hop_mtu.max(MIN_PATH_MTU)) - 40;
                if mss >= self.send_mss {
                    return false;
                }
                self.send_mss = mss;
                self.cc.shrink_mss(mss);
                // Resend what the too-large segments carried, at once and without a
                // congestion response (go back to SND.UNA, as a timeout would).
                self.rtt_probe = None;
                self.snd_nxt = self.snd_una;
                self.output(ctx);
                true
            }
            kind if self.state == State::SynSent => {
                let refused = matches!(
                    kind,
                    IcmpErrorKind::PortUnreachable | IcmpErrorKind::ProtocolUnreachable
                );
                let why = if refused {
                    TcpErrorKind::ConnectionRefused
                } else {
                    TcpErrorKind::Unreachable
                };
                self.finish(ctx, CloseReason::Error(why));
                true
            }
            _ => false,
        }
    }

    /// (Re)arms keepalive from the last time the peer was heard from (or disarms it when
    /// off or in a state without keepalive). A deadline already past fires on the next
    /// poll.
    pub(crate) fn arm_keepalive(&mut self) {
        self.timers.keepalive = match self.keepalive {
            Some(ka) if self.state.has_keepalive() => Some(self.last_received + ka.idle),
            _ => None,
        };
    }

    /// The keepalive timer fired: probe an idle connection, or give up on a silent peer
    /// (see [`Keepalive`](super::Keepalive)).
    #[cold]
    fn on_keepalive(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let ka = match self.keepalive {
            Some(ka) if self.state.has_keepalive() => ka,
            _ => {
                self.timers.keepalive = None;
                return;
            }
        };
        if self.snd_max != self.snd_una || self.timers.persist.is_some() {
            // Data (or a probe of a zero window) outstanding: the retransmission and
            // persist timers watch the peer. Look again after an idle period.
            self.keepalive_probes = 0;
            self.timers.keepalive = Some(now + ka.idle);
            return;
        }
        let quiet_until = self.last_received + ka.idle;
        if self.keepalive_probes == 0 && now < quiet_until {
            // Heard from the peer since the timer was armed.
            self.timers.keepalive = Some(quiet_until);
            return;
        }
        if self.keepalive_probes >= ka.probes.max(1) {
            self.finish(ctx, CloseReason::TimedOut);
            return;
        }
        // The probe: one below the next sequence number and empty, so the peer finds it
        // old and answers with an ACK (RFC 9293 §3.8.4).
        ctx.counters.keepalive_probes += 1;
        self.keepalive_probes += 1;
        let seq = self.snd_una - 1u32;
        self.emit(ctx, Control::None, seq, IOBufChain::new(), false);
        self.timers.keepalive = Some(now + ka.interval);
    }

    /// RFC 6298 §5.4–5.7: back off, resend, give up after the configured retries.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn on_retransmit_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let limit = match self.state {
            State::SynSent | State::SynReceived => ctx.config.max_syn_retransmissions,
            _ => ctx.config.max_retransmissions,
        };
        if self.retries >= limit {
            if self.state == State::SynReceived && self.passive {
                // A half-open connection never handed out: drop it quietly.
                ctx.counters.connections_timed_out += 1;
                self.state = State::Closed;
                self.timers.clear();
            } else {
                self.finish(ctx, CloseReason::TimedOut);
            }
            return;
        }
        self.retries += 1;
        ctx.counters.timeouts += 1;
        self.rtt.back_off();
        self.rtt_probe = None; // Karn: never time a retransmitted segment.
        match self.state {
            State::SynSent | State::SynReceived => {
                ctx.counters.retransmissions += 1;
                self.send_syn(ctx);
            }
            _ => {
                let flight = u32::try_from((self.snd_max - self.snd_una).max(0)).unwrap_or(0);
                self.cc.on_timeout(flight);
                self.limited_transmit = 0;
                self.timers.tail_probe = None;
                // The peer may renege on SACKed data (RFC 2018 §8): resend everything.
                self.sacked.clear();
                self.in_recovery = false;
                self.recover = self.snd_max;
                self.dup_acks = 0;
                self.snd_nxt = self.snd_una;
                self.output(ctx);
                if self.snd_nxt == self.snd_una {
                    // Nothing could be resent (a zero window): the persist timer probes.
                    return;
                }
            }
        }
        self.timers.retransmit = Some(after(ctx.now, self.rtt.rto_nanos()));
    }

    /// Arms the tail loss probe (RFC 8985 §7): if the last segments of a flight are lost,
    /// no duplicate ACKs come and only the RTO (200 ms at least) would notice; a probe
    /// after about two round trips elicits the SACK that lets fast recovery repair it.
    /// Only with an RTT sample, outside recovery, once per flight, and only if it fires
    /// before the retransmission timer.
    fn arm_tail_probe(&mut self, ctx: &Ctx<'_>, flight: usize) {
        if !ctx.config.tail_loss_probe
            || self.tail_probe_sent
            || self.in_recovery
            || !self.rtt.has_sample()
        {
            return;
        }
        // In nanoseconds: as `Duration`s these sums cost a segment about 20 instructions.
        let mut pto = self
            .rtt
            .srtt_nanos()
            .saturating_mul(2)
            .max(TLP_MIN.as_nanos() as u64);
        if flight <= self.send_mss {
            // A lone segment may wait for the peer's delayed ACK.
            pto = pto.saturating_add(TLP_DELAYED_ACK_ALLOWANCE.as_nanos() as u64);
        }
        let at = after(ctx.now, pto);
        if self.timers.retransmit.is_none_or(|rto| at < rto) {
            self.timers.tail_probe = Some(at);
        }
    }

    /// The tail loss probe fired: send new data if the windows allow, else resend the last
    /// segment (RFC 8985 §7.3).
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn on_tail_probe(&mut self, ctx: &mut Ctx<'_>) {
        if self.snd_max == self.snd_una || self.in_recovery {
            return;
        }
        ctx.counters.tail_loss_probes += 1;
        self.tail_probe_sent = true;
        self.rtt_probe = None; // Karn: the flight's ACKs are ambiguous from here on.
        let window = self.snd_wnd.min(self.cc.cwnd) as usize;
        if self.unsent() > 0 && window > self.in_flight() as usize {
            self.output(ctx);
            return;
        }
        let data_in_flight = usize::try_from((self.snd_max - self.snd_una).max(0))
            .unwrap_or(0)
            .min(self.queue.len());
        if data_in_flight > 0 {
            let len = data_in_flight.min(self.max_payload());
            let seq = self.snd_una + (data_in_flight - len);
            self.retransmit_range(ctx, seq, len);
        } else if let Some(fin) = self.fin_seq {
            ctx.counters.retransmissions += 1;
            self.emit(ctx, Control::Fin, fin, IOBufChain::new(), true);
        }
    }

    fn arm_persist(&mut self, ctx: &mut Ctx<'_>) {
        let base = self.rtt.rto();
        let factor = 1u32 << self.persist_backoff.min(10);
        let interval = base.saturating_mul(factor).min(ctx.config.max_rto);
        self.timers.persist = Some(ctx.now + interval);
    }

    /// Zero-window probe: an old sequence number makes the peer answer with its window.
    // Once per connection or on loss only: cold, kept off the per-segment path.
    #[cold]
    fn on_persist_timeout(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.window_probes += 1;
        let seq = self.snd_una - 1u32;
        self.emit(ctx, Control::None, seq, IOBufChain::new(), false);
        self.persist_backoff = self.persist_backoff.saturating_add(1);
        self.arm_persist(ctx);
    }
}

/// Sends a RST from `local` to `remote` at `seq` (with an ACK of `ack` if given), and
/// counts it: for a connection's own resets and for segments no connection matches.
#[cold]
pub(crate) fn emit_reset(
    ctx: &mut Ctx<'_>,
    local: core::net::SocketAddrV4,
    remote: core::net::SocketAddrV4,
    seq: SeqNumber,
    ack: Option<SeqNumber>,
) {
    ctx.counters.resets_sent += 1;
    ctx.counters.segments_out += 1;
    let segment = TcpSegment {
        src: *local.ip(),
        dst: *remote.ip(),
        header: Repr {
            src_port: local.port(),
            dst_port: remote.port(),
            control: Control::Rst,
            push: false,
            seq_number: seq,
            ack_number: ack,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &[],
        },
        payload: IOBufChain::new(),
    };
    if ctx.out.send_tcp(segment).is_err() {
        ctx.counters.output_errors += 1;
    }
}
