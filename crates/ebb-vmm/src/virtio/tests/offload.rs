//! Offloads against a hostile driver: checksum offload, TCP segmentation on transmit
//! (HOST_TSO4) and large receive (GUEST_TSO4).

use super::direct::host_got;
use super::*;

// ===== checksum offload =====

/// What a driver that wants checksum offload accepts.
pub(super) fn csum_features() -> u64 {
    Guest::good_features()
        | features::bit(features::NET_CSUM)
        | features::bit(features::NET_GUEST_CSUM)
}

/// A started offloading device with `accepted` features and the three queues.
pub(super) fn start_with(g: &mut Guest, accepted: u64) {
    assert!(g.negotiate(accepted));
    for q in [RX, TX, CTRL] {
        g.queue(q, u32::from(SIZE), Guest::rings(q));
    }
    g.driver_ok();
    g.settle();
    g.assert_healthy();
}

/// Sends `FRAME` with a header of `flags`, `csum_start` and `csum_offset`.
fn send_with_header(g: &mut Guest, flags: u8, start: u16, offset: u16) {
    let mut header = [0u8; NET_HDR_LEN];
    header[0] = flags;
    header[6..8].copy_from_slice(&start.to_le_bytes());
    header[8..10].copy_from_slice(&offset.to_le_bytes());
    g.mem.write_bytes(BUF, &header).expect("in memory");
    g.mem.write_bytes(BUF + 0x100, FRAME).expect("in memory");
    g.desc(TX, 0, d(BUF, NET_HDR_LEN as u32, DESC_F_NEXT, 1));
    g.desc(TX, 1, d(BUF + 0x100, FRAME.len() as u32, 0, 0));
    g.publish(TX, 0);
    g.settle();
}

/// Posts one receive buffer, lets one frame arrive and returns the header and frame the
/// guest got.
fn receive_one(g: &mut Guest, frame: &[u8], checksum: FrameChecksum) -> (Vec<u8>, Vec<u8>) {
    g.desc(RX, 0, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.arrive_with(frame, checksum);
    g.settle();
    let (_, len) = *g.used(RX).last().expect("a used entry");
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(len))
        .expect("in memory");
    (got[..NET_HDR_LEN].to_vec(), got[NET_HDR_LEN..].to_vec())
}

/// `FRAME` with a "partial checksum" at 14 + 4 completed, as the kernel would.
fn completed_frame() -> Vec<u8> {
    let mut f = FRAME.to_vec();
    assert!(complete_checksum(&mut f, 14, 4));
    f
}

#[test]
fn checksum_offload_is_offered_only_with_a_backend_that_completes_checksums() {
    let plain = Guest::new();
    plain.write(regs::DEVICE_FEATURES_SEL, 0);
    assert_eq!(
        plain.read(regs::DEVICE_FEATURES) & 0b11,
        0,
        "no CSUM, GUEST_CSUM"
    );
    assert!(!plain.negotiate(csum_features()), "not offered, so refused");
    let offloading = Guest::with_offload(None);
    offloading.write(regs::DEVICE_FEATURES_SEL, 0);
    assert_eq!(offloading.read(regs::DEVICE_FEATURES) & 0b11, 0b11);
    assert!(offloading.negotiate(csum_features()));
    assert_eq!(offloading.dev.features(), Some(csum_features()));
}

#[test]
fn needs_csum_from_the_guest_is_passed_to_the_backend() {
    let mut g = Guest::with_offload(None);
    start_with(&mut g, csum_features());
    send_with_header(&mut g, ebb_abi::virtio::NET_HDR_F_NEEDS_CSUM, 14, 4);
    assert_eq!(g.sent(), vec![FRAME.to_vec()]);
    let partial = FrameChecksum::Partial {
        start: 14,
        offset: 4,
    };
    assert_eq!(g.sent_checksums(), vec![partial]);
    assert_eq!(g.dev.stats.tx_csum_partial.load(Ordering::Relaxed), 1);
    // The field may end exactly at the frame's end.
    let last = FRAME.len() as u16 - 2;
    send_with_header(&mut g, ebb_abi::virtio::NET_HDR_F_NEEDS_CSUM, last, 0);
    g.assert_healthy();
    assert_eq!(g.sent().len(), 2);
}

