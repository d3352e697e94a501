//! The Messenger end to end, hosted: a front end and nodes in one process, each its own
//! Messenger, over real loopback TCP (Linux sockets on 127.0.0.1), on a two-core runtime.
//! Hostile and slow peers are plain `std` sockets in threads speaking the wire format by
//! hand.
//!
//! Run: `cargo test -p ebb-dist --test messenger`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebb::future::{PromiseFuture, promise};
use ebb::net::{Network, SocketAddr};
use ebb::{CoreId, EbbId, IOBufChain};
use ebb_dist::messenger::{
    CallError, Control, FrontEnd, JoinError, LossReason, MAX_CONTROL_PAYLOAD, Messenger,
    MessengerConfig, PROTOCOL_VERSION, ProtocolError, SendError,
};
use ebb_dist::node::{NodeId, RuntimeInfo};
use ebb_dist::wire::{FrameClass, HEADER_LEN, Header, MAX_PAYLOAD, WireError};

mod common;
use common::{chain, network, pattern, run, tolerant};

const COUNTER: EbbId = match EbbId::from_u32(2100) {
    Some(id) => id,
    None => panic!(),
};
const NOTE: u16 = 1;
const ECHO: u16 = 2;
const REFUSE: u16 = 3;
const NEVER: u16 = 4;
const SLOW: u16 = 5;
const LIMIT: Duration = Duration::from_secs(20);

/// What a node's handlers received: (sender, payload bytes).
type Inbox = Arc<Mutex<Vec<(NodeId, Vec<u8>)>>>;

/// Registers the test handlers: NOTE collects into `inbox`, ECHO answers "echo:" + the
/// payload, REFUSE fails, NEVER never answers, SLOW answers after 300 ms.
fn serve(messenger: &Messenger, inbox: &Inbox) {
    let inbox = inbox.clone();
    messenger.on_message(COUNTER, NOTE, move |from, payload| {
        inbox.lock().unwrap().push((from, payload.to_vec()));
    });
    messenger.on_call(COUNTER, ECHO, |_from, payload| async move {
        let mut reply = chain(b"echo:");
        reply.append(&mut payload.clone());
        Ok(reply)
    });
    messenger.on_call(COUNTER, REFUSE, |from, _payload| async move {
        Err(format!("refused: {from} may not"))
    });
    messenger.on_call(COUNTER, NEVER, |_from, _payload| async move {
        std::future::pending::<()>().await;
        Ok(IOBufChain::default())
    });
    messenger.on_call(COUNTER, SLOW, |_from, payload| async move {
        ebb::sleep(Duration::from_millis(300)).await;
        Ok(payload)
    });
}

/// A front end and `nodes` joined nodes, all serving the test handlers.
async fn cluster(
    network: &Network,
    nodes: usize,
    config: MessengerConfig,
) -> (FrontEnd, Inbox, Vec<(Messenger, RuntimeInfo, Inbox)>) {
    let front = FrontEnd::start(network, 0, config.clone())
        .await
        .expect("front end listens");
    let front_inbox = Inbox::default();
    serve(front.messenger(), &front_inbox);
    let mut joined = Vec::new();
    for i in 0..nodes {
        let token = 0x5eed_0000 + i as u64;
        let expected = front.expect(token);
        let node = Messenger::new(config.clone());
        let inbox = Inbox::default();
        serve(&node, &inbox);
        let (admitted, info) =
            ebb::future::join(expected, node.join(network, front.local_addr(), token)).await;
        let info = info.expect("the node joins");
        assert_eq!(admitted.expect("the front end admits it"), info);
        assert_eq!(node.node(), Some(info.node));
        joined.push((node, info, inbox));
    }
    (front, front_inbox, joined)
}

/// Waits (polling) until `done()` holds, at most `LIMIT`.
async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        ebb::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs `f` in a plain thread; the future resolves to its result.
fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> PromiseFuture<T> {
    let (promise, future) = promise();
    std::thread::spawn(move || {
        let _ = promise.set(f());
    });
    future
}

#[test]
fn messages_flow_both_ways_in_order_and_intact() {
    run(|| async {
        let net = network().await;
        let (front, front_inbox, nodes) = cluster(&net, 2, tolerant()).await;
        assert_eq!(nodes[0].1.node, NodeId(1));
        assert_eq!(nodes[1].1.node, NodeId(2));
        let fm = front.messenger().clone();
        const COUNT: u32 = 2000;
        let big_out = pattern(1 << 20, 7);
        let big_in = pattern(1 << 20, 9);
        for (node, info, _) in &nodes {
            for i in 0..COUNT {
                fm.send_when_ready(info.node, COUNTER, NOTE, chain(&i.to_le_bytes()))
                    .await
                    .unwrap();
                node.send_when_ready(NodeId::FRONT_END, COUNTER, NOTE, chain(&i.to_le_bytes()))
                    .await
                    .unwrap();
            }
            fm.send_when_ready(info.node, COUNTER, NOTE, chain(&big_out))
                .await
                .unwrap();
            node.send_when_ready(NodeId::FRONT_END, COUNTER, NOTE, chain(&big_in))
                .await
                .unwrap();
        }
        let expected = COUNT as usize + 1;
        for (_, info, inbox) in &nodes {
            until("each node has every message", || {
                inbox.lock().unwrap().len() == expected
            })
            .await;
            let inbox = inbox.lock().unwrap();
            for (i, (from, bytes)) in inbox.iter().take(COUNT as usize).enumerate() {
                assert_eq!(*from, NodeId::FRONT_END);
                assert_eq!(
                    bytes,
                    &(i as u32).to_le_bytes(),
                    "message {i} to {}",
                    info.node
                );
            }
            assert!(
                inbox[COUNT as usize].1 == big_out,
                "the 1 MB message arrives intact"
            );
        }
        until("the front end has every message", || {
            front_inbox.lock().unwrap().len() == 2 * expected
        })
        .await;
        let inbox = front_inbox.lock().unwrap();
        for (_, info, _) in &nodes {
            let from_node: Vec<&Vec<u8>> = inbox
                .iter()
                .filter(|(from, _)| *from == info.node)
                .map(|(_, b)| b)
                .collect();
            assert_eq!(from_node.len(), expected);
            for (i, bytes) in from_node.iter().take(COUNT as usize).enumerate() {
                assert_eq!(*bytes, &(i as u32).to_le_bytes());
            }
            assert!(*from_node[COUNT as usize] == big_in);
        }
        let stats = fm.stats();
        assert_eq!(stats.messages_sent, 2 * expected as u64);
        assert_eq!(stats.messages_received, 2 * expected as u64);
        assert_eq!(stats.unhandled_messages, 0);
    });
}

