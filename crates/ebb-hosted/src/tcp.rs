//! TCP over Linux sockets, with EbbRT's event-driven interface (`ebb_core::net`).
//!
//! * [`listen`] opens one `SO_REUSEPORT` listening socket per core, so the kernel spreads
//!   incoming connections over the cores and each connection is owned, for its whole life,
//!   by the core that accepted it. The accept handler runs there.
//! * [`connect`] returns a future of an established [`SocketConn`] owned by the calling core.
//! * A connection calls its [`TcpHandler`] with each chunk of data as it is read — no
//!   `read` call, no receive buffer beyond the kernel's. Closing the receive window stops
//!   reading, so the kernel's buffer fills and TCP flow control pushes back on the peer.
//! * `send` writes what the socket takes and queues the rest on the connection, in order;
//!   `try_send` hands the rest back instead. Nothing is ever dropped silently.
//! * `send_window_increased` fires when the socket takes data again after either call met
//!   a full window (as in ebb-net): after `send` left data queued, once some of it drained;
//!   after `try_send` handed back a non-empty rest, once the socket is writable again.
//!   Sockets are registered edge-triggered for `EPOLLOUT`, so the "writable again" edge
//!   after an `EAGAIN` always arrives; `window_wanted` remembers that someone waits for it.
//!
//! Handler callbacks never nest: while one runs the handler is checked out of its slot, and
//! anything the callback causes (a close, a failure) is delivered after it returns.

use crate::reactor::{self, Source, Token};
use ebb_core::CoreId;
use ebb_core::event::{self, Handle};
use ebb_core::iobuf::{IOBuf, IOBufChain, REGION_OVERHEAD, Tailroom};
use ebb_core::net::{CloseReason, SendError, SocketAddr, TcpConnection, TcpErrorKind, TcpHandler};
use rustix::event::epoll::EventFlags;
use rustix::fd::OwnedFd;
use rustix::io::Errno;
use rustix::net::{
    self as rnet, AddressFamily, SendAncillaryBuffer, SendFlags, Shutdown, SocketFlags, SocketType,
};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::IoSlice;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;

/// Reads per readiness event before yielding to other connections.
const READS_PER_EVENT: usize = 16;
/// Receive buffer sizes adapt between these bounds (small requests, bulk streams).
const MIN_READ: usize = 2 * 1024;
const MAX_READ: usize = 64 * 1024;
/// The largest receive buffer a connection keeps between reads for reuse (see
/// `SocketRecord::receive_buffer`): bounds what an idle connection holds.
const MAX_KEPT_READ: usize = 8 * 1024;
/// Segments handed to one `sendmsg`.
const MAX_IOVECS: usize = 64;
const LISTEN_BACKLOG: i32 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Connecting,
    Open,
    /// `close()` was called: queued data drains, then FIN.
    Closing,
    /// Our FIN is sent; waiting for the peer's.
    WriteShut,
    Closed(CloseReason),
    ConnectFailed(TcpErrorKind),
}

/// One socket connection as its core keeps it: the socket, its reactor registration
/// (it is the [`Source`] readiness goes to), its send queue and its handler.
/// [`SocketConn`] is the application's handle on it.
struct SocketRecord {
    fd: RefCell<Option<OwnedFd>>,
    token: Cell<Option<Token>>,
    local: SocketAddr,
    peer: SocketAddr,
    state: Cell<State>,
    handler: RefCell<Option<Box<dyn TcpHandler>>>,
    /// The handler was checked out by a running callback.
    in_callback: Cell<bool>,
    send_queue: RefCell<IOBufChain>,
    /// `try_send` handed data back: the next writable edge fires `send_window_increased`
    /// (once), even though nothing is queued here.
    window_wanted: Cell<bool>,
    writable: Cell<bool>,
    readable: Cell<bool>,
    peer_eof: Cell<bool>,
    /// epoll reported the peer's FIN (RDHUP/HUP): reads must go on until they see it.
    fin_pending: Cell<bool>,
    receive_open: Cell<bool>,
    read_scheduled: Cell<bool>,
    read_size: Cell<usize>,
    /// A clone of the last receive buffer (at most `MAX_KEPT_READ`): once the handler
    /// has let go of every view of it, the next read fills the same region — no
    /// allocation, no zero-fill — instead of a fresh one.
    last_receive: Cell<Option<IOBuf>>,
    send_buffer: usize,
    connect_waker: RefCell<Option<Waker>>,
}

