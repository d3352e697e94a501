//! The Messenger: ordered, reliable Ebb-to-Ebb messages and calls between the nodes of
//! one application, one TCP connection per peer over `ebb::net`, frames of [`crate::wire`].
//!
//! ```ignore
//! // front end (node 0)
//! let front = FrontEnd::start(&network, 0, MessengerConfig::default()).await?;
//! front.messenger().on_message(COUNTER, BUMP, |from, payload| { /* ... */ });
//! let info = front.expect(token).await?;            // the node presenting `token` joined
//! let answer = front.messenger().call(info.node, COUNTER, READ, payload).await?;
//!
//! // a node
//! let messenger = Messenger::new(MessengerConfig::default());
//! messenger.on_call(COUNTER, READ, |from, payload| async move { Ok(payload) });
//! let info = messenger.join(&network, front_end_addr, token).await?;
//! messenger.send(NodeId::FRONT_END, COUNTER, BUMP, payload)?;
//! ```
//!
//! * **Receivers** register per (destination [`EbbId`], kind): a one-way handler
//!   ([`on_message`](Messenger::on_message)) or a call handler
//!   ([`on_call`](Messenger::on_call)) whose future's `Ok` goes back as a Reply and whose
//!   `Err` as a Failure. A message for an unregistered (Ebb, kind) is counted
//!   ([`MessengerStats::unhandled_messages`]) and dropped; a call to one is answered with
//!   a Failure "no handler for ...".
//! * **Payloads** are [`IOBufChain`]s, sent and received without copies: the header is a
//!   separate buffer in front of the payload's own, and a received payload shares the
//!   buffers the connection delivered.
//! * **Back-pressure**: each peer's queue holds at most
//!   [`MessengerConfig::queue_limit`] bytes (or a single frame of any size when empty).
//!   [`send`](Messenger::send) beyond it fails with [`SendError::Full`]; wait with
//!   [`room`](Messenger::room), or use [`send_when_ready`](Messenger::send_when_ready).
//!   Calls wait for room themselves.
//! * **Failure**: a connection that closes, resets or carries bytes that are not the
//!   protocol makes its peer *lost*: every call waiting on it fails with
//!   [`CallError::PeerLost`], every later send or call fails fast, and the application
//!   hears of it through [`peer_lost`](Messenger::peer_lost) (a future) and
//!   [`on_peer_lost`](Messenger::on_peer_lost) (a callback). Nothing a peer sends panics
//!   a node or makes it buffer more than one frame ([`MessengerConfig::max_payload`]);
//!   its calls are bounded ([`MessengerConfig::max_incoming_calls`]) and reading from it
//!   stops while the answers to them pile up beyond twice the queue limit.
//! * **Heartbeats**: a joined peer silent for [`MessengerConfig::silence_limit`] is lost
//!   ([`LossReason::Silent`]), so a frozen peer is reported, not waited on forever.
//! * **Joining** (`join.rs`): the front end admits the nodes it expects
//!   ([`FrontEnd::expect`]), a node learns its [`RuntimeInfo`](crate::node::RuntimeInfo)
//!   ([`Messenger::join`]); nodes may then connect to each other directly
//!   ([`Messenger::listen_for_peers`], [`Messenger::connect_peer`]).
//!
//! ## Cores
//!
//! A connection belongs to the core that owns it (`ebb::net`'s rule): its handler reads
//! and dispatches there, and a local writer task moves the peer's queue into it. Everything
//! else — the peers, their queues and pending calls, the registered handlers — is shared
//! behind short spin locks, so `send`, `call` and the rest work from **any core** without
//! a hop: a frame queued on one core wakes the writer on the connection's core. Message
//! and call handlers run on the core that owns the sender's connection (with Linux sockets
//! the kernel spreads a front end's accepted connections over its cores), which is why
//! they are `Send + Sync`; call handlers' futures are local to that core.

