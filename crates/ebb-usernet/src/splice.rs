//! One forwarded connection: a host TCP socket spliced to an ebb-net connection to the
//! guest, bytes both ways with back-pressure, half-close and reset carried across.
//!
//! * **Host → guest.** The host socket is read only while the guest connection took
//!   everything read before: a read of at most [`READ_CHUNK`] bytes is offered with
//!   `try_send`, and what the send window refuses waits in [`Splice::to_guest`] (so at
//!   most one chunk per connection) until `send_window_increased`. Meanwhile the host
//!   kernel's socket buffer fills and the host's TCP is flow-controlled.
//! * **Guest → host.** Data the guest sent is written to the host socket at once; what
//!   the socket does not take waits in [`GuestSide::to_host`]. Past [`TO_HOST_HIGH`]
//!   bytes the connection's receive window is closed (the guest's TCP is
//!   flow-controlled), and reopened below [`TO_HOST_LOW`]. ebb-net holds what the guest
//!   had already sent into the last advertised window, within its `max_held_bytes`.
//! * **Half-close.** EOF from the host: FIN to the guest once everything read went out.
//!   FIN from the guest: `shutdown(Write)` on the host socket once everything received
//!   was written. The splice ends when the guest connection is closed and everything
//!   received was written.
//! * **Reset.** A reset or failure on either side resets the other: an error on the
//!   host socket aborts the guest connection (RST), a guest connection that ends other
//!   than normally (reset, timeout, a refused or failed connect) resets the host socket
//!   (`SO_LINGER` 0, then close).
//! * **Guest forwards.** A splice of a guest forward starts with the guest connection
//!   established and the host socket still connecting ([`Splice::connecting`]): nothing
//!   moves until the connect's outcome (the socket's first writable or error event).
//!   Meanwhile what the guest sends waits in [`GuestSide::to_host`] under the same
//!   bound. A failed connect aborts the guest connection (RST); a guest reset meanwhile
//!   drops the connecting socket.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice};
use std::net::{Shutdown, TcpStream};
use std::rc::Rc;

use ebb_core::iobuf::Tailroom;
use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_core::{IOBuf, IOBufChain};
use ebb_net::tcp::TcpConn;

/// Most bytes read from a host socket at once (and so held per connection toward the
/// guest).
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Bytes from the guest waiting for the host socket at which the receive window closes.
pub(crate) const TO_HOST_HIGH: usize = 256 * 1024;
/// ...and below which it opens again.
pub(crate) const TO_HOST_LOW: usize = 64 * 1024;
/// A read this small that cannot be copied out of the [`ReadBuffer`] fails rather than
/// take the whole buffer along for a few bytes.
const SMALL_READ: usize = 2048;
/// Host reads per connection per round, so one busy connection does not starve others.
const READS_PER_ROUND: usize = 4;
/// Buffers per `writev` to the host socket.
const WRITEV_MAX: usize = 32;

/// The guest connection's side, shared with its handler (which only records events).
#[derive(Default)]
pub(crate) struct GuestSide {
    /// The connection once established.
    pub(crate) conn: Option<TcpConn>,
    /// Why the connect failed (refused, timed out).
    pub(crate) failed: Option<TcpErrorKind>,
    /// Data from the guest not yet written to the host socket.
    pub(crate) to_host: VecDeque<IOBuf>,
    pub(crate) to_host_bytes: usize,
    /// The receive window is closed because `to_host` is over [`TO_HOST_HIGH`].
    pub(crate) window_closed: bool,
    /// The guest sent FIN.
    pub(crate) peer_closed: bool,
    /// The connection ended, and why.
    pub(crate) closed: Option<CloseReason>,
}

/// The handler on the guest connection: records each event in the shared
/// [`GuestSide`] and names the splice in `touched`, for the forwarder to act on after
/// the stack's poll (no host I/O inside the stack's callbacks).
pub(crate) struct SpliceHandler {
    pub(crate) id: u64,
    pub(crate) side: Rc<RefCell<GuestSide>>,
    pub(crate) touched: Rc<RefCell<Vec<u64>>>,
}

impl SpliceHandler {
    fn touch(&self) {
        self.touched.borrow_mut().push(self.id);
    }
}

/// Buffers a few guest bytes are compacted into (see [`GuestSide::queue_for_host`]).
const COMPACT_CHUNK: usize = 2048 - ebb_core::iobuf::REGION_OVERHEAD;

