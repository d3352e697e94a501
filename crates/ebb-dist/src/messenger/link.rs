//! One connection's handler: decodes frames, runs the join handshake's two sides, and
//! dispatches a joined peer's messages, calls and answers. Runs on the core that owns the
//! connection.

use alloc::boxed::Box;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::sync::Arc;
use core::cell::Cell;
use core::time::Duration;

use ebb::future::Promise;
use ebb::net::{CloseReason, SocketAddr, TcpConnection, TcpHandler};
use ebb::{IOBuf, Instant};

use super::control::{Control, FrontShared, PROTOCOL_VERSION};
use super::error::{CallError, JoinError, LossReason, ProtocolError};
use super::peer::{Closing, Peer};
use super::{
    Handler, Inner, MAX_CONTROL_PAYLOAD, MAX_FAILURE_REASON, Messenger, Published, control_frame,
    crossing_refusal,
};
use crate::node::{NodeId, RuntimeInfo, global_ids_of};
use crate::wire::{Frame, FrameClass, FrameDecoder, HEADER_LEN, Header, encode};

/// Where the conversation is.
pub(crate) enum Role {
    /// Front end: a new connection; the first frame must be a Hello.
    AwaitHello(Arc<FrontShared>),
    /// Node: Hello sent; the first frame must be a Welcome or a refusal.
    AwaitWelcome(Option<Promise<Result<RuntimeInfo, JoinError>>>),
    /// Joined: the peer is this node.
    Joined(NodeId),
    /// Refused (front end): the refusal is on its way; anything more is ignored.
    Refused,
    /// A node listening for peers: a new connection; the first frame must be a PeerHello.
    AwaitPeerHello,
    /// A node connecting to a peer: PeerHello sent; the first frame must be a
    /// PeerWelcome naming `expected`, or a refusal.
    AwaitPeerWelcome {
        expected: NodeId,
        promise: Option<Promise<Result<(), JoinError>>>,
    },
}

pub(crate) struct Link {
    /// When bytes last came from the peer (for the heartbeat watch).
    heard: Rc<Cell<Instant>>,
    pub(crate) messenger: Messenger,
    pub(crate) peer: Arc<Peer>,
    pub(crate) decoder: FrameDecoder,
    pub(crate) role: Role,
    pub(crate) peer_addr: SocketAddr,
}

impl Link {
    /// A new link; until it is joined the decoder takes only control-sized frames, so an
    /// unauthenticated peer cannot make us hold more.
    pub(crate) fn new(
        messenger: Messenger,
        peer: Arc<Peer>,
        role: Role,
        peer_addr: SocketAddr,
    ) -> Link {
        Link {
            heard: Rc::new(Cell::new(ebb::now())),
            messenger,
            peer,
            decoder: FrameDecoder::new(MAX_CONTROL_PAYLOAD),
            role,
            peer_addr,
        }
    }

    fn inner(&self) -> &Inner {
        &self.messenger.inner
    }

    /// The connection ended or must end for `reason`: fail the peer (once) and tell whoever
    /// waits on this stage of the conversation.
    fn lose(&mut self, reason: LossReason) {
        if !self.peer.fail(reason.clone()) {
            return;
        }
        match &mut self.role {
            Role::Joined(node) => {
                let node = *node;
                self.messenger.report_loss(node, self.peer_addr, reason);
            }
            Role::AwaitWelcome(promise) => {
                if let Some(p) = promise.take() {
                    let _ = p.set(Err(JoinError::Lost(reason.clone())));
                }
                self.inner().record_error(self.peer_addr, None, reason);
            }
            Role::AwaitPeerWelcome { promise, .. } => {
                if let Some(p) = promise.take() {
                    let _ = p.set(Err(JoinError::Lost(reason.clone())));
                }
                self.inner().record_error(self.peer_addr, None, reason);
            }
            Role::AwaitHello(_) | Role::AwaitPeerHello => {
                self.inner().record_error(self.peer_addr, None, reason)
            }
            Role::Refused => {}
        }
    }

    /// The Messenger was shut down during the handshake: the connection ends, and
    /// whoever waits on the handshake hears it was disconnected.
    fn shut_down(&mut self) {
        self.lose(LossReason::Disconnected);
        self.peer.close(Closing::Abort);
    }

    fn protocol_error(&mut self, conn: &dyn TcpConnection, error: ProtocolError) {
        conn.abort();
        self.lose(LossReason::Protocol(error));
    }

