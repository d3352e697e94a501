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

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ebb_core::event;
use ebb_core::net::CloseReason;
use ebb_core::testing::TestPlatform;
use ebb_core::{CoreId, IOBuf, Instant};
use ebb_net_driver::Link;
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
        Arc::new(AtomicU32::new(0)),
    );
    Client::start(&conn, data, outcome.clone(), done.clone());
    wait_until(limit, "the echo", || done.load(Ordering::SeqCst) == 1).await;
    outcome.lock().unwrap().clone()
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

/// Ours connects to the peer, which echoes on `PEER_PORT`.
const PEER_PORT: u16 = 7000;

fn peer_echoes(peer: &NetStack) {
    let listener = peer
        .listen(PEER_PORT, |conn| {
            conn.set_handler(Echo {
                ran_on: RanOn::default(),
            })
        })
        .expect("peer listens");
    std::mem::forget(listener);
}

/// The core's waits that started in `[from, to)`.
fn waits_between(platform: &TestPlatform, from: Instant, to: Instant) -> Vec<(Instant, Instant)> {
    platform
        .waits(CoreId(0))
        .into_iter()
        .filter(|&(at, _)| at >= from && at < to)
        .collect()
}

#[test]
fn an_idle_stack_sleeps_until_its_next_deadline_or_forever() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (_nic, us, peer, _) = two_stacks(&p, Link::new());
        // An established connection and a little traffic, then nothing.
        let outcome = echo_from_peer(&peer, pattern(1, 1000), Duration::from_secs(5)).await;
        assert!(outcome.intact);
        let _conn = peer
            .connect(SocketAddrV4::new(US, PORT))
            .await
            .expect("an idle connection");
        event::sleep(Duration::from_secs(5)).await; // TIME-WAIT of the first one ends.
        let (ours, theirs) = (us.runner_counters(), peer.runner_counters());
        let t0 = event::now();
        event::sleep(Duration::from_secs(10)).await;
        let t1 = event::now();
        let (d_us, d_peer) = (
            delta(us.runner_counters(), ours),
            delta(peer.runner_counters(), theirs),
        );
        let waits = waits_between(&p, t0, t1);
        assert_eq!(d_us.idle_polls, 0, "no idle polling: {d_us:?}");
        assert_eq!(d_peer.idle_polls, 0, "no idle polling: {d_peer:?}");
        // Nothing to do: the core slept once until the only deadline left, this task's.
        assert_eq!(
            waits,
            [(t0, t1)],
            "one sleep until the next deadline: us {d_us:?}, peer {d_peer:?}"
        );
        assert_eq!(d_us.polls, 0, "{d_us:?}");
    });
}

#[test]
fn the_deadline_timer_retransmits_what_a_lossy_link_lost() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (nic, us, peer, _) = two_stacks(&p, Link::new());
        peer_echoes(&peer);
        let conn = us
            .connect(SocketAddrV4::new(PEER, PEER_PORT))
            .await
            .expect("we connect");
        event::sleep(Duration::from_millis(100)).await;
        // The cable is cut: nothing we send arrives, and nothing answers.
        nic.blackhole(Side::B, true);
        let before = us.runner_counters();
        let retransmitted = us.counters().expect("counters").tcp.retransmissions;
        let (outcome, done) = (
            Arc::new(Mutex::new(Outcome::default())),
            Arc::new(AtomicU32::new(0)),
        );
        let t0 = event::now();
        Client::start(&conn, pattern(3, 100_000), outcome.clone(), done.clone());
        event::sleep(Duration::from_secs(3)).await;
        let t1 = event::now();
        let d = delta(us.runner_counters(), before);
        let c = us.counters().expect("counters");
        assert!(nic.lost(Side::B) > 0, "the link lost frames");
        assert!(
            c.tcp.retransmissions > retransmitted && c.tcp.timeouts > 0,
            "the timer retransmitted: {:?}",
            c.tcp
        );
        assert!(d.timer_fires > 0, "{d:?}");
        assert!(d.idle_polls <= 1, "only the send was idle-polled: {d:?}");
        // The core slept from timer to timer (the tail loss probe, then the RTO backing
        // off), never polling in between.
        let waits = waits_between(&p, t0, t1);
        assert!(
            waits.iter().all(
                |&(at, until)| until.saturating_duration_since(at) >= Duration::from_millis(10)
            ),
            "no short naps: {waits:?}"
        );
        assert!(
            waits
                .iter()
                .any(|&(at, until)| until.saturating_duration_since(at)
                    >= Duration::from_millis(200)),
            "slept until a retransmission deadline (min_rto 200 ms): {waits:?}"
        );
        assert!(
            waits.len() as u64 <= d.timer_fires + peer.runner_counters().timer_fires + 1,
            "one sleep per timer: {waits:?} {d:?}"
        );
        // The cable mended, the next retransmission gets through and the echo completes.
        nic.blackhole(Side::B, false);
        wait_until(Duration::from_secs(120), "the echo after the loss", || {
            done.load(Ordering::SeqCst) == 1
        })
        .await;
        let outcome = outcome.lock().unwrap().clone();
        assert!(outcome.intact, "{outcome:?}");
    });
}

