//! The rings and the I/O thread against a hostile driver: a well-behaved driver first,
//! then bad descriptor chains, what is legal but odd, transmit frame sizes, and when the
//! thread may sleep.

use super::*;

// ===== a well-behaved driver =====

#[test]
pub(super) fn a_well_behaved_driver_moves_frames_both_ways() {
    let mut g = Guest::new();
    assert_eq!(g.read(regs::MAGIC), ebb_abi::virtio::MAGIC);
    assert_eq!(g.read(regs::VERSION), 2);
    assert_eq!(g.read(regs::DEVICE_ID), ebb_abi::virtio::DEVICE_ID_NET);
    g.start();
    // Transmit: header and frame in two descriptors.
    g.mem
        .write_bytes(BUF, &[0u8; NET_HDR_LEN])
        .expect("in memory");
    g.mem.write_bytes(BUF + 0x100, FRAME).expect("in memory");
    g.desc(TX, 0, d(BUF, NET_HDR_LEN as u32, DESC_F_NEXT, 1));
    g.desc(TX, 1, d(BUF + 0x100, FRAME.len() as u32, 0, 0));
    g.publish(TX, 0);
    g.settle();
    assert_eq!(g.sent(), vec![FRAME.to_vec()]);
    assert_eq!(g.used(TX), vec![(0, 0)]);
    // used_event is still 0 (the driver asked about the first used entry): one wake-up.
    assert_eq!(g.wakes[0].read().expect("the vCPU was woken"), 1);
    // Receive: a 1,526-byte buffer; the driver asks to hear about the first used entry.
    g.desc(RX, 3, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 3);
    g.set_used_event(RX, 0);
    g.arrive(FRAME);
    g.settle();
    let total = (NET_HDR_LEN + FRAME.len()) as u32;
    assert_eq!(g.used(RX), vec![(3, total)]);
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(total))
        .expect("in memory");
    assert_eq!(&got[NET_HDR_LEN..], FRAME);
    assert_eq!(got[10], 1, "num_buffers");
    assert_eq!(g.wakes[0].read().expect("the vCPU was woken"), 1);
    assert_eq!(g.dev.stats.rx_frames.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.tx_frames.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

// ===== descriptor chains =====

/// A fresh, started device; `descs` written into queue `q`'s table, `head` published (and
/// a frame waiting, so a receive queue is looked at); the device driven to rest.
fn chain_case(q: u16, descs: &[(u64, u32, u16, u16)], head: u16) -> Guest {
    let descs = descs.to_vec();
    bounded(move || {
        let mut g = Guest::new();
        g.start();
        for (i, desc) in descs.iter().enumerate() {
            g.desc(q, i as u16, *desc);
        }
        if q == RX {
            g.arrive(FRAME);
        }
        g.publish(q, head);
        g.settle();
        g
    })
}

#[test]
pub(super) fn hostile_chains_break_the_device_naming_the_queue_and_the_fault() {
    let long_cycle: Vec<_> = (0..SIZE)
        .map(|i| d(BUF + 64 * u64::from(i), 64, DESC_F_NEXT, (i + 1) % SIZE))
        .collect();
    let w = DESC_F_WRITE;
    let n = DESC_F_NEXT;
    type Case<'a> = (&'a str, u16, Vec<(u64, u32, u16, u16)>, u16, &'a [&'a str]);
    let cases: Vec<Case> = vec![
        ("self loop", TX, vec![d(BUF, 64, n, 0)], 0, &["loops"]),
        (
            "2-cycle",
            TX,
            vec![d(BUF, 64, n, 1), d(BUF, 64, n, 0)],
            0,
            &["loops"],
        ),
        ("long cycle", TX, long_cycle, 5, &["head 5 loops"]),
        (
            "self loop on rx",
            RX,
            vec![d(BUF, 64, w | n, 0)],
            0,
            &["loops"],
        ),
        (
            "self loop on ctrl",
            CTRL,
            vec![d(BUF, 64, n, 0)],
            0,
            &["loops"],
        ),
        (
            "next out of range",
            TX,
            vec![d(BUF, 64, n, SIZE)],
            0,
            &["index 16 is outside the table of 16"],
        ),
        (
            "next 0xffff",
            TX,
            vec![d(BUF, 64, n, 0xffff)],
            0,
            &["index 65535 is outside"],
        ),
        (
            "head out of range",
            TX,
            vec![],
            SIZE,
            &["index 16 is outside"],
        ),
        (
            "head 0xffff",
            RX,
            vec![],
            0xffff,
            &["index 65535 is outside"],
        ),
        (
            "buffer past the end of memory",
            TX,
            vec![d(MEM, 64, 0, 0)],
            0,
            &["buffer 0x800000+64 is outside guest memory"],
        ),
        (
            "buffer straddling the end of memory",
            TX,
            vec![d(MEM - 4, 64, 0, 0)],
            0,
            &["outside guest memory"],
        ),
        (
            "address + length overflows u64",
            TX,
            vec![d(u64::MAX - 2, 64, 0, 0)],
            0,
            &["0xfffffffffffffffd+64 is outside"],
        ),
        (
            "buffer in the MMIO window",
            RX,
            vec![d(MMIO_BASE, 64, w, 0)],
            0,
            &["0xfeb00000+64 is outside"],
        ),
        (
            "huge length",
            TX,
            vec![d(BUF, u32::MAX, 0, 0)],
            0,
            &["outside guest memory"],
        ),
        (
            "zero length",
            TX,
            vec![d(BUF, 0, 0, 0)],
            0,
            &["descriptor 0 has length zero"],
        ),
        (
            "zero length mid-chain",
            RX,
            vec![d(BUF, 64, w | n, 1), d(BUF, 0, w, 0)],
            0,
            &["descriptor 1 has length zero"],
        ),
        (
            "device-writable buffer on the transmit queue",
            TX,
            vec![d(BUF, 64, w, 0)],
            0,
            &["descriptor 0 goes the wrong way"],
        ),
        (
            "device-readable buffer on the receive queue",
            RX,
            vec![d(BUF, 1526, w | n, 1), d(BUF + 0x1000, 64, 0, 0)],
            0,
            &["descriptor 1 goes the wrong way"],
        ),
        (
            "readable after writable on the control queue",
            CTRL,
            vec![d(BUF, 1, w | n, 1), d(BUF + 64, 4, 0, 0)],
            0,
            &["descriptor 1 goes the wrong way"],
        ),
        (
            "indirect descriptor",
            TX,
            vec![d(BUF, 64, DESC_F_INDIRECT, 0)],
            0,
            &["descriptor 0 is indirect"],
        ),
        (
            "indirect descriptor mid-chain",
            RX,
            vec![d(BUF, 64, w | n, 1), d(BUF, 64, w | DESC_F_INDIRECT, 0)],
            0,
            &["descriptor 1 is indirect"],
        ),
    ];
    for (name, q, descs, head, words) in cases {
        let g = chain_case(q, &descs, head);
        let mut all = vec![queue_name(q)];
        all.extend_from_slice(words);
        let why = g.dev.broken();
        assert!(
            g.status() & status::DEVICE_NEEDS_RESET != 0
                && all.iter().all(|w| why.as_deref().unwrap_or("").contains(w)),
            "{name}: wanted DEVICE_NEEDS_RESET and a reason naming {all:?}, got {why:?}"
        );
        // Broken means stopped: nothing was returned, and more work changes nothing.
        assert_eq!(g.used(q), vec![], "{name}");
        assert!(g.sent().is_empty(), "{name}");
    }
}