#[test]
fn calls_answer_fail_and_name_a_missing_handler() {
    run(|| async {
        let net = network().await;
        let (front, _, nodes) = cluster(&net, 1, tolerant()).await;
        let fm = front.messenger().clone();
        let (node, info, node_inbox) = &nodes[0];
        let n = info.node;

        let reply = fm.call(n, COUNTER, ECHO, chain(b"hi")).await.unwrap();
        assert_eq!(reply.to_vec(), b"echo:hi");
        let back = node
            .call(NodeId::FRONT_END, COUNTER, ECHO, chain(b"there"))
            .await
            .unwrap();
        assert_eq!(back.to_vec(), b"echo:there");

        // A 1 MB call and its 1 MB reply.
        let big = pattern(1 << 20, 3);
        let reply = fm.call(n, COUNTER, ECHO, chain(&big)).await.unwrap();
        assert_eq!(&reply.to_vec()[..5], b"echo:");
        assert!(reply.to_vec()[5..] == big[..]);

        // Many calls in flight at once, from the front end.
        let calls: Vec<_> = (0..200u32)
            .map(|i| fm.call(n, COUNTER, ECHO, chain(&i.to_le_bytes())))
            .collect();
        for (i, answer) in ebb::future::join_all(calls).await.into_iter().enumerate() {
            let mut want = b"echo:".to_vec();
            want.extend_from_slice(&(i as u32).to_le_bytes());
            assert_eq!(answer.unwrap().to_vec(), want);
        }

        match fm.call(n, COUNTER, REFUSE, chain(b"x")).await {
            Err(CallError::Failed { node, reason }) => {
                assert_eq!(node, n);
                assert_eq!(reason, "refused: node 0 may not");
            }
            other => panic!("expected the handler's failure, got {other:?}"),
        }
        match fm.call(n, COUNTER, 77, chain(b"x")).await {
            Err(CallError::Failed { reason, .. }) => {
                assert_eq!(reason, format!("no handler for kind 77 of Ebb 2100 on {n}"))
            }
            other => panic!("expected a missing handler's failure, got {other:?}"),
        }
        // A one-way message nobody registered: counted, dropped; the next still arrives.
        fm.send(n, COUNTER, 78, chain(b"lost")).unwrap();
        fm.send(n, COUNTER, NOTE, chain(b"after")).unwrap();
        until("the next message arrives", || {
            node_inbox.lock().unwrap().len() == 1
        })
        .await;
        assert_eq!(node.stats().unhandled_messages, 1);
        assert_eq!(node.stats().unhandled_calls, 1);

        // A call from another core than the one that owns the connection.
        let other = node.clone();
        let from_core_1 = ebb::spawn_local_on(CoreId(1), move || async move {
            let reply = other
                .call(NodeId::FRONT_END, COUNTER, ECHO, chain(b"core1"))
                .await;
            (ebb::core_id(), reply.map(|r| r.to_vec()))
        })
        .await
        .unwrap();
        assert_eq!(from_core_1, (CoreId(1), Ok(b"echo:core1".to_vec())));

        // A deadline: the late answer is counted and dropped.
        match fm
            .call_timeout(n, COUNTER, SLOW, chain(b"s"), Duration::from_millis(20))
            .await
        {
            Err(CallError::TimedOut(_)) => {}
            other => panic!("expected a timeout, got {other:?}"),
        }
        until("the late answer comes", || fm.stats().late_answers == 1).await;

        // Unknown peers and sending before joining.
        assert_eq!(
            fm.send(NodeId(9), COUNTER, NOTE, chain(b"x")),
            Err(SendError::UnknownPeer(NodeId(9)))
        );
        let unjoined = Messenger::new(MessengerConfig::default());
        assert!(matches!(
            unjoined.call(NodeId(0), COUNTER, ECHO, chain(b"x")).await,
            Err(CallError::Send(SendError::UnknownPeer(_)))
        ));
    });
}

#[test]
fn the_join_refuses_what_it_does_not_expect() {
    run(|| async {
        let net = network().await;
        let front = FrontEnd::start(&net, 0, tolerant()).await.unwrap();
        let addr = front.local_addr();
        let expected = front.expect(1);
        assert_eq!(front.expect(1).await, Err(JoinError::TokenInUse(1)));
        match ebb_dist::messenger::join(&net, addr, 2).await {
            Err(JoinError::Refused(reason)) => assert_eq!(reason, "unknown join token 0x2"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let (admitted, joined) =
            ebb::future::join(expected, ebb_dist::messenger::join(&net, addr, 1)).await;
        let (messenger, info) = joined.unwrap();
        assert_eq!(admitted.unwrap(), info);
        assert_eq!(info.node, NodeId(1));
        assert_eq!(
            info.global_ids,
            ebb_dist::node::global_ids_of(NodeId(1)).unwrap()
        );
        assert_eq!(SocketAddr::V4(info.front_end), addr);
        assert_eq!(
            messenger.join(&net, addr, 1).await,
            Err(JoinError::AlreadyJoined)
        );
        // A token is good for one join.
        assert!(matches!(
            ebb_dist::messenger::join(&net, addr, 1).await,
            Err(JoinError::Refused(_))
        ));
        // A withdrawn expectation admits nobody.
        drop(front.expect(3));
        assert!(matches!(
            ebb_dist::messenger::join(&net, addr, 3).await,
            Err(JoinError::Refused(_))
        ));
        // Nobody listening.
        let closed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            ebb_dist::messenger::join(&net, closed, 1).await,
            Err(JoinError::Connect(_))
        ));
        assert_eq!(front.messenger().stats().connections_refused, 3);
    });
}

#[test]
fn a_lost_peer_fails_its_pending_calls_promptly() {
    run(|| async {
        let net = network().await;
        let (front, _, mut nodes) = cluster(&net, 2, tolerant()).await;
        let fm = front.messenger().clone();
        let lost_seen = Arc::new(Mutex::new(Vec::new()));
        let seen = lost_seen.clone();
        fm.on_peer_lost(move |node, reason| seen.lock().unwrap().push((node, reason.clone())));
        let (dying, info, _) = nodes.remove(0);
        let victim = info.node;
        let survivor = nodes[0].1.node;

        // Ten calls that the node will never answer.
        let pending: Vec<_> = (0..10)
            .map(|_| ebb::spawn_local(fm.call(victim, COUNTER, NEVER, chain(b"?"))))
            .collect();
        until("the calls reach the node", || {
            dying.stats().calls_received == 10
        })
        .await;
        let lost = fm.peer_lost(victim);

        // The node dies: its connection is reset.
        let died = Instant::now();
        dying.shutdown();
        for call in pending {
            match call.await {
                Err(CallError::PeerLost { node, reason }) => {
                    assert_eq!(node, victim);
                    assert_eq!(reason, LossReason::Connection(ebb::net::CloseReason::Reset));
                }
                other => panic!("expected the peer's loss, got {other:?}"),
            }
        }
        let took = died.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "pending calls failed after {took:?}"
        );
        eprintln!("pending calls failed {took:?} after the node's connection was reset");
        assert_eq!(
            lost.await.unwrap(),
            LossReason::Connection(ebb::net::CloseReason::Reset)
        );
        assert_eq!(lost_seen.lock().unwrap().len(), 1);
        assert_eq!(lost_seen.lock().unwrap()[0].0, victim);

        // Later sends and calls fail fast; the other node is served as before.
        assert!(matches!(
            fm.send(victim, COUNTER, NOTE, chain(b"x")),
            Err(SendError::PeerLost { .. })
        ));
        assert!(matches!(
            fm.call(victim, COUNTER, ECHO, chain(b"x")).await,
            Err(CallError::PeerLost { .. })
        ));
        assert_eq!(
            fm.call(survivor, COUNTER, ECHO, chain(b"ok"))
                .await
                .unwrap()
                .to_vec(),
            b"echo:ok"
        );
        assert_eq!(fm.peers(), vec![(victim, false), (survivor, true)]);
        // The node's side saw its own disconnect.
        assert_eq!(
            dying.peer_lost(NodeId::FRONT_END).await,
            Ok(LossReason::Disconnected)
        );
        assert_eq!(fm.stats().peers_lost, 1);
    });
}