/// A TCP connection, owned by one core. Cheap to clone (a reference count); not `Send`.
#[derive(Clone)]
pub struct SocketConn(Rc<SocketRecord>);

fn error_kind(e: Errno) -> TcpErrorKind {
    match e {
        Errno::CONNREFUSED => TcpErrorKind::ConnectionRefused,
        Errno::CONNRESET | Errno::PIPE => TcpErrorKind::ConnectionReset,
        Errno::ADDRINUSE => TcpErrorKind::AddressInUse,
        Errno::ADDRNOTAVAIL => TcpErrorKind::AddressNotAvailable,
        Errno::TIMEDOUT => TcpErrorKind::TimedOut,
        Errno::NETUNREACH | Errno::HOSTUNREACH => TcpErrorKind::Unreachable,
        Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM => TcpErrorKind::OutOfResources,
        other => TcpErrorKind::Other(other.raw_os_error()),
    }
}

fn close_reason(e: Errno) -> CloseReason {
    match e {
        Errno::CONNRESET | Errno::PIPE => CloseReason::Reset,
        Errno::TIMEDOUT => CloseReason::TimedOut,
        other => CloseReason::Error(error_kind(other)),
    }
}

/// One `send` of a one-segment chain, else one `sendmsg` of the chain's first segments,
/// gathered on the stack (no allocation);
/// `MSG_NOSIGNAL` turns a closed peer into `EPIPE` instead of a process-killing `SIGPIPE`.
fn send_segments(fd: &OwnedFd, chain: &IOBufChain) -> rustix::io::Result<usize> {
    // A reply built in one buffer: a plain `send`, no iovec array or message header.
    if chain.segment_count() == 1
        && let Some(only) = chain.front()
    {
        return rnet::send(fd, only, SendFlags::NOSIGNAL);
    }
    // A reply is a few segments: an iovec array that fits them is cheaper to set up than
    // the whole `MAX_IOVECS` one (a kilobyte of stores on every send).
    if chain.segment_count() <= FEW_IOVECS {
        send_with::<FEW_IOVECS>(fd, chain)
    } else {
        send_with::<MAX_IOVECS>(fd, chain)
    }
}

/// Segments a small reply has at most, for `send_segments`.
const FEW_IOVECS: usize = 8;

/// One `sendmsg` of the first `N` segments of `chain`.
fn send_with<const N: usize>(fd: &OwnedFd, chain: &IOBufChain) -> rustix::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    let mut count = 0;
    for (slot, segment) in slices.iter_mut().zip(chain.segments()) {
        *slot = IoSlice::new(segment);
        count += 1;
    }
    rnet::sendmsg(
        fd,
        &slices[..count],
        &mut SendAncillaryBuffer::default(),
        SendFlags::NOSIGNAL,
    )
}

/// What `SocketRecord::write_from` wrote of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    /// All of it: the chain's bytes are all sent (the chain itself is untouched).
    All,
    /// Not all: the chain holds the rest (the socket is full, or closed locally).
    Part,
}

fn sock_addr(addr: rustix::io::Result<rnet::SocketAddrAny>) -> Option<SocketAddr> {
    addr.ok().and_then(|a| SocketAddr::try_from(a).ok())
}

