//! # ebb-bytestream — byte-stream endpoints for apps, tests and benchmarks
//!
//! Handlers written once against `ebb_core::net`, so they run over every backend of
//! `ebb::net` unchanged — Linux sockets, ebb-net over TAP, ebb-net over virtio-net — and
//! in tests that drive a backend directly:
//!
//! * [`pattern`] — the deterministic byte stream the apps serve and check: one 1 MiB
//!   pseudo-random block, repeated; payloads are zero-copy slices of that one block;
//! * [`Sink`] — counts and SHA-256s everything received, reports when the connection
//!   ends;
//! * [`PatternSender`] — sends N bytes of the pattern, respecting back-pressure
//!   (`try_send` what the window takes, continue on `send_window_increased`), then closes;
//! * [`Echo`] — sends back everything it receives, zero copy (the received buffers go
//!   out as they are), for request/response latency tests.
//!
//! Invariants: handlers never block and never queue more than one send window of data
//! beyond what the connection accepted, so memory stays bounded for any transfer size.
//! `no_std` + `alloc`, so native images link it too.

#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod pattern;

use alloc::boxed::Box;
use alloc::string::String;
use core::fmt::Write as _;

use ebb_core::net::{CloseReason, SocketAddr, TcpConnection, TcpHandler};
use ebb_core::{IOBuf, IOBufChain};
use sha2::{Digest, Sha256};

use pattern::Pattern;

/// The lowercase hex form of a digest.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// What one connection moved, reported when it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// Bytes received ([`Sink`]) or sent ([`PatternSender`]).
    pub bytes: u64,
    /// SHA-256 of those bytes, lowercase hex.
    pub sha256: String,
    /// The other end.
    pub peer: SocketAddr,
    /// How the connection ended.
    pub reason: CloseReason,
}

/// Where a handler delivers its report (a callback: print it, or hand it to a test).
pub type ReportFn = Box<dyn FnOnce(StreamReport)>;

/// Counts and hashes everything received; closes when the peer does.
pub struct Sink {
    peer: SocketAddr,
    bytes: u64,
    hasher: Sha256,
    report: Option<ReportFn>,
}

impl Sink {
    /// A sink for a connection from `peer`; `report` gets the totals when it ends.
    pub fn new(peer: SocketAddr, report: ReportFn) -> Self {
        Self {
            peer,
            bytes: 0,
            hasher: Sha256::new(),
            report: Some(report),
        }
    }
}

impl TcpHandler for Sink {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        self.bytes += data.len() as u64;
        self.hasher.update(data.as_slice());
    }

    fn closed(&mut self, reason: CloseReason) {
        let hasher = core::mem::take(&mut self.hasher);
        if let Some(report) = self.report.take() {
            report(StreamReport {
                bytes: self.bytes,
                sha256: hex(&hasher.finalize()),
                peer: self.peer,
                reason,
            });
        }
    }
}

/// Sends `total` bytes of the [`Pattern`], then closes; reports what it sent.
pub struct PatternSender {
    pattern: Pattern,
    peer: SocketAddr,
    offset: u64,
    total: u64,
    /// `close` was called after the last byte.
    closed_ours: bool,
    hasher: Sha256,
    report: Option<ReportFn>,
}

/// Largest chain offered to `try_send` at once.
const SEND_CHUNK: usize = 256 * 1024;

impl PatternSender {
    /// A sender of `total` pattern bytes to `peer`. Call [`PatternSender::start`] with
    /// the connection, then install it as the connection's handler.
    pub fn new(pattern: Pattern, peer: SocketAddr, total: u64, report: ReportFn) -> Self {
        Self {
            pattern,
            peer,
            offset: 0,
            total,
            closed_ours: false,
            hasher: Sha256::new(),
            report: Some(report),
        }
    }

    /// The first sends: a new connection has no event that would start them. Call it
    /// outside any callback, before installing the sender as the handler (events it
    /// causes wait for the handler).
    pub fn start(&mut self, conn: &dyn TcpConnection) {
        self.fill(conn);
    }

