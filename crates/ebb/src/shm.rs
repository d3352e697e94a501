//! Shared-memory connections: a front end and a native node it runs in its own process,
//! talking through rings in memory both map — no network, no system call per message.
//!
//! A node booted by the front end's own monitor (`ebb-dist`'s LocalNodeAllocator with a
//! shared window) has a [shared window](ebb_shm) at the top of its memory. Each side opens
//! its end and gets a [`SharedConn`] with a TCP connection's shape — the same
//! [`TcpHandler`] callbacks, `try_send` with back-pressure, FIN and reset — which becomes
//! an `ebb::net::Connection` (`Connection::from`), so whatever runs over TCP (the
//! Messenger) runs over it unchanged:
//!
//! * the node: [`connect_to_front_end`];
//! * the front end (hosted only): [`attach`] with the node's [`HostWindow`].
//!
//! ## Cost
//!
//! Bytes are copied once into the ring and once out (into a fresh [`IOBuf`]). While a
//! core is busy or in its idle-poll window it looks at the ring (two loads) with the rest
//! of its devices and makes no exit and no system call. A side that sleeps says so in the
//! window; the other wakes it only then: the node rings the host's doorbell (an
//! ioeventfd, handled by the host kernel), the host writes the kick eventfd of the vCPU
//! that serves the connection.
//!
//! ## Invariants
//!
//! * Nothing the other side writes is trusted (see [`ebb_shm`]): a ring index that lies
//!   resets the connection with [`TcpErrorKind::Other`]`(`[`CORRUPT`]`)`, garbage bytes
//!   are the reader's protocol's to refuse, and a receive allocates at most
//!   [`RECEIVE_CHUNK`] bytes at a time, fallibly (out of memory: the bytes wait).
//! * A connection lives on the core that opened it; events reach its handler there,
//!   never re-entrantly (callbacks queue what they cause for the next dispatch).
//! * A window carries one connection, once.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::string::String;
use core::cell::{Cell, RefCell};
use core::sync::atomic::{AtomicU64, Ordering};

use ebb_core::iobuf::{IOBuf, IOBufChain, Tailroom};
use ebb_core::net::{
    CloseReason, Ipv4Addr, SendError, SocketAddr, SocketAddrV4, TcpConnection, TcpErrorKind,
    TcpHandler,
};
use ebb_shm::{Endpoint, PeerState, State};
pub use ebb_shm::{Mapping, Side, WindowError, capacity_of, mark_reset};

#[allow(unused_imports)] // empty natively: the front end's side is hosted only
pub use crate::platform::shm::host::*;

/// The error code a connection fails with when the other side broke the ring protocol.
pub const CORRUPT: i32 = -0x5348; // "SH"

/// The most bytes one receive callback gets (and allocates).
pub const RECEIVE_CHUNK: usize = 64 * 1024;

/// Receive callbacks per dispatch at most, so one busy connection cannot keep its core
/// from the rest of its work.
const RECEIVES_PER_DISPATCH: usize = 4;

/// What this node's shared-memory connections counted (all of them, since it started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Wakes sent to a sleeping peer (natively a doorbell `out`; hosted a write to the
    /// vCPU's kick eventfd, one system call).
    pub wakes_sent: u64,
    /// Wakes received from the peer (hosted: the doorbell's readiness; natively the
    /// vCPU's kick is not told apart from other kicks, so 0).
    pub wakes_received: u64,
    /// Dispatches of a connection (each found work: bytes, room, or an end).
    pub dispatches: u64,
    /// Bytes sent and received through windows.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
}

static WAKES_SENT: AtomicU64 = AtomicU64::new(0);
static WAKES_RECEIVED: AtomicU64 = AtomicU64::new(0);
static DISPATCHES: AtomicU64 = AtomicU64::new(0);
static BYTES_SENT: AtomicU64 = AtomicU64::new(0);
static BYTES_RECEIVED: AtomicU64 = AtomicU64::new(0);

/// What this node's shared-memory connections counted so far.
pub fn stats() -> ShmStats {
    ShmStats {
        wakes_sent: WAKES_SENT.load(Ordering::Relaxed),
        wakes_received: WAKES_RECEIVED.load(Ordering::Relaxed),
        dispatches: DISPATCHES.load(Ordering::Relaxed),
        bytes_sent: BYTES_SENT.load(Ordering::Relaxed),
        bytes_received: BYTES_RECEIVED.load(Ordering::Relaxed),
    }
}

/// A platform saw the peer's wake.
#[allow(dead_code)] // natively unused: a window's kick is not told apart from others
pub(crate) fn count_wake_received() {
    WAKES_RECEIVED.fetch_add(1, Ordering::Relaxed);
}

