//! The direct path (TAP): `readv`/`writev` between the backend and guest memory.

use super::offload::{csum_features, start_with};
use super::*;

// ===== the direct path (TAP): readv/writev between the backend and guest memory =====

/// Receives what the host end of a direct backend got, one datagram per frame.
pub(super) fn host_got(host: &UnixDatagram) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    // Room for the largest frame HOST_TSO4 allows, and one byte to show a longer one.
    let mut buf = vec![0u8; NET_HDR_LEN + 14 + 65_535 + 1];
    while let Ok(n) = host.recv(&mut buf) {
        got.push(buf[..n].to_vec());
    }
    got
}

#[test]
fn a_direct_backend_without_a_header_moves_bare_frames_both_ways() {
    let (mut g, host) = Guest::with_direct(false);
    g.start();
    post_tx(&mut g, 0, BUF, &[0u8; NET_HDR_LEN], FRAME);
    g.settle();
    assert_eq!(
        host_got(&host),
        vec![FRAME.to_vec()],
        "the frame, no header"
    );
    assert_eq!(g.used(TX), vec![(0, 0)]);
    // Receive: the device writes the header in front of the frame it reads.
    g.mem
        .write_bytes(BUF + 0x1000, &[0xee; 64])
        .expect("in memory");
    g.desc(RX, 3, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 3);
    host.send(FRAME).expect("send");
    g.settle();
    let total = (NET_HDR_LEN + FRAME.len()) as u32;
    assert_eq!(g.used(RX), vec![(3, total)]);
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(total))
        .expect("in memory");
    assert_eq!(
        got[..NET_HDR_LEN],
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        "num_buffers 1"
    );
    assert_eq!(&got[NET_HDR_LEN..], FRAME);
    assert_eq!(g.dev.stats.tx_frames.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_frames.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

#[test]
fn a_direct_backend_with_a_header_gets_only_the_validated_checksum_request() {
    use ebb_abi::virtio::{NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM};
    let (mut g, host) = Guest::with_direct(true);
    start_with(&mut g, csum_features());
    // The guest's header asks for a checksum, no segmentation, and carries junk in the
    // fields that mean nothing then (hdr_len, gso_size, num_buffers): the backend sees
    // NEEDS_CSUM and the two offsets, nothing else of it.
    let mut header = [0xaa; NET_HDR_LEN];
    header[0] = NET_HDR_F_NEEDS_CSUM;
    header[1] = ebb_abi::virtio::NET_HDR_GSO_NONE;
    header[6..8].copy_from_slice(&14u16.to_le_bytes());
    header[8..10].copy_from_slice(&4u16.to_le_bytes());
    post_tx(&mut g, 0, BUF, &header, FRAME);
    g.settle();
    let mut expected = vec![NET_HDR_F_NEEDS_CSUM, 0, 0, 0, 0, 0, 14, 0, 4, 0, 0, 0];
    expected.extend_from_slice(FRAME);
    assert_eq!(host_got(&host), vec![expected]);
    assert_eq!(g.dev.stats.tx_csum_partial.load(Ordering::Relaxed), 1);
    // Receive: the backend's header reaches the guest with num_buffers set.
    g.desc(RX, 0, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    let mut datagram = vec![NET_HDR_F_DATA_VALID, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    datagram.extend_from_slice(FRAME);
    host.send(&datagram).expect("send");
    g.settle();
    let (_, len) = g.used(RX)[0];
    let got = g
        .mem
        .read_bytes(BUF + 0x1000, u64::from(len))
        .expect("in memory");
    assert_eq!(got[0], NET_HDR_F_DATA_VALID);
    assert_eq!(got[10..12], [1, 0], "num_buffers");
    assert_eq!(&got[NET_HDR_LEN..], FRAME);
    assert_eq!(g.dev.stats.rx_csum_valid.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

#[test]
fn a_frame_longer_than_the_chain_is_dropped_on_the_direct_path_and_the_next_fits() {
    let (mut g, host) = Guest::with_direct(false);
    g.start();
    // Exactly the frame fits the second buffer (header + frame); one byte less does not.
    let exact = (NET_HDR_LEN + FRAME.len()) as u32;
    g.desc(RX, 0, d(BUF + 0x1000, exact - 1, DESC_F_WRITE, 0));
    g.publish(RX, 0);
    g.desc(RX, 1, d(BUF + 0x2000, exact, DESC_F_WRITE, 0));
    g.publish(RX, 1);
    host.send(FRAME).expect("send");
    host.send(FRAME).expect("send");
    g.settle();
    assert_eq!(
        g.used(RX),
        vec![(0, 0), (1, exact)],
        "cut frame dropped, full one kept"
    );
    assert_eq!(g.dev.stats.rx_dropped.load(Ordering::Relaxed), 1);
    assert_eq!(g.dev.stats.rx_frames.load(Ordering::Relaxed), 1);
    g.assert_healthy();
}

#[test]
fn a_full_direct_backend_keeps_the_chain_and_loses_nothing() {
    let (mut g, host) = Guest::with_direct(false);
    // The smallest send buffer the kernel allows (a few frames): more chains than that
    // stay unread at the host end, so the device must stop, keep the refused chain, and
    // go on once the host reads.
    let Some(Direct { fd, .. }) = g.backends[0].direct() else {
        unreachable!("a direct backend")
    };
    rustix::net::sockopt::set_socket_send_buffer_size(fd, 1).expect("SO_SNDBUF");
    g.start();
    const FRAMES: u16 = 8;
    let mut sent = Vec::new();
    for i in 0..FRAMES {
        let mut frame = FRAME.to_vec();
        frame.push(i as u8);
        post_tx(
            &mut g,
            2 * i,
            BUF + 0x1000 * u64::from(i),
            &[0u8; NET_HDR_LEN],
            &frame,
        );
        sent.push(frame);
    }
    let mut got = Vec::new();
    let mut refused = false;
    for _ in 0..64 {
        g.step();
        refused |= g.engine.has_pending_output();
        got.extend(host_got(&host));
        if got.len() == sent.len() {
            break;
        }
    }
    assert_eq!(got, sent, "every frame, in order");
    assert!(
        refused,
        "the host end never pushed back: the case tests nothing"
    );
    assert!(!g.engine.has_pending_output());
    g.assert_healthy();
}

#[test]
fn a_direct_backend_with_frames_and_no_buffers_asks_for_a_receive_kick() {
    let (mut g, host) = Guest::with_direct(false);
    g.start();
    host.send(FRAME).expect("send");
    g.settle();
    assert!(!g.engine.want_kicks(&g.mem, true), "no buffers yet");
    assert!(
        g.wants_kick(RX),
        "frames may wait in the backend: a kick is wanted"
    );
    g.desc(RX, 3, d(BUF + 0x1000, 1526, DESC_F_WRITE, 0));
    g.publish(RX, 3);
    g.engine.want_kicks(&g.mem, false);
    g.settle();
    assert_eq!(g.used(RX), vec![(3, (NET_HDR_LEN + FRAME.len()) as u32)]);
    g.assert_healthy();
}

#[test]
fn frames_that_ask_for_an_answer_give_the_guest_a_turn_on_the_direct_path() {
    for vnet_hdr in [false, true] {
        let (mut g, host) = Guest::with_direct(vnet_hdr);
        if vnet_hdr {
            // The direct path reads frames with a header only for a driver that reads
            // the checksum flags in it.
            start_with(&mut g, csum_features());
        } else {
            g.start();
        }
        super::engine::the_guest_has_a_turn_after_frames_that_ask_for_an_answer(
            &mut g,
            &|_, frame| {
                let mut datagram = if vnet_hdr {
                    vec![0u8; NET_HDR_LEN]
                } else {
                    Vec::new()
                };
                datagram.extend_from_slice(frame);
                host.send(&datagram).expect("send");
            },
        );
    }
}
