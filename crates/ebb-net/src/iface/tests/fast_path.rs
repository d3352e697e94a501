//! The receive fast path for plain TCP segments (`Interface::plain_tcp_to_us`) against
//! the general path: fed the same frames, an interface with the fast path and one
//! without must deliver the same segments, send the same frames and count the same.

use alloc::format;

use proptest::prelude::*;

use super::*;
use ebb_net_driver::ChecksumCapabilities as DeviceChecksums;

/// A plain ACK+PSH from the peer's port 40000 to our port 80 carrying `payload`.
fn tcp_segment(payload: &[u8]) -> Vec<u8> {
    let mut segment = vec![
        0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 9, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ];
    segment.extend_from_slice(payload);
    let sum = checksum::combine(&[
        checksum::pseudo_header(PEER_IP, OUR_IP, 6, segment.len() as u16),
        checksum::data(&segment),
    ]);
    segment[16..18].copy_from_slice(&(!sum).to_be_bytes());
    segment
}

/// Frames the fast path takes, and near misses it must leave to the general path.
fn seeds() -> Vec<Vec<u8>> {
    let plain = from_peer(IpProtocol::Tcp, &tcp_segment(b"hello, ebbflow")).to_vec();
    let empty = from_peer(IpProtocol::Tcp, &tcp_segment(b"")).to_vec();
    let mut padded = empty.clone();
    padded.extend_from_slice(&[0xee; 6]); // link padding past the IPv4 total length
    let mut no_df = plain.clone();
    no_df[20] = 0; // DF clear: still not a fragment
    let ip_sum = !checksum::data(&{
        let mut h = no_df[14..34].to_vec();
        h[10..12].fill(0);
        h
    });
    no_df[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    // A 24-byte IPv4 header (one NOP-padded option word): the general path only.
    let with_options = {
        let segment = tcp_segment(b"opt");
        let mut ip = ipv4(PEER_IP, OUR_IP, IpProtocol::Tcp, &segment);
        ip[0] = 0x46;
        ip.splice(20..20, [1, 1, 1, 0]);
        let total = (ip.len() as u16).to_be_bytes();
        ip[2..4].copy_from_slice(&total);
        ip[10..12].fill(0);
        let sum = !checksum::data(&ip[..24]);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        eth(OUR_MAC, PEER_MAC, EtherType::Ipv4, &ip)
    };
    let udp_frame = from_peer(IpProtocol::Udp, &udp(PEER_IP, OUR_IP, 1, 7000, b"data")).to_vec();
    let arp = arp_reply_from(PEER_MAC, PEER_IP).to_vec();
    vec![plain, empty, padded, no_df, with_options, udp_frame, arp]
}

/// Two identical interfaces, the first with the fast path, the second without; both
/// know the peer, and one has its checksums verified by the device.
fn pair(offloaded: bool, dhcp: bool) -> [Interface; 2] {
    [true, false].map(|fast| {
        let mut caps = DeviceCapabilities::ETHERNET;
        if offloaded {
            caps.checksum = DeviceChecksums::ALL;
        }
        let config = if dhcp {
            InterfaceConfig::new_dhcp(OUR_MAC).with_seed(3)
        } else {
            let cidr = Ipv4Cidr::new(OUR_IP, 24).expect("valid prefix");
            InterfaceConfig::new_static(OUR_MAC, cidr, None).with_seed(0)
        };
        let mut iface = Interface::new(config, caps);
        iface.set_fast_path(fast);
        iface.poll(t(0));
        learn_peer(&mut iface, t(0));
        iface
    })
}

/// A reply TCP sends for every segment it gets, so the output side is compared too.
fn reply() -> crate::transport::TcpSegment {
    let header = crate::wire::tcp::PlainHeader {
        src_port: 80,
        dst_port: 40000,
        seq_number: crate::wire::tcp::SeqNumber(9),
        ack_number: crate::wire::tcp::SeqNumber(2),
        window_len: 1000,
        flags: 0x10,
    };
    crate::transport::TcpSegment {
        src: OUR_IP,
        dst: PEER_IP,
        header: header.to_repr(),
        payload: IOBufChain::new(),
    }
}

/// Feeds `frames` to both interfaces of every pair and compares everything observable.
fn same_behaviour(frames: &[Vec<u8>]) {
    for offloaded in [false, true] {
        for dhcp in [false, true] {
            let mut ifaces = pair(offloaded, dhcp);
            let mut tcps = [(); 2].map(|_| TcpRecorder {
                reply: Some(reply()),
                ..TcpRecorder::default()
            });
            for (i, frame) in frames.iter().enumerate() {
                let mut outputs = Vec::new();
                for (iface, tcp) in ifaces.iter_mut().zip(tcps.iter_mut()) {
                    let now = t_ms(1000 + i as u64);
                    iface.receive_frame(now, IOBuf::copy_from_slice(frame), tcp);
                    outputs.push(sent(iface));
                }
                let context = format!("frame {i} offloaded {offloaded} dhcp {dhcp}");
                assert_eq!(outputs[0], outputs[1], "sent, {context}");
                assert_eq!(ifaces[0].counters(), ifaces[1].counters(), "{context}");
                let received = |tcp: &TcpRecorder| -> Vec<(Ipv4Addr, Ipv4Addr, Vec<u8>)> {
                    let to_vec =
                        |(src, dst, seg): &(Ipv4Addr, Ipv4Addr, IOBuf)| (*src, *dst, seg.to_vec());
                    tcp.received.iter().map(to_vec).collect()
                };
                assert_eq!(received(&tcps[0]), received(&tcps[1]), "{context}");
                assert_eq!(tcps[0].reply_results, tcps[1].reply_results, "{context}");
            }
        }
    }
}

#[test]
fn fast_path_matches_general_path_on_the_seeds() {
    same_behaviour(&seeds());
}

/// The fast path really takes the plain frames (with a valid or an offloaded checksum)
/// and leaves the ones with options, other protocols or a wrong address alone.
#[test]
fn fast_path_takes_exactly_plain_tcp_to_us() {
    let seeds = seeds();
    for offloaded in [false, true] {
        let [iface, _] = pair(offloaded, false);
        let taken: Vec<bool> = seeds
            .iter()
            .map(|f| iface.plain_tcp_to_us(f).is_some())
            .collect();
        assert_eq!(taken, [true, true, true, true, false, false, false]);
        let plain = &seeds[0];
        assert_eq!(
            iface.plain_tcp_to_us(plain),
            Some(TcpInIp {
                src: PEER_IP,
                dst: OUR_IP,
                start: 34,
                end: plain.len(),
            })
        );
        let mut bad_ip_sum = plain.clone();
        bad_ip_sum[24] ^= 0x40;
        assert_eq!(iface.plain_tcp_to_us(&bad_ip_sum).is_some(), offloaded);
    }
    // No address yet (DHCP): nothing is "to us".
    let [unconfigured, _] = pair(false, true);
    assert!(unconfigured.plain_tcp_to_us(&seeds[0]).is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Seeds with up to three bytes changed (mostly in the 54 header bytes the fast path
    /// reads) and sometimes truncated behave the same with and without the fast path.
    #[test]
    fn fast_path_matches_general_path_on_mutated_frames(
        which in proptest::collection::vec(
            (0usize..7, proptest::collection::vec((0usize..64, any::<u8>()), 0..4), 0usize..8),
            1..12,
        )
    ) {
        let seeds = seeds();
        let frames: Vec<Vec<u8>> = which
            .into_iter()
            .map(|(seed, changes, cut)| {
                let mut f = seeds[seed].clone();
                for (at, value) in changes {
                    let at = at % f.len();
                    f[at] = value;
                }
                if cut >= 6 {
                    let keep = f.len() * (cut - 5) / 3;
                    f.truncate(keep.min(f.len()));
                }
                f
            })
            .collect();
        same_behaviour(&frames);
    }
}