/// Why a shared-memory connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// There is no window to open.
    #[error("no shared window: {0}")]
    NoWindow(&'static str),
    /// The window is unusable or its end is taken.
    #[error("{0}")]
    Window(#[from] WindowError),
    /// The core could not poll the connection.
    #[error("cannot poll the shared window's connection on this core: {0}")]
    Register(String),
}

/// How a side tells the other to look (it sleeps).
pub(crate) type Notify = Box<dyn Fn(&Endpoint)>;

/// Adds a connection to the calling core's polled devices; returns how to remove it.
pub(crate) type Unregister = Box<dyn FnOnce()>;

/// Opens the node's end of the shared window its front end gave it and returns the
/// connection, owned by the calling core. Natively only; a hosted process has no window.
pub fn connect_to_front_end() -> Result<SharedConn, ShmError> {
    let (mapping, notify) = crate::platform::shm::guest_window()?;
    let endpoint = Endpoint::open(mapping, Side::Guest, ebb_core::event::core_id().0)?;
    open(endpoint, notify, crate::platform::shm::register_guest)
}

/// Wraps an opened end as a connection that `register` makes the calling core poll.
pub(crate) fn open(
    endpoint: Endpoint,
    notify: Notify,
    register: impl FnOnce(Rc<ConnCore>) -> Result<Unregister, ShmError>,
) -> Result<SharedConn, ShmError> {
    let core = Rc::new(ConnCore::new(endpoint, notify));
    let unregister = register(core.clone())?;
    *core.unregister.borrow_mut() = Some(unregister);
    Ok(SharedConn(core))
}

/// A connection over a shared window (see the module docs).
#[derive(Clone)]
pub struct SharedConn(Rc<ConnCore>);

pub(crate) struct ConnCore {
    endpoint: RefCell<Endpoint>,
    handler: RefCell<Option<Box<dyn TcpHandler>>>,
    /// What `send` accepted beyond the ring's room, in order.
    queued: RefCell<IOBufChain>,
    receive_open: Cell<bool>,
    close_requested: Cell<bool>,
    finish_sent: Cell<bool>,
    peer_finish_delivered: Cell<bool>,
    /// A send was refused room: `send_window_increased` is owed once there is some.
    window_owed: Cell<bool>,
    /// How the connection ends, to be told to the handler at the next dispatch.
    ending: Cell<Option<CloseReason>>,
    done: Cell<bool>,
    notify: Notify,
    unregister: RefCell<Option<Box<dyn FnOnce()>>>,
}

fn no_address() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
}

const CORRUPT_REASON: CloseReason = CloseReason::Error(TcpErrorKind::Other(CORRUPT));

impl ConnCore {
    fn new(endpoint: Endpoint, notify: Notify) -> ConnCore {
        ConnCore {
            endpoint: RefCell::new(endpoint),
            handler: RefCell::new(None),
            queued: RefCell::new(IOBufChain::default()),
            receive_open: Cell::new(true),
            close_requested: Cell::new(false),
            finish_sent: Cell::new(false),
            peer_finish_delivered: Cell::new(false),
            window_owed: Cell::new(false),
            ending: Cell::new(None),
            done: Cell::new(false),
            notify,
            unregister: RefCell::new(None),
        }
    }

    fn wake(&self, endpoint: &Endpoint) {
        WAKES_SENT.fetch_add(1, Ordering::Relaxed);
        (self.notify)(endpoint);
    }

    /// Ends the connection for `reason` at the next dispatch, resetting our end now so
    /// the peer stops at once.
    fn reset(&self, reason: CloseReason) {
        if self.done.get() || self.ending.get().is_some() {
            return;
        }
        let mut endpoint = self.endpoint.borrow_mut();
        if endpoint.set_state(State::Reset) {
            self.wake(&endpoint);
        }
        *self.queued.borrow_mut() = IOBufChain::default();
        self.ending.set(Some(reason));
    }

    /// Moves queued bytes into the ring as room allows.
    fn flush(&self) {
        let mut queued = self.queued.borrow_mut();
        if queued.is_empty() {
            return;
        }
        let taken = core::mem::take(&mut *queued);
        drop(queued);
        if let Ok(rest) = self.write(taken) {
            *self.queued.borrow_mut() = rest;
        }
    }

