//! The Messenger over a shared-memory window, hosted: the front end on core 0 holds the
//! host end of a window in its own heap, a node Messenger on core 1 the guest end —
//! the same rings, flags and doorbells a native node booted in the front end's process
//! uses (there the window is the top of the VM's memory and the node's doorbell an
//! ioeventfd; crates/ebb-dist/tests/nodes.rs and apps/cluster run that). Hostile peers
//! are raw ring ends in plain threads.
//!
//! Run: `cargo test -p ebb-dist --test shm`.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebb::net::Network;
use ebb::shm::{HostWindow, Side};
use ebb::{CoreId, EbbId, IOBufChain};
use ebb_dist::messenger::{CallError, FrontEnd, LossReason, Messenger};
use ebb_dist::node::NodeId;
use ebb_shm::{Endpoint, HeapWindow, Mapping};
use rustix::event::{EventfdFlags, eventfd};

mod common;
use common::{chain, network, pattern, run, tolerant};

const COUNTER: EbbId = match EbbId::from_u32(2100) {
    Some(id) => id,
    None => panic!(),
};
const NOTE: u16 = 1;
const ECHO: u16 = 2;
const LIMIT: Duration = Duration::from_secs(20);

fn ring(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Both ends of one heap window, each with the other's doorbell as its wake.
fn window_pair(bytes: usize) -> (Arc<HeapWindow>, HostWindow, HostWindow) {
    let mapping = HeapWindow::new(bytes).expect("a heap window");
    let host_bell = eventfd(0, EventfdFlags::NONBLOCK).unwrap();
    let guest_bell = eventfd(0, EventfdFlags::NONBLOCK).unwrap();
    let (hb, gb) = (
        host_bell.try_clone().unwrap(),
        guest_bell.try_clone().unwrap(),
    );
    let host = HostWindow {
        mapping: mapping.clone(),
        doorbell: host_bell,
        wake_guest: Arc::new(move |_core| ring(&gb)),
    };
    let guest = HostWindow {
        mapping: mapping.clone(),
        doorbell: guest_bell,
        wake_guest: Arc::new(move |_core| ring(&hb)),
    };
    (mapping, host, guest)
}

fn serve(messenger: &Messenger, inbox: &Arc<Mutex<Vec<Vec<u8>>>>) {
    let inbox = inbox.clone();
    messenger.on_message(COUNTER, NOTE, move |_from, payload| {
        inbox.lock().unwrap().push(payload.to_vec());
    });
    messenger.on_call(COUNTER, ECHO, |_from, payload| async move { Ok(payload) });
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        ebb::sleep(Duration::from_millis(1)).await;
    }
}

/// A front end (core 0) and a node (core 1) joined through `window_pair`.
async fn joined(
    net: &Network,
    bytes: usize,
) -> (
    FrontEnd,
    Messenger,
    Arc<HeapWindow>,
    Arc<Mutex<Vec<Vec<u8>>>>,
    Arc<Mutex<Vec<Vec<u8>>>>,
) {
    let front = FrontEnd::start(net, 0, tolerant()).await.unwrap();
    let front_inbox = Arc::default();
    serve(front.messenger(), &front_inbox);
    let (mapping, host, guest) = window_pair(bytes);
    front.accept_shared(ebb::shm::attach(host).expect("the host end opens"));
    let expected = front.expect(77);
    let node_inbox: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let inbox = node_inbox.clone();
    let node = ebb::spawn_local_on(CoreId(1), move || async move {
        let node = Messenger::new(tolerant());
        serve(&node, &inbox);
        let conn = ebb::shm::attach_end(guest, Side::Guest).expect("the guest end opens");
        let info = node.join_shared(conn, 77).await.expect("the node joins");
        assert_eq!(info.node, NodeId(1));
        node
    })
    .await
    .unwrap();
    let info = ebb::timeout(LIMIT, expected).await.unwrap().unwrap();
    assert_eq!(info.node, NodeId(1));
    (front, node, mapping, front_inbox, node_inbox)
}