#[test]
fn hostile_checksum_requests_break_the_device_and_reach_no_backend() {
    let len = FRAME.len() as u16;
    for (name, accepted, start, offset) in [
        ("start past the frame", csum_features(), 0xffff, 0),
        ("offset past the frame", csum_features(), 14, 0xfff0),
        ("field one byte over the end", csum_features(), len - 2, 1),
        ("start at the end", csum_features(), len, 0),
        ("both at the maximum", csum_features(), u16::MAX, u16::MAX),
        ("CSUM not negotiated", Guest::good_features(), 14, 4),
    ] {
        let g = bounded(move || {
            let mut g = Guest::with_offload(None);
            start_with(&mut g, accepted);
            send_with_header(&mut g, ebb_abi::virtio::NET_HDR_F_NEEDS_CSUM, start, offset);
            g
        });
        g.assert_broken(&[queue_name(TX), "NEEDS_CSUM"]);
        assert!(g.sent().is_empty(), "{name}: nothing reaches the backend");
    }
}

#[test]
fn received_checksum_state_reaches_a_guest_csum_driver_as_header_flags() {
    use ebb_abi::virtio::{NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM};
    let mut g = Guest::with_offload(None);
    start_with(&mut g, csum_features());
    let partial = FrameChecksum::Partial {
        start: 14,
        offset: 4,
    };
    let (header, frame) = receive_one(&mut g, FRAME, partial);
    assert_eq!(header[0], NET_HDR_F_NEEDS_CSUM);
    assert_eq!(header[6..10], [14, 0, 4, 0], "csum_start, csum_offset");
    assert_eq!(frame, FRAME, "left partial for the guest");
    let (header, _) = receive_one(&mut g, FRAME, FrameChecksum::Verified);
    assert_eq!(header[0], NET_HDR_F_DATA_VALID);
    let (header, _) = receive_one(&mut g, FRAME, FrameChecksum::Complete);
    assert_eq!(header[0], 0);
    assert_eq!(g.dev.stats.rx_csum_partial.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_csum_valid.load(Ordering::Relaxed), 1);

    // A driver without GUEST_CSUM reads no flags: it gets complete checksums.
    let mut g = Guest::with_offload(None);
    start_with(
        &mut g,
        Guest::good_features() | features::bit(features::NET_CSUM),
    );
    let (header, frame) = receive_one(&mut g, FRAME, partial);
    assert_eq!(header[0], 0);
    assert_eq!(
        frame,
        completed_frame(),
        "completed before the guest sees it"
    );
}

#[test]
fn injected_corruption_is_never_hidden_by_checksum_offload() {
    let corrupt = FaultConfig::NONE.with_corrupt(Probability::from_percent(100));
    let mut g = Guest::with_offload(Some(corrupt));
    start_with(&mut g, csum_features());
    // Toward the guest: a frame the backend verified is corrupted by the injector after
    // that, so it must reach the guest unmarked, for the guest's stack to check.
    for state in [
        FrameChecksum::Verified,
        FrameChecksum::Partial {
            start: 14,
            offset: 4,
        },
    ] {
        let (header, frame) = receive_one(&mut g, FRAME, state);
        assert_eq!(header[0], 0, "{state:?}: no DATA_VALID, no NEEDS_CSUM");
        // The partial checksum was completed before the one-bit corruption.
        let original = match state {
            FrameChecksum::Verified => FRAME.to_vec(),
            _ => completed_frame(),
        };
        let flipped: u32 = frame
            .iter()
            .zip(&original)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 1, "{state:?}: exactly the injected bit differs");
    }
    // From the guest: a partial checksum is completed over the original bytes, then one
    // bit is flipped; the backend gets a complete (and so detectably wrong) checksum.
    send_with_header(&mut g, ebb_abi::virtio::NET_HDR_F_NEEDS_CSUM, 14, 4);
    assert_eq!(g.sent_checksums(), vec![FrameChecksum::Complete]);
    let sent = &g.sent()[0];
    let flipped: u32 = sent
        .iter()
        .zip(&completed_frame())
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(flipped, 1, "completed first, corrupted after");
    g.assert_healthy();
}

// ===== TCP segmentation offload on transmit (HOST_TSO4), direct backends only =====

/// What a driver that wants TSO accepts (HOST_TSO4 needs CSUM).
fn tso4_features() -> u64 {
    csum_features() | features::bit(features::NET_HOST_TSO4)
}

/// Bytes of the Ethernet, IPv4 and TCP headers of [`tcp_frame`].
const TCP_HEADERS: u16 = 14 + 20 + 20;
/// The largest frame HOST_TSO4 allows: an Ethernet header and a 65,535-byte IPv4 packet.
const TSO4_FRAME_MAX: usize = 14 + 65_535;