    /// Offers the connection as much as it takes; closes once all is sent.
    fn fill(&mut self, conn: &dyn TcpConnection) {
        let before = self.offset;
        let done = send_pattern(conn, &self.pattern, &mut self.offset, self.total);
        for segment in self
            .pattern
            .slice(before, (self.offset - before) as usize)
            .segments()
        {
            self.hasher.update(segment);
        }
        if done && !self.closed_ours {
            self.closed_ours = true;
            conn.close();
        }
    }
}

/// Sends pattern bytes `[*offset, end)` as the connection takes them, advancing
/// `*offset` past what it accepted; true once everything is accepted.
///
/// Back-pressure, portably across backends: `try_send` what the window takes, and when
/// something is left (or the window is shut) hand one chunk to `send`, which queues it
/// and guarantees a later `send_window_increased` on every backend. So at most one chunk
/// waits on the connection, and memory stays bounded. If that chunk went out at once
/// (nothing queued), go on.
pub fn send_pattern(
    conn: &dyn TcpConnection,
    pattern: &Pattern,
    offset: &mut u64,
    end: u64,
) -> bool {
    while *offset < end {
        let chunk = (end - *offset).min(SEND_CHUNK as u64) as usize;
        let window = conn.send_window();
        if window == 0 {
            if conn.send(pattern.slice(*offset, chunk)).is_err() {
                return false; // failing: `closed` follows
            }
            *offset += chunk as u64;
        } else {
            let len = chunk.min(window);
            let Ok(rest) = conn.try_send(pattern.slice(*offset, len)) else {
                return false;
            };
            *offset += len as u64;
            if rest.is_empty() {
                continue;
            }
            if conn.send(rest).is_err() {
                return false;
            }
        }
        if conn.queued_bytes() > 0 {
            return *offset >= end;
        }
    }
    true
}

impl TcpHandler for PatternSender {
    fn receive(&mut self, _conn: &dyn TcpConnection, _data: IOBuf) {}

    /// A half-close: the peer sends no more, but we finish sending (then close).
    fn peer_closed(&mut self, _conn: &dyn TcpConnection) {}

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.fill(conn);
    }

    fn closed(&mut self, reason: CloseReason) {
        let hasher = core::mem::take(&mut self.hasher);
        if let Some(report) = self.report.take() {
            report(StreamReport {
                bytes: self.offset,
                sha256: hex(&hasher.finalize()),
                peer: self.peer,
                reason,
            });
        }
    }
}

/// Echoed bytes that may wait on a connection before [`Echo`] stops reading.
pub const ECHO_MAX_QUEUED: usize = 256 * 1024;

/// Sends back everything received, in order, without copying; closes when the peer does.
///
/// Back-pressure: the echo is `send` (queued, never dropped). When a `send` had to queue
/// — the data was larger than the send window, which is exactly when every backend
/// promises a later `send_window_increased` — and more than [`ECHO_MAX_QUEUED`] bytes
/// wait, the receive window closes, so a client that sends without reading is
/// flow-controlled instead of growing the queue; it reopens on `send_window_increased`.
/// Pausing on the queue length alone would be wrong: ebb-net counts bytes inside the
/// window that it has not transmitted yet as queued, and no event follows those (the
/// stall a streaming echo over ebb-net once hit).
#[derive(Debug, Default)]
pub struct Echo {
    /// The receive window is closed until the queue drains.
    paused: bool,
    /// A send was larger than the send window, so a `send_window_increased` will come.
    promised: bool,
    /// Small pieces that arrived while an event was promised, copied together (see
    /// [`Echo::receive`]); sent before anything that follows them, and at that event.
    held: Option<IOBuf>,
}

/// The buffer small pieces are gathered in: a 2 KiB allocation with its region header.
const HELD_CHUNK: usize = 2048 - ebb_core::iobuf::REGION_OVERHEAD;

