//! Joining: the front end admits the nodes it expects, each node learns who it is.
//!
//! ```text
//!   node                                   front end (node 0, listening)
//!    | -- TCP connect ----------------------> |
//!    | -- Control Hello { version, token } --> |  token expected? → next node id
//!    | <-- Control Welcome(RuntimeInfo) ------ |  (or Refused(reason), then FIN)
//!    | <========= Messages, calls, answers ==> |
//! ```
//!
//! Control payloads are postcard-encoded [`Control`]s of at most
//! [`MAX_CONTROL_PAYLOAD`](super::MAX_CONTROL_PAYLOAD) bytes. The token is how the front
//! end knows the connecting node is the one it allocated (the allocator puts it on the
//! node's command line); a connection with an unknown token, another protocol version, a
//! first frame that is not a Hello, or no Hello within the handshake timeout is refused or
//! aborted, and recorded in [`Messenger::recent_errors`].

use alloc::collections::BTreeMap;
use alloc::sync::{Arc, Weak};
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::AtomicU32;
use core::task::{Context, Poll};
use core::time::Duration;

use ebb::future::{PromiseFuture, promise};
use ebb::net::{
    CloseReason, Connection, Listener, Network, SocketAddr, SocketAddrV4, TcpConnection,
    TcpErrorKind,
};

use super::control::{Control, Expected, FrontShared, PROTOCOL_VERSION};
use super::error::{JoinError, LossReason};
use super::link::{Link, Role};
use super::peer::{Closing, Peer, write_loop};
use super::{Messenger, MessengerConfig, control_frame, crossing_refusal};
use crate::node::{NodeId, RuntimeInfo};

/// The front end (node 0): listens for nodes, admits the ones it expects, and is their
/// peer through its [`Messenger`]. Dropping it stops listening (joined nodes stay).
pub struct FrontEnd {
    messenger: Messenger,
    shared: Arc<FrontShared>,
    listener: Listener,
}

impl FrontEnd {
    /// Starts a front end listening on `port` of `network` (0: any free port). Nodes
    /// reach it at the listener's address unless [`expect_at`](Self::expect_at) says
    /// otherwise.
    pub async fn start(
        network: &Network,
        port: u16,
        config: MessengerConfig,
    ) -> Result<FrontEnd, JoinError> {
        let messenger = Messenger::with_node(NodeId::FRONT_END, config);
        let seed = ebb::now().as_nanos()
            ^ ((port as u64) << 48)
            ^ (Arc::as_ptr(&messenger.inner) as usize as u64);
        messenger.inner.peer_key.call_once(|| make_peer_key(seed));
        let shared_slot: Arc<spin::Once<Weak<FrontShared>>> = Arc::new(spin::Once::new());
        let on_accept = {
            let messenger = messenger.clone();
            let slot = shared_slot.clone();
            move |conn: Connection| {
                match slot.get().and_then(Weak::upgrade) {
                    Some(front) => accept(&messenger, front, conn),
                    // Not started yet, or stopped: nobody may join through it.
                    None => conn.abort(),
                }
            }
        };
        let listener = network
            .listen(port, on_accept)
            .await
            .map_err(JoinError::Listen)?;
        let default_address = match listener.local_addr() {
            SocketAddr::V4(v4) => v4,
            SocketAddr::V6(v6) => SocketAddrV4::new(ebb::net::Ipv4Addr::LOCALHOST, v6.port()),
        };
        let shared = Arc::new(FrontShared {
            expected: spin::Mutex::new(BTreeMap::new()),
            next_node: AtomicU32::new(1),
            default_address,
        });
        shared_slot.call_once(|| Arc::downgrade(&shared));
        Ok(FrontEnd {
            messenger,
            shared,
            listener,
        })
    }