    /// Writes what the ring takes of `data`, publishes it and wakes a sleeping peer;
    /// returns the rest. `Err`: the peer corrupted the ring (the connection is reset).
    fn write(&self, mut data: IOBufChain) -> Result<IOBufChain, ()> {
        let mut endpoint = self.endpoint.borrow_mut();
        let mut written = 0;
        for segment in data.segments() {
            match endpoint.write(segment) {
                Ok(n) => {
                    written += n;
                    if n < segment.len() {
                        break;
                    }
                }
                Err(_) => {
                    drop(endpoint);
                    self.reset(CORRUPT_REASON);
                    return Err(());
                }
            }
        }
        BYTES_SENT.fetch_add(written as u64, Ordering::Relaxed);
        if written > 0 && endpoint.publish() {
            self.wake(&endpoint);
        }
        drop(endpoint);
        let rest = data.split_off(written).unwrap_or_default();
        Ok(rest)
    }

    fn room(&self) -> usize {
        match self.endpoint.try_borrow_mut() {
            Ok(mut e) => e.room().unwrap_or(1),
            Err(_) => 0,
        }
    }

    /// Whether a dispatch would do something (cheap: a few loads from the window).
    pub(crate) fn has_work(&self) -> bool {
        if self.done.get() {
            return false;
        }
        if self.ending.get().is_some() {
            return true;
        }
        if self.handler.try_borrow().map_or(true, |h| h.is_none()) {
            return false;
        }
        if (self.window_owed.get() || !self.queued.borrow().is_empty()) && self.room() > 0 {
            return true;
        }
        if self.close_requested.get() && !self.finish_sent.get() && self.queued.borrow().is_empty()
        {
            return true;
        }
        let Ok(endpoint) = self.endpoint.try_borrow() else {
            return false;
        };
        let available = endpoint.available();
        if self.receive_open.get() && available != Ok(0) {
            return true;
        }
        match endpoint.peer_state() {
            PeerState::Is(State::Absent | State::Open) => false,
            PeerState::Is(State::Finished) => {
                !self.peer_finish_delivered.get() && available == Ok(0)
            }
            PeerState::Is(State::Reset) | PeerState::Invalid(_) => true,
        }
    }

    /// The core is about to sleep: ask the peer for a wake, then look once more.
    pub(crate) fn arm(&self) -> bool {
        if self.done.get() {
            return false;
        }
        let armed = match self.endpoint.try_borrow() {
            Ok(endpoint) => endpoint.arm_receive().unwrap_or(true),
            Err(_) => true,
        };
        (armed && self.receive_open.get()) || self.has_work()
    }

    /// Does what there is to do and tells the handler.
    pub(crate) fn dispatch(self: &Rc<Self>) {
        if self.done.get() {
            return;
        }
        if let Ok(endpoint) = self.endpoint.try_borrow() {
            endpoint.disarm_receive();
        }
        let Some(mut handler) = self.handler.borrow_mut().take() else {
            return;
        };
        DISPATCHES.fetch_add(1, Ordering::Relaxed);
        let conn = SharedConn(self.clone());
        if self.step(&mut *handler, &conn) {
            self.finish(handler);
        } else {
            *self.handler.borrow_mut() = Some(handler);
        }
    }

    /// One dispatch; true when the connection ended.
    fn step(&self, handler: &mut dyn TcpHandler, conn: &SharedConn) -> bool {
        if self.ending.get().is_some() {
            return true;
        }
        match self.endpoint.borrow().peer_state() {
            PeerState::Is(State::Reset) => {
                self.ending.set(Some(CloseReason::Reset));
                return true;
            }
            PeerState::Invalid(_) => {
                self.reset(CORRUPT_REASON);
                return true;
            }
            _ => {}
        }
        self.flush();
        if self.window_owed.get() && self.queued.borrow().is_empty() && self.room() > 0 {
            self.window_owed.set(false);
            handler.send_window_increased(conn);
        }
        for _ in 0..RECEIVES_PER_DISPATCH {
            if !self.receive_open.get() || self.ending.get().is_some() {
                break;
            }
            match self.receive_chunk() {
                Ok(Some(buf)) => handler.receive(conn, buf),
                Ok(None) => break,
                Err(()) => return true,
            }
        }
        if self.ending.get().is_some() {
            return true;
        }
        let finished = self.endpoint.borrow().peer_state() == PeerState::Is(State::Finished);
        if finished
            && !self.peer_finish_delivered.get()
            && self.endpoint.borrow().available() == Ok(0)
        {
            self.peer_finish_delivered.set(true);
            handler.peer_closed(conn);
        }
        if self.close_requested.get() && !self.finish_sent.get() && self.queued.borrow().is_empty()
        {
            self.finish_sent.set(true);
            let mut endpoint = self.endpoint.borrow_mut();
            if endpoint.set_state(State::Finished) {
                self.wake(&endpoint);
            }
        }
        if self.finish_sent.get() && self.peer_finish_delivered.get() {
            self.ending.set(Some(CloseReason::Normal));
        }
        self.ending.get().is_some()
    }