    fn handle(&mut self, conn: &dyn TcpConnection, frame: Frame) -> Result<(), ProtocolError> {
        match &mut self.role {
            Role::Joined(node) => {
                let node = *node;
                self.dispatch(node, frame)
            }
            Role::AwaitHello(front) => {
                let front = front.clone();
                self.on_hello(conn, &front, frame)
            }
            Role::AwaitWelcome(_) => self.on_welcome(conn, frame),
            Role::AwaitPeerHello => self.on_peer_hello(conn, frame),
            Role::AwaitPeerWelcome { .. } => self.on_peer_welcome(conn, frame),
            Role::Refused => Ok(()),
        }
    }

    /// Front end: admit the node if its token was expected, refuse it otherwise.
    fn on_hello(
        &mut self,
        conn: &dyn TcpConnection,
        front: &FrontShared,
        frame: Frame,
    ) -> Result<(), ProtocolError> {
        let (version, token) = match control(&frame)? {
            Control::Hello { version, token } => (version, token),
            _ => {
                return Err(ProtocolError::Unexpected {
                    class: frame.header.class,
                    when: "instead of a Hello",
                });
            }
        };
        if version != PROTOCOL_VERSION {
            let reason =
                format!("protocol version {version}; this front end speaks {PROTOCOL_VERSION}");
            self.refuse(conn, reason);
            return Ok(());
        }
        let admission = match front.admit(token) {
            Ok(admission) => admission,
            Err(reason) => {
                self.refuse(conn, reason);
                return Ok(());
            }
        };
        let info = admission.info.clone();
        let peer_key = self.inner().peer_key.get().copied().unwrap_or(0);
        let welcome = Control::Welcome {
            info: info.clone(),
            peer_key,
        };
        let welcome = control_frame(NodeId::FRONT_END, &welcome)
            .map_err(|_| ProtocolError::BadControl("cannot encode the Welcome".into()))?;
        self.peer.set_node(info.node);
        match self
            .messenger
            .publish_peer(info.node, &self.peer, false, Some(welcome))
        {
            Published::Yes => {}
            Published::Shut => {
                self.shut_down();
                return Ok(());
            }
            // Lost meanwhile: its handler reports it.
            Published::Taken | Published::Lost => return Ok(()),
        }
        self.role = Role::Joined(info.node);
        self.decoder
            .set_max_payload(self.inner().config.max_payload);
        self.watch(info.node);
        admission.admitted();
        Ok(())
    }

    fn refuse(&mut self, _conn: &dyn TcpConnection, reason: String) {
        self.inner().stats.connections_refused.add(1);
        self.inner()
            .record_error(self.peer_addr, None, LossReason::Refused(reason.clone()));
        let me = self.messenger.node().unwrap_or(NodeId::FRONT_END);
        if let Ok(frame) = control_frame(me, &Control::Refused(reason)) {
            let _ = self.peer.enqueue(frame, false);
        }
        self.peer.close(Closing::Graceful);
        self.role = Role::Refused;
    }

    /// Node: the front end's answer to our Hello.
    fn on_welcome(&mut self, conn: &dyn TcpConnection, frame: Frame) -> Result<(), ProtocolError> {
        let (info, peer_key) = match control(&frame)? {
            Control::Welcome { info, peer_key } => (info, peer_key),
            Control::Refused(reason) => {
                if let Role::AwaitWelcome(promise) = &mut self.role
                    && let Some(p) = promise.take()
                {
                    let _ = p.set(Err(JoinError::Refused(reason.clone())));
                }
                conn.close();
                self.lose(LossReason::Refused(reason));
                return Ok(());
            }
            _ => {
                return Err(ProtocolError::Unexpected {
                    class: FrameClass::Control,
                    when: "instead of a Welcome",
                });
            }
        };
        if info.node == NodeId::FRONT_END
            || global_ids_of(info.node) != Some(info.global_ids.clone())
        {
            return Err(ProtocolError::BadControl(format!(
                "Welcome names {} with global ids {:?}",
                info.node, info.global_ids
            )));
        }
        if !self.messenger.assume_node(info.node) {
            return Err(ProtocolError::BadControl(
                "this Messenger already has a node id".into(),
            ));
        }
        self.inner().peer_key.call_once(|| peer_key);
        self.peer.set_node(NodeId::FRONT_END);
        if self
            .messenger
            .publish_peer(NodeId::FRONT_END, &self.peer, false, None)
            == Published::Shut
        {
            self.shut_down();
            return Ok(());
        }
        self.decoder
            .set_max_payload(self.inner().config.max_payload);
        let promise = match core::mem::replace(&mut self.role, Role::Joined(NodeId::FRONT_END)) {
            Role::AwaitWelcome(promise) => promise,
            _ => None,
        };
        self.watch(NodeId::FRONT_END);
        if let Some(p) = promise {
            let _ = p.set(Ok(info));
        }
        Ok(())
    }