    /// The front end's Messenger (node 0).
    pub fn messenger(&self) -> &Messenger {
        &self.messenger
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// Takes a node's shared-memory connection (the front end's end of the window of a
    /// node it runs in its own process, [`ebb::shm::attach`]): the node joins through it
    /// exactly as through TCP — its Hello must carry a token this front end expects — and
    /// every later message to and from it takes the window, with no system call per
    /// message. The connection belongs to the calling core.
    pub fn accept_shared(&self, conn: ebb::shm::SharedConn) {
        accept(&self.messenger, self.shared.clone(), Connection::from(conn));
    }

    /// Expects a node presenting `token`; resolves to its [`RuntimeInfo`] once it joined.
    /// The node reaches the front end at the listener's address. Dropping the future
    /// withdraws the expectation (a later Hello with the token is refused); wrap it in
    /// `ebb::timeout` to bound the wait.
    pub fn expect(&self, token: u64) -> Expectation {
        self.expect_at(token, self.shared.default_address)
    }

    /// [`expect`](Self::expect), telling the node it reaches the front end at
    /// `reachable_at` (a VM behind user-mode networking sees the host at another address).
    pub fn expect_at(&self, token: u64, reachable_at: SocketAddrV4) -> Expectation {
        let mut expected = self.shared.expected.lock();
        if expected.contains_key(&token) {
            return Expectation {
                state: ExpectationState::Failed(Some(JoinError::TokenInUse(token))),
                token,
                front: Weak::new(),
            };
        }
        let (promise, future) = promise();
        expected.insert(
            token,
            Expected {
                promise,
                reachable_at,
            },
        );
        Expectation {
            state: ExpectationState::Waiting(future),
            token,
            front: Arc::downgrade(&self.shared),
        }
    }
}

impl Drop for FrontEnd {
    fn drop(&mut self) {
        self.listener.close();
    }
}

impl core::fmt::Debug for FrontEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "FrontEnd({})", self.local_addr())
    }
}

/// A node the front end expects: resolves to its [`RuntimeInfo`] once it joined.
#[must_use = "dropping an Expectation withdraws it"]
pub struct Expectation {
    state: ExpectationState,
    token: u64,
    front: Weak<FrontShared>,
}

enum ExpectationState {
    Waiting(PromiseFuture<Result<RuntimeInfo, JoinError>>),
    Failed(Option<JoinError>),
}

impl Future for Expectation {
    type Output = Result<RuntimeInfo, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            ExpectationState::Waiting(future) => match Pin::new(future).poll(cx) {
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => Poll::Ready(Err(JoinError::FrontEndStopped)),
                Poll::Pending => Poll::Pending,
            },
            ExpectationState::Failed(e) => {
                Poll::Ready(Err(e.take().unwrap_or(JoinError::FrontEndStopped)))
            }
        }
    }
}

impl Drop for Expectation {
    fn drop(&mut self) {
        if let (ExpectationState::Waiting(_), Some(front)) = (&self.state, self.front.upgrade()) {
            let _ = front.expected.lock().remove(&self.token);
        }
    }
}

/// Front end: a node connected (on the core that accepted it).
fn accept(messenger: &Messenger, front: Arc<FrontShared>, conn: Connection) {
    let config = &messenger.inner.config;
    let peer = Arc::new(Peer::new(None, config.queue_limit));
    let peer_addr = conn.peer_addr();
    let link = Link::new(
        messenger.clone(),
        peer.clone(),
        Role::AwaitHello(front),
        peer_addr,
    );
    conn.set_handler(link);
    let _detached = ebb::spawn_local(write_loop(conn, peer.clone()));
    handshake_deadline(messenger, peer, peer_addr);
}