// ---- peers speaking the wire by hand ----

fn frame(class: FrameClass, source: u32, kind: u16, call: u32, payload: &[u8]) -> Vec<u8> {
    let header = Header {
        class,
        source: NodeId(source),
        destination: COUNTER,
        kind,
        call,
        len: payload.len() as u32,
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

fn control(control: &Control) -> Vec<u8> {
    let payload = postcard::to_allocvec(control).unwrap();
    let mut bytes = frame(FrameClass::Control, u32::MAX, 0, 0, &payload);
    // Control frames go to Ebb 0.
    bytes[8..12].copy_from_slice(&0u32.to_le_bytes());
    bytes
}

fn hello(token: u64) -> Vec<u8> {
    control(&Control::Hello {
        version: PROTOCOL_VERSION,
        token,
    })
}

/// Reads one frame (header, payload) off a blocking socket.
fn read_frame(stream: &mut TcpStream) -> std::io::Result<(Header, Vec<u8>)> {
    let mut head = [0u8; HEADER_LEN];
    stream.read_exact(&mut head)?;
    let header = Header::decode(&head, MAX_PAYLOAD).expect("the Messenger sends valid headers");
    let mut payload = vec![0u8; header.len as usize];
    stream.read_exact(&mut payload)?;
    Ok((header, payload))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    stream
}

/// Joins by hand with `token`; returns the socket and the node id given.
fn join_by_hand(addr: SocketAddr, token: u64) -> (TcpStream, NodeId) {
    let mut stream = connect(addr);
    stream.write_all(&hello(token)).unwrap();
    let (header, payload) = read_frame(&mut stream).unwrap();
    assert_eq!(header.class, FrameClass::Control);
    match postcard::from_bytes::<Control>(&payload).unwrap() {
        Control::Welcome { info, .. } => (stream, info.node),
        other => panic!("expected a Welcome, got {other:?}"),
    }
}

/// Sends `bytes` on a fresh connection, then reads until the Messenger closes it;
/// returns what it sent back.
fn hostile(addr: SocketAddr, bytes: Vec<u8>, then_close: bool) -> Vec<u8> {
    let mut stream = connect(addr);
    stream.write_all(&bytes).unwrap();
    if then_close {
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut back = Vec::new();
    let _ = stream.read_to_end(&mut back);
    back
}

#[test]
fn hostile_bytes_close_only_their_connection() {
    run(|| async {
        let net = network().await;
        // Time enough for the good node's join and for each hostile connection's bytes to
        // arrive on a loaded machine (else its error would be a handshake timeout)...
        let config = MessengerConfig {
            handshake_timeout: Duration::from_secs(2),
            // The hand-made peers send no heartbeats.
            silence_limit: None,
            ..MessengerConfig::default()
        };
        let (front, _, nodes) = cluster(&net, 1, config.clone()).await;
        let fm = front.messenger().clone();
        let addr = front.local_addr();
        let good = nodes[0].1.node;
        // ... and a front end of its own, with a short timeout, for the connection that
        // says nothing.
        const QUICK: Duration = Duration::from_millis(300);
        let quick = FrontEnd::start(
            &net,
            0,
            MessengerConfig {
                handshake_timeout: QUICK,
                ..config
            },
        )
        .await
        .unwrap();

        let truncated_hello = hello(5)[..HEADER_LEN + 2].to_vec();
        let mut oversize = hello(5);
        oversize[20..24].copy_from_slice(&(MAX_CONTROL_PAYLOAD + 1).to_le_bytes());
        let mut old_version = control(&Control::Hello {
            version: PROTOCOL_VERSION + 1,
            token: 0,
        });
        let mut future_wire = old_version.clone();
        future_wire[2] = 9;
        let not_control = frame(FrameClass::Message, 0, NOTE, 0, b"hi");
        let bad_control = {
            let mut f = frame(FrameClass::Control, 0, 0, 0, &[0xff; 8]);
            f[8..12].copy_from_slice(&0u32.to_le_bytes());
            f
        };
        let cases: Vec<(&str, Vec<u8>, bool, LossReason)> = vec![
            (
                "garbage",
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                false,
                LossReason::Protocol(ProtocolError::Wire(WireError::BadMagic(0x4745))),
            ),
            (
                "a truncated frame",
                truncated_hello,
                true,
                LossReason::Protocol(ProtocolError::Truncated {
                    buffered: HEADER_LEN + 2,
                }),
            ),
            (
                "an oversize length before joining",
                oversize,
                false,
                LossReason::Protocol(ProtocolError::Wire(WireError::TooLong {
                    len: MAX_CONTROL_PAYLOAD + 1,
                    max: MAX_CONTROL_PAYLOAD,
                })),
            ),
            (
                "another wire version",
                std::mem::take(&mut future_wire),
                false,
                LossReason::Protocol(ProtocolError::Wire(WireError::UnsupportedVersion(9))),
            ),
            (
                "a message before the Hello",
                not_control,
                false,
                LossReason::Protocol(ProtocolError::Unexpected {
                    class: FrameClass::Message,
                    when: "before the join",
                }),
            ),
            (
                "a control payload that does not decode",
                bad_control,
                false,
                LossReason::Protocol(ProtocolError::BadControl(String::new())),
            ),
            (
                "a wrong token",
                hello(0xbad),
                false,
                LossReason::Refused("unknown join token 0xbad".into()),
            ),
            (
                "another protocol version",
                std::mem::take(&mut old_version),
                false,
                LossReason::Refused(format!(
                    "protocol version {}; this front end speaks {PROTOCOL_VERSION}",
                    PROTOCOL_VERSION + 1
                )),
            ),
            (
                "silence",
                Vec::new(),
                false,
                LossReason::HandshakeTimeout(QUICK),
            ),
        ];
        for (what, bytes, close, want) in cases {
            let (at, addr) = match want {
                LossReason::HandshakeTimeout(_) => (quick.messenger(), quick.local_addr()),
                _ => (&fm, addr),
            };
            let before = at.recent_errors().len();
            let back = in_thread(move || hostile(addr, bytes, close))
                .await
                .unwrap();
            until("the error is recorded", || {
                at.recent_errors().len() > before
            })
            .await;
            let got = at.recent_errors().last().unwrap().reason.clone();
            match (&got, &want) {
                (
                    LossReason::Protocol(ProtocolError::BadControl(_)),
                    LossReason::Protocol(ProtocolError::BadControl(_)),
                ) => {}
                _ => assert_eq!(got, want, "{what}"),
            }
            eprintln!("{what}: {got}");
            if let LossReason::Refused(reason) = &want {
                // A refusal is said before the connection closes.
                let mut stream = &back[..];
                let mut head = [0u8; HEADER_LEN];
                stream.read_exact(&mut head).unwrap();
                let header = Header::decode(&head, MAX_PAYLOAD).unwrap();
                let said: Control = postcard::from_bytes(&stream[..header.len as usize]).unwrap();
                assert_eq!(said, Control::Refused(reason.clone()), "{what}");
            }
            // The good node is served throughout.
            let answer = fm.call(good, COUNTER, ECHO, chain(b"still")).await.unwrap();
            assert_eq!(answer.to_vec(), b"echo:still", "after {what}");
        }

        // Joined peers that misbehave: a frame claiming another source, an oversize
        // length after the join.
        for (what, token, bytes, want) in [
            (
                "a spoofed source",
                10,
                frame(FrameClass::Message, 7, NOTE, 0, b"x"),
                ProtocolError::WrongSource {
                    claimed: NodeId(7),
                    expected: NodeId(2),
                },
            ),
            (
                "an oversize length",
                11,
                {
                    let mut f = frame(FrameClass::Message, 3, NOTE, 0, b"");
                    f[20..24].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
                    f
                },
                ProtocolError::Wire(WireError::TooLong {
                    len: MAX_PAYLOAD + 1,
                    max: MAX_PAYLOAD,
                }),
            ),
        ] {
            let expected = front.expect(token);
            let joined = in_thread(move || join_by_hand(addr, token));
            let (info, joined) = ebb::future::join(expected, joined).await;
            let (mut stream, node) = joined.unwrap();
            let node = NodeId(node.0);
            assert_eq!(info.unwrap().node, node);
            let lost = fm.peer_lost(node);
            let pending = ebb::spawn_local(fm.call(node, COUNTER, ECHO, chain(b"?")));
            in_thread(move || {
                stream.write_all(&bytes).unwrap();
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest);
            })
            .await
            .unwrap();
            assert_eq!(
                lost.await.unwrap(),
                LossReason::Protocol(want.clone()),
                "{what}"
            );
            assert!(matches!(pending.await, Err(CallError::PeerLost { .. })));
            let answer = fm.call(good, COUNTER, ECHO, chain(b"still")).await.unwrap();
            assert_eq!(answer.to_vec(), b"echo:still", "after {what}");
        }
    });
}

#[test]
fn a_slow_receiver_is_held_to_the_queue_limit() {
    const LIMIT_BYTES: usize = 256 << 10;
    const MESSAGE: usize = 16 << 10;
    const MORE: u32 = 100;
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            queue_limit: LIMIT_BYTES,
            silence_limit: None,
            ..MessengerConfig::default()
        };
        let front = FrontEnd::start(&net, 0, config).await.unwrap();
        let fm = front.messenger().clone();
        let addr = front.local_addr();
        let expected = front.expect(42);
        let start_reading = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicUsize::new(0));
        let (go, rx) = (start_reading.clone(), received.clone());
        // The slow receiver: joins, then reads nothing until told; then checks that every
        // message came, in order, up to the end marker.
        let reader = in_thread(move || {
            let (mut stream, node) = join_by_hand(addr, 42);
            while !go.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut next = 0u32;
            loop {
                let (header, payload) = read_frame(&mut stream).unwrap();
                if header.kind == 99 {
                    return (node, next);
                }
                assert_eq!(header.class, FrameClass::Message);
                assert_eq!(payload.len(), MESSAGE);
                assert_eq!(&payload[..4], &next.to_le_bytes(), "in order");
                next += 1;
                rx.store(next as usize, Ordering::Relaxed);
            }
        });
        let node = expected.await.unwrap().node;
        let mut payload = vec![0u8; MESSAGE];
        let mut accepted = 0u32;
        let mut most_queued = 0;
        let refused = loop {
            payload[..4].copy_from_slice(&accepted.to_le_bytes());
            match fm.send(node, COUNTER, NOTE, chain(&payload)) {
                Ok(()) => accepted += 1,
                Err(e) => break e,
            }
            most_queued = most_queued.max(fm.queued_bytes(node).unwrap());
            assert!(
                accepted < 100_000,
                "a receiver that does not read never pushed back"
            );
            if accepted.is_multiple_of(8) {
                // Let the writer move what the socket takes.
                ebb::sleep(Duration::from_millis(1)).await;
            }
        };
        match refused {
            SendError::Full {
                node: n,
                queued,
                limit,
            } => {
                assert_eq!((n, limit), (node, LIMIT_BYTES));
                assert!(queued <= LIMIT_BYTES);
            }
            other => panic!("expected Full, got {other:?}"),
        }
        assert!(most_queued <= LIMIT_BYTES, "queued {most_queued}");
        eprintln!(
            "the queue refused after {accepted} messages of {MESSAGE} bytes (the kernel's \
             buffers took the rest), never above {most_queued} bytes queued"
        );
        // Room comes once the receiver reads.
        let room = fm.room(node, MESSAGE);
        ebb::sleep(Duration::from_millis(50)).await;
        start_reading.store(true, Ordering::Release);
        room.await.unwrap();
        for i in accepted..accepted + MORE {
            payload[..4].copy_from_slice(&i.to_le_bytes());
            fm.send_when_ready(node, COUNTER, NOTE, chain(&payload))
                .await
                .unwrap();
            assert!(fm.queued_bytes(node).unwrap() <= LIMIT_BYTES);
        }
        fm.send_when_ready(node, COUNTER, 99, chain(b"end"))
            .await
            .unwrap();
        let (joined_as, got) = reader.await.unwrap();
        assert_eq!(joined_as, node);
        assert_eq!(got, accepted + MORE, "every accepted message, in order");
        assert!(received.load(Ordering::Relaxed) > 0);
    });
}