/// A TCPv4 frame of `len` bytes as a stack hands it to a TSO device: Ethernet, a
/// 20-byte IPv4 header whose total length covers the rest, a 20-byte TCP header (some
/// bytes standing for the pseudo-header sum in its checksum field) and a counting
/// payload. The device does
/// not parse it; it is here so the bytes that must arrive unchanged look like the real
/// thing.
fn tcp_frame(len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00");
    let ip_len = u16::try_from(len - 14).unwrap_or(u16::MAX);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 2, 15, 10, 0, 2, 2]);
    f.extend_from_slice(&[0x1f, 0x90, 0xc0, 0x00]); // ports 8080 -> 49152
    f.extend_from_slice(&[
        0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0x12, 0x34, 0, 0,
    ]);
    assert_eq!(f.len(), usize::from(TCP_HEADERS));
    f.extend((0..len - f.len()).map(|i| i as u8));
    f
}

/// The header a TSO driver sends with [`tcp_frame`]: NEEDS_CSUM on the TCP checksum,
/// TCPV4 segments of 1,460 payload bytes behind the 54 bytes of headers.
fn tso4_header() -> ebb_abi::virtio::NetHdr {
    ebb_abi::virtio::NetHdr::needs_csum(34, 16).with_tcpv4_gso(TCP_HEADERS, 1460)
}

/// Posts transmit chain 0: `header` in one descriptor, then `frame` in up to three (the
/// headers, the payload's first half, the rest), as a driver's segment list would.
fn post_tx_frame(g: &mut Guest, header: &[u8; NET_HDR_LEN], frame: &[u8]) {
    g.mem.write_bytes(BUF, header).expect("in memory");
    let at = BUF + 0x1000;
    g.mem.write_bytes(at, frame).expect("in memory");
    let headers = frame.len().min(usize::from(TCP_HEADERS));
    let half = headers + (frame.len() - headers) / 2;
    let pieces: Vec<_> = [0..headers, headers..half, half..frame.len()]
        .into_iter()
        .filter(|r| !r.is_empty())
        .collect();
    g.desc(TX, 0, d(BUF, NET_HDR_LEN as u32, DESC_F_NEXT, 1));
    for (i, r) in pieces.iter().enumerate() {
        let i = i as u16 + 1;
        let last = usize::from(i) == pieces.len();
        let (flags, next) = if last { (0, 0) } else { (DESC_F_NEXT, i + 1) };
        g.desc(TX, i, d(at + r.start as u64, r.len() as u32, flags, next));
    }
    g.publish(TX, 0);
}

/// A started direct device with a header on its socket, offering `offload`, the driver
/// having accepted `accepted`; and the host end.
fn direct_started(offload: Offload, accepted: u64) -> (Guest, UnixDatagram) {
    let (mut g, host) = Guest::with_direct_offering(true, offload);
    start_with(&mut g, accepted);
    (g, host)
}

#[test]
fn segmentation_offload_is_offered_only_when_asked_and_only_with_checksum_offload() {
    let tso4_alone = Offload {
        checksum: false,
        tso4: true,
        guest_tso4: true,
    };
    // The spec makes HOST_TSO4 depend on CSUM.
    assert_offered_only_as_asked(
        "HOST_TSO4",
        features::bit(features::NET_HOST_TSO4),
        tso4_features(),
        Guest::good_features() | features::bit(features::NET_HOST_TSO4),
        [
            ("no offload", Offload::NONE, false),
            ("checksum offload only", Offload::CHECKSUM, false),
            ("TSO without checksum offload", tso4_alone, false),
            ("both", Offload::CHECKSUM_AND_TSO4, true),
        ],
    );
}

/// For each case, `feature` is offered (in the register too) and a driver asking for
/// `with_it` is accepted exactly when the case says so; and where offered, a driver
/// taking `feature` without what the spec makes it depend on (`without_dependency`) is
/// refused, like any inconsistent set, and may try again.
fn assert_offered_only_as_asked(
    what: &str,
    feature: u64,
    with_it: u64,
    without_dependency: u64,
    cases: [(&str, Offload, bool); 4],
) {
    for (name, offload, offered) in cases {
        let (g, _host) = Guest::with_direct_offering(true, offload);
        assert_eq!(g.dev.offered() & feature != 0, offered, "{name}");
        g.write(regs::DEVICE_FEATURES_SEL, 0);
        let window = u64::from(g.read(regs::DEVICE_FEATURES));
        assert_eq!(
            window & feature != 0,
            offered,
            "{name}: the register agrees"
        );
        assert_eq!(
            g.negotiate(with_it),
            offered,
            "{name}: {what} is accepted only when offered"
        );
        g.assert_healthy();
    }
    let (g, _host) = Guest::with_direct_offering(true, Offload::CHECKSUM_AND_TSO4);
    assert!(
        !g.negotiate(without_dependency),
        "{what} without what it depends on"
    );
    g.assert_healthy();
    g.write(regs::STATUS, 0);
    assert!(g.negotiate(with_it));
    assert_eq!(g.dev.features(), Some(with_it));
}