/// Aborts an accepted connection that has not joined within the handshake timeout. One
/// already ending (refused: its refusal is on its way, then FIN) is given one more
/// timeout to end: its error is recorded already, so a peer that keeps its side open
/// past the timeout adds no handshake timeout to it, and the refusal is not cut short by
/// a reset — but a peer that never takes the refusal (a zero window) or never closes is
/// then aborted, quietly, rather than kept for good.
fn handshake_deadline(messenger: &Messenger, peer: Arc<Peer>, peer_addr: SocketAddr) {
    let timeout = messenger.inner.config.handshake_timeout;
    let messenger = messenger.clone();
    let _detached = ebb::spawn_local(async move {
        ebb::sleep(timeout).await;
        if peer.node().is_some() || peer.lost().is_some() {
            return;
        }
        if !peer.closing() {
            let reason = LossReason::HandshakeTimeout(timeout);
            if peer.fail(reason.clone()) {
                messenger.inner.record_error(peer_addr, None, reason);
            }
            peer.close(Closing::Abort);
            return;
        }
        ebb::sleep(timeout).await;
        if peer.node().is_none() && peer.lost().is_none() {
            peer.close(Closing::Abort);
        }
    });
}

/// Joins the application whose front end listens at `front_end`, presenting `token`:
/// a fresh [`Messenger`] with the default configuration, and what the front end told
/// this node. See [`Messenger::join`] to register handlers before joining.
pub async fn join(
    network: &Network,
    front_end: SocketAddr,
    token: u64,
) -> Result<(Messenger, RuntimeInfo), JoinError> {
    let messenger = Messenger::new(MessengerConfig::default());
    let info = messenger.join(network, front_end, token).await?;
    Ok((messenger, info))
}

impl Messenger {
    /// Joins the application whose front end listens at `front_end`, presenting `token`
    /// (at most [`MessengerConfig::handshake_timeout`]). On success this Messenger is the
    /// node the front end named, the front end is its peer, and the connection belongs
    /// to the calling core. Handlers registered before are in place when the first
    /// message arrives.
    pub async fn join(
        &self,
        network: &Network,
        front_end: SocketAddr,
        token: u64,
    ) -> Result<RuntimeInfo, JoinError> {
        if !self.start_joining() {
            return Err(JoinError::AlreadyJoined);
        }
        let result = self.join_once(network, front_end, token).await;
        if result.is_err() {
            self.stop_joining();
        }
        result
    }

    async fn join_once(
        &self,
        network: &Network,
        front_end: SocketAddr,
        token: u64,
    ) -> Result<RuntimeInfo, JoinError> {
        let timeout = self.inner.config.handshake_timeout;
        let conn = match ebb::timeout(timeout, network.connect(front_end)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(kind)) => return Err(JoinError::Connect(kind)),
            Err(_) => return Err(JoinError::TimedOut(timeout)),
        };
        self.join_over(conn, token).await
    }

    /// [`join`](Self::join) through `conn`, a connection to the front end already open:
    /// on a native node its front end runs in-process, the shared window's
    /// ([`ebb::shm::connect_to_front_end`]), so that every message to the front end
    /// takes memory instead of the network. The front end must
    /// [`accept_shared`](FrontEnd::accept_shared) its end.
    pub async fn join_shared(
        &self,
        conn: ebb::shm::SharedConn,
        token: u64,
    ) -> Result<RuntimeInfo, JoinError> {
        if !self.start_joining() {
            return Err(JoinError::AlreadyJoined);
        }
        let result = self.join_over(Connection::from(conn), token).await;
        if result.is_err() {
            self.stop_joining();
        }
        result
    }

    async fn join_over(&self, conn: Connection, token: u64) -> Result<RuntimeInfo, JoinError> {
        let timeout = self.inner.config.handshake_timeout;
        let peer = Arc::new(Peer::new(None, self.inner.config.queue_limit));
        let (promise, welcome) = promise();
        let link = Link::new(
            self.clone(),
            peer.clone(),
            Role::AwaitWelcome(Some(promise)),
            conn.peer_addr(),
        );
        conn.set_handler(link);
        let hello = Control::Hello {
            version: PROTOCOL_VERSION,
            token,
        };
        let frame = control_frame(NodeId(super::peer::UNASSIGNED), &hello)
            .map_err(|_| JoinError::Lost(LossReason::Disconnected))?;
        let _ = peer.enqueue(frame, false);
        let _detached = ebb::spawn_local(write_loop(conn, peer.clone()));
        match ebb::timeout(timeout, welcome).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(JoinError::Lost(LossReason::Disconnected)),
            Err(_) => {
                peer.fail(LossReason::HandshakeTimeout(timeout));
                peer.close(Closing::Abort);
                Err(JoinError::TimedOut(timeout))
            }
        }
    }
}