impl Echo {
    /// Queues `data`, noting whether that promised a window event; `false` if the
    /// connection is failing (`closed` follows).
    fn send(&mut self, conn: &dyn TcpConnection, data: IOBuf) -> bool {
        if data.len() > conn.send_window() {
            self.promised = true;
        }
        conn.send(IOBufChain::from(data)).is_ok()
    }

    /// Queues what is held, if anything; `false` if the connection is failing.
    fn send_held(&mut self, conn: &dyn TcpConnection) -> bool {
        match self.held.take() {
            Some(held) => self.send(conn, held),
            None => true,
        }
    }

    /// Keeps `data`, a few bytes in a much larger buffer, by copying it into the held
    /// buffer (a new one when that is full, the full one queued). `Err(data)` when there
    /// is no memory for a copy.
    fn hold(&mut self, conn: &dyn TcpConnection, data: IOBuf) -> Result<(), IOBuf> {
        if let Some(held) = &mut self.held
            && held.tailroom() >= data.len()
            && held.extend_from_slice(data.as_slice()).is_ok()
        {
            return Ok(());
        }
        let Ok(mut fresh) = IOBuf::try_with_capacity(data.len().max(HELD_CHUNK)) else {
            return Err(data);
        };
        if fresh.extend_from_slice(data.as_slice()).is_err() {
            return Err(data);
        }
        if self.send_held(conn) {
            self.held = Some(fresh);
        }
        Ok(())
    }
}

