//! One core, no root, virtual time: a `NetStack` on side A of a test link and a peer
//! `NetStack` (on the same core) on side B.
//!
//! What is tested: a megabyte echoed and the connection closed; the poll policy (at most
//! `MAX_ROUNDS` stack polls per runner poll, the rest taken by the idle handler without
//! the core sleeping in between); an idle stack sleeps (the platform's wait log and the
//! runner's counters show no busy polling); the deadline timer retransmits what a lossy
//! link lost, with the core sleeping until the retransmission deadline; a device that
//! refuses transmission stops idle polling until its writable report (and the 1 ms
//! backstop); shutdown unwatches the device, removes the idle handler and ends the timer
//! task.

mod common;

use std::cell::Cell;
use std::net::SocketAddrV4;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ebb_core::event;
use ebb_core::net::CloseReason;
use ebb_core::testing::TestPlatform;
use ebb_core::{CoreId, IOBuf};
use ebb_net::phy::Link;
use ebb_netstack::{MAX_ROUNDS, NetStack, RunnerCounters};

const PORT: u16 = 80;

/// Ours on side A, the peer on side B, both started on the calling core; ours echoes on
/// `PORT`.
fn two_stacks(platform: &Arc<TestPlatform>, link: Link) -> (TestNic, NetStack, NetStack, RanOn) {
    let (nic, [ours, theirs]) = TestNic::new(platform, link, [1, 1], [Deal::RoundRobin; 2]);
    let us = NetStack::start(devices(ours), config(US, 1)).expect("our stack");
    let peer = NetStack::start(devices(theirs), config(PEER, 2)).expect("peer stack");
    let ran_on = RanOn::default();
    let echo_ran_on = ran_on.clone();
    let listener = us
        .listen(PORT, move |conn| {
            conn.set_handler(Echo {
                ran_on: echo_ran_on.clone(),
            })
        })
        .expect("listen");
    std::mem::forget(listener); // Listens for the whole test.
    (nic, us, peer, ran_on)
}

/// The peer connects to us, sends `data` and checks the echo; resolves with the outcome.
async fn echo_from_peer(peer: &NetStack, data: Vec<u8>, limit: Duration) -> Outcome {
    let conn = peer
        .connect(SocketAddrV4::new(US, PORT))
        .await
        .expect("peer connects");
    let (outcome, done) = (
        Arc::new(Mutex::new(Outcome::default())),
        Rc::new(Cell::new(0)),
    );
    Client::start(&conn, data, outcome.clone(), done.clone());
    wait_until(limit, "the echo", || done.get() == 1).await;
    let outcome = outcome.lock().unwrap().clone();
    outcome
}

fn delta(after: RunnerCounters, before: RunnerCounters) -> RunnerCounters {
    RunnerCounters {
        polls: after.polls - before.polls,
        readable_events: after.readable_events - before.readable_events,
        writable_events: after.writable_events - before.writable_events,
        timer_fires: after.timer_fires - before.timer_fires,
        idle_polls: after.idle_polls - before.idle_polls,
        tx_blocked: after.tx_blocked - before.tx_blocked,
        ..RunnerCounters::default()
    }
}

#[test]
fn a_megabyte_is_echoed_and_the_connection_closes() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (_nic, us, peer, ran_on) = two_stacks(&p, Link::new());
        let data = pattern(7, 1 << 20);
        let outcome = echo_from_peer(&peer, data, Duration::from_secs(60)).await;
        assert!(outcome.intact, "every byte echoed in order: {outcome:?}");
        assert_eq!(outcome.closed, Some(CloseReason::Normal));
        // Our side closes too (it answered the FIN), and the echo ran here.
        wait_until(Duration::from_secs(10), "our side closed", || {
            us.tcp().connection_count() == 0
        })
        .await;
        assert!(
            ran_on
                .lock()
                .unwrap()
                .iter()
                .all(|&(c, _, _)| c == CoreId(0)),
            "handlers ran on the stack's core"
        );
        let c = us.counters().expect("counters");
        assert!(c.runner.readable_events > 0, "driven by the device: {c:?}");
        assert_eq!(
            c.tcp.retransmissions, 0,
            "a clean link loses nothing: {c:?}"
        );
    });
}

/// An Ethernet frame to us that the interface drops at once (an unknown EtherType).
fn junk_frame() -> IOBuf {
    let mut frame = vec![0u8; 60];
    frame[..6].copy_from_slice(&mac(1).0);
    frame[6..12].copy_from_slice(&mac(2).0);
    frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    IOBuf::copy_from_slice(&frame)
}

#[test]
fn a_runner_poll_runs_at_most_max_rounds_and_the_idle_handler_takes_the_rest() {
    const FRAMES: usize = 5000;
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        // Room for the whole burst on the link and in the queue.
        let link = Link::new().with_capacity(FRAMES);
        let (nic, [ours, _theirs]) = TestNic::new(&p, link, [1, 1], [Deal::RoundRobin; 2]);
        let us = NetStack::start(devices(ours), config(US, 1)).expect("our stack");
        event::yield_now().await;
        let before = us.runner_counters();
        let t0 = event::now();
        nic.send_raw(Side::B, (0..FRAMES).map(|_| junk_frame()).collect());
        // One readable report; then the idle handler must finish the burst without the
        // core sleeping (virtual time does not move) and without another report.
        for _ in 0..1000 {
            if nic.pending(Side::A, 0) == 0 {
                break;
            }
            event::yield_now().await;
        }
        assert_eq!(nic.pending(Side::A, 0), 0, "the burst was drained");
        assert_eq!(event::now(), t0, "drained without sleeping");
        let d = delta(us.runner_counters(), before);
        // One stack poll takes at most rx_batches (4) bursts of max_burst frames.
        let per_stack_poll = 4 * Link::new().capabilities().max_burst;
        let runner_polls =
            (d.readable_events + d.writable_events + d.timer_fires + d.idle_polls) as usize;
        assert!(
            d.polls as usize <= MAX_ROUNDS * runner_polls,
            "at most MAX_ROUNDS stack polls per runner poll: {d:?}"
        );
        assert!(
            d.polls as usize >= FRAMES / per_stack_poll,
            "the burst took many stack polls: {d:?}"
        );
        assert_eq!(
            d.readable_events, 1,
            "one report for the whole burst: {d:?}"
        );
        assert!(
            d.idle_polls as usize >= FRAMES / per_stack_poll / MAX_ROUNDS - 1,
            "the idle handler picked up what each runner poll left: {d:?}"
        );
        let c = us.counters().expect("counters");
        assert_eq!(c.interface.rx_frames, FRAMES as u64, "{c:?}");
    });
}
