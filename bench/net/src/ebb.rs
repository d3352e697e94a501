//! Ebbflow's side: two ebb-net [`Stack`]s (interface + TCP) joined by the benchmark's
//! [`BenchLink`], driven in one thread exactly like the smoltcp pair.
//!
//! The device hands each frame's chain (pooled header + payload slices) to the link,
//! which gathers it into the far end's recycled receive buffer (one copy of the frame, as
//! a NIC's gather DMA); the receiving stack gets that buffer as an `IOBuf`. (ebb-net's own
//! `ebb_net_driver::Link`, used before, passed one-segment frames through without that copy; the
//! shared link treats every frame of both stacks alike.)
//!
//! Configured to match the smoltcp side: Nagle off (ebb-net's default), delayed ACK off,
//! 256 KiB receive window, MTU 1500, 1024-frame queues, software checksums both ways
//! (or, with `--checksum-offload`, none on either stack). The
//! application API is the EbbRT one: data arrives as `IOBuf`s in `receive` callbacks and
//! is sent as chains of slices of one shared pattern buffer (zero copy, which is the point
//! of the design — smoltcp copies into and out of its socket rings).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;

use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{
    ChecksumCapabilities, DeviceCapabilities, DeviceCounters, ETHERNET_HEADER_LEN, NetDevice,
    RxFrame, TxFrame,
};

use crate::link::{BenchLink, LinkEnd, MAX_FRAME};
use crate::{
    Clock, PatternCheck, PingPongReport, StreamReport, Tally, TallyStart, Workload, pattern_byte,
};

const PORT: u16 = 5000;
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// 4,096 pattern periods (~1 MiB): slices of it are the stream's data.
const PATTERN_LEN: usize = 251 * 4096;

/// One end of the link as an ebb-net device.
struct LinkDevice {
    end: LinkEnd,
    caps: DeviceCapabilities,
}

impl NetDevice for LinkDevice {
    fn capabilities(&self) -> DeviceCapabilities {
        self.caps
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let n = max.min(self.caps.max_burst);
        for taken in 0..n {
            let Some(frame) = self.end.receive() else {
                return taken;
            };
            out.push(RxFrame::new(frame));
        }
        n
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let n = frames.len().min(self.caps.max_burst);
        for _ in 0..n {
            if let Some(frame) = frames.pop_front() {
                self.end.send_gather(&frame.chain);
            }
        }
        n
    }

    /// Frames waiting are work to do now; the link has no timers.
    fn poll_at(&self) -> Option<Instant> {
        (self.end.pending() > 0).then_some(Instant::ZERO)
    }

    fn counters(&self) -> DeviceCounters {
        let (received, sent) = self.end.counts();
        DeviceCounters {
            rx_frames: received.frames,
            rx_bytes: received.bytes,
            tx_frames: sent.frames,
            tx_bytes: sent.bytes,
            ..DeviceCounters::default()
        }
    }
}

type Node = Stack<LinkDevice, TcpLayer>;

fn node(device: LinkDevice, mac: u8, ip: Ipv4Addr, tcp: TcpLayer) -> Node {
    let cidr = Ipv4Cidr::new(ip, 24).expect("a /24 is valid");
    let config = InterfaceConfig::new_static(EthernetAddress([2, 0, 0, 0, 0, mac]), cidr, None);
    Stack::new(device, config, tcp)
}

fn layer(seed: u64) -> TcpLayer {
    TcpLayer::new(TcpConfig {
        isn_seed: [seed, !seed],
        delayed_ack: None,
        // smoltcp's side has 256 KiB socket buffers (smol.rs): the same window here, not
        // ebb-net's 1 MiB default.
        receive_window: 256 * 1024,
        max_out_of_order_bytes: 256 * 1024,
        ..TcpConfig::default()
    })
}

fn now(clock: &Clock) -> Instant {
    Instant::from_nanos(clock.nanos())
}

/// Two stacks, the server listening; the caller connects. With `offload` the link
/// reports full checksum offload (a trusted wire), so neither stack computes checksums.
fn pair(offload: bool) -> (Node, Node, TcpLayer, TcpLayer, BenchLink) {
    let mut caps = DeviceCapabilities::ETHERNET;
    caps.mtu = MAX_FRAME - ETHERNET_HEADER_LEN;
    caps.checksum = if offload {
        ChecksumCapabilities::ALL
    } else {
        ChecksumCapabilities::NONE
    };
    let (link, a, b) = BenchLink::new();
    let (client_tcp, server_tcp) = (layer(1), layer(2));
    let client = node(LinkDevice { end: a, caps }, 1, CLIENT, client_tcp.clone());
    let server = node(LinkDevice { end: b, caps }, 2, SERVER, server_tcp.clone());
    (client, server, client_tcp, server_tcp, link)
}

fn poll_both(client: &mut Node, server: &mut Node, clock: &Clock) {
    let t = now(clock);
    client.poll(t);
    server.poll(t);
}

/// Receives the stream and checks every byte against the pattern.
struct StreamReceiver {
    received: Rc<Cell<usize>>,
    check: PatternCheck,
}

