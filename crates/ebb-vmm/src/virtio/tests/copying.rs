//! The copying path (the AF_XDP backend's: [`CopyingLink`]): every backend-generic case
//! of `engine.rs` again with the in-memory backend as a copying link — hostile chains,
//! oversized frames, odd but legal rings, resets and sleeping — then what is the copying
//! path's own: one flush per round, back-pressure that loses nothing, frames too long for
//! a backend buffer, runts from the backend.

use super::*;

/// Runs `case` with [`Guest::build`] making copying backends.
fn over_a_copying_backend(case: fn()) {
    COPYING.set(true);
    case();
    COPYING.set(false);
}

macro_rules! again_over_a_copying_backend {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                over_a_copying_backend(super::engine::$case);
            }
        )*
    };
}

// The cases of engine.rs, each against the copying path (`Guest::new` builds one pair,
// one backend: the path an AF_XDP backend takes).
again_over_a_copying_backend!(
    a_well_behaved_driver_moves_frames_both_ways,
    hostile_chains_break_the_device_naming_the_queue_and_the_fault,
    an_available_index_may_not_run_more_than_a_queue_ahead,
    a_broken_device_stays_stopped_until_reset,
    a_reset_device_works_again,
    overlapping_buffers_are_the_guests_own_business,
    a_frame_larger_than_the_posted_buffer_is_dropped_and_counted,
    garbage_in_the_event_indices_and_the_used_ring_changes_only_wake_ups,
    transmit_chains_that_hold_no_frame_break_the_device,
    a_head_published_twice_is_served_twice,
    reasons_name_queues_of_every_pair_and_the_control_queue,
    a_stocked_receive_ring_alone_lets_the_device_sleep,
    frames_waiting_for_buffers_make_the_device_ask_for_receive_kicks,
    the_sleep_is_cut_short_by_pending_output_and_backend_deadlines,
    frames_that_ask_for_an_answer_give_the_guest_a_turn,
);

/// A started one-pair device over a copying backend with `buffer_len`-byte buffers.
fn copying_guest(buffer_len: usize) -> (Guest, CopyingWire) {
    let wire = Wire::default();
    let copying = CopyingWire {
        buffer_len,
        ..CopyingWire::default()
    };
    let end = WireEnd {
        wire: wire.clone(),
        fd: EventFd::new(EFD_NONBLOCK).expect("an eventfd"),
        copying: Some(copying.clone()),
    };
    let mut g = Guest::with_backend(1, Offload::NONE, Box::new(end), wire);
    g.start();
    (g, copying)
}

/// Transmit chains `0..n` (one descriptor each: header and frame), published at once.
fn post_frames(g: &mut Guest, n: u16) {
    for i in 0..n {
        let at = BUF + u64::from(i) * 0x100;
        let len = g.tx_buffer(at, FRAME);
        g.desc(TX, i, d(at, len, 0, 0));
        g.publish(TX, i);
    }
}

#[test]
fn a_round_of_transmits_is_flushed_once() {
    let (mut g, copying) = copying_guest(2048);
    post_frames(&mut g, 5);
    g.settle();
    assert_eq!(g.sent(), vec![FRAME.to_vec(); 5], "byte for byte, in order");
    assert_eq!(
        *copying.flushes.lock().expect("not poisoned"),
        vec![5],
        "one flush for the round's five frames"
    );
    assert_eq!(g.dev.stats.tx_frames.load(Ordering::Relaxed), 5);
    g.assert_healthy();
}

#[test]
fn a_full_backend_keeps_the_chain_and_loses_nothing() {
    let (mut g, copying) = copying_guest(2048);
    *copying.room.lock().expect("not poisoned") = Some(2);
    post_frames(&mut g, 4);
    g.settle();
    assert_eq!(g.sent().len(), 2);
    assert_eq!(
        g.used(TX),
        vec![(0, 0), (1, 0)],
        "the refused chains are not returned"
    );
    assert!(
        g.engine.has_pending_output(),
        "the held chain cuts the sleep short"
    );
    *copying.room.lock().expect("not poisoned") = None;
    g.settle();
    assert_eq!(g.sent(), vec![FRAME.to_vec(); 4]);
    assert_eq!(g.used(TX), vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
    assert_eq!(g.dev.stats.tx_dropped.load(Ordering::Relaxed), 0);
    g.assert_healthy();
}

#[test]
fn a_frame_longer_than_a_backend_buffer_is_dropped_and_counted() {
    let (mut g, _) = copying_guest(FRAME.len() - 1);
    post_frames(&mut g, 1);
    g.settle();
    assert!(g.sent().is_empty());
    assert_eq!(g.used(TX), vec![(0, 0)], "returned all the same");
    assert_eq!(g.dev.stats.tx_dropped.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

#[test]
fn runts_from_the_backend_are_dropped_and_frames_wait_for_buffers() {
    let (mut g, _) = copying_guest(2048);
    g.arrive(&FRAME[..13]);
    g.arrive(FRAME);
    g.settle();
    // No receive buffer yet: both wait in the backend, and the device asks for a kick.
    assert!(g.used(RX).is_empty());
    assert!(!g.engine.want_kicks(&g.mem, true));
    assert!(
        g.wants_kick(RX),
        "frames waiting: the device asks for receive kicks"
    );
    g.engine.want_kicks(&g.mem, false);
    g.desc(RX, 0, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.desc(RX, 1, d(BUF + 0x2000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 1);
    g.settle();
    let total = (NET_HDR_LEN + FRAME.len()) as u32;
    assert_eq!(g.used(RX), vec![(0, 0), (1, total)], "the runt dropped");
    let got = g
        .mem
        .read_bytes(BUF + 0x2000, u64::from(total))
        .expect("in memory");
    assert_eq!(got[..NET_HDR_LEN], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(&got[NET_HDR_LEN..], FRAME);
    assert_eq!(g.dev.stats.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_frames.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}