/// A node's listener for direct connections from other nodes of its application
/// ([`Messenger::listen_for_peers`]). Dropping it stops listening (connected peers stay).
pub struct PeerListener {
    listener: Listener,
}

impl PeerListener {
    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }
}

impl Drop for PeerListener {
    fn drop(&mut self) {
        self.listener.close();
    }
}

impl core::fmt::Debug for PeerListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PeerListener({})", self.local_addr())
    }
}

/// A peer key from the clock and an address: nodes present it to each other, so a
/// stray connection cannot pose as a node by naming a node id. Not a cryptographic
/// secret (see docs/13-distributed.md).
fn make_peer_key(seed: u64) -> u64 {
    // splitmix64's finalizer.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Messenger {
    /// Listens on `port` of `network` for other nodes of the application connecting
    /// directly ([`connect_peer`](Self::connect_peer)). The node must have joined.
    /// A connecting node presents the application's peer key and its id; one already
    /// connected and alive, a wrong key or this node's own id is refused.
    pub async fn listen_for_peers(
        &self,
        network: &Network,
        port: u16,
    ) -> Result<PeerListener, JoinError> {
        if self.node().is_none() || self.inner.peer_key.get().is_none() {
            return Err(JoinError::NotJoined);
        }
        let messenger = self.clone();
        let listener = network
            .listen(port, move |conn: Connection| {
                let config = &messenger.inner.config;
                let peer = Arc::new(Peer::new(None, config.queue_limit));
                let peer_addr = conn.peer_addr();
                let link = Link::new(
                    messenger.clone(),
                    peer.clone(),
                    Role::AwaitPeerHello,
                    peer_addr,
                );
                conn.set_handler(link);
                let _detached = ebb::spawn_local(write_loop(conn, peer.clone()));
                handshake_deadline(&messenger, peer, peer_addr);
            })
            .await
            .map_err(JoinError::Listen)?;
        Ok(PeerListener { listener })
    }

    /// Connects directly to `node`, which listens at `addr`
    /// ([`listen_for_peers`](Self::listen_for_peers)): from then on `node` is a peer
    /// like the front end. This node must have joined. Of two nodes connecting to each
    /// other at once, the connection from the lower id stays and both calls succeed: the
    /// lower refuses the higher's PeerHello while it connects itself, and the higher,
    /// refused so, tries again until the lower's connection (which it admits) is up.
    ///
    /// A node that has just joined may not listen yet: the front end counts it joined
    /// when it sends the Welcome, and may name it to others before the node has read
    /// that Welcome and started [`listen_for_peers`](Self::listen_for_peers). So a
    /// connection refused, or reset before the peer's answer (a user-mode network's
    /// forwarder accepts first and resets when the node behind it refuses), is tried
    /// again, backing off from 1 ms, until the handshake timeout has passed; the last
    /// error is returned then.
    pub async fn connect_peer(
        &self,
        network: &Network,
        node: NodeId,
        addr: SocketAddr,
    ) -> Result<(), JoinError> {
        let Some(me) = self.node() else {
            return Err(JoinError::NotJoined);
        };
        // Already a live peer (it connected to us, or we to it): nothing to do. A second
        // connection would only be refused, and in a crossing the two could each close
        // the one the other kept.
        if self.peers().contains(&(node, true)) {
            return Ok(());
        }
        let timeout = self.inner.config.handshake_timeout;
        let deadline = ebb::now() + timeout;
        let mut backoff = Duration::from_millis(1);
        // Registered before the first connection is made: a PeerHello from `node` that
        // comes meanwhile sees it.
        let _connecting = ConnectingTo::new(self, node);
        let crossing = JoinError::Refused(crossing_refusal(node, me));
        loop {
            if self.inner.shut.load(core::sync::atomic::Ordering::Acquire) {
                return Err(JoinError::Lost(LossReason::Disconnected));
            }
            let left = deadline.saturating_duration_since(ebb::now());
            let error = match self.try_connect_peer(network, node, addr, left).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            // Refused, but `node`'s own connection (from the lower id) came in meanwhile.
            if self.crossed_and_up(node) {
                return Ok(());
            }
            // `node` connects to us itself (it has the lower id): its connection is on its
            // way, or fails, and then ours goes through.
            if !not_listening_yet(&error) && error != crossing {
                return Err(error);
            }
            if ebb::now() + backoff >= deadline {
                return Err(error);
            }
            self.inner.stats.peer_connect_retries.add(1);
            ebb::sleep(backoff).await;
            if self.crossed_and_up(node) {
                return Ok(());
            }
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
    }

    /// One attempt of [`connect_peer`](Self::connect_peer), given `timeout` for the
    /// connection and again for the answer.
    async fn try_connect_peer(
        &self,
        network: &Network,
        node: NodeId,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<(), JoinError> {
        let (Some(me), Some(&key)) = (self.node(), self.inner.peer_key.get()) else {
            return Err(JoinError::NotJoined);
        };
        let conn = match ebb::timeout(timeout, network.connect(addr)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(kind)) => return Err(JoinError::Connect(kind)),
            Err(_) => return Err(JoinError::TimedOut(timeout)),
        };
        let peer = Arc::new(Peer::new(None, self.inner.config.queue_limit));
        let (promise, welcome) = promise();
        let role = Role::AwaitPeerWelcome {
            expected: node,
            promise: Some(promise),
        };
        conn.set_handler(Link::new(
            self.clone(),
            peer.clone(),
            role,
            conn.peer_addr(),
        ));
        let hello = Control::PeerHello {
            version: PROTOCOL_VERSION,
            node: me,
            key,
        };
        let frame =
            control_frame(me, &hello).map_err(|_| JoinError::Lost(LossReason::Disconnected))?;
        let _ = peer.enqueue(frame, false);
        let _detached = ebb::spawn_local(write_loop(conn, peer.clone()));
        match ebb::timeout(timeout, welcome).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(JoinError::Lost(LossReason::Disconnected)),
            Err(_) => {
                peer.fail(LossReason::HandshakeTimeout(timeout));
                peer.close(Closing::Abort);
                Err(JoinError::TimedOut(timeout))
            }
        }
    }
}

