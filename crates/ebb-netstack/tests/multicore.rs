//! Two cores, no root, virtual time: a `NetStack` on two queues of a test NIC (cores 0
//! and 1), whose received frames are dealt to the queues round-robin, ignoring flows —
//! the worst case for ownership: about half of every connection's frames arrive on the
//! core that does not own it and must be steered (by the runtime's real steering, one
//! `spawn_on` message per batch) to the one that does. The peer is an ordinary one-queue
//! `NetStack` on core 0.
//!
//! What is tested, for each `Placement` of `listen_on_every_core`: every byte echoed
//! intact on every connection; each accepted connection owned by (and its handler run
//! on) the core the placement chose; connections opened by core 1 through
//! `CoreNetStack::connect` owned and served there; frames actually steered (the
//! runners' counters); nothing reset or refused; the flow directory empty once every
//! connection has left TIME-WAIT. And: the steering inbox is bounded
//! (`MAX_STEERED_WAITING`), what overflows it dropped and counted.

mod common;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ebb_core::net::CloseReason;
use ebb_core::rcu::RcuDomain;
use ebb_core::testing::TestPlatform;
use ebb_core::{CoreId, IOBuf, event};
use ebb_net::steering::FlowDirectory;
use ebb_net::tcp::FourTuple;
use ebb_net_driver::Link;
use ebb_netstack::{MAX_STEERED_WAITING, NetStack, NetStackCounters, Placement};

const CORES: usize = 2;
const OUR_PORT: u16 = 80;
const PEER_PORT: u16 = 7000;

/// Where each connection was accepted: `(core, tuple)`.
type Accepted = Arc<Mutex<Vec<(CoreId, FourTuple)>>>;

struct World {
    nic: TestNic,
    us: NetStack,
    peer: NetStack,
    accepted: Accepted,
    ran_on: RanOn,
}

/// Our two-queue stack listening (echo) on every core with `placement`, and the peer
/// listening (echo) on `PEER_PORT`.
async fn world(
    platform: &Arc<TestPlatform>,
    placement: Placement,
    link: Link,
    deal: Deal,
) -> World {
    let (nic, [ours, theirs]) = TestNic::new(platform, link, [CORES, 1], [deal, Deal::RoundRobin]);
    let us = NetStack::start(devices(ours), config(US, 1)).expect("our stack");
    us.ready().await.expect("every core runs its queue");
    assert_eq!(us.cores(), [CoreId(0), CoreId(1)]);
    let peer = NetStack::start(devices(theirs), config(PEER, 2)).expect("peer stack");
    let (accepted, ran_on) = (Accepted::default(), RanOn::default());
    let (a, r) = (accepted.clone(), ran_on.clone());
    let listener = us
        .listen_on_every_core(OUR_PORT, placement, move |conn| {
            a.lock()
                .unwrap()
                .push((event::core_id(), conn.four_tuple()));
            conn.set_handler(Echo { ran_on: r.clone() });
        })
        .await
        .expect("listen on every core");
    std::mem::forget(listener);
    let peer_listener = peer
        .listen(PEER_PORT, |conn| {
            conn.set_handler(Echo {
                ran_on: RanOn::default(),
            })
        })
        .expect("peer listens");
    std::mem::forget(peer_listener);
    World {
        nic,
        us,
        peer,
        accepted,
        ran_on,
    }
}

type Outcomes = Vec<Arc<Mutex<Outcome>>>;

/// `n` connections from the peer to us, each sending its own bytes; and, with `out`, one
/// from each of our cores to the peer. Returns every outcome and the count of ended ones.
fn traffic(w: &World, n: u32, out: bool) -> (Outcomes, Outcomes, Arc<AtomicU32>) {
    let done = Arc::new(AtomicU32::new(0));
    let mut inbound = Vec::new();
    for i in 0..n {
        let outcome = Arc::new(Mutex::new(Outcome::default()));
        inbound.push(outcome.clone());
        let data = pattern(u64::from(i) + 1, 100_000 + 977 * i as usize);
        let connecting = w.peer.connect(SocketAddrV4::new(US, OUR_PORT));
        let done = done.clone();
        drop(event::spawn_local(async move {
            let conn = connecting.await.expect("the peer connects");
            Client::start(&conn, data, outcome, done);
        }));
    }
    let mut outbound = Vec::new();
    if out {
        for core in [CoreId(0), CoreId(1)] {
            let outcome = Arc::new(Mutex::new(Outcome::default()));
            outbound.push(outcome.clone());
            let (handle, done) = (w.us.handle(), done.clone());
            // Core 1's connection is made there, through its own `CoreNetStack`.
            event::spawn_on(core, move || {
                let here = handle.on_this_core().expect("this core runs a queue");
                assert_eq!(here.core(), core);
                let connecting = here.connect(SocketAddrV4::new(PEER, PEER_PORT));
                drop(event::spawn_local(async move {
                    let conn = match connecting.await {
                        Ok(conn) => conn,
                        Err(e) => {
                            outcome.lock().unwrap().closed = Some(CloseReason::Error(e));
                            return;
                        }
                    };
                    let data = pattern(1000 + u64::from(core.0), 150_000);
                    Client::start(&conn, data, outcome, done);
                }));
            })
            .expect("spawn on our core");
        }
    }
    (inbound, outbound, done)
}