#[test]
fn a_node_joins_and_talks_through_the_window() {
    run(|| async {
        let net = network().await;
        let (front, node, _mapping, front_inbox, node_inbox) = joined(&net, 64 << 10).await;
        let fm = front.messenger().clone();
        const COUNT: u32 = 3000;
        // Small messages both ways, from both cores, through a 30 KiB ring: back-pressure
        // many times over.
        let nm = node.clone();
        let sender = ebb::spawn_local_on(CoreId(1), move || async move {
            for i in 0..COUNT {
                nm.send_when_ready(NodeId::FRONT_END, COUNTER, NOTE, chain(&i.to_le_bytes()))
                    .await
                    .unwrap();
            }
            nm.send_when_ready(
                NodeId::FRONT_END,
                COUNTER,
                NOTE,
                chain(&pattern(1 << 20, 3)),
            )
            .await
            .unwrap();
        });
        for i in 0..COUNT {
            fm.send_when_ready(NodeId(1), COUNTER, NOTE, chain(&i.to_le_bytes()))
                .await
                .unwrap();
        }
        fm.send_when_ready(NodeId(1), COUNTER, NOTE, chain(&pattern(1 << 20, 5)))
            .await
            .unwrap();
        sender.await.unwrap();
        until("every message arrived", || {
            front_inbox.lock().unwrap().len() == COUNT as usize + 1
                && node_inbox.lock().unwrap().len() == COUNT as usize + 1
        })
        .await;
        for (inbox, seed) in [(&front_inbox, 3), (&node_inbox, 5)] {
            let inbox = inbox.lock().unwrap();
            for (i, m) in inbox[..COUNT as usize].iter().enumerate() {
                assert_eq!(m, &(i as u32).to_le_bytes(), "in order");
            }
            assert_eq!(
                inbox[COUNT as usize],
                pattern(1 << 20, seed),
                "1 MiB intact"
            );
        }
        // Calls both ways.
        let reply = fm
            .call(NodeId(1), COUNTER, ECHO, chain(b"ping"))
            .await
            .unwrap();
        assert_eq!(reply.to_vec(), b"ping");
        let nm = node.clone();
        let reply = ebb::spawn_local_on(CoreId(1), move || async move {
            nm.call(
                NodeId::FRONT_END,
                COUNTER,
                ECHO,
                chain(&pattern(300_000, 1)),
            )
            .await
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(reply.to_vec(), pattern(300_000, 1));
        assert_eq!(fm.peers(), vec![(NodeId(1), true)]);
        let nm = node.clone();
        ebb::spawn_on(CoreId(1), move || nm.shutdown()).unwrap();
        until("the front end saw the node go", || {
            fm.peers() == vec![(NodeId(1), false)]
        })
        .await;
    })
}

#[test]
fn a_gone_node_fails_its_calls_at_once() {
    run(|| async {
        let net = network().await;
        let (front, node, mapping, _f, _n) = joined(&net, 64 << 10).await;
        let fm = front.messenger().clone();
        // The node stops answering (a handler that never replies), then its end of the
        // window is marked reset, as the allocator does when a VM ends.
        node.on_call(COUNTER, ECHO, |_from, _payload| async move {
            std::future::pending::<()>().await;
            Ok(IOBufChain::default())
        });
        let pending = fm.call(NodeId(1), COUNTER, ECHO, chain(b"never answered"));
        let lost = fm.peer_lost(NodeId(1));
        let marked = Instant::now();
        let mapping: Arc<dyn Mapping> = mapping;
        ebb::sleep(Duration::from_millis(20)).await;
        ebb_shm::mark_reset(mapping, Side::Guest).unwrap();
        let (answer, reason) = ebb::future::join(pending, lost).await;
        let took = marked.elapsed();
        assert!(
            matches!(answer, Err(CallError::PeerLost { .. })),
            "{answer:?}"
        );
        assert!(
            matches!(
                reason,
                Ok(LossReason::Connection(ebb::net::CloseReason::Reset))
            ),
            "{reason:?}"
        );
        assert!(took < Duration::from_secs(1), "reported after {took:?}");
    })
}

#[test]
fn hostile_bytes_in_the_window_close_it_with_a_clear_error() {
    run(|| async {
        let net = network().await;
        let front = FrontEnd::start(&net, 0, tolerant()).await.unwrap();
        for garbage in [
            vec![0xffu8; 64],                      // no frame at all
            b"EBB\x01 and then nonsense".to_vec(), // a truncated header, then FIN
            vec![0u8; 24],                         // a header of zeros
        ] {
            let (mapping, host, _guest) = window_pair(64 << 10);
            front.accept_shared(ebb::shm::attach(host).unwrap());
            let before = front.messenger().recent_errors().len();
            let mapping: Arc<dyn Mapping> = mapping;
            std::thread::spawn(move || {
                let mut raw = Endpoint::open(mapping, Side::Guest, 0).unwrap();
                raw.write(&garbage).unwrap();
                raw.publish();
                raw.set_state(ebb_shm::State::Finished);
            })
            .join()
            .unwrap();
            let fm = front.messenger().clone();
            until("the front end refused the window", || {
                fm.recent_errors().len() > before
            })
            .await;
            let error = front.messenger().recent_errors().pop().unwrap();
            assert_eq!(error.node, None, "it never joined");
            assert!(
                matches!(error.reason, LossReason::Protocol(_)),
                "{:?}",
                error.reason
            );
        }
        // The front end still admits a well-behaved node.
        let (_f, _node, _m, _fi, _ni) = joined(&net, 64 << 10).await;
        drop(front);
    })
}
