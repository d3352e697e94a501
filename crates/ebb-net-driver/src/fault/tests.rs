use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::{ChecksumCapabilities, Link, LinkEnd};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn at(nanos: u64) -> Instant {
    Instant::from_nanos(nanos)
}

/// A frame carrying its number in its first four bytes (inside the Ethernet header, which
/// corruption leaves alone by default), then a pattern.
fn numbered(n: u32, len: usize) -> IOBuf {
    let mut v = vec![0u8; len.max(4)];
    v[..4].copy_from_slice(&n.to_be_bytes());
    for (i, b) in v.iter_mut().enumerate().skip(4) {
        *b = (i as u32).wrapping_mul(31).wrapping_add(n) as u8;
    }
    IOBuf::from_vec(v)
}

fn number(frame: &[u8]) -> u32 {
    u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]])
}

fn send(end: &mut impl NetDevice, now: Instant, frames: impl IntoIterator<Item = IOBuf>) {
    let mut q: VecDeque<TxFrame> = frames.into_iter().map(TxFrame::from).collect();
    // At least one call, even with nothing to send: it releases held frames.
    end.transmit(now, &mut q);
    while !q.is_empty() {
        assert!(
            end.transmit(now, &mut q) > 0,
            "the test links never refuse forever"
        );
    }
}

fn receive_all(dev: &mut impl NetDevice, now: Instant) -> Vec<IOBuf> {
    let mut out = Vec::new();
    while dev.receive(now, &mut out, 16) > 0 {}
    out.into_iter().map(|frame| frame.buf).collect()
}

/// A link whose receiving end is wrapped in an injector with `rx` faults.
fn rx_rig(seed: u64, rx: FaultConfig) -> (LinkEnd, FaultInjector<LinkEnd>) {
    let (a, b) = Link::new().with_capacity(100_000).connect();
    (a, FaultInjector::new(b, seed).with_rx_faults(rx))
}

/// Sends `n` numbered frames one at a time, one every 10 µs, receiving as it goes, then
/// lets time run until nothing is held; returns what arrived and when.
fn trickle(
    sender: &mut impl NetDevice,
    receiver: &mut impl NetDevice,
    n: u32,
) -> Vec<(Instant, IOBuf)> {
    let mut got = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..n {
        now = at(u64::from(i) * 10 * US);
        send(sender, now, [numbered(i, 60 + (i as usize * 37) % 1400)]);
        got.extend(receive_all(receiver, now).into_iter().map(|f| (now, f)));
    }
    // Release what is still held, following poll_at as a stack would.
    let mut polls = 0;
    while let Some(t) = [sender.poll_at(), receiver.poll_at()]
        .into_iter()
        .flatten()
        .min()
    {
        polls += 1;
        assert!(
            polls <= 4 * n,
            "poll_at keeps asking for polls that do nothing"
        );
        now = now.max(t);
        send(sender, now, []);
        got.extend(receive_all(receiver, now).into_iter().map(|f| (now, f)));
    }
    got
}

fn everything() -> FaultConfig {
    FaultConfig::NONE
        .with_drop(Probability::from_percent(5))
        .with_duplicate(Probability::from_percent(5))
        .with_corrupt(Probability::from_percent(5))
        .with_delay(
            Probability::from_percent(10),
            Duration::from_micros(5),
            Duration::from_micros(500),
        )
        .with_reorder(Probability::from_percent(10), Duration::from_micros(100))
}

#[test]
fn same_seed_same_faults() {
    let run = |seed| {
        let (mut a, mut b) = rx_rig(seed, everything());
        trickle(&mut a, &mut b, 3000)
    };
    let first = run(42);
    assert_eq!(first, run(42));
    assert_ne!(first, run(43));

    let run_tx = |seed| {
        let (a, mut b) = Link::new().with_capacity(100_000).connect();
        let mut a = FaultInjector::new(a, seed).with_tx_faults(everything());
        let got = trickle(&mut a, &mut b, 3000);
        (got, a.stats())
    };
    let first = run_tx(7);
    assert_eq!(first, run_tx(7));
    assert_ne!(first.0, run_tx(8).0);
}

#[test]
fn one_fault_rate_does_not_move_another() {
    let dropped = |config: FaultConfig| {
        let (mut a, mut b) = rx_rig(9, config);
        let got = trickle(&mut a, &mut b, 2000);
        let mut numbers: Vec<u32> = got.iter().map(|(_, f)| number(f)).collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
    };
    let lossy = FaultConfig::NONE.with_drop(Probability::from_percent(10));
    assert_eq!(
        dropped(lossy),
        dropped(lossy.with_corrupt(Probability::from_percent(50)))
    );
}