#[test]
fn a_peer_that_closes_its_socket_fails_calls_to_it() {
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            silence_limit: None,
            ..MessengerConfig::default()
        };
        let front = FrontEnd::start(&net, 0, config).await.unwrap();
        let fm = front.messenger().clone();
        let addr = front.local_addr();
        let expected = front.expect(7);
        let joined = in_thread(move || join_by_hand(addr, 7));
        let (info, joined) = ebb::future::join(expected, joined).await;
        let (mut stream, _) = joined.unwrap();
        let node = info.unwrap().node;
        let call = ebb::spawn_local(fm.call(node, COUNTER, ECHO, chain(b"?")));
        // The peer reads the request, then goes away without answering.
        let closed = in_thread(move || {
            let (header, _) = read_frame(&mut stream).unwrap();
            drop(stream);
            (header.class, Instant::now())
        })
        .await
        .unwrap();
        assert_eq!(closed.0, FrameClass::Request);
        match call.await {
            Err(CallError::PeerLost { node: n, reason }) => {
                assert_eq!(n, node);
                assert_eq!(reason, LossReason::PeerFinished);
            }
            other => panic!("expected the peer's loss, got {other:?}"),
        }
        assert!(closed.1.elapsed() < Duration::from_secs(1));
    });
}

/// A 64-byte call's round trip, front end to node over loopback (a number for the
/// report, not a benchmark: run with `--release -- --ignored --nocapture`).
#[test]
#[ignore]
fn round_trip_of_a_64_byte_call() {
    run(|| async {
        let net = network().await;
        let (front, _, nodes) = cluster(&net, 1, tolerant()).await;
        let fm = front.messenger().clone();
        let node = nodes[0].1.node;
        let payload = chain(&[7u8; 64]);
        for _ in 0..1000 {
            fm.call(node, COUNTER, ECHO, payload.clone()).await.unwrap();
        }
        let mut samples = Vec::new();
        for _ in 0..20_000 {
            let start = Instant::now();
            fm.call(node, COUNTER, ECHO, payload.clone()).await.unwrap();
            samples.push(start.elapsed());
        }
        samples.sort();
        eprintln!(
            "64 B call round trip over loopback: median {:?}, p99 {:?}",
            samples[samples.len() / 2],
            samples[samples.len() * 99 / 100]
        );
        // The same as two one-way messages (ping, pong): the raw Messenger round trip.
        const PING: u16 = 10;
        const PONG: u16 = 11;
        let node_messenger = nodes[0].0.clone();
        let echo = node_messenger.clone();
        node_messenger.on_message(COUNTER, PING, move |from, payload| {
            echo.send(from, COUNTER, PONG, payload).unwrap();
        });
        let waiting: Arc<Mutex<Option<ebb::future::Promise<()>>>> = Arc::default();
        let slot = waiting.clone();
        let front_core = Arc::new(AtomicUsize::new(usize::MAX));
        let seen_on = front_core.clone();
        fm.on_message(COUNTER, PONG, move |_, _| {
            seen_on.store(ebb::core_id().index(), Ordering::Relaxed);
            if let Some(p) = slot.lock().unwrap().take() {
                let _ = p.set(());
            }
        });
        let mut samples = Vec::new();
        for i in 0..21_000 {
            let (p, pong) = promise();
            *waiting.lock().unwrap() = Some(p);
            let start = Instant::now();
            fm.send(node, COUNTER, PING, payload.clone()).unwrap();
            pong.await.unwrap();
            if i >= 1000 {
                samples.push(start.elapsed());
            }
        }
        samples.sort();
        eprintln!(
            "64 B message ping-pong over loopback: median {:?}, p99 {:?} (the node's \
             connection on core 0, the front end's accepted one on core {})",
            samples[samples.len() / 2],
            samples[samples.len() * 99 / 100],
            front_core.load(Ordering::Relaxed)
        );
        // 1 MB messages, front end to node, as fast as the queue takes them.
        const BULK: u16 = 12;
        const MB: usize = 1 << 20;
        const COUNT: usize = 300;
        let got = Arc::new(AtomicUsize::new(0));
        let counter = got.clone();
        node_messenger.on_message(COUNTER, BULK, move |_, payload| {
            counter.fetch_add(payload.len(), Ordering::Relaxed);
        });
        let bulk = chain(&vec![1u8; MB]);
        let start = Instant::now();
        for _ in 0..COUNT {
            fm.send_when_ready(node, COUNTER, BULK, bulk.clone())
                .await
                .unwrap();
        }
        until("every megabyte arrived", || {
            got.load(Ordering::Relaxed) == COUNT * MB
        })
        .await;
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "1 MB messages over loopback: {:.0} MB/s ({COUNT} in {secs:.2} s)",
            COUNT as f64 / secs
        );
        let plain = in_thread(move || plain_tcp_throughput(COUNT * MB))
            .await
            .unwrap();
        eprintln!("plain TCP between two threads over loopback: {plain:.0} MB/s");

        // Beside it, in the same run: plain Linux TCP ping-pong between two threads.
        let plain = in_thread(plain_tcp_ping_pong).await.unwrap();
        eprintln!(
            "64 B plain TCP ping-pong over loopback (two threads, blocking sockets): \
             median {:?}, p99 {:?}",
            plain.0, plain.1
        );
    });
}