async fn per_core(us: &NetStack) -> Vec<NetStackCounters> {
    us.counters_per_core()
        .await
        .into_iter()
        .map(|(_, c)| c.expect("counters"))
        .collect()
}

/// Runs `n` inbound connections (and one outbound per core) to the end and checks
/// everything the module docs list; `placed` says which core must own a tuple.
async fn echo_everything(w: &World, n: u32, placed: impl Fn(&FourTuple) -> Option<CoreId>) {
    let (inbound, outbound, done) = traffic(w, n, true);
    let total = n + CORES as u32;
    let ended = wait_for(Duration::from_secs(120), || {
        done.load(Ordering::SeqCst) == total
    })
    .await;
    if !ended {
        let counters = per_core(&w.us).await;
        panic!(
            "{} of {total} connections ended after 120 s; inbound {:?}, outbound {:?}, ours {counters:#?}, peer {:#?}",
            done.load(Ordering::SeqCst),
            inbound
                .iter()
                .map(|o| o.lock().unwrap().clone())
                .collect::<Vec<_>>(),
            outbound
                .iter()
                .map(|o| o.lock().unwrap().clone())
                .collect::<Vec<_>>(),
            w.peer.counters().expect("peer counters"),
        );
    }
    for outcome in inbound.iter().chain(&outbound) {
        let outcome = outcome.lock().unwrap();
        assert!(
            outcome.intact,
            "every echo intact and in order: {outcome:?}"
        );
        assert_eq!(outcome.closed, Some(CloseReason::Normal), "{outcome:?}");
    }
    // Core 1's own connection was served on core 1 (and core 0's on core 0).
    for (core, outcome) in [CoreId(0), CoreId(1)].into_iter().zip(&outbound) {
        assert_eq!(
            outcome.lock().unwrap().core,
            Some(core),
            "owned by its core"
        );
    }

    // Ownership: each inbound connection was accepted, and served, where the placement
    // said.
    let accepted = w.accepted.lock().unwrap().clone();
    assert_eq!(accepted.len(), n as usize);
    for &(core, tuple) in &accepted {
        if let Some(chosen) = placed(&tuple) {
            assert_eq!(core, chosen, "{tuple:?} accepted on {core:?}");
        }
    }
    for &(core, local, remote) in w.ran_on.lock().unwrap().iter() {
        let owner = accepted
            .iter()
            .find(|(_, t)| t.local == local && t.remote == remote)
            .map(|(c, _)| *c);
        assert_eq!(
            Some(core),
            owner,
            "{local}-{remote}'s handler ran on {core:?}"
        );
    }

    let counters = per_core(&w.us).await;
    let steered: u64 = counters.iter().map(|c| c.runner.steered_out).sum();
    let copied: u64 = counters.iter().map(|c| c.runner.steered_everywhere).sum();
    let steered_in: u64 = counters.iter().map(|c| c.runner.steered_in).sum();
    assert!(
        steered > 100,
        "round-robin queues made the cores steer frames: {:?}",
        counters.iter().map(|c| c.runner).collect::<Vec<_>>()
    );
    // ARP replies are copied to the other core as well.
    assert_eq!(
        steered + copied * (CORES as u64 - 1),
        steered_in,
        "every steered frame arrived"
    );
    for (core, c) in counters.iter().enumerate() {
        assert_eq!(
            c.tcp.dropped_no_listener, 0,
            "core {core} reset nothing: {:?}",
            c.tcp
        );
        assert_eq!(c.tcp.dropped_owned_elsewhere, 0, "core {core}: {:?}", c.tcp);
        assert_eq!(c.runner.steered_dropped, 0, "core {core}: {:?}", c.runner);
        assert_eq!(c.runner.steer_failures, 0, "core {core}: {:?}", c.runner);
        assert_eq!(c.tcp.output_errors, 0, "core {core}: {:?}", c.tcp);
        assert_eq!(
            c.interface.tx_dropped.too_large, 0,
            "core {core}: {:?}",
            c.interface
        );
    }
    assert!(
        w.nic.dealt(Side::A).iter().all(|&n| n > 100),
        "both queues received"
    );

    // After TIME-WAIT (2 MSL = 2 s here) every claim is released.
    wait_until(Duration::from_secs(10), "the directory empties", || {
        w.us.owned_connections() == 0
    })
    .await;
}

