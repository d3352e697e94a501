//! Property tests: no frame panics the interface, and every frame received is accounted
//! for exactly once — delivered somewhere or counted under one drop reason.

use proptest::prelude::*;

use super::*;

/// Frames counted as handled (delivered, answered or noted) plus frames dropped.
fn accounted(c: &InterfaceCounters) -> u64 {
    c.rx_arp
        + c.rx_tcp
        + c.rx_udp
        + c.rx_dhcp
        + c.rx_icmp_echo_requests
        + c.rx_icmp_echo_replies
        + c.rx_icmp_unreachable
        + c.rx_icmp_other
        + c.rx_dropped.total()
}

/// Valid frames of every kind, to be mutated.
fn seeds() -> Vec<Vec<u8>> {
    let arp = arp_reply_from(PEER_MAC, PEER_IP).to_vec();
    let ping = {
        let mut m = vec![8, 0, 0, 0, 0x12, 0x34, 0, 1, b'x', b'y'];
        let c = !checksum::data(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        from_peer(IpProtocol::Icmp, &m).to_vec()
    };
    let udp_frame = from_peer(IpProtocol::Udp, &udp(PEER_IP, OUR_IP, 1, 7000, b"data")).to_vec();
    let dhcp = from_peer(IpProtocol::Udp, &udp(PEER_IP, OUR_IP, 67, 68, &[2u8; 300])).to_vec();
    let tcp = from_peer(
        IpProtocol::Tcp,
        &[
            0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
        ],
    )
    .to_vec();
    vec![arp, ping, udp_frame, dhcp, tcp]
}

fn interfaces() -> [Interface; 2] {
    let mut dhcp = Interface::new(
        InterfaceConfig::new_dhcp(OUR_MAC).with_seed(3),
        DeviceCapabilities::ETHERNET,
    );
    dhcp.poll(t(0));
    let mut static_iface = iface();
    static_iface.udp_bind(7000).unwrap();
    [static_iface, dhcp]
}

fn feed(frames: &[Vec<u8>]) {
    for mut iface in interfaces() {
        let before = iface.counters().rx_frames;
        let mut tcp = TcpRecorder::default();
        for (i, f) in frames.iter().enumerate() {
            iface.receive_frame(t_ms(i as u64), IOBuf::copy_from_slice(f), &mut tcp);
            iface.poll(t_ms(i as u64));
        }
        let c = iface.counters();
        assert_eq!(c.rx_frames - before, frames.len() as u64);
        assert_eq!(accounted(&c), c.rx_frames, "{c:?}");
        assert_eq!(c.rx_tcp as usize, tcp.received.len());
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(frames in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..120), 1..20)) {
        feed(&frames);
    }

    #[test]
    fn mutated_frames_never_panic(
        which in proptest::collection::vec((0usize..5, any::<usize>(), any::<u8>(), 0usize..4), 1..30)
    ) {
        let seeds = seeds();
        let frames: Vec<Vec<u8>> = which
            .into_iter()
            .map(|(seed, at, value, cut)| {
                let mut f = seeds[seed].clone();
                let at = at % f.len();
                f[at] = value;
                // Sometimes truncate, to reach every length check.
                let keep = f.len() - (f.len() / 4) * cut.min(3) / 3;
                f.truncate(keep);
                f
            })
            .collect();
        feed(&frames);
    }
}

#[test]
fn unmutated_seeds_are_accounted_for() {
    feed(&seeds());
}