/// Median and p99 of a 64-byte ping-pong between two threads over loopback TCP.
fn plain_tcp_ping_pong() -> (Duration, Duration) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            s.write_all(&buf).unwrap();
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut buf = [7u8; 64];
    let mut samples = Vec::new();
    for i in 0..21_000 {
        let start = Instant::now();
        c.write_all(&buf).unwrap();
        c.read_exact(&mut buf).unwrap();
        if i >= 1000 {
            samples.push(start.elapsed());
        }
    }
    drop(c);
    server.join().unwrap();
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

#[test]
fn a_peer_is_held_to_its_calls_in_flight() {
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            max_incoming_calls: 2,
            ..tolerant()
        };
        let (front, _, nodes) = cluster(&net, 1, config).await;
        let (node, info, _) = &nodes[0];
        let fm = front.messenger().clone();
        let never: Vec<_> = (0..2)
            .map(|_| ebb::spawn_local(fm.call(info.node, COUNTER, NEVER, chain(b"?"))))
            .collect();
        until("both calls run", || node.stats().calls_received == 2).await;
        match fm.call(info.node, COUNTER, ECHO, chain(b"x")).await {
            Err(CallError::Failed { reason, .. }) => {
                assert_eq!(reason, "busy: 2 calls from node 0 already running")
            }
            other => panic!("expected busy, got {other:?}"),
        }
        node.shutdown();
        for call in never {
            assert!(matches!(call.await, Err(CallError::PeerLost { .. })));
        }
    });
}