fn run_two_cores<F: std::future::Future<Output = ()> + 'static>(
    main: impl FnOnce(Arc<TestPlatform>) -> F + Send,
) {
    let platform = TestPlatform::with_auto_advance(CORES);
    let p = platform.clone();
    run(&platform, CORES, move || main(p));
}

#[test]
fn hashed_connections_live_on_their_hashed_core_with_frames_on_any_queue() {
    run_two_cores(|p| async move {
        let w = world(&p, Placement::Hashed, Link::new(), Deal::RoundRobin).await;
        // The hash is stable: a directory over the same cores places a tuple alike.
        let directory =
            FlowDirectory::new(Arc::new(RcuDomain::new(CORES)), vec![CoreId(0), CoreId(1)]);
        echo_everything(&w, 12, |t| {
            Some(directory.place(CoreId(0), t, Placement::Hashed))
        })
        .await;
        let accepted = w.accepted.lock().unwrap().clone();
        for core in [CoreId(0), CoreId(1)] {
            assert!(
                accepted.iter().any(|&(c, _)| c == core),
                "hashing used {core:?} too: {accepted:?}"
            );
        }
    });
}

#[test]
fn accepting_core_connections_stay_where_their_syn_arrived() {
    run_two_cores(|p| async move {
        let w = world(&p, Placement::AcceptingCore, Link::new(), Deal::RoundRobin).await;
        // Which queue a SYN reaches is the NIC's choice; the owner is whichever core
        // accepted, and its handler must run there (checked inside).
        echo_everything(&w, 8, |_| None).await;
        let counters = per_core(&w.us).await;
        for (core, c) in counters.iter().enumerate() {
            assert!(c.tcp.segments_in > 0, "core {core} served connections");
        }
    });
}

#[test]
fn connections_placed_on_one_core_are_all_served_there() {
    run_two_cores(|p| async move {
        let w = world(
            &p,
            Placement::Core(CoreId(1)),
            Link::new(),
            Deal::RoundRobin,
        )
        .await;
        echo_everything(&w, 6, |_| Some(CoreId(1))).await;
        let counters = per_core(&w.us).await;
        assert!(
            counters[0].runner.steered_out > 0,
            "core 0 steered core 1's frames: {:?}",
            counters[0].runner
        );
    });
}

#[test]
fn the_steering_inbox_is_bounded_and_counts_what_overflows() {
    // One queue receives everything (a hash that puts every flow in one bucket) and
    // hands it over in a single burst larger than the inbox: core 1 steers it all to
    // core 0, which keeps MAX_STEERED_WAITING frames and drops the rest.
    const FRAMES: usize = MAX_STEERED_WAITING + 904;
    run_two_cores(|p| async move {
        let link = Link::new().with_capacity(FRAMES).with_max_burst(FRAMES);
        let w = world(&p, Placement::Core(CoreId(0)), link, Deal::AllTo(1)).await;
        let syn = syn_frame(40_000);
        w.nic
            .send_raw(Side::B, (0..FRAMES).map(|_| syn.clone()).collect());
        wait_until(Duration::from_secs(1), "core 0 took the batch", || {
            w.us.runner_counters().steered_in > 0
        })
        .await;
        let counters = per_core(&w.us).await;
        let (home, other) = (counters[0].runner, counters[1].runner);
        // The burst, and the peer's answers to core 0's SYN-ACKs (all on queue 1 too).
        assert!(
            other.steered_out >= FRAMES as u64,
            "core 1 steered it all: {other:?}"
        );
        assert_eq!(
            home.steered_in,
            other.steered_out + other.steered_everywhere,
            "{home:?}"
        );
        // Core 1 may hand the burst over in more than one piece, and core 0 may take a
        // few frames out of its inbox in between, making room for as many more (one CI
        // run dropped 903, not 904): the overflow is dropped less at most that slack.
        let overflow = (FRAMES - MAX_STEERED_WAITING) as u64;
        assert!(
            (overflow - 64..=overflow).contains(&home.steered_dropped),
            "what overflowed the inbox ({overflow}) was dropped and counted: {home:?}"
        );
        // What was kept reached core 0's TCP (and only that, with the few answers).
        let rx_tcp = counters[0].interface.rx_tcp;
        assert!(
            (MAX_STEERED_WAITING as u64..FRAMES as u64).contains(&rx_tcp),
            "core 0 processed the {MAX_STEERED_WAITING} kept: {rx_tcp}"
        );
    });
}

/// A SYN from the peer's port `port` to our port, as the peer's stack would send it.
fn syn_frame(port: u16) -> IOBuf {
    ebb_net::testing::syn_frame(
        mac(2),
        mac(1),
        SocketAddrV4::new(PEER, port),
        SocketAddrV4::new(US, OUR_PORT),
    )
}