#[test]
fn drops_at_their_rate_and_are_counted() {
    let (mut a, mut b) = rx_rig(
        1,
        FaultConfig::NONE.with_drop(Probability::from_percent(10)),
    );
    let got = trickle(&mut a, &mut b, 10_000);
    let stats = b.stats().rx;
    assert!((800..=1200).contains(&stats.dropped), "{stats:?}");
    assert_eq!(got.len() as u64, 10_000 - stats.dropped);
    // What arrived is in order, each at most once.
    assert!(got.windows(2).all(|w| number(&w[0].1) < number(&w[1].1)));

    let c = b.counters();
    assert_eq!(c.rx_dropped.injected, stats.dropped);
    assert_eq!(c.rx_frames, got.len() as u64);
    assert_eq!(c.rx_frames + c.rx_dropped.total(), a.counters().tx_frames);
}

#[test]
fn duplicates_follow_their_original() {
    let dup = FaultConfig::NONE.with_duplicate(Probability::from_percent(10));
    let (mut a, mut b) = rx_rig(2, dup);
    let got = trickle(&mut a, &mut b, 10_000);
    let stats = b.stats().rx;
    assert!((800..=1200).contains(&stats.duplicated), "{stats:?}");
    assert_eq!(got.len() as u64, 10_000 + stats.duplicated);
    let numbers: Vec<u32> = got.iter().map(|(_, f)| number(f)).collect();
    let mut doubled = 0;
    for (i, w) in numbers.windows(2).enumerate() {
        assert!(w[0] <= w[1], "out of order at {i}");
        if w[0] == w[1] {
            doubled += 1;
            assert_eq!(got[i].1, got[i + 1].1, "a duplicate is the same frame");
            assert!(
                got[i].1.shares_storage_with(&got[i + 1].1),
                "and not a copy"
            );
        }
    }
    assert_eq!(doubled, stats.duplicated);
    let mut unique = numbers;
    unique.dedup();
    assert!(unique.into_iter().eq(0..10_000));
}

#[test]
fn corruption_flips_one_bit_past_the_header_and_spares_the_sender() {
    let corrupt = FaultConfig::NONE.with_corrupt(Probability::from_percent(10));
    let (mut a, mut b) = rx_rig(3, corrupt);
    let originals: Vec<IOBuf> = (0..10_000)
        .map(|i| numbered(i, 60 + i as usize % 1400))
        .collect();
    // The sender keeps its frames (as a retransmit queue would): they cross the link
    // without a copy, so corrupting in place would damage them.
    send(&mut a, Instant::ZERO, originals.iter().cloned());
    let got = receive_all(&mut b, Instant::ZERO);
    assert_eq!(got.len(), originals.len());

    let mut damaged = 0;
    for (orig, frame) in originals.iter().zip(&got) {
        assert_eq!(
            orig,
            &numbered(number(orig), orig.len()),
            "sender's copy intact"
        );
        assert_eq!(orig.len(), frame.len());
        let diff: Vec<(usize, u8)> = orig
            .iter()
            .zip(frame.iter())
            .enumerate()
            .filter(|(_, (x, y))| x != y)
            .map(|(i, (x, y))| (i, x ^ y))
            .collect();
        match diff.as_slice() {
            [] => {}
            [(i, x)] => {
                damaged += 1;
                assert!(*i >= ETHERNET_HEADER_LEN, "byte {i} is in the header");
                assert_eq!(x.count_ones(), 1, "one bit flipped");
            }
            more => panic!("several bytes changed: {more:?}"),
        }
    }
    let stats = b.stats().rx;
    assert_eq!(damaged, stats.corrupted);
    assert!((800..=1200).contains(&damaged), "{stats:?}");
}

#[test]
fn corruption_is_caught_by_an_internet_checksum() {
    // The ones'-complement sum the IPv4, ICMP, UDP and TCP checksums use: a frame that
    // sums to 0xffff (checksum field included) is intact.
    fn sum(bytes: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            s += u32::from(word);
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }
    let corrupt = FaultConfig::NONE.with_corrupt(Probability::ALWAYS);
    let (mut a, mut b) = rx_rig(4, corrupt);
    let frames: Vec<IOBuf> = (0..2000u32)
        .map(|i| {
            // Header, then a payload with a valid checksum in its first two bytes.
            let mut v = numbered(i, 60 + i as usize % 500).to_vec();
            v[14] = 0;
            v[15] = 0;
            let ck = !sum(&v[14..]);
            v[14..16].copy_from_slice(&ck.to_be_bytes());
            assert_eq!(sum(&v[14..]), 0xffff);
            IOBuf::from_vec(v)
        })
        .collect();
    send(&mut a, Instant::ZERO, frames);
    let got = receive_all(&mut b, Instant::ZERO);
    assert_eq!(got.len(), 2000);
    assert!(got.iter().all(|f| sum(&f[14..]) != 0xffff));
    assert_eq!(b.stats().rx.corrupted, 2000);
}