/// [`Messenger::connect_peer`] under way to a node, while it lives.
struct ConnectingTo<'a> {
    messenger: &'a Messenger,
    node: NodeId,
}

impl<'a> ConnectingTo<'a> {
    fn new(messenger: &'a Messenger, node: NodeId) -> ConnectingTo<'a> {
        messenger
            .inner
            .connecting
            .lock()
            .entry(node)
            .or_default()
            .calls += 1;
        ConnectingTo { messenger, node }
    }
}

impl Drop for ConnectingTo<'_> {
    fn drop(&mut self) {
        let mut connecting = self.messenger.inner.connecting.lock();
        if let Some(c) = connecting.get_mut(&self.node) {
            c.calls -= 1;
            if c.calls == 0 {
                connecting.remove(&self.node);
            }
        }
    }
}

/// Whether a failed [`Messenger::connect_peer`] attempt looks like a node that does not
/// listen yet (worth another try) rather than one that answered and refused.
fn not_listening_yet(error: &JoinError) -> bool {
    matches!(
        error,
        JoinError::Connect(TcpErrorKind::ConnectionRefused | TcpErrorKind::ConnectionReset)
            | JoinError::Lost(LossReason::Connection(
                CloseReason::Reset | CloseReason::Error(TcpErrorKind::ConnectionRefused)
            ))
    )
}