#[test]
fn a_caller_that_does_not_read_its_answers_is_flow_controlled() {
    const QUEUE: usize = 64 << 10;
    const REQUEST: usize = 16 << 10;
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            queue_limit: QUEUE,
            silence_limit: None,
            ..MessengerConfig::default()
        };
        let front = FrontEnd::start(&net, 0, config).await.unwrap();
        let fm = front.messenger().clone();
        serve(&fm, &Inbox::default());
        let addr = front.local_addr();
        let expected = front.expect(9);
        let read_now = Arc::new(AtomicBool::new(false));
        let go = read_now.clone();
        let (sent_tx, sent_rx) = promise();
        // Floods ECHO calls without reading an answer, until its writes stall for 1 s;
        // then reads every answer to the requests it sent whole.
        let caller = in_thread(move || {
            let (mut stream, node) = join_by_hand(addr, 9);
            stream
                .set_write_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            let request = |i: u32| {
                let mut payload = vec![0u8; REQUEST];
                payload[..4].copy_from_slice(&i.to_le_bytes());
                frame(FrameClass::Request, node.0, ECHO, i + 1, &payload)
            };
            let mut whole = 0u32;
            while whole < 20_000 && stream.write_all(&request(whole)).is_ok() {
                whole += 1;
            }
            let _ = sent_tx.set(whole);
            while !go.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut answers = 0;
            while answers < whole {
                let (header, _) = read_frame(&mut stream).unwrap();
                assert!(matches!(
                    header.class,
                    FrameClass::Reply | FrameClass::Failure
                ));
                answers += 1;
            }
            answers
        });
        let node = expected.await.unwrap().node;
        let whole = sent_rx.await.unwrap();
        assert!(whole < 20_000, "the flood was never pushed back");
        let queued = fm.queued_bytes(node).unwrap();
        // Reading stops above twice the limit; the calls already running (at most
        // max_incoming_calls) may still add their answers.
        let bound = 2 * QUEUE + (64 << 10) + 256 * (REQUEST + 64);
        assert!(queued <= bound, "{queued} bytes queued");
        eprintln!(
            "a caller that never reads was stopped after {whole} calls of {REQUEST} bytes, \
             {queued} bytes of answers queued"
        );
        read_now.store(true, Ordering::Release);
        assert_eq!(caller.await.unwrap(), whole, "every whole call answered");
    });
}

/// Watches every core's event loop (both of `run`'s) until `stop`: the longest one went
/// without running a 5 ms timer, in `worst` (nanoseconds). A stall that long on a loaded
/// machine is what a silence limit cannot tell from a dead peer.
fn watch_stalls(worst: &Arc<AtomicU64>, stop: &Arc<AtomicBool>) {
    for core in [CoreId(0), CoreId(1)] {
        let (worst, stop) = (worst.clone(), stop.clone());
        ebb::spawn_on(core, move || {
            let _detached = ebb::spawn_local(async move {
                let mut last = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    ebb::sleep(Duration::from_millis(5)).await;
                    let now = Instant::now();
                    worst.fetch_max((now - last).as_nanos() as u64, Ordering::AcqRel);
                    last = now;
                }
            });
        })
        .unwrap();
    }
}

#[test]
fn heartbeats_keep_an_idle_peer_and_a_silent_one_is_lost() {
    // Long enough that only a stall of most of a second (heartbeats go every quarter of
    // it) ends the idle pair; the silent peer's test needs a short one.
    const IDLE_SILENCE: Duration = Duration::from_secs(1);
    const SILENCE: Duration = Duration::from_millis(300);
    run(|| async {
        let net = network().await;
        let config = |limit| MessengerConfig {
            silence_limit: Some(limit),
            ..MessengerConfig::default()
        };
        let (front, _, nodes) = cluster(&net, 1, config(IDLE_SILENCE)).await;
        let fm = front.messenger().clone();
        let good = nodes[0].1.node;
        // Idle for three silence limits: only the heartbeats keep both sides. A core
        // starved for most of a limit (the machine is shared) is indistinguishable from a
        // frozen peer, and a loss then proves nothing: the stall watch tells which.
        let (worst, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        watch_stalls(&worst, &stop);
        ebb::sleep(3 * IDLE_SILENCE).await;
        stop.store(true, Ordering::Release);
        let stalled = Duration::from_nanos(worst.load(Ordering::Acquire));
        let both = (fm.peers(), nodes[0].0.peers());
        if both == (vec![(good, true)], vec![(NodeId::FRONT_END, true)]) {
            eprintln!("an idle pair stayed connected (longest stall {stalled:?})");
            let echo = fm.call(good, COUNTER, ECHO, chain(b"ok")).await.unwrap();
            assert_eq!(echo.to_vec(), b"echo:ok");
        } else if stalled >= IDLE_SILENCE / 4 {
            eprintln!(
                "an idle pair was lost ({both:?}) after a stall of {stalled:?}, longer than the \
                 heartbeats' slack allows: not the Messenger's fault"
            );
        } else {
            panic!("an idle pair was lost ({both:?}); the longest stall was {stalled:?}");
        }

        // A peer that joins and then says nothing (a VM frozen, a cable cut), at a front
        // end of its own with a short limit.
        let (front, _, _) = cluster(&net, 0, config(SILENCE)).await;
        let fm = front.messenger().clone();
        let expected = front.expect(77);
        let addr = front.local_addr();
        // Before the join: the peer's silence cannot be counted from earlier than this.
        let asked = Instant::now();
        let admitted = async {
            let info = expected.await;
            (info, Instant::now())
        };
        let joined = in_thread(move || join_by_hand(addr, 77));
        let ((info, admitted), joined) = ebb::future::join(admitted, joined).await;
        let (stream, _) = joined.unwrap();
        let silent = info.unwrap().node;
        let pending = ebb::spawn_local(fm.call(silent, COUNTER, ECHO, chain(b"?")));
        assert_eq!(fm.peer_lost(silent).await, Ok(LossReason::Silent(SILENCE)));
        let lost = Instant::now();
        // Never before the limit; after it within a quarter of it for the next look (and
        // 1 ms for the second one), bounded at four times it for a loaded machine (a
        // stall of a few hundred milliseconds happens there; no silence watch at all
        // would never report it).
        assert!(
            lost - asked >= SILENCE,
            "a silent peer was declared lost {:?} after it joined",
            lost - asked
        );
        let took = lost - admitted;
        assert!(
            took <= 4 * SILENCE,
            "a silent peer was seen {took:?} after it was admitted"
        );
        eprintln!(
            "a silent peer was reported lost {took:?} after its admission (limit {SILENCE:?})"
        );
        assert!(matches!(pending.await, Err(CallError::PeerLost { .. })));
        drop(stream);
    });
}

#[test]
fn nodes_connect_to_each_other_directly() {
    run(|| async {
        let net = network().await;
        let (front, _, nodes) = cluster(&net, 2, tolerant()).await;
        let (one, one_info, _) = &nodes[0];
        let (two, two_info, two_inbox) = &nodes[1];
        let listener = two.listen_for_peers(&net, 0).await.unwrap();
        let addr = listener.local_addr();

        // The wrong node at that address, and a stranger without the key, are refused.
        assert!(matches!(
            one.connect_peer(&net, NodeId(5), addr).await,
            Err(JoinError::Lost(LossReason::Protocol(
                ProtocolError::BadControl(_)
            )))
        ));
        let stranger = in_thread(move || {
            let mut stream = connect(addr);
            let hello = control(&Control::PeerHello {
                version: PROTOCOL_VERSION,
                node: NodeId(1),
                key: 0x1234,
            });
            stream.write_all(&hello).unwrap();
            let (_, payload) = read_frame(&mut stream).unwrap();
            postcard::from_bytes::<Control>(&payload).unwrap()
        })
        .await
        .unwrap();
        assert_eq!(
            stranger,
            Control::Refused("node 1 presented a wrong peer key".into())
        );

        one.connect_peer(&net, two_info.node, addr).await.unwrap();
        assert!(one.peers().contains(&(two_info.node, true)));
        until("node 2 has node 1 as a peer", || {
            two.peers().contains(&(one_info.node, true))
        })
        .await;
        // Once connected, connecting again is done at once (no second connection), from
        // either side.
        assert_eq!(one.connect_peer(&net, two_info.node, addr).await, Ok(()));
        assert_eq!(one.stats().peer_connect_retries, 0);
        assert!(one.peers().contains(&(two_info.node, true)));
        // Messages and calls both ways, without the front end.
        for i in 0..100u32 {
            one.send(two_info.node, COUNTER, NOTE, chain(&i.to_le_bytes()))
                .unwrap();
        }
        until("node 2 has the messages", || {
            two_inbox.lock().unwrap().len() == 100
        })
        .await;
        for (i, (from, bytes)) in two_inbox.lock().unwrap().iter().enumerate() {
            assert_eq!(
                (*from, &bytes[..]),
                (one_info.node, &(i as u32).to_le_bytes()[..])
            );
        }
        let reply = two
            .call(one_info.node, COUNTER, ECHO, chain(b"peer"))
            .await
            .unwrap();
        assert_eq!(reply.to_vec(), b"echo:peer");
        assert_eq!(front.messenger().stats().messages_received, 0);

        // Node 2 goes away: node 1 hears of it, and keeps the front end.
        let lost = one.peer_lost(two_info.node);
        two.shutdown();
        assert_eq!(
            lost.await,
            Ok(LossReason::Connection(ebb::net::CloseReason::Reset))
        );
        assert_eq!(
            one.call(NodeId::FRONT_END, COUNTER, ECHO, chain(b"ok"))
                .await
                .unwrap()
                .to_vec(),
            b"echo:ok"
        );
        // Not joined: nothing to listen or connect with.
        let unjoined = Messenger::new(MessengerConfig::default());
        assert!(matches!(
            unjoined.listen_for_peers(&net, 0).await,
            Err(JoinError::NotJoined)
        ));
    });
}

/// MB/s of `bytes` sent from one thread to another over loopback TCP in 1 MB writes.
fn plain_tcp_throughput(bytes: usize) -> f64 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        while total < bytes {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            total += n;
        }
        Instant::now()
    });
    let mut c = TcpStream::connect(addr).unwrap();
    let block = vec![1u8; 1 << 20];
    let start = Instant::now();
    for _ in 0..bytes / block.len() {
        c.write_all(&block).unwrap();
    }
    let end = reader.join().unwrap();
    (bytes >> 20) as f64 / end.duration_since(start).as_secs_f64()
}

