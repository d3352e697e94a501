//! The peer: two smoltcp interfaces joined by an in-memory pipe, driven in one thread the
//! same way as the ebb-net pair (poll one, then the other, until the workload is done).
//!
//! smoltcp is configured the way its own benchmarks and a user wanting speed would: Nagle
//! off, delayed ACK off for ping-pong, 256 KiB socket buffers (the same window ebb-net
//! advertises), MTU 1500.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};

use crate::{Clock, PatternCheck, PingPongReport, StreamReport, Workload, pattern_byte};

const MTU: usize = 1514;
const QUEUE_FRAMES: usize = 1024;
const SOCKET_BUFFER: usize = 256 * 1024;
const PORT: u16 = 5000;

type Queue = Rc<RefCell<VecDeque<Vec<u8>>>>;

/// One end of the pipe: frames sent here appear in the other end's receive queue.
struct PipeEnd {
    rx: Queue,
    tx: Queue,
    /// Report full checksum offload (a trusted wire): smoltcp computes none.
    checksum_offload: bool,
}

struct RxToken(Vec<u8>);
struct TxToken(Queue);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0; len];
        let result = f(&mut frame);
        let mut queue = self.0.borrow_mut();
        if queue.len() < QUEUE_FRAMES {
            queue.push_back(frame);
        }
        result
    }
}

impl Device for PipeEnd {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken)> {
        let frame = self.rx.borrow_mut().pop_front()?;
        Some((RxToken(frame), TxToken(self.tx.clone())))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken> {
        Some(TxToken(self.tx.clone()))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MTU;
        if self.checksum_offload {
            caps.checksum = phy::ChecksumCapabilities::ignored();
        }
        caps
    }
}

struct Node {
    device: PipeEnd,
    iface: Interface,
    sockets: SocketSet<'static>,
    socket: SocketHandle,
}

impl Node {
    fn new(device: PipeEnd, mac: u8, ip: [u8; 4], now: Instant) -> Node {
        let mut device = device;
        let mut config = Config::new(EthernetAddress([0x02, 0, 0, 0, 0, mac]).into());
        config.random_seed = u64::from(mac);
        let mut iface = Interface::new(config, &mut device, now);
        iface.update_ip_addrs(|addrs| {
            addrs
                .push(IpCidr::new(IpAddress::v4(ip[0], ip[1], ip[2], ip[3]), 24))
                .expect("one address fits");
        });
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        let mut sockets = SocketSet::new(Vec::new());
        let socket = sockets.add(socket);
        Node {
            device,
            iface,
            sockets,
            socket,
        }
    }

    fn poll(&mut self, now: Instant) {
        self.iface.poll(now, &mut self.device, &mut self.sockets);
    }

    fn tcp(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.socket)
    }
}

fn now(clock: &Clock) -> Instant {
    Instant::from_micros(clock.micros() as i64)
}

/// Client 10.0.0.1 connected to server 10.0.0.2:5000.
fn connected_pair(clock: &Clock, checksum_offload: bool) -> (Node, Node) {
    let a_to_b: Queue = Rc::default();
    let b_to_a: Queue = Rc::default();
    let t = now(clock);
    let mut client = Node::new(
        PipeEnd {
            rx: b_to_a.clone(),
            tx: a_to_b.clone(),
            checksum_offload,
        },
        1,
        [10, 0, 0, 1],
        t,
    );
    let mut server = Node::new(
        PipeEnd {
            rx: a_to_b,
            tx: b_to_a,
            checksum_offload,
        },
        2,
        [10, 0, 0, 2],
        t,
    );
    server.tcp().listen(PORT).expect("listen");
    let cx = client.iface.context();
    client
        .sockets
        .get_mut::<tcp::Socket>(client.socket)
        .connect(cx, (IpAddress::v4(10, 0, 0, 2), PORT), 49152)
        .expect("connect");
    while !(client.tcp().may_send() && server.tcp().may_recv()) {
        let t = now(clock);
        client.poll(t);
        server.poll(t);
    }
    (client, server)
}

/// Bulk: the client streams `bytes`, the server reads and checks them.
pub fn stream(bytes: usize, clock: &Clock, offload: bool) -> StreamReport {
    let (mut client, mut server) = connected_pair(clock, offload);
    // A whole number of pattern periods, so chunk[sent % len] is pattern_byte(sent).
    let chunk: Vec<u8> = (0..251 * 256).map(pattern_byte).collect();
    let mut sent = 0usize;
    let mut received = 0usize;
    let mut scratch = vec![0u8; 64 * 1024];
    let check = PatternCheck::new();
    let start = clock.micros();
    while received < bytes {
        let t = now(clock);
        while sent < bytes && client.tcp().can_send() {
            let offset = sent % chunk.len();
            let want = (bytes - sent).min(chunk.len() - offset);
            match client.tcp().send_slice(&chunk[offset..offset + want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n,
            }
        }
        client.poll(t);
        server.poll(t);
        while let Ok(n) = server.tcp().recv_slice(&mut scratch) {
            if n == 0 {
                break;
            }
            assert!(
                check.matches(received, &scratch[..n]),
                "smoltcp corrupted the stream"
            );
            received += n;
        }
    }
    StreamReport {
        bytes,
        micros: clock.micros() - start,
    }
}

/// Ping-pong: the client sends `size` bytes, the server echoes them, `rounds` times.
pub fn ping_pong(rounds: usize, size: usize, clock: &Clock, offload: bool) -> PingPongReport {
    let (mut client, mut server) = connected_pair(clock, offload);
    let message: Vec<u8> = (0..size).map(pattern_byte).collect();
    let mut scratch = vec![0u8; size];
    let mut round_trips = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let began = clock.nanos();
        let n = client.tcp().send_slice(&message).expect("window open");
        assert_eq!(n, size);
        let mut echoed = 0;
        let mut at_server = 0;
        while echoed < size {
            let t = now(clock);
            client.poll(t);
            server.poll(t);
            while at_server < size {
                match server.tcp().recv_slice(&mut scratch) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        at_server += n;
                        let sent = server.tcp().send_slice(&scratch[..n]).expect("echo");
                        assert_eq!(sent, n);
                    }
                }
            }
            server.poll(t);
            client.poll(t);
            if let Ok(n) = client.tcp().recv_slice(&mut scratch) {
                echoed += n;
            }
        }
        round_trips.push(clock.nanos() - began);
    }
    PingPongReport::new(size, round_trips)
}

/// Runs one workload on the smoltcp pair.
pub fn run(workload: &Workload, clock: &Clock, offload: bool) -> String {
    match *workload {
        Workload::Stream { bytes } => stream(bytes, clock, offload).to_string(),
        Workload::PingPong { rounds, size } => ping_pong(rounds, size, clock, offload).to_string(),
    }
}
