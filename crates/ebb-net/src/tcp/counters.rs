//! What a layer counted ([`TcpCounters`]), read with `TcpLayer::counters`.

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
    /// Receive windows doubled because a peer filled one the application kept up with
    /// (autotuning, [`TcpConfig::max_receive_window`](super::TcpConfig::max_receive_window)).
    pub windows_grown: u64,
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
    /// Dropped unacknowledged while the layer holds [`TcpConfig::max_held_bytes`](super::TcpConfig::max_held_bytes):
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