#[test]
pub(super) fn an_available_index_may_not_run_more_than_a_queue_ahead() {
    for (name, idx) in [("one too many", SIZE + 1), ("backwards", 0xffff)] {
        let mut g = Guest::new();
        g.start();
        g.set_avail_idx(TX, idx);
        g.settle();
        g.assert_broken(&[queue_name(TX), "available index jumped from 0"]);
        assert_eq!(g.used(TX), vec![], "{name}");
    }
    // Exactly a queue's worth is fine.
    let mut g = Guest::new();
    g.start();
    for i in 0..SIZE {
        g.tx_buffer(BUF + 0x100 * u64::from(i), FRAME);
        g.desc(
            TX,
            i,
            d(
                BUF + 0x100 * u64::from(i),
                (NET_HDR_LEN + FRAME.len()) as u32,
                0,
                0,
            ),
        );
        g.publish(TX, i);
    }
    g.settle();
    g.assert_healthy();
    assert_eq!(g.sent().len(), usize::from(SIZE));
}

#[test]
pub(super) fn a_broken_device_stays_stopped_until_reset() {
    let mut g = chain_case(TX, &[d(BUF, 64, DESC_F_NEXT, 0)], 0);
    g.assert_broken(&["loops"]);
    // A good chain now is not looked at; neither are frames from the backend.
    g.tx_buffer(BUF, FRAME);
    g.desc(TX, 1, d(BUF, (NET_HDR_LEN + FRAME.len()) as u32, 0, 0));
    g.publish(TX, 1);
    g.arrive(FRAME);
    for _ in 0..4 {
        assert!(!g.step());
    }
    assert!(g.sent().is_empty());
    assert_eq!(g.used(TX), vec![]);
    // The first reason stays, even if the driver goes on writing to the registers.
    g.driver_ok();
    g.settle();
    g.assert_broken(&["loops"]);
}