#[test]
fn a_tso4_frame_reaches_a_direct_backend_whole_with_only_the_validated_request() {
    use ebb_abi::virtio::{NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM, NetHdr};
    let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, tso4_features());
    // 20 KB of TCP, far more than one MTU. Besides the request, the guest's header has
    // junk where nothing is asked (DATA_VALID, num_buffers): none of it goes through.
    let frame = tcp_frame(20_000);
    let header = NetHdr {
        flags: NET_HDR_F_NEEDS_CSUM | NET_HDR_F_DATA_VALID,
        num_buffers: 0xaaaa,
        ..tso4_header()
    };
    post_tx_frame(&mut g, &header.to_bytes(), &frame);
    g.settle();
    // NEEDS_CSUM at 34 + 16; TCPV4, hdr_len 54, gso_size 1460 (0x05b4); num_buffers 0.
    let mut expected = vec![
        NET_HDR_F_NEEDS_CSUM,
        1,
        54,
        0,
        0xb4,
        0x05,
        34,
        0,
        16,
        0,
        0,
        0,
    ];
    expected.extend_from_slice(&frame);
    let got = host_got(&host);
    assert_eq!(got.len(), 1, "one datagram, one write");
    assert!(got[0] == expected, "the header and the frame, unchanged");
    assert_eq!(g.used(TX), vec![(0, 0)]);
    assert_eq!(g.dev.stats.tx_frames.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.tx_gso.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.tx_csum_partial.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

#[test]
fn the_largest_tso4_frame_passes() {
    let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, tso4_features());
    let frame = tcp_frame(TSO4_FRAME_MAX);
    post_tx_frame(&mut g, &tso4_header().to_bytes(), &frame);
    g.settle();
    g.assert_healthy();
    let got = host_got(&host);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len(), NET_HDR_LEN + TSO4_FRAME_MAX);
    assert!(got[0][NET_HDR_LEN..] == frame[..]);
    assert_eq!(g.dev.stats.tx_gso.load(Ordering::Relaxed), 1);
}

#[test]
fn hostile_segmentation_requests_break_the_device_and_reach_no_backend() {
    use ebb_abi::virtio::NetHdr;
    let len = 4000;
    let good = tso4_header();
    let gso_type = |gso_type| NetHdr { gso_type, ..good };
    for (name, accepted, header, frame_len, words) in [
        (
            "TCPV4 without HOST_TSO4 negotiated",
            csum_features(),
            good,
            len,
            "without VIRTIO_NET_F_HOST_TSO4 negotiated",
        ),
        (
            "TCPV4 without NEEDS_CSUM",
            tso4_features(),
            NetHdr::PLAIN.with_tcpv4_gso(TCP_HEADERS, 1460),
            len,
            "without NEEDS_CSUM",
        ),
        (
            "TCPV4 with ECN",
            tso4_features(),
            gso_type(0x81),
            len,
            "ECN",
        ),
        ("ECN alone", tso4_features(), gso_type(0x80), len, "ECN"),
        (
            "UDP (3)",
            tso4_features(),
            gso_type(3),
            len,
            "does not offer",
        ),
        (
            "TCPV6 (4)",
            tso4_features(),
            gso_type(4),
            len,
            "does not offer",
        ),
        (
            "UDP_L4 (5)",
            tso4_features(),
            gso_type(5),
            len,
            "does not offer",
        ),
        (
            "undefined (0x7f)",
            tso4_features(),
            gso_type(0x7f),
            len,
            "does not offer",
        ),
        (
            "hdr_len one past the frame",
            tso4_features(),
            NetHdr {
                hdr_len: len as u16 + 1,
                ..good
            },
            len,
            "hdr_len past",
        ),
        (
            "hdr_len at the maximum",
            tso4_features(),
            NetHdr {
                hdr_len: u16::MAX,
                ..good
            },
            len,
            "hdr_len past",
        ),
        (
            "gso_size 0",
            tso4_features(),
            NetHdr {
                gso_size: 0,
                ..good
            },
            len,
            "gso_size 0",
        ),
        (
            "a frame one byte over the TSO limit",
            tso4_features(),
            good,
            TSO4_FRAME_MAX + 1,
            "holds 65562 bytes",
        ),
    ] {
        let (g, got) = bounded(move || {
            let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, accepted);
            post_tx_frame(&mut g, &header.to_bytes(), &tcp_frame(frame_len));
            g.settle();
            // The monitor goes on: more rounds of a broken device do nothing.
            g.settle();
            let got = host_got(&host);
            (g, got)
        });
        g.assert_broken(&[queue_name(TX), words]);
        assert!(got.is_empty(), "{name}: nothing reaches the backend");
        assert_eq!(g.dev.stats.tx_gso.load(Ordering::Relaxed), 0, "{name}");
    }
}

