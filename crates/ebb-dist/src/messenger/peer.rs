//! One peer connection's shared state and its writer.
//!
//! A [`Peer`] is reached from every core (senders and callers lock it briefly); its
//! connection is not: it belongs to the core that owns it, where [`write_loop`] (a local
//! task owning the `Connection`) moves the peer's queue into TCP and the link's handler
//! (`link.rs`) reads. The two meet only through the lock and wakers.
//!
//! Invariants:
//! * the queue holds at most `queue_limit` bytes of the application's frames, or one frame
//!   when it was empty (so any frame up to `MAX_PAYLOAD` can go); replies and failures to
//!   the peer's calls are queued beyond it, and the link stops reading from the peer while
//!   the queue is above twice the limit, so a peer that calls without reading the answers
//!   is flow-controlled instead of growing the queue;
//! * once `lost` is set it stays set: the queue is emptied, every pending call failed, and
//!   every later send or call fails with that reason;
//! * no connection method is called with the lock held (a connection may call its handler,
//!   which takes the lock, from inside `try_send` or `abort`).

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::poll_fn;
use core::sync::atomic::{AtomicU32, Ordering};
use core::task::{Context, Poll, Waker};

use ebb::IOBufChain;
use ebb::future::Promise;
use ebb::net::{Connection, TcpConnection};

use super::error::{CallError, LossReason, SendError};
use crate::node::NodeId;

/// A node id no node has: a connection not yet joined.
pub(crate) const UNASSIGNED: u32 = u32::MAX;

/// The answer a pending call waits for.
pub(crate) type Answer = Result<IOBufChain, CallError>;

/// How a connection is to end once its writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Send what is queued, then FIN (a refusal's last words).
    Graceful,
    /// Reset now.
    Abort,
}

pub(crate) struct Peer {
    /// The node at the other end (`UNASSIGNED` until the join handshake names it).
    node: AtomicU32,
    next_call: AtomicU32,
    pub(crate) queue_limit: usize,
    state: spin::Mutex<PeerState>,
}

#[derive(Default)]
struct PeerState {
    /// Whole frames waiting for the connection, in order.
    queue: IOBufChain,
    /// TCP refused part of the last write; the handler's `send_window_increased` clears it.
    blocked: bool,
    writer: Option<Waker>,
    room: Vec<Waker>,
    pending: BTreeMap<u32, Promise<Answer>>,
    lost: Option<LossReason>,
    closing: Option<Closing>,
    reading_paused: bool,
    incoming_calls: usize,
    lost_waiters: Vec<Promise<LossReason>>,
}

/// What the writer does next.
enum Step {
    Write(IOBufChain),
    ResumeReading,
    Close,
    Abort,
}

/// Why a frame was not queued; `Full` hands the frame back.
pub(crate) enum Refusal {
    Full { queued: usize, frame: IOBufChain },
    Lost(LossReason),
}

impl Peer {
    pub(crate) fn new(node: Option<NodeId>, queue_limit: usize) -> Peer {
        Peer {
            node: AtomicU32::new(node.map_or(UNASSIGNED, |n| n.0)),
            next_call: AtomicU32::new(1),
            queue_limit,
            state: spin::Mutex::new(PeerState::default()),
        }
    }

    /// The node at the other end, once joined.
    pub(crate) fn node(&self) -> Option<NodeId> {
        match self.node.load(Ordering::Acquire) {
            UNASSIGNED => None,
            n => Some(NodeId(n)),
        }
    }

    pub(crate) fn set_node(&self, node: NodeId) {
        self.node.store(node.0, Ordering::Release);
    }

    fn node_or_unassigned(&self) -> NodeId {
        NodeId(self.node.load(Ordering::Acquire))
    }

    pub(crate) fn lost(&self) -> Option<LossReason> {
        self.state.lock().lost.clone()
    }

    /// Whether the connection is being ended (a refusal on its way, or an abort).
    pub(crate) fn closing(&self) -> bool {
        self.state.lock().closing.is_some()
    }

    /// Whether the link stopped reading from the peer (so its silence says nothing).
    pub(crate) fn reading_paused(&self) -> bool {
        self.state.lock().reading_paused
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.state.lock().queue.len()
    }