mod control;
mod error;
mod join;
mod link;
mod peer;

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::{Future, poll_fn};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use core::time::Duration;

use ebb::net::SocketAddr;
use ebb::{EbbId, IOBuf, IOBufChain};

pub use control::{Control, PROTOCOL_VERSION};
pub use error::{CallError, JoinError, LossReason, ProtocolError, SendError};
pub use join::{Expectation, FrontEnd, PeerListener, join};

use crate::node::NodeId;
use crate::wire::{self, FrameClass, HEADER_LEN, Header, MAX_PAYLOAD};
use link::CallFuture;
use peer::{Closing, Peer, Refusal, UNASSIGNED};

/// The largest control payload (a Hello, Welcome or refusal); a connection that has not
/// joined may not send a larger frame.
pub const MAX_CONTROL_PAYLOAD: u32 = 1024;

/// The most bytes of a Failure's reason that are kept.
pub const MAX_FAILURE_REASON: usize = 1024;

/// How many connection errors [`Messenger::recent_errors`] keeps.
pub const RECENT_ERRORS: usize = 32;

/// A Messenger's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessengerConfig {
    /// Bytes (headers included) that may wait in one peer's queue before
    /// [`Messenger::send`] refuses more. Default 4 MiB.
    pub queue_limit: usize,
    /// The largest payload a peer may send us (at most [`MAX_PAYLOAD`], the default).
    pub max_payload: u32,
    /// Calls from one peer whose handlers may run at once; more are answered with a
    /// "busy" Failure. Default 256.
    pub max_incoming_calls: usize,
    /// How long a join may take, on both sides. Default 10 s.
    pub handshake_timeout: Duration,
    /// A joined peer from which nothing (no frame, not even a heartbeat) arrives for
    /// this long is lost ([`LossReason::Silent`]); each side sends a heartbeat every
    /// quarter of it. Default 1 s; `None`: no heartbeats, only the connection's end
    /// tells (a peer must then send nothing it would not otherwise).
    pub silence_limit: Option<Duration>,
}

impl Default for MessengerConfig {
    fn default() -> Self {
        MessengerConfig {
            queue_limit: 4 << 20,
            max_payload: MAX_PAYLOAD,
            max_incoming_calls: 256,
            handshake_timeout: Duration::from_secs(10),
            silence_limit: Some(Duration::from_secs(1)),
        }
    }
}

/// What a Messenger counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessengerStats {
    /// One-way messages queued.
    pub messages_sent: u64,
    /// One-way messages received from joined peers.
    pub messages_received: u64,
    /// Of those, messages for an (Ebb, kind) with no handler, dropped.
    pub unhandled_messages: u64,
    /// Calls made.
    pub calls_sent: u64,
    /// Calls received.
    pub calls_received: u64,
    /// Of those, calls for an (Ebb, kind) with no handler (answered with a Failure).
    pub unhandled_calls: u64,
    /// Answers (replies and failures) queued for peers.
    pub calls_answered: u64,
    /// Answers that came after their caller stopped waiting, dropped.
    pub late_answers: u64,
    /// Joined peers lost.
    pub peers_lost: u64,
    /// Joins refused (front end).
    pub connections_refused: u64,
    /// Direct connections to a peer tried again because it did not listen yet
    /// ([`Messenger::connect_peer`]).
    pub peer_connect_retries: u64,
}

/// A connection that ended in error (refused, aborted for bad bytes, lost), as
/// [`Messenger::recent_errors`] keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionError {
    /// Where the connection came from.
    pub peer_addr: SocketAddr,
    /// The peer, if it had joined.
    pub node: Option<NodeId>,
    /// What happened.
    pub reason: LossReason,
}

#[derive(Default)]
struct Counter(AtomicU64);