#[test]
fn a_segmentation_request_not_negotiated_on_the_iobuf_path_is_refused() {
    // The IOBuf path hands a backend a segmentation request only as a large frame, and
    // only where HOST_TSO4 was offered and negotiated (an external link that takes large
    // frames). With checksum offload alone, or a fault injector in between, the request
    // is refused rather than handing the backend a frame that needed cutting.
    let faults = FaultConfig::default();
    for (name, faults) in [
        ("checksum offload", None),
        ("a fault injector", Some(faults)),
    ] {
        let g = bounded(move || {
            let mut g = Guest::build(1, Offload::CHECKSUM, faults);
            start_with(&mut g, csum_features());
            post_tx_frame(&mut g, &tso4_header().to_bytes(), &tcp_frame(4000));
            g.settle();
            g
        });
        g.assert_broken(&[queue_name(TX), "TCPV4 without VIRTIO_NET_F_HOST_TSO4"]);
        assert!(g.sent().is_empty(), "{name}: nothing reaches the backend");
    }
}

#[test]
fn on_the_iobuf_path_a_negotiated_segmentation_request_reaches_the_backend_as_one_frame() {
    // An external link that takes large frames (ebb-usernet's endpoint) is offered
    // HOST_TSO4: the request becomes one frame longer than the MTU with a partial
    // checksum, which the link cuts or takes whole.
    let frame = tcp_frame(4000);
    let sent = frame.clone();
    let g = bounded(move || {
        let mut g = Guest::build(1, Offload::CHECKSUM_AND_TSO4, None);
        start_with(&mut g, tso4_features());
        post_tx_frame(&mut g, &tso4_header().to_bytes(), &sent);
        g.settle();
        g
    });
    g.assert_healthy();
    assert_eq!(g.sent(), vec![frame], "the whole frame, unchanged");
    assert_eq!(
        g.sent_checksums(),
        vec![FrameChecksum::Partial {
            start: 34,
            offset: 16
        }]
    );
    assert_eq!(g.dev.stats.tx_gso.load(Ordering::Relaxed), 1);
}

#[test]
fn on_the_iobuf_path_a_large_frame_reaches_only_a_guest_tso4_driver_behind_a_gso_header() {
    // The device writes the GSO header itself: TCPV4, the frame's 54 bytes of headers
    // and the MTU's 1,460 payload bytes per segment, with the frame's checksum state.
    let frame = tcp_frame(4000);
    let partial = FrameChecksum::Partial {
        start: 34,
        offset: 16,
    };
    let arriving = frame.clone();
    let mut g = bounded(move || {
        let mut g = Guest::build(1, Offload::CHECKSUM_AND_TSO4, None);
        start_with(&mut g, guest_tso4_features());
        post_rx(&mut g, 0, BUF + 0x1000, LARGE_CHAIN);
        g.arrive_with(&arriving, partial);
        g.settle();
        g
    });
    g.assert_healthy();
    let (_, len) = *g.used(RX).last().expect("a used entry");
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(len))
        .expect("in memory");
    let expected = ebb_abi::virtio::NetHdr {
        num_buffers: 1,
        ..ebb_abi::virtio::NetHdr::needs_csum(34, 16).with_tcpv4_gso(TCP_HEADERS, 1460)
    };
    assert_eq!(&got[..NET_HDR_LEN], &expected.to_bytes());
    assert_eq!(&got[NET_HDR_LEN..], &frame[..]);
    assert_eq!(g.dev.stats.rx_gso.load(Ordering::Relaxed), 1);
    // A driver without GUEST_TSO4 never gets one, however large its buffer.
    g = bounded(move || {
        let mut g = Guest::build(1, Offload::CHECKSUM_AND_TSO4, None);
        start_with(&mut g, csum_features());
        post_rx(&mut g, 0, BUF + 0x1000, LARGE_CHAIN);
        g.arrive_with(&frame, partial);
        g.settle();
        g
    });
    g.assert_healthy();
    assert_eq!(g.used(RX).last().map(|u| u.1), Some(0), "returned empty");
    assert_eq!(g.dev.stats.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_gso.load(Ordering::Relaxed), 0);
}