impl SocketRecord {
    fn new(fd: OwnedFd, state: State, peer: Option<SocketAddr>) -> Rc<SocketRecord> {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let local = sock_addr(rnet::getsockname(&fd)).unwrap_or(unspecified);
        let peer = peer
            .or_else(|| {
                rnet::getpeername(&fd)
                    .ok()
                    .flatten()
                    .and_then(|a| SocketAddr::try_from(a).ok())
            })
            .unwrap_or(unspecified);
        let send_buffer = rnet::sockopt::socket_send_buffer_size(&fd).unwrap_or(16 * 1024);
        // Latency first: no Nagle. Batching is the application's choice (send a chain).
        let _ = rnet::sockopt::set_tcp_nodelay(&fd, true);
        Rc::new(SocketRecord {
            fd: RefCell::new(Some(fd)),
            token: Cell::new(None),
            local,
            peer,
            state: Cell::new(state),
            handler: RefCell::new(None),
            in_callback: Cell::new(false),
            send_queue: RefCell::new(IOBufChain::new()),
            window_wanted: Cell::new(false),
            writable: Cell::new(false),
            readable: Cell::new(false),
            peer_eof: Cell::new(false),
            fin_pending: Cell::new(false),
            receive_open: Cell::new(true),
            read_scheduled: Cell::new(false),
            read_size: Cell::new(MIN_READ),
            last_receive: Cell::new(None),
            send_buffer,
            connect_waker: RefCell::new(None),
        })
    }

    fn register(self: &Rc<Self>) -> Result<(), TcpErrorKind> {
        let flags = EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP;
        let fd = self.fd.borrow();
        let fd = fd.as_ref().ok_or(TcpErrorKind::ConnectionReset)?;
        let token = reactor::register(fd, flags, self.clone() as Rc<dyn Source>).map_err(|e| {
            e.raw_os_error().map_or(TcpErrorKind::Other(0), |c| {
                error_kind(Errno::from_raw_os_error(c))
            })
        })?;
        self.token.set(Some(token));
        Ok(())
    }

    fn is_open_for_sending(&self) -> Result<(), SendError> {
        match self.state.get() {
            State::Open | State::Connecting => Ok(()),
            State::Closing | State::WriteShut => Err(SendError::Closed),
            State::Closed(reason) => Err(SendError::Failed(reason)),
            State::ConnectFailed(kind) => Err(SendError::Failed(CloseReason::Error(kind))),
        }
    }

    /// Calls the handler, unless a callback is already running or there is none. `conn`
    /// is this record's handle, lent to the handler: the caller's own (an event's or a
    /// task's), so that a callback costs no reference-count traffic.
    fn callback(&self, conn: &SocketConn, f: impl FnOnce(&mut dyn TcpHandler, &SocketConn)) {
        debug_assert!(core::ptr::eq(self, &*conn.0));
        if self.in_callback.get() {
            return;
        }
        let Some(mut handler) = self.handler.borrow_mut().take() else {
            return;
        };
        self.in_callback.set(true);
        f(&mut *handler, conn);
        self.in_callback.set(false);
        if let State::Closed(reason) = self.state.get() {
            // The connection ended during the callback: deliver that now, then let go of
            // the handler (and the reference cycles it may hold).
            let replaced = self.handler.borrow_mut().take();
            drop(replaced);
            handler.closed(reason);
            return;
        }
        let mut slot = self.handler.borrow_mut();
        if slot.is_none() {
            *slot = Some(handler);
        }
    }