impl Counter {
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct Counters {
    messages_sent: Counter,
    messages_received: Counter,
    unhandled_messages: Counter,
    calls_sent: Counter,
    calls_received: Counter,
    unhandled_calls: Counter,
    calls_answered: Counter,
    late_answers: Counter,
    peers_lost: Counter,
    connections_refused: Counter,
    peer_connect_retries: Counter,
}

type MessageFn = dyn Fn(NodeId, IOBufChain) + Send + Sync;
type CallFn = dyn Fn(NodeId, IOBufChain) -> CallFuture + Send + Sync;
type LossFn = dyn Fn(NodeId, &LossReason) + Send + Sync;

#[derive(Clone)]
enum Handler {
    Message(Arc<MessageFn>),
    Call(Arc<CallFn>),
}

/// (destination Ebb, kind, is a call handler).
type HandlerKey = (u32, u16, bool);

struct Inner {
    /// This node's id, `UNASSIGNED` until joined.
    node: AtomicU32,
    /// The application's peer key: the front end's own, a node's from its Welcome.
    peer_key: spin::Once<u64>,
    /// A join is under way or done.
    joining: spin::Mutex<bool>,
    config: MessengerConfig,
    handlers: spin::RwLock<BTreeMap<HandlerKey, Handler>>,
    peers: spin::Mutex<BTreeMap<NodeId, Arc<Peer>>>,
    /// [`Messenger::shutdown`] was called: no peer is admitted any more.
    shut: AtomicBool,
    /// The nodes [`Messenger::connect_peer`] is connecting to now.
    connecting: spin::Mutex<BTreeMap<NodeId, Connecting>>,
    loss_hooks: spin::RwLock<Vec<Arc<LossFn>>>,
    stats: Counters,
    errors: spin::Mutex<VecDeque<ConnectionError>>,
}

/// [`Messenger::connect_peer`]'s calls to one node under way. Of two nodes connecting to
/// each other at once, the connection from the lower node id stays: the lower refuses
/// the other's PeerHello while it connects itself, the higher admits the lower's and
/// notes it here, so that its own attempt, refused, counts as connected.
#[derive(Default)]
struct Connecting {
    calls: usize,
    /// The node's own connection to this one was admitted meanwhile.
    crossed: bool,
}

/// Why the lower node of two connecting to each other at once refuses the higher's
/// PeerHello (the higher knows it by these exact words).
fn crossing_refusal(lower: NodeId, higher: NodeId) -> String {
    alloc::format!(
        "{lower} is connecting to {higher} itself: of two connections at once, the one from the lower node id stays"
    )
}

impl Inner {
    fn handler(&self, ebb: EbbId, kind: u16, call: bool) -> Option<Handler> {
        self.handlers
            .read()
            .get(&(ebb.as_u32(), kind, call))
            .cloned()
    }

    fn record_error(&self, peer_addr: SocketAddr, node: Option<NodeId>, reason: LossReason) {
        let mut errors = self.errors.lock();
        if errors.len() == RECENT_ERRORS {
            errors.pop_front();
        }
        errors.push_back(ConnectionError {
            peer_addr,
            node,
            reason,
        });
    }
}

/// What [`Messenger::publish_peer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Published {
    Yes,
    /// A live peer with that id is there; nothing was queued.
    Taken,
    /// The peer was lost before its Welcome could be queued; not published.
    Lost,
    /// The Messenger was shut down; not published (the caller ends the connection).
    Shut,
}

/// A node's Messenger (see the [module docs](self)). Cheap to clone; usable from every
/// core.
#[derive(Clone)]
pub struct Messenger {
    inner: Arc<Inner>,
}

impl core::fmt::Debug for Messenger {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.node() {
            Some(node) => write!(f, "Messenger({node})"),
            None => f.write_str("Messenger(not joined)"),
        }
    }
}

impl Messenger {
    /// A Messenger for a node that has yet to [`join`](Self::join): register its
    /// handlers, then join.
    pub fn new(config: MessengerConfig) -> Messenger {
        Messenger::with_id(UNASSIGNED, config)
    }