    /// A node: another node connects directly.
    fn on_peer_hello(
        &mut self,
        conn: &dyn TcpConnection,
        frame: Frame,
    ) -> Result<(), ProtocolError> {
        let (version, node, key) = match control(&frame)? {
            Control::PeerHello { version, node, key } => (version, node, key),
            _ => {
                return Err(ProtocolError::Unexpected {
                    class: frame.header.class,
                    when: "instead of a PeerHello",
                });
            }
        };
        let Some(me) = self.messenger.node() else {
            return Err(ProtocolError::BadControl("this node has not joined".into()));
        };
        if version != PROTOCOL_VERSION {
            let reason = format!("protocol version {version}; this node speaks {PROTOCOL_VERSION}");
            self.refuse(conn, reason);
            return Ok(());
        }
        if Some(&key) != self.inner().peer_key.get() {
            self.refuse(conn, format!("{node} presented a wrong peer key"));
            return Ok(());
        }
        if node == me || node == NodeId::FRONT_END || global_ids_of(node).is_none() {
            self.refuse(conn, format!("{node} cannot connect to {me} as a peer"));
            return Ok(());
        }
        if me < node && self.messenger.connecting_to(node) {
            // Both connect at once: ours, from the lower id, stays.
            self.refuse(conn, crossing_refusal(me, node));
            return Ok(());
        }
        let welcome = control_frame(me, &Control::PeerWelcome { node: me })
            .map_err(|_| ProtocolError::BadControl("cannot encode the PeerWelcome".into()))?;
        self.peer.set_node(node);
        match self
            .messenger
            .publish_peer(node, &self.peer, true, Some(welcome))
        {
            Published::Yes => {
                if node < me {
                    self.messenger.crossed(node);
                }
            }
            Published::Taken => {
                self.refuse(conn, format!("{node} is already connected to {me}"));
                return Ok(());
            }
            Published::Shut => {
                self.shut_down();
                return Ok(());
            }
            // Its handler reports it.
            Published::Lost => return Ok(()),
        }
        self.role = Role::Joined(node);
        self.decoder
            .set_max_payload(self.inner().config.max_payload);
        self.watch(node);
        Ok(())
    }

    /// A node: the answer of the node it connected to.
    fn on_peer_welcome(
        &mut self,
        conn: &dyn TcpConnection,
        frame: Frame,
    ) -> Result<(), ProtocolError> {
        let Role::AwaitPeerWelcome { expected, .. } = &self.role else {
            return Ok(());
        };
        let expected = *expected;
        let node = match control(&frame)? {
            Control::PeerWelcome { node } => node,
            Control::Refused(reason) => {
                self.settle_peer_join(Err(JoinError::Refused(reason.clone())));
                conn.close();
                self.lose(LossReason::Refused(reason));
                return Ok(());
            }
            _ => {
                return Err(ProtocolError::Unexpected {
                    class: FrameClass::Control,
                    when: "instead of a PeerWelcome",
                });
            }
        };
        if node != expected {
            return Err(ProtocolError::BadControl(format!(
                "expected {expected} at this address, found {node}"
            )));
        }
        self.peer.set_node(node);
        let published = self.messenger.publish_peer(node, &self.peer, true, None);
        if published == Published::Shut {
            self.shut_down();
            return Ok(());
        }
        if published != Published::Yes {
            let reason = format!("{node} is already connected");
            self.settle_peer_join(Err(JoinError::Refused(reason.clone())));
            conn.close();
            self.lose(LossReason::Refused(reason));
            return Ok(());
        }
        self.decoder
            .set_max_payload(self.inner().config.max_payload);
        self.settle_peer_join(Ok(()));
        self.role = Role::Joined(node);
        self.watch(node);
        Ok(())
    }

    fn settle_peer_join(&mut self, result: Result<(), JoinError>) {
        if let Role::AwaitPeerWelcome { promise, .. } = &mut self.role
            && let Some(p) = promise.take()
        {
            let _ = p.set(result);
        }
    }