    /// Ends the connection: deregisters, closes the socket, tells the handler once.
    fn finish(self: &Rc<Self>, reason: CloseReason) {
        if matches!(self.state.get(), State::Closed(_)) {
            return;
        }
        self.state.set(State::Closed(reason));
        *self.send_queue.borrow_mut() = IOBufChain::new();
        if let Some(fd) = self.fd.borrow_mut().take() {
            if let Some(token) = self.token.take() {
                let _ = reactor::deregister(&fd, token);
            }
            if reason == CloseReason::Aborted {
                // Linger zero turns close into a reset.
                let _ = rnet::sockopt::set_socket_linger(&fd, Some(std::time::Duration::ZERO));
            }
        }
        if !self.in_callback.get() {
            let handler = self.handler.borrow_mut().take();
            if let Some(mut handler) = handler {
                handler.closed(reason);
            }
        }
        if let Some(waker) = self.connect_waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Writes queued data until the queue is empty or the socket is full.
    fn flush(self: &Rc<Self>) {
        if !self.writable.get() {
            return;
        }
        let written = {
            let mut queue = self.send_queue.borrow_mut();
            let written = self.write_from(&mut queue);
            if written == Ok(Written::All) {
                *queue = IOBufChain::new();
            }
            written
        };
        if let Err(reason) = written {
            self.finish(reason);
        }
    }

    /// Writes from the front of `chain` until all of it went or the socket is full.
    /// What went out of a rest is trimmed off; when all of it went
    /// ([`Written::All`]) the chain is left as it was, for the caller to drop or
    /// clear — `send`'s chain is its own to drop, once, instead of being replaced by an
    /// empty one that is then dropped too. Clears `writable` on a full socket; a failure
    /// is returned, not acted on, so the caller can end the connection once it holds
    /// no borrows.
    fn write_from(&self, chain: &mut IOBufChain) -> Result<Written, CloseReason> {
        let fd = self.fd.borrow();
        let Some(fd) = fd.as_ref() else {
            return Ok(Written::Part);
        };
        while !chain.is_empty() {
            match send_segments(fd, chain) {
                // All of it (the usual case): nothing to trim.
                Ok(n) if n == chain.len() => return Ok(Written::All),
                // `n` never exceeds the chain's length, so trimming cannot fail.
                Ok(n) => drop(chain.trim_front(n)),
                Err(Errno::AGAIN) => {
                    self.writable.set(false);
                    break;
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(close_reason(e)),
            }
        }
        Ok(if chain.is_empty() {
            Written::All
        } else {
            Written::Part
        })
    }

    /// Sends FIN once a requested close has drained, and ends the connection once both
    /// directions are done.
    fn advance_close(self: &Rc<Self>) {
        if self.state.get() == State::Closing && self.send_queue.borrow().is_empty() {
            if let Some(fd) = self.fd.borrow().as_ref() {
                let _ = rnet::shutdown(fd, Shutdown::Write);
            }
            self.state.set(State::WriteShut);
        }
        if self.state.get() == State::WriteShut && self.peer_eof.get() {
            self.finish(CloseReason::Normal);
        }
    }

    fn wants_to_read(&self) -> bool {
        self.readable.get()
            && self.receive_open.get()
            && !self.peer_eof.get()
            && self.handler.borrow().is_some()
            && matches!(
                self.state.get(),
                State::Open | State::Closing | State::WriteShut
            )
    }

    /// A buffer to read up to `capacity` bytes into: the last one again if the handler
    /// has dropped it and it is the right size, else a fresh one. Request/response
    /// protocols consume each read before the next, so they read into one region for
    /// good; a handler that keeps the bytes (a stored value) keeps that region to itself.
    fn receive_buffer(&self, capacity: usize) -> IOBuf {
        if let Some(mut last) = self.last_receive.take()
            && last.recycle()
            && last.tailroom() == capacity
        {
            return last;
        }
        IOBuf::with_capacity(capacity)
    }

    /// Reads and delivers data while the window is open, up to a per-event budget.
    fn read_some(conn: &SocketConn) {
        let this = &conn.0;
        for _ in 0..READS_PER_EVENT {
            if !this.wants_to_read() {
                return;
            }
            // `read_size` is the buffer's whole allocation, a power of two: its bytes are
            // that less the region's header, so the allocator's size class fits it.
            let size = this.read_size.get();
            let mut buf = this.receive_buffer(size - REGION_OVERHEAD);
            let capacity = buf.tailroom();
            let result = {
                let fd = this.fd.borrow();
                let Some(fd) = fd.as_ref() else { return };
                // A fresh buffer's tailroom is read into uninitialized (a bulk stream's
                // 64 KiB reads were each zero-filled first).
                match buf.read_into_tailroom(|tail| read_fd(fd, tail)) {
                    Ok(read) => read,
                    Err(_) => return,
                }
            };
            match result {
                Ok(0) => {
                    this.readable.set(false);
                    this.peer_eof.set(true);
                    this.callback(conn, |h, c| h.peer_closed(c));
                    this.advance_close();
                    return;
                }
                Ok(n) => {
                    if n == capacity {
                        this.read_size.set((size * 2).min(MAX_READ));
                    } else if size > MIN_READ {
                        // (At `MIN_READ` a short read leaves the size as it is.)
                        this.read_size.set(
                            (size / 2)
                                .max(MIN_READ)
                                .max((n + REGION_OVERHEAD).next_power_of_two().min(MAX_READ)),
                        );
                    }
                    if size <= MAX_KEPT_READ {
                        this.last_receive.set(Some(buf.clone()));
                    }
                    this.callback(conn, |h, c| h.receive(c, buf));
                    if n < capacity && !this.fin_pending.get() {
                        // A short read drained the socket; the next arrival is a new edge.
                        // Not so for a FIN that came with the data: its edge is this one,
                        // so with `fin_pending` we read on until the read returns 0.
                        this.readable.set(false);
                        return;
                    }
                }
                Err(Errno::AGAIN) => {
                    this.readable.set(false);
                    return;
                }
                Err(Errno::INTR) => {}
                Err(e) => {
                    this.finish(close_reason(e));
                    return;
                }
            }
        }
        // Budget spent with data left: continue in a later event, after other work.
        this.schedule_read();
    }

    fn schedule_read(self: &Rc<Self>) {
        if self.read_scheduled.replace(true) {
            return;
        }
        let conn = SocketConn(self.clone());
        let _detached = event::spawn_local(async move {
            conn.0.read_scheduled.set(false);
            SocketRecord::read_some(&conn);
        });
    }
}

impl SocketRecord {
    /// The socket is writable: drain the queue, tell a handler waiting for the window,
    /// and go on with a close.
    #[inline(never)]
    fn writable_edge(self: &Rc<Self>, conn: &SocketConn) {
        let before = self.send_queue.borrow().len();
        let mut room_opened = false;
        if before > 0 {
            self.flush();
            room_opened = self.send_queue.borrow().len() < before;
        }
        // A `try_send` rest waits for this edge; with a queue still not drained the
        // socket is full again and the queue's own progress decides.
        if self.send_queue.borrow().is_empty() && self.window_wanted.get() {
            room_opened = true;
        }
        if room_opened && matches!(self.state.get(), State::Open) {
            self.window_wanted.set(false);
            self.callback(conn, |h, c| h.send_window_increased(c));
        }
        self.advance_close();
    }
}

impl Source for SocketRecord {
    fn ready(self: Rc<Self>, flags: EventFlags) {
        // The event's reference becomes the handle callbacks lend to the handler.
        let conn = SocketConn(self);
        let this = &conn.0;
        if this.state.get() == State::Connecting {
            if !flags.intersects(EventFlags::OUT | EventFlags::ERR | EventFlags::HUP) {
                return;
            }
            let error = this.fd.borrow().as_ref().map(rnet::sockopt::socket_error);
            match error {
                Some(Ok(Ok(()))) => this.state.set(State::Open),
                Some(Ok(Err(e)) | Err(e)) => {
                    this.state.set(State::ConnectFailed(error_kind(e)));
                    if let Some(fd) = this.fd.borrow_mut().take()
                        && let Some(token) = this.token.take()
                    {
                        let _ = reactor::deregister(&fd, token);
                    }
                }
                None => {}
            }
            if let Some(waker) = this.connect_waker.borrow_mut().take() {
                waker.wake();
            }
            if this.state.get() != State::Open {
                return;
            }
        }
        if flags.contains(EventFlags::ERR) {
            let error = this.fd.borrow().as_ref().map(rnet::sockopt::socket_error);
            if let Some(Ok(Err(e))) = error {
                this.finish(close_reason(e));
                return;
            }
        }
        if flags.contains(EventFlags::OUT) {
            this.writable.set(true);
            // With `IN` and `OUT` registered edge-triggered, every arrival reports `OUT`
            // too. On an open connection with nothing queued and nobody waiting for the
            // window (a request/response server between requests) that is all there is.
            if this.state.get() != State::Open
                || this.window_wanted.get()
                || !this.send_queue.borrow().is_empty()
            {
                this.writable_edge(&conn);
            }
        }
        if flags.intersects(EventFlags::IN | EventFlags::RDHUP | EventFlags::HUP | EventFlags::ERR)
        {
            if flags.intersects(EventFlags::RDHUP | EventFlags::HUP) {
                this.fin_pending.set(true);
            }
            this.readable.set(true);
            SocketRecord::read_some(&conn);
        }
    }
}

impl SocketConn {
    /// Installs the connection's handler (replacing any previous one). Data that arrived
    /// before a handler was set is delivered to it.
    pub fn set_handler(&self, handler: impl TcpHandler) {
        *self.0.handler.borrow_mut() = Some(Box::new(handler));
        if self.0.wants_to_read() {
            self.0.schedule_read();
        }
    }

    /// Whether the connection has ended.
    pub fn is_closed(&self) -> bool {
        matches!(
            self.0.state.get(),
            State::Closed(_) | State::ConnectFailed(_)
        )
    }
}

impl TcpConnection for SocketConn {
    fn send(&self, mut data: IOBufChain) -> Result<(), SendError> {
        self.0.is_open_for_sending()?;
        let queue_empty = self.0.send_queue.borrow().is_empty();
        if queue_empty && self.0.writable.get() && self.0.state.get() != State::Connecting {
            // The usual case: straight from the caller's chain, and only a rest is queued
            // (moving every segment into the queue and out again costs more than the
            // write's own bookkeeping).
            match self.0.write_from(&mut data) {
                // Sent: `data` is dropped here, once.
                Ok(Written::All) => return Ok(()),
                Ok(Written::Part) => {}
                Err(reason) => {
                    self.0.finish(reason);
                    return Err(SendError::Failed(reason));
                }
            }
        }
        self.0.send_queue.borrow_mut().append(&mut data);
        self.0.flush();
        match self.0.state.get() {
            State::Closed(reason) => Err(SendError::Failed(reason)),
            _ => Ok(()),
        }
    }

    fn try_send(&self, mut data: IOBufChain) -> Result<IOBufChain, SendError> {
        self.0.is_open_for_sending()?;
        if !self.0.send_queue.borrow().is_empty() || self.0.state.get() == State::Connecting {
            // Nothing can go out before the queue (or the handshake): the rest is all of
            // it, and the caller waits for the window like after a full socket.
            self.0.window_wanted.set(!data.is_empty());
            return Ok(data);
        }
        if self.0.fd.borrow().is_none() {
            return Err(SendError::Closed);
        }
        match self.0.write_from(&mut data) {
            Ok(Written::All) => {
                self.0.window_wanted.set(false);
                Ok(IOBufChain::new())
            }
            // A rest means `write_from` met `EAGAIN` (it stops only then, the descriptor
            // being there), so the writable edge that ends the wait is still to come.
            Ok(Written::Part) => {
                self.0.window_wanted.set(!data.is_empty());
                Ok(data)
            }
            Err(reason) => {
                self.0.finish(reason);
                Err(SendError::Failed(reason))
            }
        }
    }

    fn send_window(&self) -> usize {
        // Linux does not expose the peer's window; the socket buffer is what `send` fills.
        if self.0.writable.get()
            && self.0.send_queue.borrow().is_empty()
            && self.0.is_open_for_sending().is_ok()
        {
            self.0.send_buffer
        } else {
            0
        }
    }

    fn queued_bytes(&self) -> usize {
        self.0.send_queue.borrow().len()
    }

    fn set_receive_window_open(&self, open: bool) {
        let was = self.0.receive_open.replace(open);
        if open && !was && self.0.wants_to_read() {
            self.0.schedule_read();
        }
    }

    fn close(&self) {
        match self.0.state.get() {
            State::Open => {
                self.0.state.set(State::Closing);
                self.0.flush();
                self.0.advance_close();
            }
            State::Connecting => self.0.finish(CloseReason::Aborted),
            _ => {}
        }
    }

    fn abort(&self) {
        self.0.finish(CloseReason::Aborted);
    }

    fn peer_addr(&self) -> SocketAddr {
        self.0.peer
    }

    fn local_addr(&self) -> SocketAddr {
        self.0.local
    }
}

impl fmt::Debug for SocketConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SocketConn")
            .field("local", &self.0.local)
            .field("peer", &self.0.peer)
            .field("state", &self.0.state.get())
            .field("queued", &self.0.send_queue.borrow().len())
            .finish()
    }
}