impl GuestSide {
    /// Queues `data` from the guest for the host socket, compactly: ebb-net hands over a
    /// view into the guest's frame, and a guest that sends a byte or two per 64 KiB
    /// frame (padded past the IP length, or overlapping what was acknowledged) would pin
    /// a frame per byte while the host does not read — so a piece that occupies much
    /// more memory than it holds is copied, into the tail of the piece before it or a
    /// small buffer of its own. The copy is fallible: without memory the piece is kept
    /// as it is (it still counts toward [`TO_HOST_HIGH`], which closes the window).
    fn queue_for_host(&mut self, data: IOBuf) {
        if data.is_empty() {
            return; // Nothing to write (and an empty write would be taken for no room).
        }
        self.to_host_bytes += data.len();
        if !data.wasteful() {
            self.to_host.push_back(data);
            return;
        }
        if let Some(last) = self.to_host.back_mut()
            && last.is_unique()
            && last.tailroom() >= data.len()
            && last.extend_from_slice(data.as_slice()).is_ok()
        {
            return;
        }
        if let Ok(mut copy) = IOBuf::try_with_capacity(data.len().max(COMPACT_CHUNK))
            && copy.extend_from_slice(data.as_slice()).is_ok()
        {
            self.to_host.push_back(copy);
            return;
        }
        self.to_host.push_back(data);
    }

    /// The memory the data waiting for the host keeps alive.
    pub(crate) fn to_host_memory(&self) -> usize {
        self.to_host.iter().map(IOBuf::occupied).sum()
    }
}

impl TcpHandler for SpliceHandler {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let mut side = self.side.borrow_mut();
        side.queue_for_host(data);
        if side.to_host_bytes >= TO_HOST_HIGH && !side.window_closed {
            side.window_closed = true;
            conn.set_receive_window_open(false);
        }
        drop(side);
        self.touch();
    }

    fn send_window_increased(&mut self, _conn: &dyn TcpConnection) {
        self.touch();
    }

    fn peer_closed(&mut self, _conn: &dyn TcpConnection) {
        // Not the default (close at once): our FIN waits for the host's EOF.
        self.side.borrow_mut().peer_closed = true;
        self.touch();
    }

    fn closed(&mut self, reason: CloseReason) {
        self.side.borrow_mut().closed = Some(reason);
        self.touch();
    }
}

/// The forwarder's buffer for host reads, one for all its connections.
///
/// A request is small: reading it into a fresh [`READ_CHUNK`] buffer would zero-fill
/// 64 KiB per request (measured: 40% of the device thread's user time under memcached
/// load) to keep a few hundred bytes. So reads land in this buffer, initialized once and
/// reused. A read that fills at most half of it is copied out into a buffer of its own
/// size; a larger one takes this buffer along to the guest without a copy, and the next
/// read starts another. So what waits for the guest occupies at most about twice its
/// bytes, however a host client paces its writes (2.5 KB pieces each taking a 64 KiB
/// buffer had pinned 26 times their size); a bulk stream's reads fill the buffer and
/// are not copied. Every allocation here is fallible: a host client cannot make the
/// monitor abort.
pub(crate) struct ReadBuffer {
    buf: Option<IOBuf>,
}

/// One read from a host socket.
enum HostRead {
    /// The bytes read, and whether the read filled less than it offered (the socket's
    /// receive queue was drained at that moment).
    Data(IOBuf, bool),
    /// End of stream.
    Eof,
}

impl ReadBuffer {
    pub(crate) fn new() -> ReadBuffer {
        ReadBuffer { buf: None }
    }

    fn read(&mut self, host: &mut TcpStream) -> std::io::Result<HostRead> {
        let out_of_memory = |_| std::io::Error::from(ErrorKind::OutOfMemory);
        let buf = match &mut self.buf {
            Some(buf) => buf,
            None => self
                .buf
                .insert(IOBuf::try_with_capacity(READ_CHUNK).map_err(out_of_memory)?),
        };
        // Unique by construction: a clone of it never leaves this type.
        buf.recycle();
        let offered = buf.tailroom();
        // Into uninitialized memory: a fresh buffer (every large read starts one) is not
        // zero-filled first, which was as much memory traffic again as the read.
        let n = buf
            .read_into_tailroom(|tail| match tail {
                Tailroom::Uninit(spare) => rustix::io::read(&*host, spare).map(|(read, _)| read),
                Tailroom::Init(spare) => {
                    rustix::io::read(&*host, &mut *spare).map(|n| &mut spare[..n])
                }
            })
            .map_err(out_of_memory)??;
        if n == 0 {
            return Ok(HostRead::Eof);
        }
        let drained = n < offered;
        if 2 * n <= offered {
            // Without the memory for the copy a small read fails (the connection is
            // reset, nothing else is lost); a larger one goes without a copy, as the
            // read buffer is as good a home for it.
            let copy = IOBuf::try_with_capacity(n).ok().and_then(|mut copy| {
                copy.extend_from_slice(buf.as_slice()).ok()?;
                Some(copy)
            });
            match copy {
                Some(copy) => return Ok(HostRead::Data(copy, drained)),
                None if n <= SMALL_READ => return Err(ErrorKind::OutOfMemory.into()),
                None => {}
            }
        }
        // `Some`: filled just above. (Were it not, this read's bytes would be lost, so an
        // error, which resets the connection, is the honest answer.)
        let whole = self.buf.take().ok_or(ErrorKind::OutOfMemory)?;
        Ok(HostRead::Data(whole, drained))
    }
}