impl TcpHandler for Echo {
    /// What must wait is kept compactly: a piece that the send window cannot take while
    /// a window event is promised, and that occupies much more memory than it holds (a
    /// byte or two in a 2 KiB receive buffer), is copied into a small buffer it shares
    /// with the pieces after it, fallibly, and sent at that event. Kept as views, a
    /// client sending a byte at a time into a closed window made the queue's 256 KiB
    /// bound hold 512 MiB of buffers.
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let refused = data.len() > conn.send_window();
        let rest = if refused && self.promised && data.wasteful() {
            self.hold(conn, data).err()
        } else {
            Some(data)
        };
        if let Some(data) = rest
            && !(self.send_held(conn) && self.send(conn, data))
        {
            return; // failing: `closed` follows
        }
        let held = self.held.as_ref().map_or(0, IOBuf::len);
        if refused && conn.queued_bytes() + held > ECHO_MAX_QUEUED {
            self.paused = true;
            conn.set_receive_window_open(false);
        }
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.promised = false;
        if !self.send_held(conn) {
            return;
        }
        if self.paused {
            self.paused = false;
            conn.set_receive_window_open(true);
        }
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        if self.send_held(conn) {
            conn.close();
        }
    }

    fn closed(&mut self, _reason: CloseReason) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};
    use ebb_core::net::{SendError, SocketAddr};

    /// A connection with ebb-net's accounting: `send` queues everything; bytes inside
    /// the window are "unsent" until the stack transmits them, and only a send larger
    /// than the window promises a `send_window_increased`.
    struct Conn {
        window: Cell<usize>,
        unsent: Cell<usize>,
        promised: Cell<bool>,
        receive_open: Cell<bool>,
        sent: RefCell<usize>,
        /// Everything sent, as sent (the buffers it keeps alive included).
        queue: RefCell<IOBufChain>,
    }

    impl TcpConnection for Conn {
        fn send(&self, data: IOBufChain) -> Result<(), SendError> {
            if data.len() > self.window.get() {
                self.promised.set(true);
            }
            self.window
                .set(self.window.get().saturating_sub(data.len()));
            self.unsent.set(self.unsent.get() + data.len());
            *self.sent.borrow_mut() += data.len();
            self.queue.borrow_mut().append(&mut { data });
            Ok(())
        }
        fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError> {
            Ok(data)
        }
        fn send_window(&self) -> usize {
            self.window.get()
        }
        fn queued_bytes(&self) -> usize {
            self.unsent.get()
        }
        fn set_receive_window_open(&self, open: bool) {
            self.receive_open.set(open);
        }
        fn close(&self) {}
        fn abort(&self) {}
        fn peer_addr(&self) -> SocketAddr {
            SocketAddr::from(([10, 0, 0, 1], 1))
        }
        fn local_addr(&self) -> SocketAddr {
            SocketAddr::from(([10, 0, 0, 2], 2))
        }
    }

    fn conn(window: usize) -> Conn {
        Conn {
            window: Cell::new(window),
            unsent: Cell::new(0),
            promised: Cell::new(false),
            receive_open: Cell::new(true),
            sent: RefCell::new(0),
            queue: RefCell::new(IOBufChain::new()),
        }
    }

    #[test]
    fn echo_pauses_only_when_an_event_is_promised() {
        // A burst inside a large window: queued (not yet transmitted) but not refused.
        // Pausing here would never be undone.
        let c = conn(8 << 20);
        let mut echo = Echo::default();
        for _ in 0..5 {
            echo.receive(&c, IOBuf::from_vec(alloc::vec![7u8; 100_000]));
        }
        assert!(c.unsent.get() > ECHO_MAX_QUEUED);
        assert!(
            c.receive_open.get(),
            "paused without a promised window event"
        );
        // A send larger than the window: refused, an event is promised, so pause.
        let c = conn(1000);
        c.unsent.set(ECHO_MAX_QUEUED);
        echo.receive(&c, IOBuf::from_vec(alloc::vec![7u8; 5000]));
        assert!(c.promised.get());
        assert!(!c.receive_open.get());
        echo.send_window_increased(&c);
        assert!(c.receive_open.get());
        assert_eq!(*c.sent.borrow(), 5000);
    }

    /// `bytes` as a view into a 2 KiB buffer, as a receive delivers a small segment.
    fn in_receive_buffer(bytes: &[u8]) -> IOBuf {
        let mut buf = IOBuf::try_with_capacity(2048).unwrap();
        buf.extend_from_slice(bytes).unwrap();
        buf
    }

    #[test]
    fn a_byte_at_a_time_into_a_closed_window_is_kept_compactly_and_in_order() {
        // The client stopped reading (window 0) and sends a byte per segment. Kept as
        // views, 10,000 bytes kept 20 MB of receive buffers alive; gathered, about what
        // they hold. Everything goes out in order once the window opens.
        let c = conn(0);
        let mut echo = Echo::default();
        let mut expected = alloc::vec![1u8; 3000];
        echo.receive(&c, IOBuf::from_vec(expected.clone()));
        assert!(c.promised.get(), "a refused send promises a window event");
        for i in 0..10_000u32 {
            let b = (i % 251) as u8;
            expected.push(b);
            echo.receive(&c, in_receive_buffer(&[b]));
        }
        let held = echo.held.as_ref().map_or(0, IOBuf::occupied);
        let memory = c.queue.borrow().iter().map(IOBuf::occupied).sum::<usize>() + held;
        assert!(
            memory <= 2 * expected.len() + 8192,
            "{} bytes kept {memory} bytes of buffers alive",
            expected.len()
        );
        c.window.set(1 << 20);
        echo.send_window_increased(&c);
        assert!(echo.held.is_none());
        assert_eq!(c.queue.borrow().to_vec(), expected);
    }

    #[test]
    fn a_small_piece_without_a_promised_event_is_sent_at_once() {
        // A zero window that no send of ours filled promises no event: a piece held
        // then could wait for good. It is queued, and its send promises the event.
        let c = conn(0);
        let mut echo = Echo::default();
        echo.receive(&c, in_receive_buffer(b"x"));
        assert!(echo.held.is_none());
        assert_eq!(c.queue.borrow().to_vec(), b"x");
        assert!(c.promised.get());
    }

    #[test]
    fn what_is_held_is_sent_before_the_connection_closes() {
        let c = conn(0);
        let mut echo = Echo::default();
        echo.receive(&c, IOBuf::from_vec(alloc::vec![1u8; 100]));
        echo.receive(&c, in_receive_buffer(b"yz"));
        assert!(echo.held.is_some());
        echo.peer_closed(&c);
        assert!(echo.held.is_none());
        assert_eq!(c.queue.borrow().len(), 102);
    }
}