    /// Starts the joined peer's heartbeat and silence watch, a local task on this core:
    /// every quarter of the silence limit it sends a heartbeat, and it ends the peer if
    /// nothing came for the whole limit (unless we stopped reading from it ourselves).
    fn watch(&self, node: NodeId) {
        let Some(limit) = self.inner().config.silence_limit else {
            return;
        };
        let every = (limit / 4).max(Duration::from_millis(1));
        let (messenger, peer, heard) = (
            self.messenger.clone(),
            self.peer.clone(),
            self.heard.clone(),
        );
        let peer_addr = self.peer_addr;
        heard.set(ebb::now());
        let _detached = ebb::spawn_local(async move {
            loop {
                ebb::sleep(every).await;
                if peer.lost().is_some() {
                    return;
                }
                if peer.reading_paused() {
                    heard.set(ebb::now());
                }
                if ebb::now().saturating_duration_since(heard.get()) > limit {
                    // A core that stalled past the limit may run this timer before the
                    // device poll that reads the heartbeats waiting for it: let that
                    // poll run, and look again, before calling a live peer silent.
                    let last = heard.get();
                    ebb::sleep(Duration::from_millis(1)).await;
                    if peer.lost().is_some() {
                        return;
                    }
                    if heard.get() == last && !peer.reading_paused() {
                        let reason = LossReason::Silent(limit);
                        if peer.fail(reason.clone()) {
                            messenger.report_loss(node, peer_addr, reason);
                        }
                        peer.close(Closing::Abort);
                        return;
                    }
                }
                if let Some(me) = messenger.node()
                    && let Ok(beat) = control_frame(me, &Control::Heartbeat)
                {
                    let _ = peer.enqueue(beat, false);
                }
            }
        });
    }

    /// A joined peer's frame.
    fn dispatch(&mut self, node: NodeId, frame: Frame) -> Result<(), ProtocolError> {
        let h = frame.header;
        if h.source != node {
            return Err(ProtocolError::WrongSource {
                claimed: h.source,
                expected: node,
            });
        }
        let stats = &self.inner().stats;
        match h.class {
            FrameClass::Message => {
                stats.messages_received.add(1);
                match self.inner().handler(h.destination, h.kind, false) {
                    Some(Handler::Message(f)) => f(node, frame.payload),
                    _ => stats.unhandled_messages.add(1),
                }
            }
            FrameClass::Request => {
                stats.calls_received.add(1);
                self.answer(node, h, frame.payload);
            }
            FrameClass::Reply | FrameClass::Failure => match self.peer.take_call(h.call) {
                Some(promise) => {
                    let answer = if h.class == FrameClass::Reply {
                        Ok(frame.payload)
                    } else {
                        Err(CallError::Failed {
                            node,
                            reason: failure_reason(&frame),
                        })
                    };
                    let _ = promise.set(answer);
                }
                // The caller stopped waiting (timed out, dropped the future).
                None => stats.late_answers.add(1),
            },
            FrameClass::Control => match control(&frame)? {
                Control::Heartbeat => {}
                _ => {
                    return Err(ProtocolError::Unexpected {
                        class: h.class,
                        when: "(a Hello, Welcome or refusal) after the join",
                    });
                }
            },
        }
        Ok(())
    }

    /// Runs a call's handler (a local task) and queues its answer.
    fn answer(&mut self, node: NodeId, request: Header, payload: ebb::IOBufChain) {
        let inner = self.inner();
        let failure = |reason: String| Answer::Failure(reason);
        let handler = match inner.handler(request.destination, request.kind, true) {
            Some(Handler::Call(f)) => f,
            _ => {
                inner.stats.unhandled_calls.add(1);
                let me = self.messenger.node().unwrap_or(NodeId::FRONT_END);
                let reason = format!(
                    "no handler for kind {} of Ebb {} on {me}",
                    request.kind,
                    request.destination.as_u32()
                );
                send_answer(&self.messenger, &self.peer, request, failure(reason));
                return;
            }
        };
        let max = inner.config.max_incoming_calls;
        if !self.peer.start_incoming_call(max) {
            let reason = format!("busy: {max} calls from {node} already running");
            send_answer(&self.messenger, &self.peer, request, failure(reason));
            return;
        }
        let mut fut = handler(node, payload);
        // Most handlers answer without waiting (a map lookup, a counter): poll once here
        // and answer at once, saving the task a spawn would cost (a fifth of a
        // shared-memory round trip). The no-op waker loses nothing: a handler that is
        // not ready is polled again, first thing, by the task below, which registers
        // the real waker.
        let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
        if let core::task::Poll::Ready(result) = fut.as_mut().poll(&mut cx) {
            self.peer.finish_incoming_call();
            send_answer(&self.messenger, &self.peer, request, Answer::from(result));
            return;
        }
        let messenger = self.messenger.clone();
        let peer = self.peer.clone();
        let _detached = ebb::spawn_local(async move {
            let answer = Answer::from(fut.await);
            peer.finish_incoming_call();
            send_answer(&messenger, &peer, request, answer);
        });
    }
}