    fn with_node(node: NodeId, config: MessengerConfig) -> Messenger {
        let messenger = Messenger::with_id(node.0, config);
        *messenger.inner.joining.lock() = true;
        messenger
    }

    fn with_id(node: u32, mut config: MessengerConfig) -> Messenger {
        config.max_payload = config.max_payload.min(MAX_PAYLOAD);
        Messenger {
            inner: Arc::new(Inner {
                node: AtomicU32::new(node),
                peer_key: spin::Once::new(),
                joining: spin::Mutex::new(false),
                config,
                handlers: spin::RwLock::new(BTreeMap::new()),
                peers: spin::Mutex::new(BTreeMap::new()),
                shut: AtomicBool::new(false),
                connecting: spin::Mutex::new(BTreeMap::new()),
                loss_hooks: spin::RwLock::new(Vec::new()),
                stats: Counters::default(),
                errors: spin::Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// This node's id (`None` until joined).
    pub fn node(&self) -> Option<NodeId> {
        match self.inner.node.load(Ordering::Acquire) {
            UNASSIGNED => None,
            n => Some(NodeId(n)),
        }
    }

    /// Its limits.
    pub fn config(&self) -> &MessengerConfig {
        &self.inner.config
    }

    fn start_joining(&self) -> bool {
        let mut joining = self.inner.joining.lock();
        !core::mem::replace(&mut *joining, true)
    }

    fn stop_joining(&self) {
        *self.inner.joining.lock() = false;
    }

    /// Takes the id a Welcome gave; false if it already has one.
    fn assume_node(&self, node: NodeId) -> bool {
        self.inner
            .node
            .compare_exchange(UNASSIGNED, node.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Publishes `peer` as `node` (with `only_if_new`, unless a live one with its id is
    /// there), queuing `first` (its Welcome) on it under the same lock: once another core
    /// can find the peer, whatever it sends goes after the Welcome.
    fn publish_peer(
        &self,
        node: NodeId,
        peer: &Arc<Peer>,
        only_if_new: bool,
        first: Option<IOBufChain>,
    ) -> Published {
        let mut peers = self.inner.peers.lock();
        // Under the lock `shutdown` takes to list the peers: a peer published before it
        // is disconnected by it, one after it is not published.
        if self.inner.shut.load(Ordering::Acquire) {
            return Published::Shut;
        }
        if only_if_new && peers.get(&node).is_some_and(|p| p.lost().is_none()) {
            return Published::Taken;
        }
        if let Some(frame) = first
            && peer.enqueue(frame, false).is_err()
        {
            return Published::Lost;
        }
        peers.insert(node, peer.clone());
        Published::Yes
    }

    /// Whether this node is connecting to `node` ([`connect_peer`](Self::connect_peer)).
    fn connecting_to(&self, node: NodeId) -> bool {
        self.inner.connecting.lock().contains_key(&node)
    }

    /// `node`'s own connection to this node was admitted: if this node is connecting to
    /// it, that connection is the one that stays.
    fn crossed(&self, node: NodeId) {
        if let Some(c) = self.inner.connecting.lock().get_mut(&node) {
            c.crossed = true;
        }
    }

    /// Whether `node`'s own connection, admitted while this node was connecting to it, is
    /// up: then this node's attempt, refused, has its peer all the same.
    fn crossed_and_up(&self, node: NodeId) -> bool {
        let crossed = self
            .inner
            .connecting
            .lock()
            .get(&node)
            .is_some_and(|c| c.crossed);
        crossed
            && self
                .inner
                .peers
                .lock()
                .get(&node)
                .is_some_and(|p| p.lost().is_none())
    }

    fn peer(&self, node: NodeId) -> Result<Arc<Peer>, SendError> {
        self.inner
            .peers
            .lock()
            .get(&node)
            .cloned()
            .ok_or(SendError::UnknownPeer(node))
    }

    fn report_loss(&self, node: NodeId, peer_addr: SocketAddr, reason: LossReason) {
        self.inner.stats.peers_lost.add(1);
        if !matches!(reason, LossReason::Disconnected) {
            self.inner
                .record_error(peer_addr, Some(node), reason.clone());
        }
        let hooks: Vec<Arc<LossFn>> = self.inner.loss_hooks.read().clone();
        for hook in hooks {
            hook(node, &reason);
        }
    }

    /// Registers `handler` for one-way messages of `kind` to `ebb` (replacing any). It
    /// runs on the core that owns the sender's connection, with the sender and the
    /// payload.
    pub fn on_message(
        &self,
        ebb: EbbId,
        kind: u16,
        handler: impl Fn(NodeId, IOBufChain) + Send + Sync + 'static,
    ) {
        self.inner.handlers.write().insert(
            (ebb.as_u32(), kind, false),
            Handler::Message(Arc::new(handler)),
        );
    }

    /// Registers `handler` for calls of `kind` to `ebb` (replacing any). It runs on the
    /// core that owns the caller's connection; its future (local to that core) answers:
    /// `Ok` as a Reply, `Err(reason)` as a Failure the caller gets as
    /// [`CallError::Failed`].
    pub fn on_call<F>(
        &self,
        ebb: EbbId,
        kind: u16,
        handler: impl Fn(NodeId, IOBufChain) -> F + Send + Sync + 'static,
    ) where
        F: Future<Output = Result<IOBufChain, String>> + 'static,
    {
        let boxed = move |from: NodeId, payload: IOBufChain| -> CallFuture {
            Box::pin(handler(from, payload))
        };
        self.inner
            .handlers
            .write()
            .insert((ebb.as_u32(), kind, true), Handler::Call(Arc::new(boxed)));
    }

    /// Removes the handlers of `kind` to `ebb` (both one-way and call).
    pub fn unregister(&self, ebb: EbbId, kind: u16) {
        let mut handlers = self.inner.handlers.write();
        handlers.remove(&(ebb.as_u32(), kind, false));
        handlers.remove(&(ebb.as_u32(), kind, true));
    }

    /// Calls `hook` whenever a joined peer is lost, on the core that owned its
    /// connection (or the one that disconnected it).
    pub fn on_peer_lost(&self, hook: impl Fn(NodeId, &LossReason) + Send + Sync + 'static) {
        self.inner.loss_hooks.write().push(Arc::new(hook));
    }

    /// The joined peers and whether each is still connected.
    pub fn peers(&self) -> Vec<(NodeId, bool)> {
        self.inner
            .peers
            .lock()
            .iter()
            .map(|(node, peer)| (*node, peer.lost().is_none()))
            .collect()
    }

    /// Bytes queued for `node` and not yet taken by its connection.
    pub fn queued_bytes(&self, node: NodeId) -> Result<usize, SendError> {
        Ok(self.peer(node)?.queued_bytes())
    }

    /// What this Messenger counted.
    pub fn stats(&self) -> MessengerStats {
        let s = &self.inner.stats;
        MessengerStats {
            messages_sent: s.messages_sent.get(),
            messages_received: s.messages_received.get(),
            unhandled_messages: s.unhandled_messages.get(),
            calls_sent: s.calls_sent.get(),
            calls_received: s.calls_received.get(),
            unhandled_calls: s.unhandled_calls.get(),
            calls_answered: s.calls_answered.get(),
            late_answers: s.late_answers.get(),
            peers_lost: s.peers_lost.get(),
            connections_refused: s.connections_refused.get(),
            peer_connect_retries: s.peer_connect_retries.get(),
        }
    }

    /// The last [`RECENT_ERRORS`] connections that ended in error, oldest first.
    pub fn recent_errors(&self) -> Vec<ConnectionError> {
        self.inner.errors.lock().iter().cloned().collect()
    }

    fn header(
        &self,
        class: FrameClass,
        ebb: EbbId,
        kind: u16,
        call: u32,
    ) -> Result<Header, SendError> {
        Ok(Header {
            class,
            source: self.node().ok_or(SendError::NotJoined)?,
            destination: ebb,
            kind,
            call,
            len: 0,
        })
    }

    fn message_frame(
        &self,
        ebb: EbbId,
        kind: u16,
        payload: IOBufChain,
    ) -> Result<IOBufChain, SendError> {
        let header = self.header(FrameClass::Message, ebb, kind, 0)?;
        let len = payload.len();
        wire::encode(header, payload).map_err(|e| SendError::from_wire(e, len))
    }

    /// Queues a one-way message of `kind` for `ebb` on `node`. Delivered in order with
    /// every other frame to that node, or the peer is reported lost. Fails with
    /// [`SendError::Full`] when the peer's queue is at its limit (the payload is dropped;
    /// clone it first — a clone shares the buffers — to retry after
    /// [`room`](Self::room)).
    pub fn send(
        &self,
        node: NodeId,
        ebb: EbbId,
        kind: u16,
        payload: IOBufChain,
    ) -> Result<(), SendError> {
        let peer = self.peer(node)?;
        let frame = self.message_frame(ebb, kind, payload)?;
        match peer.enqueue(frame, true) {
            Ok(()) => {
                self.inner.stats.messages_sent.add(1);
                Ok(())
            }
            Err(Refusal::Full { queued, .. }) => Err(SendError::Full {
                node,
                queued,
                limit: peer.queue_limit,
            }),
            Err(Refusal::Lost(reason)) => Err(SendError::PeerLost { node, reason }),
        }
    }

    /// [`send`](Self::send), waiting for room in the peer's queue instead of failing with
    /// [`SendError::Full`].
    pub async fn send_when_ready(
        &self,
        node: NodeId,
        ebb: EbbId,
        kind: u16,
        payload: IOBufChain,
    ) -> Result<(), SendError> {
        let peer = self.peer(node)?;
        let mut frame = self.message_frame(ebb, kind, payload)?;
        loop {
            let len = frame.len();
            poll_fn(|cx| peer.poll_room(cx, len)).await?;
            match peer.enqueue(frame, true) {
                Ok(()) => {
                    self.inner.stats.messages_sent.add(1);
                    return Ok(());
                }
                // Another sender took the room first.
                Err(Refusal::Full { frame: back, .. }) => frame = back,
                Err(Refusal::Lost(reason)) => return Err(SendError::PeerLost { node, reason }),
            }
        }
    }

    /// Resolves once a payload of `len` bytes would be queued for `node` (or with the
    /// error that says it never will be).
    pub fn room(
        &self,
        node: NodeId,
        len: usize,
    ) -> impl Future<Output = Result<(), SendError>> + 'static {
        let peer = self.peer(node);
        async move {
            let peer = peer?;
            poll_fn(|cx| peer.poll_room(cx, len + HEADER_LEN)).await
        }
    }

    /// Calls `ebb` on `node` with a request of `kind`: resolves to the handler's reply, its
    /// failure, or [`CallError::PeerLost`] if the peer is lost first. Waits for room in
    /// the peer's queue. Dropping the future forgets the call (a late answer is dropped).
    pub fn call(
        &self,
        node: NodeId,
        ebb: EbbId,
        kind: u16,
        payload: IOBufChain,
    ) -> impl Future<Output = Result<IOBufChain, CallError>> + 'static {
        let this = self.clone();
        async move {
            let peer = this.peer(node)?;
            let header = this.header(FrameClass::Request, ebb, kind, 1)?;
            let len = payload.len();
            if len > MAX_PAYLOAD as usize {
                return Err(CallError::Send(SendError::TooLong {
                    len,
                    max: MAX_PAYLOAD,
                }));
            }
            let (mut promise, answer) = ebb::future::promise();
            let mut payload = Some(payload);
            let id = loop {
                let make = |id: u32| {
                    let header = Header { call: id, ..header };
                    let payload = payload.take().unwrap_or_default();
                    wire::encode(header, payload).map_err(|e| SendError::from_wire(e, len))
                };
                match peer.enqueue_call(make, len + HEADER_LEN, promise) {
                    Ok(id) => break id,
                    Err((SendError::Full { .. }, Some(back))) => {
                        promise = back;
                        poll_fn(|cx| peer.poll_room(cx, len + HEADER_LEN)).await?;
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            };
            this.inner.stats.calls_sent.add(1);
            let forget = ForgetCall { peer: &peer, id };
            let result = answer.await;
            drop(forget);
            match result {
                Ok(answer) => answer,
                Err(_) => Err(CallError::PeerLost {
                    node,
                    reason: peer.lost().unwrap_or(LossReason::Disconnected),
                }),
            }
        }
    }

    /// [`call`](Self::call) with a deadline: [`CallError::TimedOut`] after `limit`.
    pub async fn call_timeout(
        &self,
        node: NodeId,
        ebb: EbbId,
        kind: u16,
        payload: IOBufChain,
        limit: Duration,
    ) -> Result<IOBufChain, CallError> {
        match ebb::timeout(limit, self.call(node, ebb, kind, payload)).await {
            Ok(result) => result,
            Err(_) => Err(CallError::TimedOut(limit)),
        }
    }

    /// Resolves when `node` is lost, with why (at once if it already is).
    pub fn peer_lost(
        &self,
        node: NodeId,
    ) -> impl Future<Output = Result<LossReason, SendError>> + 'static {
        let waiting = self.peer(node).map(|peer| peer.wait_lost());
        async move {
            match waiting? {
                Ok(reason) => Ok(reason),
                Err(future) => future.await.map_err(|_| SendError::UnknownPeer(node)),
            }
        }
    }

    /// Aborts the connection to `node`: its pending calls fail, it is reported lost with
    /// [`LossReason::Disconnected`].
    pub fn disconnect(&self, node: NodeId) -> Result<(), SendError> {
        let peer = self.peer(node)?;
        if peer.fail(LossReason::Disconnected) {
            self.report_loss(node, unspecified_addr(), LossReason::Disconnected);
        }
        peer.close(Closing::Abort);
        Ok(())
    }

    /// Disconnects every peer, and admits no more: a join or direct connection still
    /// in its handshake is ended ([`LossReason::Disconnected`]), and
    /// [`connect_peer`](Self::connect_peer) tries no more.
    pub fn shutdown(&self) {
        self.inner.shut.store(true, Ordering::Release);
        let nodes: Vec<NodeId> = self.inner.peers.lock().keys().copied().collect();
        for node in nodes {
            let _ = self.disconnect(node);
        }
    }
}

fn unspecified_addr() -> SocketAddr {
    SocketAddr::V4(ebb::net::SocketAddrV4::new(
        ebb::net::Ipv4Addr::UNSPECIFIED,
        0,
    ))
}

/// Forgets a call whose future is dropped before its answer came.
struct ForgetCall<'a> {
    peer: &'a Peer,
    id: u32,
}

impl Drop for ForgetCall<'_> {
    fn drop(&mut self) {
        self.peer.forget_call(self.id);
    }
}

/// A control frame from `source`.
fn control_frame(source: NodeId, control: &Control) -> Result<IOBufChain, SendError> {
    let bytes = postcard::to_allocvec(control).map_err(|_| SendError::OutOfMemory)?;
    let header = Header {
        class: FrameClass::Control,
        source,
        destination: EbbId::new_static(0),
        kind: 0,
        call: 0,
        len: 0,
    };
    let len = bytes.len();
    wire::encode(header, IOBufChain::from(IOBuf::from_vec(bytes)))
        .map_err(|e| SendError::from_wire(e, len))
}