#[test]
fn without_tso4_a_transmit_chain_holds_no_more_than_before() {
    // Without HOST_TSO4 negotiated a chain may hold 64 KiB, as before; the largest TSO
    // chain is more than that.
    let before = 65_536 - NET_HDR_LEN;
    for (name, offload, accepted) in [
        ("not offered", Offload::CHECKSUM, csum_features()),
        (
            "offered, not accepted",
            Offload::CHECKSUM_AND_TSO4,
            csum_features(),
        ),
    ] {
        let (mut g, host) = direct_started(offload, accepted);
        post_tx_frame(&mut g, &[0; NET_HDR_LEN], &tcp_frame(before));
        g.settle();
        g.assert_healthy();
        assert_eq!(host_got(&host).len(), 1, "{name}: the 64 KiB chain went");
        for frame_len in [before + 1, TSO4_FRAME_MAX] {
            let (g, got) = bounded(move || {
                let (mut g, host) = direct_started(offload, accepted);
                post_tx_frame(&mut g, &[0; NET_HDR_LEN], &tcp_frame(frame_len));
                g.settle();
                let got = host_got(&host);
                (g, got)
            });
            let holds = format!("holds {} bytes", NET_HDR_LEN + frame_len);
            g.assert_broken(&[queue_name(TX), &holds, "at most 65536"]);
            assert!(got.is_empty(), "{name}: {frame_len}-byte frame");
        }
    }
}

// ===== large receive (GUEST_TSO4), direct backends only =====

/// What a driver that takes large frames accepts (GUEST_TSO4 needs GUEST_CSUM).
fn guest_tso4_features() -> u64 {
    csum_features() | features::bit(features::NET_GUEST_TSO4)
}

/// The largest receive chain a GUEST_TSO4 driver posts: a header, an Ethernet header and
/// a 65,535-byte IPv4 packet.
const LARGE_CHAIN: u32 = (NET_HDR_LEN + TSO4_FRAME_MAX) as u32;

/// Resets the device and starts it again, fresh rings and all, with `accepted`.
fn restart_with(g: &mut Guest, accepted: u64) {
    g.write(regs::STATUS, 0);
    g.settle();
    for q in [RX, TX, CTRL] {
        let (desc, _, _) = Guest::rings(q);
        g.mem.write_bytes(desc, &[0u8; 0x3000]).expect("in memory");
    }
    g.avail_idx = [0; 3];
    start_with(g, accepted);
}

/// A large frame as the TAP hands it over with large receive on: the kernel's header
/// (NEEDS_CSUM on the TCP checksum, TCPV4 segments of 1,448 bytes behind 54 bytes of
/// headers; `num_buffers` left as junk, which the device overwrites) and a
/// [`tcp_frame`] of `len` bytes.
fn large_datagram(len: usize) -> Vec<u8> {
    let header = ebb_abi::virtio::NetHdr {
        num_buffers: 0xaaaa,
        ..ebb_abi::virtio::NetHdr::needs_csum(34, 16).with_tcpv4_gso(TCP_HEADERS, 1448)
    };
    let mut datagram = header.to_bytes().to_vec();
    datagram.extend_from_slice(&tcp_frame(len));
    datagram
}

/// Posts receive chain `head` (slots `head`, `head + 1`) of `len` bytes at `at`: 1,526
/// bytes, then the rest, as a driver might split a large buffer.
fn post_rx(g: &mut Guest, head: u16, at: u64, len: u32) {
    let first = len.min(1526);
    if first == len {
        g.desc(RX, head, d(at, len, DESC_F_WRITE, 0));
    } else {
        g.desc(RX, head, d(at, first, DESC_F_WRITE | DESC_F_NEXT, head + 1));
        g.desc(
            RX,
            head + 1,
            d(at + u64::from(first), len - first, DESC_F_WRITE, 0),
        );
    }
    g.publish(RX, head);
}

#[test]
fn large_receive_is_offered_only_when_asked_and_only_with_guest_csum() {
    let guest_tso4 = features::bit(features::NET_GUEST_TSO4);
    let alone = Offload {
        checksum: false,
        tso4: false,
        guest_tso4: true,
    };
    // The spec makes GUEST_TSO4 depend on GUEST_CSUM: CSUM alone is not enough.
    assert_offered_only_as_asked(
        "GUEST_TSO4",
        guest_tso4,
        guest_tso4_features(),
        Guest::good_features() | features::bit(features::NET_CSUM) | guest_tso4,
        [
            ("no offload", Offload::NONE, false),
            ("checksum offload only", Offload::CHECKSUM, false),
            ("GUEST_TSO4 without checksum offload", alone, false),
            (
                "checksum and segmentation offload",
                Offload::CHECKSUM_AND_TSO4,
                true,
            ),
        ],
    );
}