/// Starts a client on a fresh connection of ours to the peer's echo, with our queue
/// refusing transmission; returns the client's outcome and done count.
async fn blocked_client(
    nic: &TestNic,
    us: &NetStack,
    peer: &NetStack,
) -> (Arc<Mutex<Outcome>>, Arc<AtomicU32>) {
    peer_echoes(peer);
    let conn = us
        .connect(SocketAddrV4::new(PEER, PEER_PORT))
        .await
        .expect("we connect");
    event::sleep(Duration::from_millis(100)).await;
    nic.refuse_tx(Side::A, 0);
    let (outcome, done) = (
        Arc::new(Mutex::new(Outcome::default())),
        Arc::new(AtomicU32::new(0)),
    );
    Client::start(&conn, pattern(5, 200_000), outcome.clone(), done.clone());
    // The idle handler polls for the send (TCP's polling contract) and meets the refusal.
    event::yield_now().await;
    (outcome, done)
}

#[test]
fn a_device_pushing_back_stops_idle_polling_until_its_writable_report() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (nic, us, peer, _) = two_stacks(&p, Link::new());
        let before = us.runner_counters();
        let (outcome, done) = blocked_client(&nic, &us, &peer).await;
        let blocked = us.runner_counters();
        // Half a millisecond off the backstop's ticks, so that the report below is not
        // raced by a retry due at the same instant.
        event::sleep(Duration::from_micros(10_500)).await;
        let d = delta(us.runner_counters(), blocked);
        assert!(
            delta(blocked, before).tx_blocked > 0,
            "the device pushed back"
        );
        assert_eq!(
            d.idle_polls, 0,
            "blocked transmission is not idle-polled: {d:?}"
        );
        // The 1 ms backstop retries (the push-back might not be the device's).
        assert!(
            (5..=11).contains(&d.timer_fires),
            "about one retry per millisecond: {d:?}"
        );
        assert!(
            nic.refused(Side::A, 0) >= d.timer_fires,
            "each retry was refused"
        );
        // The report resumes transmission at once, before any timer.
        let t = event::now();
        let sent = us.counters().expect("counters").device.tx_frames;
        nic.allow_tx(Side::A, 0, true);
        // A busy core looks at its devices every 32 iterations (DEVICE_POLL_INTERVAL).
        for _ in 0..100 {
            event::yield_now().await;
        }
        assert_eq!(event::now(), t);
        let c = us.counters().expect("counters");
        assert_eq!(c.runner.writable_events, 1, "{:?}", c.runner);
        assert!(c.device.tx_frames > sent, "sent on the report");
        wait_until(Duration::from_secs(30), "the echo", || {
            done.load(Ordering::SeqCst) == 1
        })
        .await;
        assert!(outcome.lock().unwrap().intact);
    });
}

#[test]
fn without_a_writable_report_the_backstop_resumes_transmission() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (nic, us, peer, _) = two_stacks(&p, Link::new());
        let (outcome, done) = blocked_client(&nic, &us, &peer).await;
        event::sleep(Duration::from_millis(10)).await;
        let sent = us.counters().expect("counters").device.tx_frames;
        let t = event::now();
        nic.allow_tx(Side::A, 0, false);
        wait_until(Duration::from_secs(1), "a retry", || {
            us.counters().expect("counters").device.tx_frames > sent
        })
        .await;
        assert!(
            event::now().saturating_duration_since(t) <= Duration::from_millis(5),
            "retried within the backstop's millisecond (and this task's 5 ms step)"
        );
        wait_until(Duration::from_secs(30), "the echo", || {
            done.load(Ordering::SeqCst) == 1
        })
        .await;
        assert!(outcome.lock().unwrap().intact);
        assert_eq!(us.runner_counters().writable_events, 0);
    });
}

#[test]
fn shutdown_unwatches_the_device_removes_the_idle_handler_and_ends_the_timer() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    run(&platform, 1, move || async move {
        let (nic, us, peer, _) = two_stacks(&p, Link::new());
        peer_echoes(&peer);
        // Our connection closes first, so it waits in TIME-WAIT: the timer task sleeps
        // on that deadline when the stack shuts down, and only the shutdown can end it
        // before then.
        let conn = us
            .connect(SocketAddrV4::new(PEER, PEER_PORT))
            .await
            .expect("we connect");
        let (outcome, done) = (
            Arc::new(Mutex::new(Outcome::default())),
            Arc::new(AtomicU32::new(0)),
        );
        Client::start(&conn, pattern(9, 10_000), outcome.clone(), done.clone());
        drop(conn);
        wait_until(Duration::from_secs(5), "the echo", || {
            done.load(Ordering::SeqCst) == 1
        })
        .await;
        assert!(outcome.lock().unwrap().intact);
        wait_until(Duration::from_secs(1), "our FIN acknowledged", || {
            peer.tcp().connection_count() == 0
        })
        .await;
        assert_eq!(us.owned_connections(), 1, "ours waits in TIME-WAIT");
        assert!(nic.watched(Side::A, 0));

        let t = event::now();
        let last = us.shutdown().expect("shutdown");
        assert!(!nic.watched(Side::A, 0), "the device is unwatched");
        assert!(
            matches!(us.shutdown(), Err(ebb_netstack::NetStackError::ShutDown)),
            "a second shutdown says so"
        );
        // Frames still arrive: nothing reacts to them.
        nic.send_raw(Side::B, vec![junk_frame()]);
        for _ in 0..100 {
            event::yield_now().await;
        }
        assert_eq!(nic.pending(Side::A, 0), 1, "the frame waits unread");
        assert_eq!(us.runner_counters(), last.runner, "no poll after shutdown");
        // The idle handler and the timer task held the runner: once both are gone —
        // at once, not when the TIME-WAIT deadline comes — dropping the stack drops the
        // device.
        drop(us);
        assert_eq!(event::now(), t, "no time passed");
        assert!(
            !nic.alive(Side::A, 0),
            "the idle handler or the timer task still holds the runner"
        );
    });
}
