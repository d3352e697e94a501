//! TCP segmentation offload end to end: stack A's device takes TCP frames longer than the
//! MTU and cuts them into segments in software (`ebb_net_driver::segment_tcp_frame`, as Linux's tun
//! does with a virtio-net `GSO_TCPV4` frame); stack B, on a plain device that verifies
//! every checksum, must receive every byte intact. Both directions run at once, so A's
//! large frames share the link with B's MSS-sized ones and with A's ACKs; a second case
//! drops and reorders frames on the way to B, so lost pieces of large frames must be
//! repaired segment by segment. A third hands A's large frames to B whole, as Linux's
//! TAP does toward a reader that takes them (`TUN_F_TSO4`): B must take TCP segments far
//! longer than its MSS.

use std::cell::Cell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{
    ChecksumOffload, DeviceCapabilities, DeviceCounters, FaultConfig, FaultInjector, FrameChecksum,
    Link, LinkEnd, NetDevice, Probability, RxFrame, Segmentation, TxFrame, completed,
    segment_tcp_frame,
};

const A: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 2);
const PORT: u16 = 9100;
const LEN: usize = 4 << 20;

/// A link end that offers TCP segmentation offload and does it in software — or, with
/// `cut` false, passes large frames on whole (the link's own MTU must allow them).
struct SegmentingEnd {
    inner: LinkEnd,
    /// The MTU it reports (the link's may be larger).
    mtu: usize,
    cut: bool,
    /// Large frames it was handed (`Segmentation::of` matched).
    frames_cut: Rc<Cell<u64>>,
    /// The segments they became.
    segments_made: Rc<Cell<u64>>,
}

impl NetDevice for SegmentingEnd {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = self.inner.capabilities();
        caps.mtu = self.mtu;
        caps.checksum.tcp = ChecksumOffload::PARTIAL;
        caps.tso_max_len = 65535;
        caps
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.inner.receive(now, out, max)
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mtu = self.mtu;
        let mut wire = VecDeque::new();
        let taken = frames.len();
        for TxFrame {
            chain: frame,
            checksum,
        } in frames.drain(..)
        {
            let head = frame
                .segments()
                .next()
                .map(|s| s.to_vec())
                .unwrap_or_default();
            match Segmentation::of(&head, mtu) {
                Some(_) if !self.cut => {
                    self.frames_cut.set(self.frames_cut.get() + 1);
                    wire.push_back(TxFrame::from(completed_whole(frame)));
                }
                Some(cut) => {
                    assert!(
                        matches!(checksum, FrameChecksum::Partial { .. }),
                        "a frame to segment must leave its checksum to the device"
                    );
                    let segments = segment_tcp_frame(&frame, cut).expect("a well-formed frame");
                    self.frames_cut.set(self.frames_cut.get() + 1);
                    self.segments_made
                        .set(self.segments_made.get() + segments.len() as u64);
                    wire.extend(segments.into_iter().map(TxFrame::from));
                }
                None => wire.push_back(TxFrame::from(completed(frame, checksum))),
            }
        }
        while !wire.is_empty() {
            self.inner.transmit(now, &mut wire);
        }
        taken
    }
    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        self.inner.counters()
    }
}

/// A large frame with its TCP checksum completed over the whole of it (what a receiver
/// that verifies checksums needs; Linux would mark it partial, trusted).
fn completed_whole(frame: IOBufChain) -> IOBufChain {
    let head = frame
        .segments()
        .next()
        .map(|s| s.to_vec())
        .unwrap_or_default();
    let checksum = FrameChecksum::partial_of(&head).expect("a TCP frame");
    completed(frame, checksum)
}

/// Checks the bytes it receives against the stream it expects.
struct Receiver {
    expected: Rc<Vec<u8>>,
    received: Rc<Cell<usize>>,
    intact: Rc<Cell<bool>>,
    closed: Rc<Cell<Option<CloseReason>>>,
}