/// What [`Splice::service`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Wait for events.
    Wait,
    /// The host socket may have more to read this round could not take: call again soon.
    Again,
    /// Finished normally: drop it (the host socket closes).
    Done,
    /// Failed: the host socket was reset; drop it.
    Reset,
}

/// One forwarded connection (see the module docs).
pub(crate) struct Splice {
    pub(crate) host: TcpStream,
    pub(crate) guest: Rc<RefCell<GuestSide>>,
    /// Opened by the guest (a guest forward), not by a host client.
    pub(crate) from_guest: bool,
    /// Edge-triggered readiness of the host socket, cleared on `WouldBlock` or on a
    /// read that drained the socket (see `hangup_seen`).
    pub(crate) readable: bool,
    /// An event said the peer hung up or the socket failed. A short read clears
    /// readiness only until then: past a hang-up no new edge follows the data, so the
    /// socket is read until it says end of stream or `WouldBlock`.
    pub(crate) hangup_seen: bool,
    pub(crate) writable: bool,
    /// The host sent EOF.
    host_eof: bool,
    /// Our FIN to the guest was asked for.
    fin_to_guest: bool,
    /// The host socket's write side was shut down (the guest's FIN carried over).
    host_shut: bool,
    /// Read from the host, refused by the guest connection's send window for now.
    to_guest: IOBufChain,
    /// The host socket's non-blocking connect has not completed (guest forwards).
    pub(crate) connecting: bool,
    /// The host connect failed: the guest connection was aborted.
    pub(crate) connect_failed: bool,
}

impl Splice {
    pub(crate) fn new(host: TcpStream, guest: Rc<RefCell<GuestSide>>) -> Splice {
        Splice {
            host,
            guest,
            // Until the first `WouldBlock`: a fresh socket may already hold data.
            readable: true,
            hangup_seen: false,
            writable: true,
            host_eof: false,
            fin_to_guest: false,
            host_shut: false,
            to_guest: IOBufChain::new(),
            connecting: false,
            connect_failed: false,
            from_guest: false,
        }
    }

    /// A splice of a guest forward: `guest` is established, `host` connecting (its
    /// readiness comes with the connect's outcome).
    pub(crate) fn connecting(host: TcpStream, guest: Rc<RefCell<GuestSide>>) -> Splice {
        Splice {
            readable: false,
            hangup_seen: false,
            writable: false,
            connecting: true,
            from_guest: true,
            ..Splice::new(host, guest)
        }
    }

