//! Segments in: [`TcpInput`] for the layer — header prediction, the general path into the
//! connection's state machine or the listeners, ICMP errors, and `poll` for what the
//! application touched and the timers due.

use alloc::rc::Rc;
use core::net::{Ipv4Addr, SocketAddrV4};

use ebb_core::Instant;
use ebb_core::iobuf::IOBuf;

use super::conn_table::FourTuple;
use super::counters::TcpCounters;
use super::layer::{Accounting, ConnRecord, Inner, LayerState, TcpLayer};
use super::send;
use super::state::{Ctx, Incoming, State, Tcb};
use crate::transport::{TcpIcmpError, TcpInput, TcpOutput};
use crate::wire::checksum::ChecksumCapabilities;
use crate::wire::tcp::{
    Control, HEADER_LEN as TCP_HEADER_LEN, MAX_HEADER_LEN, Packet, PlainHeader, Repr, SeqNumber,
};

/// Where [`TcpLayer::receive_general`] took a segment.
enum Received {
    /// To this connection.
    Conn(Rc<ConnRecord>),
    /// To the listeners (or answered with a RST).
    NoConn,
    /// Nowhere: malformed (counted).
    Malformed,
}

impl TcpLayer {
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
    ) -> Result<Rc<ConnRecord>, IOBuf> {
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
                let conn = Rc::new(ConnRecord::new(
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
                        // Dropped before any processing: nothing to deliver.
                        Received::Malformed => return,
                    }
                }
            }
        };
        self.deliver_events();
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
        self.deliver_events();
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
        self.deliver_events();
    }

    fn poll_at(&self) -> Option<Instant> {
        let inner = &self.0;
        if inner.needs_poll.get() || !inner.ready.borrow().is_empty() {
            return Some(Instant::ZERO);
        }
        // A bound, not the exact earliest: polling up to a wheel slot early is harmless.
        inner.state.borrow_mut().deadlines.due_no_earlier_than()
    }

    fn transmit_blocked(&self) -> bool {
        !self.0.blocked.borrow().is_empty()
    }
}