#[test]
fn corruption_withdraws_checksum_offload() {
    let (a, b) = Link::new()
        .with_checksum(ChecksumCapabilities::ALL)
        .connect();
    let a =
        FaultInjector::new(a, 0).with_tx_faults(FaultConfig::NONE.with_drop(Probability::ALWAYS));
    assert_eq!(a.capabilities().checksum, ChecksumCapabilities::ALL);

    let b = FaultInjector::new(b, 0)
        .with_rx_faults(FaultConfig::NONE.with_corrupt(Probability::from_ppm(1)));
    let c = b.capabilities().checksum;
    assert!(
        !c.tcp.rx_verified && !c.ipv4.rx_verified && !c.udp.rx_verified && !c.icmpv4.rx_verified
    );
    assert!(c.tcp.tx_filled);
    let b = b.with_tx_faults(FaultConfig::NONE.with_corrupt(Probability::ALWAYS));
    assert_eq!(b.capabilities().checksum, ChecksumCapabilities::NONE);
}

#[test]
fn corrupting_a_transmitted_chain_leaves_its_segments_alone() {
    let (a, mut b) = Link::new().connect();
    let mut a = FaultInjector::new(a, 5)
        .with_tx_faults(FaultConfig::NONE.with_corrupt(Probability::ALWAYS));
    let header = IOBuf::copy_from_slice(&[0xaa; 14]);
    let payload = IOBuf::from_vec(vec![0x55; 200]);
    let mut chain = IOBufChain::from(header.clone());
    chain.push_back(payload.clone());
    let mut q = VecDeque::from([TxFrame::from(chain.clone())]);
    assert_eq!(a.transmit(Instant::ZERO, &mut q), 1);
    let got = receive_all(&mut b, Instant::ZERO);
    assert_eq!(
        (header.as_slice(), payload.as_slice()),
        (&[0xaa; 14][..], &[0x55; 200][..])
    );
    assert_eq!(got[0].len(), 214);
    assert_ne!(got[0].as_slice(), chain.to_vec().as_slice());
    assert_eq!(a.stats().tx.corrupted, 1);
}