    /// While connecting: whether the connect is over (`Ok(true)`: connected), still under
    /// way (`Ok(false)`), or failed.
    fn connect_done(&mut self) -> std::io::Result<bool> {
        if !(self.writable || self.readable) {
            return Ok(false);
        }
        if let Some(e) = self.host.take_error()? {
            return Err(e);
        }
        match self.host.peer_addr() {
            Ok(_) => {
                self.connecting = false;
                // Edge-triggered: data that came with the connect must be read now.
                self.readable = true;
                self.writable = true;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotConnected => {
                self.readable = false;
                self.writable = false;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Bytes this splice holds (both directions).
    pub(crate) fn buffered(&self) -> usize {
        self.to_guest.len() + self.guest.borrow().to_host_bytes
    }

    /// The memory [`buffered`](Self::buffered)'s bytes keep alive (their buffers).
    pub(crate) fn buffered_memory(&self) -> usize {
        self.to_guest.iter().map(IOBuf::occupied).sum::<usize>()
            + self.guest.borrow().to_host_memory()
    }

    /// Resets the host socket: RST instead of FIN when it closes.
    pub(crate) fn reset_host(&self) {
        // The RST goes out when the socket is closed (the splice is dropped); no
        // shutdown before, which would send a FIN first.
        let _ =
            rustix::net::sockopt::set_socket_linger(&self.host, Some(std::time::Duration::ZERO));
    }

    /// Moves what can be moved now, both ways, and says what next.
    pub(crate) fn service(&mut self, reads: &mut ReadBuffer) -> Next {
        let side = self.guest.clone();
        let mut side = side.borrow_mut();
        if side.failed.is_some() {
            self.reset_host();
            return Next::Reset;
        }
        let Some(conn) = side.conn.clone() else {
            return Next::Wait; // connecting
        };
        if self.connecting {
            if side.closed.is_some_and(|r| r != CloseReason::Normal) {
                self.reset_host();
                return Next::Reset; // the guest gave up first
            }
            match self.connect_done() {
                Ok(true) => {}
                Ok(false) => return Next::Wait,
                Err(e) => {
                    log::debug!("ebb-usernet: guest forward: host connect failed: {e}");
                    self.connect_failed = true;
                    conn.abort();
                    return Next::Reset;
                }
            }
        }
        // Guest → host.
        while self.writable && !side.to_host.is_empty() {
            // On the stack: no allocation per write.
            let mut slices = [IoSlice::new(&[]); WRITEV_MAX];
            let mut n = 0;
            for (slot, buf) in slices.iter_mut().zip(side.to_host.iter()) {
                *slot = IoSlice::new(buf.as_slice());
                n += 1;
            }
            // `sendmsg` with MSG_NOSIGNAL, not `writev`: a client that closed gets us
            // EPIPE, never SIGPIPE, whatever the embedding program does with signals.
            let sent = rustix::net::sendmsg(
                &self.host,
                &slices[..n],
                &mut rustix::net::SendAncillaryBuffer::default(),
                rustix::net::SendFlags::NOSIGNAL,
            );
            match sent {
                // Nothing taken from non-empty buffers: try again on the next event
                // rather than loop.
                Ok(0) => break,
                Ok(n) => consume(&mut side, n),
                Err(rustix::io::Errno::AGAIN) => self.writable = false,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => {
                    conn.abort();
                    self.reset_host();
                    return Next::Reset;
                }
            }
        }
        if side.window_closed && side.to_host_bytes <= TO_HOST_LOW {
            side.window_closed = false;
            conn.set_receive_window_open(true);
        }
        if side.peer_closed && side.to_host.is_empty() && !self.host_shut {
            self.host_shut = true;
            let _ = self.host.shutdown(Shutdown::Write);
        }
        match side.closed {
            Some(CloseReason::Normal) if side.to_host.is_empty() => return Next::Done,
            Some(CloseReason::Normal) => return Next::Wait, // still writing to the host
            Some(_) => {
                self.reset_host();
                return Next::Reset;
            }
            None => {}
        }
        drop(side);
        // Host → guest.
        if !self.to_guest.is_empty() {
            match conn.try_send(std::mem::take(&mut self.to_guest)) {
                Ok(rest) => self.to_guest = rest,
                Err(_) => {
                    conn.abort();
                    self.reset_host();
                    return Next::Reset;
                }
            }
        }
        let mut count = 0;
        while self.to_guest.is_empty() && self.readable && !self.host_eof {
            if count == READS_PER_ROUND {
                return Next::Again;
            }
            count += 1;
            match reads.read(&mut self.host) {
                Ok(HostRead::Eof) => self.host_eof = true,
                Ok(HostRead::Data(buf, drained)) => {
                    // Edge-triggered: data arriving after this read is a new edge, so
                    // a read that drained the socket needs no `WouldBlock` to confirm
                    // it (one system call less per request).
                    if drained && !self.hangup_seen {
                        self.readable = false;
                    }
                    match conn.try_send(IOBufChain::from(buf)) {
                        Ok(rest) => self.to_guest = rest,
                        Err(_) => {
                            conn.abort();
                            self.reset_host();
                            return Next::Reset;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    conn.abort();
                    self.reset_host();
                    return Next::Reset;
                }
            }
        }
        if self.host_eof && self.to_guest.is_empty() && !self.fin_to_guest {
            self.fin_to_guest = true;
            conn.close();
        }
        Next::Wait
    }
}

/// Drops the first `n` bytes of `side.to_host` (written to the host).
fn consume(side: &mut GuestSide, mut n: usize) {
    side.to_host_bytes -= n;
    while n > 0 {
        let Some(front) = side.to_host.front_mut() else {
            break;
        };
        if front.len() <= n {
            n -= front.len();
            side.to_host.pop_front();
        } else {
            let _ = front.trim_front(n);
            n = 0;
        }
    }
}
