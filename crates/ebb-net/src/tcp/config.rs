//! A layer's settings: [`TcpConfig`] and the [`Keepalive`] it may turn on.

use core::time::Duration;

use super::congestion::CongestionAlgorithm;

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
    /// The largest window the window-scale shift must express (sets the shift we offer),
    /// and how far a connection's window grows (autotuning, as Linux grows a socket's
    /// receive buffer): each time a whole window's worth arrives in order within 10 ms
    /// and the application takes it as it comes, the window doubles, up to this. A bulk
    /// stream then keeps more in flight where the round trip is long (measured: a
    /// native node's 1 MiB messages through the monitor's user-mode network, 0.5x Linux
    /// TCP's throughput with a 1 MiB window, 0.7x with 4 MiB); request-response traffic
    /// never delivers a window that fast, and a stream with losses (a segment out of
    /// order starts the measure again) is not widened: it keeps `receive_window`.
    /// Default 4 MiB (shift 7); at most `receive_window` turns growth off.
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
    /// `receive_window`. A connection whose window grew past `receive_window`
    /// (autotuning, `max_receive_window`) keeps up to its window instead.
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
    /// The most a connection offers an application room for, in flight and queued
    /// together — a socket's send buffer: [`send_window`](ebb_core::net::TcpConnection::send_window)
    /// and `try_send` never go past it, whatever windows the peer and the congestion
    /// control allow. Without it a peer that advertises a large window, acknowledges a
    /// stream until the congestion window is large, and then stops would have every
    /// connection queue up to that window (a scaled window reaches 1 GiB). `send`,
    /// which queues everything, is not held to it: its caller chose to. Default 4 MiB,
    /// the top of Linux's `tcp_wmem`.
    pub send_buffer: usize,
    /// Keepalive for every connection of the layer (each can change it with
    /// [`TcpConn::set_keepalive`](super::TcpConn::set_keepalive)). Default off, as for sockets.
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
            send_buffer: 4 << 20,
            keepalive: None,
        }
    }
}