impl TcpHandler for StreamReceiver {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        let base = self.received.get();
        assert!(
            self.check.matches(base, data.as_slice()),
            "ebb-net corrupted the stream"
        );
        self.received.set(base + data.len());
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

/// Offers the stream as the send window opens: slices of `pattern`, never copied.
struct StreamSender {
    pattern: IOBuf,
    total: usize,
    sent: usize,
}

impl StreamSender {
    /// Offers the next slice; what the window does not take comes back and is offered
    /// again after `send_window_increased` (which a handed-back rest arms).
    fn pump(&mut self, conn: &dyn TcpConnection) {
        while self.sent < self.total {
            let offset = self.sent % PATTERN_LEN;
            let n = (self.total - self.sent).min(PATTERN_LEN - offset);
            let mut slice = self.pattern.clone();
            slice.trim_front(offset).expect("offset within pattern");
            slice.trim_back(slice.len() - n).expect("n within pattern");
            match conn.try_send(IOBufChain::from(slice)) {
                Ok(rest) => {
                    self.sent += n - rest.len();
                    if !rest.is_empty() {
                        return;
                    }
                }
                Err(e) => panic!("send failed: {e}"),
            }
        }
    }
}

impl TcpHandler for StreamSender {
    fn receive(&mut self, _conn: &dyn TcpConnection, _data: IOBuf) {}
    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.pump(conn);
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

/// Bulk: the client streams `bytes`, the server checks them.
pub fn stream(bytes: usize, clock: &Clock, offload: bool) -> StreamReport {
    let (mut client, mut server, client_tcp, server_tcp, link) = pair(offload);
    let received: Rc<Cell<usize>> = Rc::default();
    let r = received.clone();
    server_tcp
        .listen(SocketAddrV4::new(SERVER, PORT), 4, move |conn| {
            conn.set_handler(StreamReceiver {
                received: r.clone(),
                check: PatternCheck::new(),
            })
        })
        .expect("listen");
    let pattern = IOBuf::from_vec((0..PATTERN_LEN).map(pattern_byte).collect());
    let started: Rc<Cell<u64>> = Rc::default();
    let tally_start: Rc<Cell<Option<TallyStart>>> = Rc::default();
    let (s, c, t, l) = (started.clone(), *clock, tally_start.clone(), link.clone());
    client_tcp
        .connect(
            SocketAddrV4::new(CLIENT, 0),
            SocketAddrV4::new(SERVER, PORT),
            move |result| {
                let conn = result.expect("connected");
                t.set(Some(TallyStart::now(&l)));
                s.set(c.micros());
                let mut sender = StreamSender {
                    pattern,
                    total: bytes,
                    sent: 0,
                };
                sender.pump(&conn);
                conn.set_handler(sender);
            },
        )
        .expect("connect");
    while received.get() < bytes {
        poll_both(&mut client, &mut server, clock);
    }
    StreamReport {
        bytes,
        micros: clock.micros() - started.get(),
        tally: tally_since(tally_start.get(), &link),
    }
}

/// What `link` carried since `start`, taken when the connection opened.
fn tally_since(start: Option<TallyStart>, link: &BenchLink) -> Tally {
    start.expect("the workload ran").tally(link)
}

/// Echoes everything back.
struct Echo;

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        conn.send(data.into()).expect("echo");
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

/// Sends a message, waits for all of it to come back, records the round trip, repeats.
struct PingPongClient {
    clock: Clock,
    message: IOBuf,
    echoed: usize,
    began: u64,
    round_trips: Rc<RefCell<Vec<u64>>>,
    rounds: usize,
}

impl PingPongClient {
    fn ping(&mut self, conn: &dyn TcpConnection) {
        self.began = self.clock.nanos();
        self.echoed = 0;
        conn.send(self.message.clone().into()).expect("window open");
    }
}

impl TcpHandler for PingPongClient {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.echoed += data.len();
        if self.echoed < self.message.len() {
            return;
        }
        let mut trips = self.round_trips.borrow_mut();
        trips.push(self.clock.nanos() - self.began);
        let more = trips.len() < self.rounds;
        drop(trips);
        if more {
            self.ping(conn);
        }
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

/// Ping-pong: `rounds` round trips of `size` bytes.
pub fn ping_pong(rounds: usize, size: usize, clock: &Clock, offload: bool) -> PingPongReport {
    let (mut client, mut server, client_tcp, server_tcp, link) = pair(offload);
    server_tcp
        .listen(SocketAddrV4::new(SERVER, PORT), 4, |conn| {
            conn.set_handler(Echo)
        })
        .expect("listen");
    let round_trips: Rc<RefCell<Vec<u64>>> = Rc::new(RefCell::new(Vec::with_capacity(rounds)));
    let tally_start: Rc<Cell<Option<TallyStart>>> = Rc::default();
    let (trips, c, t, l) = (
        round_trips.clone(),
        *clock,
        tally_start.clone(),
        link.clone(),
    );
    let message = IOBuf::from_vec((0..size).map(pattern_byte).collect());
    client_tcp
        .connect(
            SocketAddrV4::new(CLIENT, 0),
            SocketAddrV4::new(SERVER, PORT),
            move |result| {
                let conn = result.expect("connected");
                t.set(Some(TallyStart::now(&l)));
                let mut client = PingPongClient {
                    clock: c,
                    message,
                    echoed: 0,
                    began: 0,
                    round_trips: trips,
                    rounds,
                };
                client.ping(&conn);
                conn.set_handler(client);
            },
        )
        .expect("connect");
    while round_trips.borrow().len() < rounds {
        poll_both(&mut client, &mut server, clock);
    }
    let tally = tally_since(tally_start.get(), &link);
    let trips = round_trips.take();
    PingPongReport::new(size, trips, tally)
}

/// Runs one workload on the ebb-net pair.
pub fn run(workload: &Workload, clock: &Clock, offload: bool) -> String {
    match *workload {
        Workload::Stream { bytes } => stream(bytes, clock, offload).to_string(),
        Workload::PingPong { rounds, size } => ping_pong(rounds, size, clock, offload).to_string(),
    }
}