#[test]
fn the_messenger_is_reachable_as_an_ebb() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Messenger>();
    run(|| async {
        let net = network().await;
        let (front, _, nodes) = cluster(&net, 1, tolerant()).await;
        let node = nodes[0].1.node;
        // EbbRT's Messenger is an Ebb: one shared representative for every core.
        let ebb = ebb::SharedEbb::create(front.messenger().clone()).unwrap();
        let reply = ebb::spawn_local_on(CoreId(1), move || async move {
            ebb.rep()
                .call(node, COUNTER, ECHO, chain(b"rep"))
                .await
                .map(|r| r.to_vec())
        })
        .await
        .unwrap();
        assert_eq!(reply, Ok(b"echo:rep".to_vec()));
    });
}

#[test]
fn a_node_that_listens_late_is_connected_to_once_it_listens() {
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            handshake_timeout: Duration::from_secs(2),
            ..tolerant()
        };
        let (_front, _, nodes) = cluster(&net, 2, config).await;
        let (one, _, _) = &nodes[0];
        let (two, two_info, _) = &nodes[1];
        // A port nobody listens on yet: the front end has named node 2 to node 1, but
        // node 2 has not started listening (it is still reading its Welcome).
        let addr = closed_port();
        let port = addr.port();
        let listens_late = async {
            ebb::sleep(Duration::from_millis(50)).await;
            two.listen_for_peers(&net, port).await.unwrap()
        };
        let (connected, _listener) =
            ebb::future::join(one.connect_peer(&net, two_info.node, addr), listens_late).await;
        connected.unwrap();
        assert!(one.peers().contains(&(two_info.node, true)));
        let retries = one.stats().peer_connect_retries;
        assert!(retries >= 1, "connected without trying again");
        eprintln!("node 1 connected after {retries} refused tries");

        // Nobody ever listens: refused, once the handshake timeout has passed.
        let nobody = closed_port();
        let start = Instant::now();
        assert_eq!(
            one.connect_peer(&net, NodeId(9), nobody).await,
            Err(JoinError::Connect(
                ebb::net::TcpErrorKind::ConnectionRefused
            ))
        );
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
            "gave up after {took:?}, with a 2 s handshake timeout"
        );
    });
}

/// A loopback address nobody listens on (a port bound and let go: very likely free).
fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A node that accepts a peer's connection publishes the peer only once its PeerWelcome
/// is queued: a message another thread sends the moment the peer can be found goes after
/// the Welcome, never before it (the connecting side would abort: a message before the
/// join is not the protocol).
#[test]
fn nothing_sent_to_a_peer_being_accepted_goes_ahead_of_its_welcome() {
    const ROUNDS: u32 = 100;
    run(|| async {
        let net = network().await;
        let (_front, _, nodes) = cluster(&net, 2, tolerant()).await;
        let (one, one_info, _) = &nodes[0];
        let (two, two_info, two_inbox) = &nodes[1];
        let listener = one.listen_for_peers(&net, 0).await.unwrap();
        let addr = listener.local_addr();
        let (one_id, two_id) = (one_info.node, two_info.node);
        for round in 0..ROUNDS {
            // A plain thread (not a core, which it would block) sends to node 2 from the
            // first instant node 1 has it as a live peer.
            let sender = {
                let one = one.clone();
                std::thread::spawn(move || {
                    let start = Instant::now();
                    while start.elapsed() < LIMIT {
                        if one.send(two_id, COUNTER, NOTE, chain(b"first")).is_ok() {
                            return true;
                        }
                        // Yields rather than spins: on two CPUs the cores it races with
                        // must get to run.
                        std::thread::yield_now();
                    }
                    false
                })
            };
            let connected = two.connect_peer(&net, one_id, addr).await;
            assert_eq!(connected, Ok(()), "round {round}");
            let sent = in_thread(move || sender.join().unwrap()).await.unwrap();
            assert!(sent, "round {round}: node 1 never had node 2 as a peer");
            until("the message arrives", || {
                two_inbox.lock().unwrap().len() == round as usize + 1
            })
            .await;
            // Apart again, for the next round.
            two.disconnect(one_id).unwrap();
            until("node 1 sees node 2 go", || {
                one.peers().contains(&(two_id, false))
            })
            .await;
        }
    });
}

