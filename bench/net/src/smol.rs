//! The peer: two smoltcp interfaces joined by the benchmark's [`BenchLink`], driven in one
//! thread the same way as the ebb-net pair (poll one, then the other, until the workload
//! is done).
//!
//! smoltcp is configured the way its own benchmarks and a user wanting speed would: Nagle
//! off, 256 KiB socket buffers (the same window ebb-net advertises), MTU 1500, and the
//! delayed ACK `--smoltcp-ack-delay` chooses (its default, or off).
//!
//! The device writes each frame straight into the link's receive buffer (`TxToken`) and
//! lends the received buffer to smoltcp for the duration of `RxToken::consume`: no copy
//! and, in the steady state, no allocation by the link.

use ebb_core::iobuf::IOBuf;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr};

use crate::link::{BenchLink, LinkEnd, MAX_FRAME};
use crate::{
    AckDelay, Clock, PatternCheck, PingPongReport, StreamReport, TallyStart, Workload, pattern_byte,
};

const SOCKET_BUFFER: usize = 256 * 1024;
const PORT: u16 = 5000;

/// One end of the link as a smoltcp device.
struct PipeEnd {
    end: LinkEnd,
    /// Report full checksum offload (a trusted wire): smoltcp computes none.
    checksum_offload: bool,
}

struct RxToken(IOBuf);
struct TxToken<'a>(&'a mut LinkEnd);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0.as_slice())
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.0.send_in_place(len, f)
    }
}

impl Device for PipeEnd {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.end.receive()?;
        Some((RxToken(frame), TxToken(&mut self.end)))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.end))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MAX_FRAME;
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
    fn new(device: PipeEnd, mac: u8, ip: [u8; 4], now: Instant, ack: AckDelay) -> Node {
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
        if ack == AckDelay::None {
            socket.set_ack_delay(None);
        }
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

/// Client 10.0.0.1 connected to server 10.0.0.2:5000, and their link.
fn connected_pair(clock: &Clock, checksum_offload: bool, ack: AckDelay) -> (Node, Node, BenchLink) {
    let (link, a, b) = BenchLink::new();
    let t = now(clock);
    let mut client = Node::new(
        PipeEnd {
            end: a,
            checksum_offload,
        },
        1,
        [10, 0, 0, 1],
        t,
        ack,
    );
    let mut server = Node::new(
        PipeEnd {
            end: b,
            checksum_offload,
        },
        2,
        [10, 0, 0, 2],
        t,
        ack,
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
    (client, server, link)
}

/// Bulk: the client streams `bytes`, the server reads and checks them.
pub fn stream(bytes: usize, clock: &Clock, offload: bool, ack: AckDelay) -> StreamReport {
    let (mut client, mut server, link) = connected_pair(clock, offload, ack);
    // A whole number of pattern periods, so chunk[sent % len] is pattern_byte(sent).
    let chunk: Vec<u8> = (0..251 * 256).map(pattern_byte).collect();
    let mut sent = 0usize;
    let mut received = 0usize;
    let mut scratch = vec![0u8; 64 * 1024];
    let check = PatternCheck::new();
    let tally = TallyStart::now(&link);
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
        tally: tally.tally(&link),
    }
}

/// Ping-pong: the client sends `size` bytes, the server echoes them, `rounds` times.
pub fn ping_pong(
    rounds: usize,
    size: usize,
    clock: &Clock,
    offload: bool,
    ack: AckDelay,
) -> PingPongReport {
    let (mut client, mut server, link) = connected_pair(clock, offload, ack);
    let message: Vec<u8> = (0..size).map(pattern_byte).collect();
    let mut scratch = vec![0u8; size];
    let mut round_trips = Vec::with_capacity(rounds);
    let tally = TallyStart::now(&link);
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
    PingPongReport::new(size, round_trips, tally.tally(&link))
}

/// Runs one workload on the smoltcp pair.
pub fn run(workload: &Workload, clock: &Clock, offload: bool, ack: AckDelay) -> String {
    match *workload {
        Workload::Stream { bytes } => stream(bytes, clock, offload, ack).to_string(),
        Workload::PingPong { rounds, size } => {
            ping_pong(rounds, size, clock, offload, ack).to_string()
        }
    }
}