fn new_socket(addr: &SocketAddr) -> Result<OwnedFd, TcpErrorKind> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    rnet::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(error_kind)
}

/// Connects to `addr`; the connection is owned by the calling core. On a core.
pub async fn connect(addr: SocketAddr) -> Result<SocketConn, TcpErrorKind> {
    let fd = new_socket(&addr)?;
    let state = match rnet::connect(&fd, &addr) {
        Ok(()) => State::Open,
        Err(Errno::INPROGRESS) => State::Connecting,
        Err(e) => return Err(error_kind(e)),
    };
    let conn = SocketRecord::new(fd, state, Some(addr));
    conn.register()?;
    std::future::poll_fn(|cx| match conn.state.get() {
        State::Connecting => {
            *conn.connect_waker.borrow_mut() = Some(cx.waker().clone());
            std::task::Poll::Pending
        }
        State::ConnectFailed(kind) => std::task::Poll::Ready(Err(kind)),
        State::Closed(_) => std::task::Poll::Ready(Err(TcpErrorKind::ConnectionReset)),
        _ => std::task::Poll::Ready(Ok(SocketConn(conn.clone()))),
    })
    .await
}

type AcceptFn = dyn Fn(SocketConn) + Send + Sync;

struct ListenerShared {
    closed: AtomicBool,
}