    fn lost_error(&self, reason: LossReason) -> SendError {
        SendError::PeerLost {
            node: self.node_or_unassigned(),
            reason,
        }
    }

    /// Queues a whole frame. With `bounded`, refuses it (handing it back) when the queue
    /// is not empty and the frame would take it beyond the limit.
    pub(crate) fn enqueue(&self, frame: IOBufChain, bounded: bool) -> Result<(), Refusal> {
        let mut frame = frame;
        let writer = {
            let mut s = self.state.lock();
            if let Some(reason) = &s.lost {
                return Err(Refusal::Lost(reason.clone()));
            }
            let queued = s.queue.len();
            if bounded && queued > 0 && queued + frame.len() > self.queue_limit {
                return Err(Refusal::Full { queued, frame });
            }
            s.queue.append(&mut frame);
            s.writer.take()
        };
        if let Some(w) = writer {
            w.wake();
        }
        Ok(())
    }

    /// Queues a call's request and registers its answer's promise under one lock, so an
    /// answer cannot come before the promise is there.
    pub(crate) fn enqueue_call(
        &self,
        make_frame: impl FnOnce(u32) -> Result<IOBufChain, SendError>,
        len: usize,
        answer: Promise<Answer>,
    ) -> Result<u32, (SendError, Option<Promise<Answer>>)> {
        let writer;
        let id;
        {
            let mut s = self.state.lock();
            if let Some(reason) = &s.lost {
                return Err((self.lost_error(reason.clone()), Some(answer)));
            }
            let queued = s.queue.len();
            if queued > 0 && queued + len > self.queue_limit {
                let full = SendError::Full {
                    node: self.node_or_unassigned(),
                    queued,
                    limit: self.queue_limit,
                };
                return Err((full, Some(answer)));
            }
            // Call ids are nonzero (zero means "no call") and never two alike in flight.
            id = loop {
                let id = self.next_call.fetch_add(1, Ordering::Relaxed);
                if id != 0 && !s.pending.contains_key(&id) {
                    break id;
                }
            };
            let mut frame = make_frame(id).map_err(|e| (e, None))?;
            s.queue.append(&mut frame);
            s.pending.insert(id, answer);
            writer = s.writer.take();
        }
        if let Some(w) = writer {
            w.wake();
        }
        Ok(id)
    }

    /// Forgets a call whose caller stopped waiting.
    pub(crate) fn forget_call(&self, id: u32) {
        let _ = self.state.lock().pending.remove(&id);
    }

    /// The pending call `id`'s promise, if its caller still waits.
    pub(crate) fn take_call(&self, id: u32) -> Option<Promise<Answer>> {
        self.state.lock().pending.remove(&id)
    }