#[test]
fn a_fixed_delay_releases_on_time_and_in_order() {
    let delay = FaultConfig::NONE.with_delay(
        Probability::ALWAYS,
        Duration::from_millis(1),
        Duration::from_millis(1),
    );
    let (mut a, mut b) = rx_rig(6, delay);
    send(&mut a, at(0), [numbered(0, 60), numbered(1, 60)]);
    assert!(receive_all(&mut b, at(0)).is_empty());
    send(&mut a, at(300 * US), [numbered(2, 60)]);
    assert!(receive_all(&mut b, at(300 * US)).is_empty());
    assert_eq!(b.poll_at(), Some(at(MS)), "earliest release");
    assert_eq!(b.held_rx(), 3);
    assert!(receive_all(&mut b, at(MS - 1)).is_empty());
    let first = receive_all(&mut b, at(MS));
    assert_eq!(first.iter().map(|f| number(f)).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(b.poll_at(), Some(at(1300 * US)));
    assert!(receive_all(&mut b, at(1299 * US)).is_empty());
    assert_eq!(
        receive_all(&mut b, at(2 * MS))
            .iter()
            .map(|f| number(f))
            .collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(b.poll_at(), None);
    assert_eq!(b.stats().rx.delayed, 3);
}

#[test]
fn random_delays_stay_within_bounds() {
    let (min, max) = (100 * US, 900 * US);
    let delay = FaultConfig::NONE.with_delay(
        Probability::from_percent(50),
        Duration::from_nanos(min),
        Duration::from_nanos(max),
    );
    let (mut a, mut b) = rx_rig(7, delay);
    let got = trickle(&mut a, &mut b, 5000);
    assert_eq!(got.len(), 5000);
    let mut late = 0;
    let mut overtaken = 0;
    let mut last = 0;
    for (when, f) in &got {
        let sent = u64::from(number(f)) * 10 * US;
        let waited = when.as_nanos() - sent;
        // Delivered when first polled after release: the trickle polls every 10 µs.
        assert!(
            waited == 0 || (min..max + 10 * US).contains(&waited),
            "{waited}"
        );
        if waited > 0 {
            late += 1;
        }
        if number(f) < last {
            overtaken += 1;
        }
        last = last.max(number(f));
    }
    let delayed = b.stats().rx.delayed;
    assert_eq!(late, delayed);
    assert!((2300..=2700).contains(&delayed), "{delayed}");
    assert!(overtaken > 0, "delays reorder frames");
}

#[test]
fn reordering_swaps_a_frame_with_the_next() {
    let reorder = FaultConfig::NONE.with_reorder(Probability::ALWAYS, Duration::from_micros(50));
    let (mut a, mut b) = rx_rig(8, reorder);
    send(&mut a, at(0), (0..6).map(|i| numbered(i, 60)));
    let got = receive_all(&mut b, at(0));
    // Each even frame is held and follows the odd one after it.
    assert_eq!(
        got.iter().map(|f| number(f)).collect::<Vec<_>>(),
        [1, 0, 3, 2, 5, 4]
    );

    // A frame with nobody behind it leaves at its timeout.
    send(&mut a, at(MS), [numbered(6, 60)]);
    assert!(receive_all(&mut b, at(MS)).is_empty());
    assert_eq!(b.poll_at(), Some(at(MS + 50 * US)));
    assert!(receive_all(&mut b, at(MS + 49 * US)).is_empty());
    assert_eq!(number(&receive_all(&mut b, at(MS + 50 * US))[0]), 6);
    assert_eq!(b.stats().rx.reordered, 4);
}

#[test]
fn reordering_at_a_rate() {
    let reorder =
        FaultConfig::NONE.with_reorder(Probability::from_percent(10), Duration::from_micros(5));
    let (mut a, mut b) = rx_rig(10, reorder);
    let got = trickle(&mut a, &mut b, 10_000);
    assert_eq!(got.len(), 10_000);
    let numbers: Vec<u32> = got.iter().map(|(_, f)| number(f)).collect();
    let inversions = numbers.windows(2).filter(|w| w[0] > w[1]).count() as u64;
    let stats = b.stats().rx;
    assert!((800..=1200).contains(&stats.reordered), "{stats:?}");
    // Frames arrive 10 µs apart, after the 5 µs timeout: each held frame is released by
    // its timeout, behind nothing, so the order survives; tighter spacing swaps them.
    assert_eq!(inversions, 0);

    let (mut a, mut b) = rx_rig(10, reorder);
    send(&mut a, at(0), (0..10_000).map(|i| numbered(i, 60)));
    let got = receive_all(&mut b, at(0));
    let numbers: Vec<u32> = got.iter().map(|f| number(f)).collect();
    let inversions = numbers.windows(2).filter(|w| w[0] > w[1]).count() as u64;
    assert_eq!(inversions, b.stats().rx.reordered - b.held_rx() as u64);
    let mut sorted = numbers;
    sorted.sort_unstable();
    assert!(sorted.iter().copied().eq(0..10_000 - b.held_rx() as u32));
}

#[test]
fn transmit_faults_and_back_pressure() {
    // A link that takes two frames per call and holds eight for the receiver.
    let (a, mut b) = Link::new().with_max_burst(2).with_capacity(8).connect();
    let drop_half = FaultConfig::NONE.with_drop(Probability::from_percent(50));
    let mut a = FaultInjector::new(a, 11).with_tx_faults(drop_half);
    let mut q: VecDeque<TxFrame> = (0..1000).map(|i| TxFrame::from(numbered(i, 60))).collect();
    let mut got = Vec::new();
    let mut calls = 0;
    while !q.is_empty() {
        let before = q.len();
        let taken = a.transmit(Instant::ZERO, &mut q);
        assert!(taken <= 2);
        assert_eq!(before - q.len(), taken);
        calls += 1;
        got.extend(receive_all(&mut b, Instant::ZERO));
    }
    assert!(calls >= 500);
    let stats = a.stats().tx;
    assert!((400..=600).contains(&stats.dropped), "{stats:?}");
    assert_eq!(got.len() as u64, 1000 - stats.dropped);
    let c = a.counters();
    assert_eq!(c.tx_dropped.injected, stats.dropped);
    assert_eq!(c.tx_frames + c.tx_dropped.total(), 1000);
}

#[test]
fn refused_frames_wait_in_the_injector() {
    // Duplicating every frame gives the link twice what it takes per call.
    let (a, mut b) = Link::new().with_max_burst(2).connect();
    let mut a = FaultInjector::new(a, 12)
        .with_tx_faults(FaultConfig::NONE.with_duplicate(Probability::ALWAYS));
    let mut q: VecDeque<TxFrame> = (0..4).map(|i| TxFrame::from(numbered(i, 60))).collect();
    assert_eq!(
        a.transmit(Instant::ZERO, &mut q),
        2,
        "two taken, four copies"
    );
    assert_eq!(a.held_tx(), 2, "two copies wait for the link");
    assert_eq!(a.poll_at(), Some(Instant::ZERO));
    assert_eq!(
        a.transmit(Instant::ZERO, &mut q),
        2,
        "the held copies left first; then two more"
    );
    assert_eq!(a.held_tx(), 2);
    assert_eq!(a.transmit(Instant::ZERO, &mut q), 0);
    assert!(q.is_empty());
    assert_eq!(a.held_tx(), 0);
    assert_eq!(a.poll_at(), None);
    let numbers: Vec<u32> = receive_all(&mut b, Instant::ZERO)
        .iter()
        .map(|f| number(f))
        .collect();
    assert_eq!(numbers, [0, 0, 1, 1, 2, 2, 3, 3]);
}

#[test]
fn everything_at_once_adds_up() {
    let (mut a, mut b) = rx_rig(13, everything());
    // Frames come faster than the receiver asks for them, so some wait in the injector.
    let mut delivered = 0u64;
    let mut out = Vec::new();
    for i in 0..5000u32 {
        let now = at(u64::from(i) * US);
        send(&mut a, now, [numbered(i, 100)]);
        out.clear();
        delivered += b.receive(now, &mut out, (i % 3) as usize) as u64;
        let s = b.stats().rx;
        assert_eq!(
            a.in_flight() as u64 + s.seen,
            u64::from(i) + 1,
            "every frame sent is in the link or seen by the injector"
        );
        assert_eq!(
            delivered + b.held_rx() as u64,
            s.seen - s.dropped + s.duplicated
        );
    }
    let c = b.counters();
    assert_eq!(c.rx_frames, delivered);
    assert_eq!(c.rx_dropped.injected, b.stats().rx.dropped);
    let s = b.stats().rx;
    for (name, n, lo, hi) in [
        ("dropped", s.dropped, 150, 350),
        ("duplicated", s.duplicated, 150, 350),
        ("corrupted", s.corrupted, 150, 350),
        ("delayed", s.delayed, 350, 650),
        ("reordered", s.reordered, 300, 650),
    ] {
        assert!((lo..=hi).contains(&n), "{name}: {n} in {s:?}");
    }
}

#[test]
fn works_behind_a_trait_object() {
    let (a, b) = Link::new().connect();
    let mut a: Box<dyn NetDevice> = Box::new(FaultInjector::new(a, 14));
    let mut b = FaultInjector::new(b, 15);
    send(&mut a, Instant::ZERO, [numbered(1, 60)]);
    let mut dev: &mut dyn NetDevice = &mut b;
    assert_eq!(number(&receive_all(&mut dev, Instant::ZERO)[0]), 1);
    assert_eq!(b.counters().rx_frames, 1);
}

#[test]
fn probabilities_clamp() {
    assert_eq!(Probability::from_percent(150), Probability::ALWAYS);
    assert_eq!(Probability::from_ppm(u32::MAX), Probability::ALWAYS);
    assert_eq!(Probability::from_percent(1).ppm(), 10_000);
    assert!(!Probability::NEVER.is_possible());
}

#[test]
fn fewer_frames_than_asked_for_means_the_inner_device_is_empty() {
    // Half the frames dropped: a receive that stopped at its first read of `max` would
    // return fewer than `max` with frames still waiting inside, which an edge-triggered
    // caller never hears about again.
    let (mut a, mut b) = rx_rig(
        4,
        FaultConfig::NONE.with_drop(Probability::from_percent(50)),
    );
    send(&mut a, Instant::ZERO, (0..64).map(|i| numbered(i, 60)));
    let mut out = Vec::new();
    let n = b.receive(Instant::ZERO, &mut out, 16);
    if n < 16 {
        let mut more = Vec::new();
        assert_eq!(
            b.inner_mut().receive(Instant::ZERO, &mut more, 64),
            0,
            "{n} frames returned with more left inside"
        );
    }
    // Until the inner device runs dry, every call fills `max`.
    let mut calls = 1;
    while b.receive(Instant::ZERO, &mut out, 16) == 16 {
        calls += 1;
        assert!(calls < 64, "the inner device never runs dry");
    }
    let dropped = b.stats().rx.dropped;
    assert_eq!(
        out.len() as u64 + dropped,
        64,
        "every frame received or dropped"
    );
}