struct ListenSource {
    fd: OwnedFd,
    token: Cell<Option<Token>>,
    on_accept: Arc<AcceptFn>,
    shared: Arc<ListenerShared>,
}

thread_local! {
    /// This core's listening sockets, so `SocketListener::close` can find them.
    static LISTENERS: RefCell<Vec<Rc<ListenSource>>> = const { RefCell::new(Vec::new()) };
}

impl Source for ListenSource {
    fn ready(self: Rc<Self>, _flags: EventFlags) {
        loop {
            if self.shared.closed.load(Ordering::Acquire) {
                return;
            }
            match rnet::accept_with(&self.fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
                Ok(fd) => {
                    let conn = SocketRecord::new(fd, State::Open, None);
                    match conn.register() {
                        Ok(()) => (self.on_accept)(SocketConn(conn)),
                        Err(kind) => log::warn!("dropping an accepted connection: {kind}"),
                    }
                }
                Err(Errno::AGAIN) => return,
                Err(Errno::INTR | Errno::CONNABORTED) => {}
                Err(e) => {
                    // Out of descriptors or memory: the pending connections wait in the
                    // backlog until the next arrival re-triggers the edge.
                    log::warn!("accept failed on {}: {e}", event::core_id());
                    return;
                }
            }
        }
    }
}