#[test]
fn large_receive_follows_what_each_driver_negotiated() {
    let (mut g, _host) = Guest::with_direct_offering(true, Offload::CHECKSUM_AND_TSO4);
    // A driver without GUEST_TSO4: large receive is off already, nothing to ask.
    start_with(&mut g, csum_features());
    assert_eq!(g.large_receive.calls(), Vec::<bool>::new());
    // One with it: on at DRIVER_OK, once.
    restart_with(&mut g, guest_tso4_features());
    assert_eq!(g.large_receive.calls(), vec![true]);
    g.settle();
    assert_eq!(g.large_receive.calls(), vec![true], "asked once");
    // A reset turns it off before any next driver negotiates.
    g.write(regs::STATUS, 0);
    g.settle();
    assert_eq!(g.large_receive.calls(), vec![true, false]);
    // Nor does the next one without GUEST_TSO4 get it back.
    restart_with(&mut g, csum_features());
    assert_eq!(g.large_receive.calls(), vec![true, false]);
    // A broken device turns it off too: its driver will reset and may come back
    // without GUEST_TSO4.
    restart_with(&mut g, guest_tso4_features());
    g.dev.break_device("a test");
    g.settle();
    assert_eq!(g.large_receive.calls(), vec![true, false, true, false]);
}

#[test]
fn a_backend_that_cannot_turn_large_receive_on_leaves_frames_mtu_sized() {
    let (mut g, host) = Guest::with_direct_offering(true, Offload::CHECKSUM_AND_TSO4);
    g.large_receive.refuse(Some(true));
    start_with(&mut g, guest_tso4_features());
    // Refused, and turned off again; GUEST_TSO4 allows large frames, it does not
    // require any: the device goes on.
    assert_eq!(g.large_receive.calls(), vec![true, false]);
    g.assert_healthy();
    post_rx(&mut g, 0, BUF + 0x1000, 1526);
    let mut datagram = vec![0u8; NET_HDR_LEN];
    datagram.extend_from_slice(FRAME);
    host.send(&datagram).expect("send");
    g.settle();
    assert_eq!(g.used(RX), vec![(0, datagram.len() as u32)]);
    // A device told to offer it over a backend whose frames take the copying path (no
    // header, here) never asks the backend: its frames would lose their GSO header.
    let (mut g, _host) = Guest::with_direct_offering(false, Offload::CHECKSUM_AND_TSO4);
    start_with(&mut g, guest_tso4_features());
    assert_eq!(g.large_receive.calls(), Vec::<bool>::new());
    g.assert_healthy();
}

#[test]
fn a_backend_that_cannot_turn_large_receive_off_breaks_the_device_for_a_driver_without_it() {
    let (mut g, _host) = Guest::with_direct_offering(true, Offload::CHECKSUM_AND_TSO4);
    start_with(&mut g, guest_tso4_features());
    g.large_receive.refuse(Some(false));
    // The reset's attempt fails (logged); the next driver takes large frames: fine.
    restart_with(&mut g, guest_tso4_features());
    assert_eq!(g.large_receive.calls(), vec![true, false]);
    g.assert_healthy();
    // The one after does not: its DRIVER_OK tries again and, failing, breaks the device.
    g.write(regs::STATUS, 0);
    g.settle();
    for q in [RX, TX, CTRL] {
        let (desc, _, _) = Guest::rings(q);
        g.mem.write_bytes(desc, &[0u8; 0x3000]).expect("in memory");
    }
    g.avail_idx = [0; 3];
    assert!(g.negotiate(csum_features()));
    for q in [RX, TX, CTRL] {
        g.queue(q, u32::from(SIZE), Guest::rings(q));
    }
    g.driver_ok();
    g.settle();
    g.assert_broken(&["large receive", "GUEST_TSO4", "refused"]);
    // Once the backend complies, a reset makes the device usable again.
    g.large_receive.refuse(None);
    restart_with(&mut g, csum_features());
    g.assert_healthy();
    assert_eq!(g.large_receive.calls().last(), Some(&false));
}