    /// Copies up to [`RECEIVE_CHUNK`] waiting bytes into a fresh buffer. `Ok(None)`:
    /// nothing waits (or no memory for it now); `Err`: the peer corrupted the ring.
    fn receive_chunk(&self) -> Result<Option<IOBuf>, ()> {
        let mut endpoint = self.endpoint.borrow_mut();
        let waiting = match endpoint.available() {
            Ok(0) => return Ok(None),
            Ok(n) => n.min(RECEIVE_CHUNK),
            Err(_) => {
                drop(endpoint);
                self.reset(CORRUPT_REASON);
                return Err(());
            }
        };
        let Ok(mut buf) = IOBuf::try_with_capacity(waiting) else {
            return Ok(None);
        };
        // A fresh buffer: the ring is copied into its tailroom without zero-filling
        // the tailroom first.
        let read = buf.read_into_tailroom(|tailroom| match tailroom {
            Tailroom::Uninit(room) => {
                let len = room.len().min(waiting);
                endpoint.read_uninit(&mut room[..len])
            }
            Tailroom::Init(room) => {
                let len = room.len().min(waiting);
                let n = endpoint.read(&mut room[..len])?;
                Ok(&mut room[..n])
            }
        });
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(_corrupt)) => {
                drop(endpoint);
                self.reset(CORRUPT_REASON);
                return Err(());
            }
            Err(_not_unique) => return Ok(None), // Unreachable: the buffer is fresh.
        };
        BYTES_RECEIVED.fetch_add(n as u64, Ordering::Relaxed);
        if endpoint.release() {
            self.wake(&endpoint);
        }
        Ok(Some(buf))
    }

    fn finish(&self, mut handler: Box<dyn TcpHandler>) {
        self.done.set(true);
        let reason = self.ending.get().unwrap_or(CloseReason::Normal);
        *self.queued.borrow_mut() = IOBufChain::default();
        handler.closed(reason);
        drop(handler);
        if let Some(unregister) = self.unregister.borrow_mut().take() {
            unregister();
        }
    }
}

impl SharedConn {
    /// Installs the handler that gets this connection's data and events from now on
    /// (bytes that came before wait for it).
    pub fn set_handler(&self, handler: impl TcpHandler) {
        *self.0.handler.borrow_mut() = Some(Box::new(handler));
    }

    /// Bytes each of the window's rings holds.
    pub fn ring_capacity(&self) -> usize {
        self.0.endpoint.borrow().capacity()
    }
}

impl TcpConnection for SharedConn {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        let core = &self.0;
        if let Some(reason) = core.ending.get() {
            return Err(SendError::Failed(reason));
        }
        if core.close_requested.get() || core.done.get() {
            return Err(SendError::Closed);
        }
        core.queued.borrow_mut().append(&mut { data });
        core.flush();
        if !core.queued.borrow().is_empty() {
            core.window_owed.set(true);
            let _ = core.endpoint.borrow_mut().want_room();
        }
        Ok(())
    }

    fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError> {
        let core = &self.0;
        if let Some(reason) = core.ending.get() {
            return Err(SendError::Failed(reason));
        }
        if core.close_requested.get() || core.done.get() {
            return Err(SendError::Closed);
        }
        core.flush();
        if !core.queued.borrow().is_empty() {
            core.window_owed.set(true);
            return Ok(data);
        }
        match core.write(data) {
            Ok(rest) => {
                if !rest.is_empty() {
                    core.window_owed.set(true);
                    let _ = core.endpoint.borrow_mut().want_room();
                }
                Ok(rest)
            }
            Err(()) => Err(SendError::Failed(CORRUPT_REASON)),
        }
    }

    fn send_window(&self) -> usize {
        if self.0.queued.borrow().is_empty() {
            self.0.endpoint.borrow_mut().room().unwrap_or(0)
        } else {
            0
        }
    }

    fn queued_bytes(&self) -> usize {
        self.0.queued.borrow().len()
    }

    fn set_receive_window_open(&self, open: bool) {
        self.0.receive_open.set(open);
    }

    fn close(&self) {
        self.0.close_requested.set(true);
    }

    fn abort(&self) {
        self.0.reset(CloseReason::Aborted);
    }

    fn peer_addr(&self) -> SocketAddr {
        no_address()
    }

    fn local_addr(&self) -> SocketAddr {
        no_address()
    }
}