/// A refused connection whose peer keeps its side open past the handshake timeout: its
/// refusal is the one error recorded (no handshake timeout after it), and it ends with
/// the refusal and a FIN, not a reset.
#[test]
fn a_refused_peer_that_stays_open_is_not_timed_out_too() {
    // Long enough for the Hello to be refused first on a loaded machine.
    const TIMEOUT: Duration = Duration::from_secs(1);
    run(|| async {
        let net = network().await;
        let config = MessengerConfig {
            handshake_timeout: TIMEOUT,
            silence_limit: None,
            ..MessengerConfig::default()
        };
        let front = FrontEnd::start(&net, 0, config).await.unwrap();
        let fm = front.messenger().clone();
        let addr = front.local_addr();
        let (said, rest) = in_thread(move || {
            let mut stream = connect(addr);
            stream.write_all(&hello(0xbad)).unwrap();
            let (_, payload) = read_frame(&mut stream).unwrap();
            let said: Control = postcard::from_bytes(&payload).unwrap();
            // Well past the timeout, with our side still open.
            std::thread::sleep(2 * TIMEOUT);
            let mut rest = Vec::new();
            let rest = stream.read_to_end(&mut rest).map(|_| rest);
            (said, rest.map_err(|e| e.kind()))
        })
        .await
        .unwrap();
        assert_eq!(said, Control::Refused("unknown join token 0xbad".into()));
        assert_eq!(rest, Ok(Vec::new()), "the refusal ends with a FIN");
        let errors: Vec<LossReason> = fm.recent_errors().into_iter().map(|e| e.reason).collect();
        assert_eq!(
            errors,
            vec![LossReason::Refused("unknown join token 0xbad".into())]
        );
    });
}

/// Two nodes connecting to each other at the same time: the connection from the lower id
/// stays, both calls succeed, and the two are peers once, alive both ways.
#[test]
fn two_nodes_connecting_to_each_other_at_once_both_succeed() {
    const ROUNDS: u32 = 20;
    run(|| async {
        let net = network().await;
        let (_front, _, nodes) = cluster(&net, 2, tolerant()).await;
        let (one, one_info, one_inbox) = &nodes[0];
        let (two, two_info, two_inbox) = &nodes[1];
        let (one_id, two_id) = (one_info.node, two_info.node);
        let one_listener = one.listen_for_peers(&net, 0).await.unwrap();
        let two_listener = two.listen_for_peers(&net, 0).await.unwrap();
        for round in 0..ROUNDS {
            let (a, b) = ebb::future::join(
                one.connect_peer(&net, two_id, two_listener.local_addr()),
                two.connect_peer(&net, one_id, one_listener.local_addr()),
            )
            .await;
            assert_eq!((a, b), (Ok(()), Ok(())), "round {round}");
            let both_up = |m: &Messenger, other: NodeId| {
                m.peers() == vec![(NodeId::FRONT_END, true), (other, true)]
            };
            assert!(both_up(one, two_id), "round {round}: {:?}", one.peers());
            until("node 2 has node 1 as a peer", || both_up(two, one_id)).await;
            // Messages and calls both ways.
            one.send(two_id, COUNTER, NOTE, chain(b"to two")).unwrap();
            two.send(one_id, COUNTER, NOTE, chain(b"to one")).unwrap();
            let reply = two.call(one_id, COUNTER, ECHO, chain(b"2")).await.unwrap();
            assert_eq!(reply.to_vec(), b"echo:2");
            let reply = one.call(two_id, COUNTER, ECHO, chain(b"1")).await.unwrap();
            assert_eq!(reply.to_vec(), b"echo:1");
            let n = round as usize + 1;
            until("the messages arrive", || {
                two_inbox.lock().unwrap().len() == n && one_inbox.lock().unwrap().len() == n
            })
            .await;
            // Nothing was lost on the way (the loser was refused, not joined).
            assert_eq!(one.stats().peers_lost, u64::from(round), "round {round}");
            // Apart again, for the next round.
            one.disconnect(two_id).unwrap();
            until("both see the connection go", || {
                one.peers().contains(&(two_id, false)) && two.peers().contains(&(one_id, false))
            })
            .await;
        }
    });
}

/// After `shutdown` a Messenger admits no peer: a node connecting to it is not taken in,
/// and its own `connect_peer`, retrying a port nobody listens on, stops trying.
#[test]
fn a_shut_down_messenger_admits_no_peer_and_stops_connecting() {
    run(|| async {
        let net = network().await;
        let quick = MessengerConfig {
            handshake_timeout: Duration::from_millis(500),
            ..tolerant()
        };
        let (_front, _, nodes) = cluster(&net, 2, quick).await;
        let (one, _, _) = &nodes[0];
        let (two, two_info, _) = &nodes[1];
        let listener = two.listen_for_peers(&net, 0).await.unwrap();
        // Shut down, still listening: a connection's handshake is ended, not admitted.
        two.shutdown();
        let connected = one
            .connect_peer(&net, two_info.node, listener.local_addr())
            .await;
        assert!(connected.is_err(), "{connected:?}");
        assert!(
            two.peers().iter().all(|&(_, alive)| !alive),
            "{:?}",
            two.peers()
        );

        // Shut down while connect_peer retries, 10 s of handshake timeout to go: it ends.
        let patient = MessengerConfig {
            handshake_timeout: Duration::from_secs(10),
            ..tolerant()
        };
        let (_front, _, nodes) = cluster(&net, 1, patient).await;
        let three = &nodes[0].0;
        let start = Instant::now();
        let (result, ()) =
            ebb::future::join(three.connect_peer(&net, NodeId(9), closed_port()), async {
                ebb::sleep(Duration::from_millis(50)).await;
                three.shutdown();
            })
            .await;
        let took = start.elapsed();
        assert_eq!(result, Err(JoinError::Lost(LossReason::Disconnected)));
        assert!(
            took < Duration::from_secs(5),
            "connect_peer went on for {took:?}"
        );
    });
}
