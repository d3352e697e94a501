//! A scripted connection for driving `httpd::Http` without sockets: the tests in
//! `tests/` and the fuzz harness (`fuzz/src/lib.rs`, which includes this file) use it.
//!
//! It keeps the accounting both backends share: `send` hands the network what the send
//! window takes and queues the rest, and only a send the window refused promises a
//! `send_window_increased`; the client "reads" when the test calls [`Conn::client_reads`],
//! which empties the queue, refills the window and delivers the promised event.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};

use ebb::net::{CloseReason, IOBuf, IOBufChain, SendError, SocketAddr, TcpConnection, TcpHandler};

/// Where the pattern block lives: body bytes are views of it.
fn pattern_block() -> (usize, usize) {
    let block = ebb_bytestream::pattern::Pattern::get().slice(0, 1 << 20);
    let front = block.front().expect("the pattern block").as_slice();
    (front.as_ptr() as usize, front.len())
}

/// What one send handed over: a buffer of ours (an answer's head, with a small body) or
/// a view of the pattern block (body bytes), and its bytes' range in [`Conn::out`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub pattern: bool,
    pub start: usize,
    pub len: usize,
}

pub struct Conn {
    /// Bytes the network takes now without queueing.
    pub window: Cell<usize>,
    /// The window the client's reads restore.
    pub refill: usize,
    /// Bytes accepted by `send` beyond the window.
    pub queued: Cell<usize>,
    /// The most ever queued.
    pub max_queued: Cell<usize>,
    /// A send was refused: `send_window_increased` is owed.
    pub promised: Cell<bool>,
    pub receive_open: Cell<bool>,
    /// We closed (gracefully) or aborted.
    pub closed: Cell<bool>,
    pub aborted: Cell<bool>,
    /// Sends fail (the connection "resets") once this many bytes were sent.
    pub send_limit: usize,
    pub failed: Cell<bool>,
    /// Everything sent, in order, and how it was handed over.
    pub out: RefCell<Vec<u8>>,
    pub pieces: RefCell<Vec<Piece>>,
    block: (usize, usize),
}

impl Conn {
    /// A connection whose network takes `window` bytes before queueing, and again after
    /// each read by the client.
    pub fn new(window: usize) -> Self {
        Self {
            window: Cell::new(window),
            refill: window,
            queued: Cell::new(0),
            max_queued: Cell::new(0),
            promised: Cell::new(false),
            receive_open: Cell::new(true),
            closed: Cell::new(false),
            aborted: Cell::new(false),
            send_limit: usize::MAX,
            failed: Cell::new(false),
            out: RefCell::new(Vec::new()),
            pieces: RefCell::new(Vec::new()),
            block: pattern_block(),
        }
    }

    fn record(&self, data: &IOBufChain) {
        let mut out = self.out.borrow_mut();
        let mut pieces = self.pieces.borrow_mut();
        for buf in data.iter() {
            let at = buf.as_slice().as_ptr() as usize;
            let pattern = at >= self.block.0 && at < self.block.0 + self.block.1;
            pieces.push(Piece {
                pattern,
                start: out.len(),
                len: buf.len(),
            });
            out.extend_from_slice(buf.as_slice());
        }
    }

    fn check_open(&self, len: usize) -> Result<(), SendError> {
        if self.closed.get() || self.failed.get() {
            return Err(SendError::Closed);
        }
        if self.out.borrow().len().saturating_add(len) > self.send_limit {
            self.failed.set(true);
            return Err(SendError::Failed(CloseReason::Reset));
        }
        Ok(())
    }

    /// The client reads everything queued: the window refills and a promised
    /// `send_window_increased` is delivered. True if it was.
    pub fn client_reads(&self, handler: &mut dyn TcpHandler) -> bool {
        self.queued.set(0);
        self.window.set(self.refill);
        if self.promised.replace(false) && !self.closed.get() && !self.failed.get() {
            handler.send_window_increased(self);
            return true;
        }
        false
    }

    /// Delivers `segments` while the receive window is open; how many were delivered.
    pub fn deliver(&self, handler: &mut dyn TcpHandler, segments: &[&[u8]]) -> usize {
        for (i, seg) in segments.iter().enumerate() {
            if !self.receive_open.get() || self.closed.get() || self.failed.get() {
                return i;
            }
            handler.receive(self, IOBuf::copy_from_slice(seg));
        }
        segments.len()
    }

    /// Delivers all of `segments`, the client reading whenever the server stops reading;
    /// then (with `fin`) the client's FIN; then the client reads until nothing more is
    /// owed. False if the server stopped reading for good (or the connection failed).
    pub fn converse(&self, handler: &mut dyn TcpHandler, segments: &[&[u8]], fin: bool) -> bool {
        let mut at = 0;
        while at < segments.len() && !self.closed.get() && !self.failed.get() {
            at += self.deliver(handler, &segments[at..]);
            if at < segments.len() && !self.receive_open.get() && !self.client_reads(handler) {
                return false; // paused with no event owed: it would never resume
            }
        }
        if fin && !self.closed.get() && !self.failed.get() {
            handler.peer_closed(self);
        }
        while self.client_reads(handler) {}
        if self.failed.get() {
            handler.closed(CloseReason::Reset);
        }
        !self.failed.get()
    }

    /// The status codes of the answers sent, in order.
    pub fn statuses(&self) -> Vec<u16> {
        let out = self.out.borrow();
        self.pieces
            .borrow()
            .iter()
            .filter(|p| !p.pattern)
            .filter_map(|p| {
                let head = &out[p.start..p.start + p.len];
                let code = head.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
                std::str::from_utf8(code).ok()?.parse().ok()
            })
            .collect()
    }

    /// The answers' heads (each up to its blank line), in order.
    pub fn heads(&self) -> Vec<String> {
        let out = self.out.borrow();
        self.pieces
            .borrow()
            .iter()
            .filter(|p| !p.pattern)
            .map(|p| {
                let bytes = &out[p.start..p.start + p.len];
                let end = bytes
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(bytes.len(), |at| at + 4);
                String::from_utf8_lossy(&bytes[..end]).into_owned()
            })
            .collect()
    }
}

impl TcpConnection for Conn {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        self.check_open(data.len())?;
        let len = data.len();
        let window = self.window.get();
        if len > window {
            self.promised.set(true);
            self.queued.set(self.queued.get() + (len - window));
            self.max_queued
                .set(self.max_queued.get().max(self.queued.get()));
            self.window.set(0);
        } else {
            self.window.set(window - len);
        }
        self.record(&data);
        Ok(())
    }

    fn try_send(&self, mut data: IOBufChain) -> Result<IOBufChain, SendError> {
        let take = data.len().min(self.window.get());
        self.check_open(take)?;
        let rest = data.split_off(take).expect("within the chain");
        self.window.set(self.window.get() - take);
        self.record(&data);
        Ok(rest)
    }

    fn send_window(&self) -> usize {
        if self.queued.get() > 0 {
            0
        } else {
            self.window.get()
        }
    }

    fn queued_bytes(&self) -> usize {
        self.queued.get()
    }

    fn set_receive_window_open(&self, open: bool) {
        self.receive_open.set(open);
    }

    fn close(&self) {
        self.closed.set(true);
    }

    fn abort(&self) {
        self.closed.set(true);
        self.aborted.set(true);
    }

    fn peer_addr(&self) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], 40000))
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], 80))
    }
}