enum Answer {
    Reply(ebb::IOBufChain),
    Failure(String),
}

impl From<Result<ebb::IOBufChain, String>> for Answer {
    fn from(served: Result<ebb::IOBufChain, String>) -> Answer {
        match served {
            Ok(reply) => Answer::Reply(reply),
            Err(reason) => Answer::Failure(reason),
        }
    }
}

/// Queues the answer to `request` (beyond the queue's limit: the caller waits for it).
fn send_answer(messenger: &Messenger, peer: &Peer, request: Header, answer: Answer) {
    let (class, payload) = match answer {
        Answer::Reply(p) => (FrameClass::Reply, p),
        Answer::Failure(mut reason) => {
            truncate_to_char_boundary(&mut reason, MAX_FAILURE_REASON);
            (
                FrameClass::Failure,
                ebb::IOBufChain::from(IOBuf::from_vec(reason.into_bytes())),
            )
        }
    };
    let Some(me) = messenger.node() else { return };
    let header = Header {
        class,
        source: me,
        destination: request.destination,
        kind: request.kind,
        call: request.call,
        len: 0,
    };
    let len = payload.len();
    let frame = match encode(header, payload) {
        Ok(frame) => frame,
        Err(e) => {
            // A reply too long for a frame becomes a failure that says so.
            let reason = format!("the reply of {len} bytes cannot be sent: {e}");
            let header = Header {
                class: FrameClass::Failure,
                ..header
            };
            match encode(
                header,
                ebb::IOBufChain::from(IOBuf::from_vec(reason.into_bytes())),
            ) {
                Ok(frame) => frame,
                Err(_) => return,
            }
        }
    };
    if peer.enqueue(frame, false).is_ok() {
        messenger.inner.stats.calls_answered.add(1);
    }
}

fn truncate_to_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

fn failure_reason(frame: &Frame) -> String {
    // At most MAX_FAILURE_REASON bytes: a small allocation, and a stack buffer first.
    let mut bytes = [0u8; MAX_FAILURE_REASON];
    let len = frame.payload.len().min(MAX_FAILURE_REASON);
    let _ = frame.payload.cursor().read_into(&mut bytes[..len]);
    String::from_utf8_lossy(&bytes[..len]).into_owned()
}

/// Decodes a control frame's payload.
fn control(frame: &Frame) -> Result<Control, ProtocolError> {
    if frame.header.class != FrameClass::Control {
        return Err(ProtocolError::Unexpected {
            class: frame.header.class,
            when: "before the join",
        });
    }
    let bytes = crate::fallible::contiguous(&frame.payload)
        .ok_or_else(|| ProtocolError::BadControl("out of memory for its payload".into()))?;
    postcard::from_bytes(&bytes).map_err(|e| ProtocolError::BadControl(format!("{e}")))
}

impl TcpHandler for Link {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if matches!(self.role, Role::Refused) || self.peer.lost().is_some() {
            return;
        }
        self.heard.set(ebb::now());
        self.decoder.push(data);
        loop {
            match self.decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(frame)) => {
                    if let Err(e) = self.handle(conn, frame) {
                        self.protocol_error(conn, e);
                        return;
                    }
                    if matches!(self.role, Role::Refused) || self.peer.lost().is_some() {
                        return;
                    }
                }
                Err(e) => {
                    self.protocol_error(conn, e.into());
                    return;
                }
            }
        }
        if self.peer.should_pause_reading() {
            conn.set_receive_window_open(false);
        }
    }

    fn send_window_increased(&mut self, _conn: &dyn TcpConnection) {
        self.peer.unblock();
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        conn.close();
        let header = if self.decoder.header_pending() {
            HEADER_LEN
        } else {
            0
        };
        let buffered = self.decoder.buffered() + header;
        if buffered > 0 && !matches!(self.role, Role::Refused) {
            self.lose(LossReason::Protocol(ProtocolError::Truncated { buffered }));
            return;
        }
        self.lose(LossReason::PeerFinished);
    }

    fn closed(&mut self, reason: CloseReason) {
        self.lose(LossReason::Connection(reason));
    }
}

/// A call handler's boxed future.
pub(crate) type CallFuture =
    core::pin::Pin<Box<dyn core::future::Future<Output = Result<ebb::IOBufChain, String>>>>;