    /// Ready when a frame of `len` bytes would be queued (or the peer is lost).
    pub(crate) fn poll_room(
        &self,
        cx: &mut Context<'_>,
        len: usize,
    ) -> Poll<Result<(), SendError>> {
        let mut s = self.state.lock();
        if let Some(reason) = &s.lost {
            return Poll::Ready(Err(self.lost_error(reason.clone())));
        }
        if s.queue.is_empty() || s.queue.len() + len <= self.queue_limit {
            return Poll::Ready(Ok(()));
        }
        if !s.room.iter().any(|w| w.will_wake(cx.waker())) {
            s.room.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Ready with the reason once the peer is lost.
    pub(crate) fn wait_lost(&self) -> Result<LossReason, ebb::future::PromiseFuture<LossReason>> {
        let mut s = self.state.lock();
        if let Some(reason) = &s.lost {
            return Ok(reason.clone());
        }
        let (promise, future) = ebb::future::promise();
        s.lost_waiters.push(promise);
        Err(future)
    }

    /// Counts an incoming call against `max`; false when `max` are already running.
    pub(crate) fn start_incoming_call(&self, max: usize) -> bool {
        let mut s = self.state.lock();
        if s.incoming_calls >= max {
            return false;
        }
        s.incoming_calls += 1;
        true
    }

    pub(crate) fn finish_incoming_call(&self) {
        let mut s = self.state.lock();
        s.incoming_calls = s.incoming_calls.saturating_sub(1);
    }

    /// After the link handled received frames: whether it must stop reading because the
    /// queue (answers to the peer's calls) is beyond twice the limit.
    pub(crate) fn should_pause_reading(&self) -> bool {
        let mut s = self.state.lock();
        if !s.reading_paused && s.queue.len() > 2 * self.queue_limit {
            s.reading_paused = true;
            return true;
        }
        false
    }

    /// The connection's send window opened again.
    pub(crate) fn unblock(&self) {
        let writer = {
            let mut s = self.state.lock();
            s.blocked = false;
            s.writer.take()
        };
        if let Some(w) = writer {
            w.wake();
        }
    }

    /// Asks the writer to end the connection.
    pub(crate) fn close(&self, how: Closing) {
        let writer = {
            let mut s = self.state.lock();
            if s.closing != Some(Closing::Abort) {
                s.closing = Some(how);
            }
            s.writer.take()
        };
        if let Some(w) = writer {
            w.wake();
        }
    }

    /// Marks the peer lost for `reason`: drops the queue, fails every pending call, wakes
    /// everyone waiting. Returns false (doing nothing) if it was already lost.
    pub(crate) fn fail(&self, reason: LossReason) -> bool {
        let (pending, room, writer, lost_waiters) = {
            let mut s = self.state.lock();
            if s.lost.is_some() {
                return false;
            }
            s.lost = Some(reason.clone());
            s.queue = IOBufChain::default();
            (
                core::mem::take(&mut s.pending),
                core::mem::take(&mut s.room),
                s.writer.take(),
                core::mem::take(&mut s.lost_waiters),
            )
        };
        let node = self.node_or_unassigned();
        for (_, promise) in pending {
            let _ = promise.set(Err(CallError::PeerLost {
                node,
                reason: reason.clone(),
            }));
        }
        for promise in lost_waiters {
            let _ = promise.set(reason.clone());
        }
        room.into_iter().chain(writer).for_each(Waker::wake);
        true
    }

    fn next_step(&self, cx: &mut Context<'_>) -> Poll<Step> {
        let mut s = self.state.lock();
        if s.lost.is_some() || s.closing == Some(Closing::Abort) {
            return Poll::Ready(Step::Abort);
        }
        if !s.blocked && !s.queue.is_empty() {
            return Poll::Ready(Step::Write(core::mem::take(&mut s.queue)));
        }
        if s.reading_paused && s.queue.len() <= self.queue_limit {
            s.reading_paused = false;
            return Poll::Ready(Step::ResumeReading);
        }
        if s.closing == Some(Closing::Graceful) && s.queue.is_empty() {
            return Poll::Ready(Step::Close);
        }
        s.writer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// TCP took part of a write: `rest` goes back in front of what was queued meanwhile.
    fn wrote(&self, mut rest: IOBufChain) {
        let room = {
            let mut s = self.state.lock();
            if s.lost.is_some() {
                return;
            }
            if !rest.is_empty() {
                s.blocked = true;
                rest.append(&mut s.queue);
                s.queue = rest;
            }
            core::mem::take(&mut s.room)
        };
        room.into_iter().for_each(Waker::wake);
    }

    /// TCP refused a write outright: the connection is ending, and its handler's `closed`
    /// reports why. Nothing more is written until then.
    fn write_refused(&self) {
        self.state.lock().blocked = true;
    }
}

/// The writer of one connection, a local task on the core that owns it: moves the peer's
/// queue into TCP as the send window allows and ends the connection when asked.
pub(crate) async fn write_loop(conn: Connection, peer: Arc<Peer>) {
    loop {
        match poll_fn(|cx| peer.next_step(cx)).await {
            Step::Write(frames) => match conn.try_send(frames) {
                Ok(rest) => peer.wrote(rest),
                Err(_) => peer.write_refused(),
            },
            Step::ResumeReading => conn.set_receive_window_open(true),
            Step::Close => {
                conn.close();
                return;
            }
            Step::Abort => {
                conn.abort();
                return;
            }
        }
    }
}