#[test]
fn a_large_frame_lands_whole_in_a_large_receive_chain() {
    let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, guest_tso4_features());
    post_rx(&mut g, 0, BUF + 0x1000, LARGE_CHAIN);
    let datagram = large_datagram(40_000);
    host.send(&datagram).expect("send");
    g.settle();
    g.assert_healthy();
    let total = datagram.len() as u32;
    assert_eq!(g.used(RX), vec![(0, total)]);
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(total))
        .expect("in memory");
    assert_eq!(
        got[..10],
        datagram[..10],
        "the kernel's header, GSO and all"
    );
    assert_eq!(got[10..12], [1, 0], "num_buffers");
    assert!(
        got[NET_HDR_LEN..] == datagram[NET_HDR_LEN..],
        "the frame, whole"
    );
    let stat = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(stat(&g.dev.stats.rx_frames), 1);
    assert_eq!(stat(&g.dev.stats.rx_gso), 1);
    assert_eq!(stat(&g.dev.stats.rx_csum_partial), 1);
    assert_eq!(stat(&g.dev.stats.rx_dropped), 0);
    // The largest frame fills the largest chain exactly.
    post_rx(&mut g, 2, BUF + 0x2_0000, LARGE_CHAIN);
    host.send(&large_datagram(TSO4_FRAME_MAX)).expect("send");
    g.settle();
    assert_eq!(g.used(RX)[1], (2, LARGE_CHAIN));
    assert_eq!(stat(&g.dev.stats.rx_gso), 2);
    g.assert_healthy();
}

#[test]
fn a_large_frame_into_a_chain_too_small_is_dropped_and_counted() {
    let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, guest_tso4_features());
    let datagram = large_datagram(40_000);
    let exact = datagram.len() as u32;
    // An MTU-sized chain, and one a byte short: both dropped, returned empty, and
    // nothing written past them (the guards stay 0x5a). Then one that fits.
    let guard = [0x5a; 64];
    for (head, at, len) in [(0, BUF, 1526), (2, BUF + 0x1_0000, exact - 1)] {
        g.mem
            .write_bytes(at + u64::from(len), &guard)
            .expect("in memory");
        post_rx(&mut g, head, at, len);
    }
    post_rx(&mut g, 4, BUF + 0x2_0000, exact);
    for _ in 0..3 {
        host.send(&datagram).expect("send");
    }
    g.settle();
    g.assert_healthy();
    assert_eq!(g.used(RX), vec![(0, 0), (2, 0), (4, exact)]);
    for (at, len) in [(BUF, 1526u64), (BUF + 0x1_0000, u64::from(exact) - 1)] {
        assert_eq!(g.mem.read_bytes(at + len, 64), Some(guard.to_vec()));
    }
    let stat = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(stat(&g.dev.stats.rx_dropped), 2);
    assert_eq!(stat(&g.dev.stats.rx_frames), 1);
    assert_eq!(stat(&g.dev.stats.rx_gso), 1);
}

#[test]
fn a_gso_frame_the_driver_did_not_negotiate_is_dropped() {
    use ebb_abi::virtio::NetHdr;
    // Without GUEST_TSO4 (a frame the kernel queued before large receive went off), and
    // with kinds large receive never asks for: dropped even where it fits, and counted.
    let tcpv4 = large_datagram(4000);
    let with_gso_type = |gso_type: u8| {
        let mut d = tcpv4.clone();
        d[1] = gso_type;
        d
    };
    for (name, accepted, datagram) in [
        ("TCPV4 without GUEST_TSO4", csum_features(), tcpv4.clone()),
        ("TCPV4 with ECN", guest_tso4_features(), with_gso_type(0x81)),
        ("TCPV6", guest_tso4_features(), with_gso_type(4)),
        ("UDP", guest_tso4_features(), with_gso_type(3)),
    ] {
        let (mut g, host) = direct_started(Offload::CHECKSUM_AND_TSO4, accepted);
        post_rx(&mut g, 0, BUF + 0x1000, LARGE_CHAIN);
        post_rx(&mut g, 2, BUF + 0x2_0000, LARGE_CHAIN);
        host.send(&datagram).expect("send");
        // The next frame, a plain one, still arrives.
        let mut plain = NetHdr::PLAIN.to_bytes().to_vec();
        plain.extend_from_slice(FRAME);
        host.send(&plain).expect("send");
        g.settle();
        g.assert_healthy();
        assert_eq!(g.used(RX), vec![(0, 0), (2, plain.len() as u32)], "{name}");
        assert_eq!(g.dev.stats.rx_dropped.load(Ordering::Relaxed), 1, "{name}");
        assert_eq!(g.dev.stats.rx_gso.load(Ordering::Relaxed), 0, "{name}");
    }
}