impl TcpHandler for Receiver {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        let at = self.received.get();
        let end = at + data.len();
        if end > self.expected.len() || self.expected[at..end] != *data.as_slice() {
            self.intact.set(false);
        }
        self.received.set(end);
    }
    fn closed(&mut self, reason: CloseReason) {
        self.closed.set(Some(reason));
    }
}

#[derive(Clone, Default)]
struct Seen {
    received: Rc<Cell<usize>>,
    intact: Rc<Cell<bool>>,
    closed: Rc<Cell<Option<CloseReason>>>,
}

impl Seen {
    fn receiver(&self, expected: Rc<Vec<u8>>) -> Receiver {
        self.intact.set(true);
        Receiver {
            expected,
            received: self.received.clone(),
            intact: self.intact.clone(),
            closed: self.closed.clone(),
        }
    }
}

fn stream(seed: u64) -> Rc<Vec<u8>> {
    let mut x = seed | 1;
    Rc::new(
        (0..LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect(),
    )
}

fn send_all(conn: &dyn TcpConnection, bytes: &[u8]) {
    for chunk in bytes.chunks(48 << 10) {
        conn.send(IOBufChain::from(IOBuf::copy_from_slice(chunk)))
            .expect("send on an open connection");
    }
    conn.close();
}

fn config(mac: u8, ip: Ipv4Addr) -> InterfaceConfig {
    let cidr = Ipv4Cidr::new(ip, 24).expect("valid /24");
    InterfaceConfig::new_static(EthernetAddress([2, 0, 0, 8, 0, mac]), cidr, None)
}

fn tcp(seed: u64) -> TcpLayer {
    TcpLayer::new(TcpConfig {
        isn_seed: [seed, seed ^ 0x55],
        ..TcpConfig::default()
    })
}

struct Outcome {
    a_segments_out: u64,
    frames_cut: u64,
    segments_made: u64,
    a_tcp_segmentation: u64,
    b_retransmissions: u64,
    a_retransmissions: u64,
}

/// A sends to B with segmentation offload while B sends to A without; `faults` on B's
/// receive side.
fn transfer(faults: FaultConfig, cut: bool) -> Outcome {
    // Whole large frames need a wire that carries them; B then learns its MSS from A.
    let wire_mtu = if cut { 1500 } else { 65535 };
    let (end_a, end_b) = Link::new()
        .with_capacity(8192)
        .with_max_burst(64)
        .with_mtu(wire_mtu)
        .connect();
    let (frames_cut, segments_made) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let device_a = SegmentingEnd {
        inner: end_a,
        mtu: 1500,
        cut,
        frames_cut: frames_cut.clone(),
        segments_made: segments_made.clone(),
    };
    // B reports the same 1500-byte MTU (so its MSS is 1460 and it ACKs every second
    // segment's worth) whatever the wire carries; the injector withdraws the offload, so
    // B sends plain segments.
    let end_b = SegmentingEnd {
        inner: end_b,
        mtu: 1500,
        cut: true,
        frames_cut: Rc::default(),
        segments_made: Rc::default(),
    };
    let device_b = FaultInjector::new(end_b, 7).with_rx_faults(faults);
    let (tcp_a, tcp_b) = (tcp(1), tcp(2));
    let mut a = Stack::new(device_a, config(1, A), tcp_a.clone());
    let mut b = Stack::new(device_b, config(2, B), tcp_b.clone());
    let (a_sends, b_sends) = (stream(0xa), stream(0xb));
    let (seen_by_a, seen_by_b) = (Seen::default(), Seen::default());
    {
        let (seen, expected, mine) = (seen_by_b.clone(), a_sends.clone(), b_sends.clone());
        tcp_b
            .listen(SocketAddrV4::new(B, PORT), 4, move |conn| {
                conn.set_handler(seen.receiver(expected.clone()));
                send_all(&conn, &mine);
            })
            .expect("listen");
    }
    {
        let (seen, expected, mine) = (seen_by_a.clone(), b_sends.clone(), a_sends.clone());
        tcp_a
            .connect(
                SocketAddrV4::new(A, 0),
                SocketAddrV4::new(B, PORT),
                move |r| {
                    let conn = r.expect("connect");
                    conn.set_handler(seen.receiver(expected.clone()));
                    send_all(&conn, &mine);
                },
            )
            .expect("connect");
    }
    let mut now = Instant::ZERO;
    let mut spins = 0;
    while seen_by_a.closed.get().is_none() || seen_by_b.closed.get().is_none() {
        assert!(
            now - Instant::ZERO < Duration::from_secs(600),
            "stuck: A got {} bytes, B got {} ({:?} / {:?})",
            seen_by_a.received.get(),
            seen_by_b.received.get(),
            tcp_a.counters(),
            tcp_b.counters()
        );
        let next = [a.poll(now), b.poll(now)].into_iter().flatten().min();
        let waiting = a.device().inner.pending() + b.device().inner().inner.pending() > 0;
        match next {
            _ if waiting && spins < 1000 => spins += 1,
            Some(t) if t <= now && spins < 1000 => spins += 1,
            Some(t) => {
                now = t.max(now + Duration::from_micros(1));
                spins = 0;
            }
            None => {
                now = now + Duration::from_millis(1);
                spins = 0;
            }
        }
    }
    for (who, seen) in [("A", &seen_by_a), ("B", &seen_by_b)] {
        assert!(seen.intact.get(), "{who} received wrong bytes");
        assert_eq!(seen.received.get(), LEN, "{who}'s byte count");
        assert_eq!(seen.closed.get(), Some(CloseReason::Normal), "{who} closed");
    }
    assert_eq!(
        b.device().inner().counters().tx_dropped.oversized,
        0,
        "B sent nothing longer than the MTU"
    );
    Outcome {
        a_segments_out: tcp_a.counters().segments_out,
        frames_cut: frames_cut.get(),
        segments_made: segments_made.get(),
        a_tcp_segmentation: a.iface().counters().tx_tcp_segmentation,
        b_retransmissions: tcp_b.counters().retransmissions,
        a_retransmissions: tcp_a.counters().retransmissions,
    }
}

#[test]
fn large_frames_cut_by_the_device_arrive_intact() {
    let out = transfer(FaultConfig::NONE, true);
    // Without offload A's 4 MiB would take about 2,900 segments.
    assert!(out.frames_cut > 0, "no frame was longer than the MTU");
    assert_eq!(out.frames_cut, out.a_tcp_segmentation);
    assert!(
        out.segments_made >= 8 * out.frames_cut,
        "large frames averaged fewer than 8 segments: {} in {}",
        out.segments_made,
        out.frames_cut
    );
    // Most of A's stream went in large frames (the MSS is 1460 here).
    assert!(
        out.segments_made * 1460 >= (LEN as u64) * 9 / 10,
        "only {} segments' worth of 4 MiB went in large frames",
        out.segments_made
    );
    eprintln!(
        "A: {} frames out, {} large ones cut into {} segments",
        out.a_segments_out, out.frames_cut, out.segments_made
    );
    assert_eq!(out.a_retransmissions + out.b_retransmissions, 0);
}

#[test]
fn lost_pieces_of_large_frames_are_resent_segment_by_segment() {
    let faults = FaultConfig::NONE
        .with_drop(Probability::from_percent(2))
        .with_reorder(Probability::from_percent(2), Duration::from_millis(1));
    let out = transfer(faults, true);
    assert!(out.frames_cut > 0);
    assert!(out.a_retransmissions > 0, "the faults cost A nothing?");
}

#[test]
fn segments_longer_than_the_mss_are_received_whole() {
    let out = transfer(FaultConfig::NONE, false);
    assert!(out.frames_cut > 0, "no large frame reached B");
    assert_eq!(out.segments_made, 0);
    assert_eq!(
        (out.a_retransmissions, out.b_retransmissions),
        (0, 0),
        "retransmissions (A, B)"
    );
}