#[test]
pub(super) fn a_reset_device_works_again() {
    let mut g = chain_case(
        TX,
        &[d(BUF, 64, DESC_F_NEXT, 1), d(BUF, 64, DESC_F_NEXT, 0)],
        0,
    );
    g.assert_broken(&["loops"]);
    g.write(regs::STATUS, 0);
    g.settle();
    assert_eq!(g.status(), 0);
    assert_eq!(g.dev.broken(), None);
    for q in [RX, TX, CTRL] {
        g.write(regs::QUEUE_SEL, u32::from(q));
        assert_eq!(
            g.read(regs::QUEUE_READY),
            0,
            "queue {q} is not ready after a reset"
        );
    }
    // A driver starts over with fresh rings.
    for q in [RX, TX, CTRL] {
        let (desc, _, _) = Guest::rings(q);
        g.mem.write_bytes(desc, &[0u8; 0x3000]).expect("in memory");
    }
    g.avail_idx = [0; 3];
    g.start();
    let len = g.tx_buffer(BUF, FRAME);
    g.desc(TX, 0, d(BUF, len, 0, 0));
    g.publish(TX, 0);
    g.desc(RX, 0, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.arrive(FRAME);
    g.settle();
    g.assert_healthy();
    assert_eq!(g.sent(), vec![FRAME.to_vec()]);
    assert_eq!(g.used(RX), vec![(0, len)]);
}

// ===== legal but odd: the device carries on =====

#[test]
pub(super) fn overlapping_buffers_are_the_guests_own_business() {
    let mut g = Guest::new();
    g.start();
    // The same transmit buffer twice in one chain: the frame is its bytes twice.
    let len = g.tx_buffer(BUF, FRAME);
    g.desc(TX, 0, d(BUF, len, DESC_F_NEXT, 1));
    g.desc(TX, 1, d(BUF, len, 0, 0));
    g.publish(TX, 0);
    // A transmit buffer over the descriptor table itself (read-only: harmless).
    let (tx_desc, _, _) = Guest::rings(TX);
    g.desc(TX, 2, d(tx_desc, 16 * u32::from(SIZE), 0, 0));
    g.publish(TX, 2);
    g.settle();
    g.assert_healthy();
    let sent = g.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].len(), 2 * len as usize - NET_HDR_LEN);
    // Two receive buffers that overlap each other: both written, in order.
    g.desc(RX, 0, d(BUF + 0x1000, 20, DESC_F_WRITE | DESC_F_NEXT, 1));
    g.desc(RX, 1, d(BUF + 0x1008, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.arrive(FRAME);
    g.settle();
    g.assert_healthy();
    assert_eq!(g.used(RX), vec![(0, len)]);
    // The second buffer holds everything after the first 20 bytes.
    let tail = g.mem.read_bytes(BUF + 0x1008, 8).expect("in memory");
    assert_eq!(tail, FRAME[20 - NET_HDR_LEN..20 - NET_HDR_LEN + 8].to_vec());
}

#[test]
pub(super) fn a_frame_larger_than_the_posted_buffer_is_dropped_and_counted() {
    let mut g = Guest::new();
    g.start();
    let big = vec![0x5a; 1514];
    g.desc(RX, 0, d(BUF, 100, DESC_F_WRITE, 0));
    g.desc(RX, 1, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.publish(RX, 1);
    g.arrive(&big);
    g.arrive(&big);
    g.settle();
    g.assert_healthy();
    assert_eq!(g.used(RX), vec![(0, 0), (1, 1526)]);
    assert_eq!(g.dev.stats.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_frames.load(Ordering::Relaxed), 1);
    // Nothing was written past the small buffer.
    assert_eq!(g.mem.read_bytes(BUF + 100, 4), Some(vec![0; 4]));
}

#[test]
pub(super) fn garbage_in_the_event_indices_and_the_used_ring_changes_only_wake_ups() {
    let mut g = Guest::new();
    g.start();
    // The driver scribbles over what only the device writes: used.idx and avail_event.
    let (_, _, used) = Guest::rings(RX);
    g.mem
        .store_u16(used + 2, 0xbeef, Ordering::Release)
        .expect("in memory");
    g.mem
        .store_u16(used + 4 + 8 * u64::from(SIZE), 0x1234, Ordering::Release)
        .expect("in memory");
    // used_event: garbage, far behind, stale, then exactly the entry about to be used.
    for (i, event) in [0xffff, 0x8000, 12345, 1, 4].into_iter().enumerate() {
        let i = i as u16;
        g.set_used_event(RX, event);
        g.desc(RX, i, d(BUF + 0x1000 * u64::from(i), 1526, DESC_F_WRITE, 0));
        g.publish(RX, i);
        g.arrive(FRAME);
        g.settle();
    }
    g.assert_healthy();
    // The device kept its own index: five frames, at slots 0..5.
    let used = g.used(RX);
    assert_eq!(used.len(), 5);
    assert!(used.iter().enumerate().all(|(i, &(id, _))| id == i as u32));
    // Garbage is only a wake-up decision: the one used_event that asked (4, as the used
    // index moved 4 -> 5) woke the vCPU, the others did not.
    assert_eq!(g.wakes[0].read().expect("woken once"), 1);
}

// ===== transmit frame sizes =====

#[test]
pub(super) fn transmit_chains_that_hold_no_frame_break_the_device() {
    for (name, descs, words) in [
        (
            "header only",
            vec![d(BUF, NET_HDR_LEN as u32, 0, 0)],
            "holds 12 bytes",
        ),
        (
            "a 70,000-byte frame",
            vec![d(BUF, 35_000, DESC_F_NEXT, 1), d(BUF, 35_000, 0, 0)],
            "holds 70000 bytes",
        ),
    ] {
        let g = chain_case(TX, &descs, 0);
        let why = g.dev.broken();
        assert!(
            g.status() & status::DEVICE_NEEDS_RESET != 0
                && [queue_name(TX), words]
                    .iter()
                    .all(|w| why.as_deref().unwrap_or("").contains(w)),
            "{name}: {why:?}"
        );
        assert!(g.sent().is_empty(), "{name}");
    }
}

#[test]
pub(super) fn a_head_published_twice_is_served_twice() {
    // The driver's mistake with its own buffer: the device sends the frame twice and
    // returns the head twice, and stays healthy.
    let mut g = Guest::new();
    g.start();
    let len = g.tx_buffer(BUF, FRAME);
    g.desc(TX, 0, d(BUF, len, 0, 0));
    g.publish(TX, 0);
    g.publish(TX, 0);
    g.settle();
    g.assert_healthy();
    assert_eq!(g.sent(), vec![FRAME.to_vec(), FRAME.to_vec()]);
    assert_eq!(g.used(TX), vec![(0, 0), (0, 0)]);
}

#[test]
pub(super) fn reasons_name_queues_of_every_pair_and_the_control_queue() {
    // Two pairs: queues 0-3 are rx/tx of pairs 0 and 1, the control queue is 4.
    for (q, role) in [
        (3u16, "queue 3 (transmit, pair 1)"),
        (4, "queue 4 (control)"),
    ] {
        let mut g = bounded(move || {
            let mut g = Guest::with_pairs(2);
            assert!(g.negotiate(Guest::good_features()));
            g.queue(q, 100, Guest::rings(q));
            g.driver_ok();
            g.settle();
            g
        });
        g.assert_broken(&[role, "queue size 100"]);
        g.settle();
    }
}

// ===== when the I/O thread may sleep =====

#[test]
pub(super) fn a_stocked_receive_ring_alone_lets_the_device_sleep() {
    let mut g = Guest::new();
    g.start();
    // A driver keeps receive buffers posted all the time; with no frame waiting for
    // them they are not work, and re-posting them must not wake the device.
    g.desc(RX, 3, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 3);
    g.settle();
    assert!(
        !g.engine.want_kicks(&g.mem, true),
        "posted receive buffers kept the device awake"
    );
    assert!(
        !g.wants_kick(RX),
        "the device asks for receive kicks it does not need"
    );
    assert!(
        g.wants_kick(TX),
        "the device does not ask for transmit kicks"
    );
    // A transmit chain is work.
    g.mem
        .write_bytes(BUF, &[0u8; NET_HDR_LEN])
        .expect("in memory");
    g.mem.write_bytes(BUF + 0x100, FRAME).expect("in memory");
    g.desc(TX, 0, d(BUF, NET_HDR_LEN as u32, DESC_F_NEXT, 1));
    g.desc(TX, 1, d(BUF + 0x100, FRAME.len() as u32, 0, 0));
    g.publish(TX, 0);
    assert!(
        g.engine.want_kicks(&g.mem, true),
        "a transmit chain is not seen"
    );
    g.settle();
    assert_eq!(g.sent(), vec![FRAME.to_vec()]);
    g.assert_healthy();
}

#[test]
pub(super) fn frames_waiting_for_buffers_make_the_device_ask_for_receive_kicks() {
    let mut g = Guest::new();
    g.start();
    // A frame arrives before the driver posts anything: it waits in the backlog.
    g.arrive(FRAME);
    g.settle();
    assert!(!g.engine.want_kicks(&g.mem, true), "nothing is posted yet");
    assert!(
        g.wants_kick(RX),
        "a waiting frame does not ask for receive buffers"
    );
    // The buffer it waits for is work, and is what wakes the device.
    g.desc(RX, 3, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 3);
    assert!(
        g.engine.want_kicks(&g.mem, true),
        "the posted buffer is not seen"
    );
    g.engine.want_kicks(&g.mem, false);
    g.settle();
    assert_eq!(g.used(RX), vec![(3, (NET_HDR_LEN + FRAME.len()) as u32)]);
    // Delivered: the ring is stocked again and nothing waits.
    g.desc(RX, 4, d(BUF + 0x2000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 4);
    assert!(!g.engine.want_kicks(&g.mem, true));
    g.assert_healthy();
}

#[test]
pub(super) fn the_sleep_is_cut_short_by_pending_output_and_backend_deadlines() {
    let now = NetInstant::from_nanos(1_000_000);
    assert_eq!(sleep_bound(now, false, None), SLEEP_MAX);
    assert_eq!(sleep_bound(now, true, None), PENDING_OUTPUT_RETRY);
    let soon = NetInstant::from_nanos(1_003_000);
    assert_eq!(
        sleep_bound(now, false, Some(soon)),
        Duration::from_micros(3)
    );
    let past = NetInstant::from_nanos(10);
    assert_eq!(sleep_bound(now, true, Some(past)), Duration::ZERO);
    let later = NetInstant::from_nanos(1_000_000_000);
    assert_eq!(sleep_bound(now, false, Some(later)), SLEEP_MAX);
}

#[test]
fn only_a_sleeping_io_thread_on_shared_cpus_asks_for_real_time() {
    use crate::virtio::net::io_real_time;
    let poll = Duration::from_micros(50);
    assert!(io_real_time(true, Duration::ZERO, None));
    assert!(io_real_time(true, Duration::ZERO, Some("1".into())));
    assert!(
        !io_real_time(true, Duration::ZERO, Some("0".into())),
        "turned off"
    );
    assert!(
        !io_real_time(false, Duration::ZERO, None),
        "a CPU of its own"
    );
    assert!(
        !io_real_time(true, poll, None),
        "a real-time thread that polls"
    );
}

// ===== the guest's turn =====

/// An Ethernet frame with an IPv4 packet holding a TCP segment with `flags` and `payload`
/// bytes of data (checksums left zero: the device does not look at them).
pub(super) fn tcp_frame(flags: u8, payload: usize) -> Vec<u8> {
    let mut frame = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00".to_vec();
    let total = (20 + 20 + payload) as u16;
    frame.extend_from_slice(&[0x45, 0]);
    frame.extend_from_slice(&total.to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 2, 2, 10, 0, 2, 15]);
    frame.extend_from_slice(&[0x2b, 0xcb, 0x30, 0x39]); // ports 11211 → 12345
    frame.extend_from_slice(&[
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        1,
        5 << 4,
        flags,
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ]);
    frame.resize(frame.len() + payload, b'x');
    frame
}

const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const SYN: u8 = 0x02;

/// Frames that ask the guest for an answer give it a turn: the I/O thread lets host input
/// wait until the guest transmits, or for [`GUEST_TURN`] at most; a bare ACK gives none.
/// `arrive` hands the backend a frame for the guest.
pub(super) fn the_guest_has_a_turn_after_frames_that_ask_for_an_answer(
    g: &mut Guest,
    arrive: &dyn Fn(&Guest, &[u8]),
) {
    for i in 0..4u16 {
        g.desc(
            RX,
            i,
            d(BUF + 0x1000 * u64::from(i + 1), 1526, DESC_F_WRITE, 0),
        );
        g.publish(RX, i);
    }
    let mut turn = GuestTurn::default();
    // A look before sleeping at `now`, as the I/O thread takes it.
    let left = |turn: &mut GuestTurn, g: &mut Guest, now| {
        let left = turn.left(
            g.engine.awaiting_answer(),
            g.engine.answers(),
            now,
            &g.dev.stats,
        );
        if left.is_none() {
            g.engine.end_guest_turn();
        }
        left
    };
    let stats = |g: &Guest| {
        (
            g.dev.stats.guest_turns.load(Ordering::Relaxed),
            g.dev.stats.guest_turns_expired.load(Ordering::Relaxed),
        )
    };
    // `frame` arrives and reaches the guest, which then has a turn if `asks`.
    let deliver = |g: &mut Guest, frame: &[u8], asks: bool, what: &str| {
        let before = g.used(RX).len();
        arrive(g, frame);
        g.settle();
        assert_eq!(
            g.used(RX).len(),
            before + 1,
            "{what} did not reach the guest"
        );
        assert_eq!(g.engine.awaiting_answer(), asks, "{what}: a turn or not");
    };
    let t0 = std::time::Instant::now();
    // A bare acknowledgement: delivered, no turn.
    deliver(g, &tcp_frame(ACK, 0), false, "a bare ACK");
    assert_eq!(left(&mut turn, g, t0), None);
    // A request: a turn, which the guest's transmission ends.
    deliver(g, &tcp_frame(PSH_ACK, 20), true, "a segment with data");
    assert_eq!(left(&mut turn, g, t0), Some(GUEST_TURN));
    let later = t0 + GUEST_TURN / 4;
    assert_eq!(
        left(&mut turn, g, later),
        Some(GUEST_TURN - GUEST_TURN / 4),
        "the turn is counted from its first sleep"
    );
    assert_eq!(stats(g), (1, 0));
    post_tx(g, 0, BUF, &[0u8; NET_HDR_LEN], FRAME);
    g.settle();
    assert!(
        !g.engine.awaiting_answer(),
        "the guest answered, its turn goes on"
    );
    assert_eq!(left(&mut turn, g, later), None);
    // A connection opening: a turn, which runs out without an answer.
    deliver(g, &tcp_frame(SYN, 0), true, "a SYN");
    let t1 = later + GUEST_TURN;
    assert_eq!(left(&mut turn, g, t1), Some(GUEST_TURN));
    assert_eq!(
        left(&mut turn, g, t1 + GUEST_TURN),
        None,
        "a turn without an answer does not end"
    );
    assert!(!g.engine.awaiting_answer());
    assert_eq!(stats(g), (2, 1));
    // Anything else (here not TCP) asks too: a turn.
    deliver(g, FRAME, true, "a frame that is not TCP");
    let t2 = t1 + 2 * GUEST_TURN;
    assert_eq!(left(&mut turn, g, t2), Some(GUEST_TURN));
    assert_eq!(stats(g), (3, 1));
    // The guest's answer and the next request in one round: that turn is over, the
    // next begins.
    g.desc(RX, 4, d(BUF + 0x5000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 4);
    g.publish(TX, 0);
    arrive(g, &tcp_frame(PSH_ACK, 20));
    assert!(g.step(), "the round did nothing");
    assert_eq!(g.used(RX).len(), 5, "the request reached the guest");
    assert!(g.engine.awaiting_answer());
    let t3 = t2 + GUEST_TURN / 2;
    assert_eq!(
        left(&mut turn, g, t3),
        Some(GUEST_TURN),
        "an answer did not end the turn"
    );
    assert_eq!(stats(g), (4, 1));
    g.settle();
    // Turns of zero length (`EBB_VMM_GUEST_TURN_US=0`): none.
    let mut no_turns = GuestTurn::lasting(Duration::ZERO);
    assert_eq!(left(&mut no_turns, g, t3), None);
    assert!(!g.engine.awaiting_answer(), "a zero-length turn goes on");
    assert_eq!(stats(g), (4, 1), "a zero-length turn is counted");
    g.assert_healthy();
}

#[test]
pub(super) fn frames_that_ask_for_an_answer_give_the_guest_a_turn() {
    let mut g = Guest::new();
    g.start();
    the_guest_has_a_turn_after_frames_that_ask_for_an_answer(&mut g, &|g, frame| g.arrive(frame));
}
