//! TCP (RFC 9293): connections, listeners and the EbbRT-style application interface.
//!
//! [`TcpLayer`] is one core's TCP: it implements [`TcpInput`](crate::transport::TcpInput) for the IP layer, which hands
//! it every received segment and calls [`TcpInput::poll`](crate::transport::TcpInput::poll) when [`TcpInput::poll_at`](crate::transport::TcpInput::poll_at) is due;
//! segments leave through the [`TcpOutput`](crate::transport::TcpOutput) lent to those calls. Nothing here reads a clock
//! or owns a device (sans-IO), so tests drive time and inspect every segment.
//!
//! # Layout
//!
//! * `layer` — the layer's state and each connection's record (they point at each other),
//!   the handle types [`TcpLayer`] and [`TcpConn`], the layer's public calls, and the
//!   bookkeeping after a TCB was processed;
//! * `input` — segments in: header prediction, the general path, the listeners, `poll`;
//! * `events` — event delivery to the application's handlers and callbacks;
//! * `conn` — the application's calls on a connection ([`TcpConn`]);
//! * `config` and `counters` — [`TcpConfig`], [`Keepalive`] and [`TcpCounters`];
//! * `conn_table` — the demux table keyed by [`FourTuple`], with its seeded hash, and the
//!   multi-core [`ConnectionDirectory`];
//! * `deadline_wheel` — every connection's next timer deadline, earliest first: a hashed
//!   timer wheel for the next ~1.07 s, `deadlines` (an indexed heap) beyond;
//! * `state` — the TCB and the per-state segment processing (RFC 9293 §3.10.7);
//! * `send` — segmentation, ACK processing, limited transmit, fast and early retransmit,
//!   NewReno recovery guided by the peer's SACK blocks, retransmission, tail-loss-probe and
//!   persist timers, the send-side application calls;
//! * `send_queue` — slicing the send queue without copying, resumed from a cursor;
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
//! [`TcpConfig::receive_window`], grown up to [`TcpConfig::max_receive_window`] while a
//! peer fills it and the application keeps up (autotuning); closed (`set_receive_window_open(false)`), it is zero
//! (data already inside the advertised window is held, never delivered while closed, and
//! the right edge never moves left); reopening sends a window update.
//!
//! **Borrow invariant.** Layer state (`layer::Inner::state`, `layer::Inner::counters`) and each TCB are
//! borrowed only inside the layer's own calls (`receive`, `poll`, `listen`, `connect`) and
//! inside connection methods, and never while application code runs. Segment processing
//! only *queues* application events on the TCB; [`TcpInput::receive`](crate::transport::TcpInput::receive) and
//! [`TcpInput::poll`](crate::transport::TcpInput::poll) deliver them at their end, after every borrow is released, one event
//! at a time with the handler taken out of its slot. Hence:
//!
//! * connection methods (send, close, abort, set_receive_window_open, set_handler) and
//!   [`TcpLayer::connect`]/[`TcpLayer::listen`] may be called from inside any callback
//!   without a `RefCell` conflict;
//! * callbacks never nest: delivery is guarded by a flag, and events caused by a callback
//!   (for example `closed(Aborted)` after `abort()`) are queued and delivered after it
//!   returns, by the same delivery loop;
//! * methods never send segments themselves (they have no [`TcpOutput`](crate::transport::TcpOutput)): they mark the
//!   layer as needing a poll.
//!
//! **Polling contract.** After the application acted on a connection outside the stack's
//! own calls, [`TcpInput::poll_at`](crate::transport::TcpInput::poll_at) returns `Some(Instant::ZERO)` (and
//! [`TcpLayer::needs_poll`] is true) until the driver calls [`TcpInput::poll`](crate::transport::TcpInput::poll); events
//! caused outside callbacks are delivered by that poll too.
//!
//! **ACKs after delivery.** In-order data handed to a handler is acknowledged on the
//! [`TcpInput::poll`](crate::transport::TcpInput::poll) the driver runs after the batch of received segments (the stack
//! always does), not inside `receive`: what the application sends from its `receive`
//! callback then carries the ACK (ping-pong: two segments per round trip, not four), and
//! a batch of segments costs fewer ACKs. At most two full segments wait so (RFC 5681
//! §4.2); out-of-order data, FINs and data nobody can take yet are acknowledged at once.
//!
//! **Transmit back-pressure.** Before each segment TCP asks the output for room
//! ([`TcpOutput::transmit_room`](crate::transport::TcpOutput::transmit_room)); when the interface's queue is full it stops (nothing is
//! lost or counted as an error), files the connection on a blocked list, and
//! [`TcpInput::transmit_blocked`](crate::transport::TcpInput::transmit_blocked) tells the driver to poll again once the device has
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
//! sequence, ACK, window and flags ([`TcpOutput::send_tcp_plain`](crate::transport::TcpOutput::send_tcp_plain)). Anything else takes
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
//! created it. The demux is [`FourTuple`] → connection, private to the `conn_table`
//! module's `ConnTable`. A multi-core stack gives each core's layer a [`ConnectionDirectory`]
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
//! due (`deadline_wheel::DeadlineWheel`: a ring of per-millisecond lists where a timer
//! re-armed later stays put and one re-armed earlier is relinked; far deadlines wait in
//! `deadlines::DeadlineHeap`; due
//! connections come out in `(deadline, FourTuple)` order); `poll_at` reads its cached
//! earliest deadline, recomputed only after the earliest connection moved. Demux is a hash-map lookup
//! (seeded hash, see `conn_table`) behind a one-entry cache of the last connection found. The lists are reused from
//! poll to poll (no allocation); segmenting the send queue resumes from a cursor
//! (`send_queue::QueueCursor`) instead of walking the queue from its front for every segment.

mod config;
mod congestion;
mod conn;
mod conn_table;
mod counters;
mod deadline_wheel;
mod deadlines;
mod events;
mod input;
mod isn;
mod layer;
mod recv;
mod send;
mod send_queue;
mod state;
mod timers;

#[cfg(test)]
mod tests;

pub use config::{Keepalive, TcpConfig};
pub use congestion::CongestionAlgorithm;
pub use conn_table::{ConnectionDirectory, FourTuple};
pub use counters::TcpCounters;
pub use layer::{NewConn, TcpConn, TcpLayer};
pub use state::State;