/// A listening port, served by every core.
pub struct SocketListener {
    addr: SocketAddr,
    shared: Arc<ListenerShared>,
    handle: Handle,
}

impl SocketListener {
    /// The bound address (with the actual port when port 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting on every core. Established connections are not affected.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        for core in 0..self.handle.num_cores() {
            let shared = self.shared.clone();
            let _ = self.handle.spawn_on(CoreId(core as u32), move || {
                LISTENERS.with(|listeners| {
                    listeners.borrow_mut().retain(|l| {
                        let keep = !Arc::ptr_eq(&l.shared, &shared);
                        if !keep && let Some(token) = l.token.take() {
                            let _ = reactor::deregister(&l.fd, token);
                        }
                        keep
                    })
                })
            });
        }
    }
}

impl fmt::Debug for SocketListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SocketListener")
            .field("addr", &self.addr)
            .finish()
    }
}

fn listening_socket(addr: &SocketAddr) -> Result<OwnedFd, TcpErrorKind> {
    let fd = new_socket(addr)?;
    rnet::sockopt::set_socket_reuseaddr(&fd, true).map_err(error_kind)?;
    rnet::sockopt::set_socket_reuseport(&fd, true).map_err(error_kind)?;
    rnet::bind(&fd, addr).map_err(error_kind)?;
    rnet::listen(&fd, LISTEN_BACKLOG).map_err(error_kind)?;
    Ok(fd)
}

/// Listens on `addr` on every core; `on_accept` runs on the core that accepted each
/// connection, which owns it from then on. On a core.
///
/// Every core's socket is bound before this returns, so the port is fully open; each core
/// starts accepting as soon as it processes its registration event.
pub fn listen(
    addr: SocketAddr,
    on_accept: impl Fn(SocketConn) + Send + Sync + 'static,
) -> Result<SocketListener, TcpErrorKind> {
    let handle = Handle::current().ok_or(TcpErrorKind::Other(0))?;
    let first = listening_socket(&addr)?;
    let bound = sock_addr(rnet::getsockname(&first)).ok_or(TcpErrorKind::AddressNotAvailable)?;
    let mut sockets = vec![first];
    for _ in 1..handle.num_cores() {
        sockets.push(listening_socket(&bound)?);
    }
    let shared = Arc::new(ListenerShared {
        closed: AtomicBool::new(false),
    });
    let on_accept: Arc<AcceptFn> = Arc::new(on_accept);
    for (core, fd) in sockets.into_iter().enumerate() {
        let (on_accept, shared) = (on_accept.clone(), shared.clone());
        handle
            .spawn_on(CoreId(core as u32), move || {
                let source = Rc::new(ListenSource {
                    fd,
                    token: Cell::new(None),
                    on_accept,
                    shared,
                });
                match reactor::register(&source.fd, EventFlags::IN, source.clone()) {
                    Ok(token) => {
                        source.token.set(Some(token));
                        LISTENERS.with(|l| l.borrow_mut().push(source));
                    }
                    Err(e) => {
                        log::error!("{}: cannot watch listening socket: {e}", event::core_id())
                    }
                }
            })
            .map_err(|_| TcpErrorKind::Other(0))?;
    }
    Ok(SocketListener {
        addr: bound,
        shared,
        handle,
    })
}

/// One `read(2)` from `fd` into a buffer's tailroom, initialized or not; the bytes read.
fn read_fd<'b>(fd: &OwnedFd, tail: Tailroom<'b>) -> rustix::io::Result<&'b mut [u8]> {
    match tail {
        Tailroom::Uninit(spare) => rustix::io::read(fd, spare).map(|(read, _)| read),
        Tailroom::Init(spare) => rustix::io::read(fd, &mut *spare).map(|n| &mut spare[..n]),
    }
}
