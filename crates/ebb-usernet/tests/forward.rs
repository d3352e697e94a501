//! The forwarder end to end in one process: host TCP clients (real sockets, in threads)
//! through a forward to a guest-side ebb-net stack (an echo server) joined to the
//! forwarder by an in-memory link, driven as the monitor's I/O thread drives a backend —
//! frames from the guest into `transmit`, frames for the guest out of `receive`, and
//! sleeping on the forwarder's descriptor until its `poll_at`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::thread;
use std::time::Duration;

use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{
    FaultConfig, FaultInjector, Link, LinkEnd, NetDevice, Probability, RxFrame, TxFrame,
};
use ebb_usernet::{GUEST_ADDR, UserNet, UserNetConfig};
use ebb_vmm::virtio::{HostLink, PortForward};
use rustix::event::epoll;

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const ECHO_PORT: u16 = 7;
const CLOSED_PORT: u16 = 9;
/// A guest server that takes 64 KiB and then never reads again.
const STALL_PORT: u16 = 11;
/// A guest server with the same handler and a budget no test reaches: its receive window
/// stays open, so whatever stops the data is the guest taking no frames.
const OPEN_STALL_PORT: u16 = 13;

/// Reads `budget` bytes, then closes its receive window for good; counts what it read in
/// `received`.
struct Stall {
    budget: usize,
    received: Rc<std::cell::Cell<usize>>,
}

impl TcpHandler for Stall {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.received.set(self.received.get() + data.len());
        self.budget = self.budget.saturating_sub(data.len());
        if self.budget == 0 {
            conn.set_receive_window_open(false);
        }
    }
    fn closed(&mut self, _reason: CloseReason) {}
}
const TIMEOUT: Duration = Duration::from_secs(20);

/// Echo with bounded memory: what the send window refuses is kept (one receive's worth)
/// and the receive window is closed until it went out. Data starting with `RESET`
/// aborts the connection instead.
struct Echo {
    pending: IOBufChain,
    close_after: bool,
    closes: Rc<RefCell<Vec<CloseReason>>>,
}

impl Echo {
    fn flush(&mut self, conn: &dyn TcpConnection) {
        if !self.pending.is_empty() {
            match conn.try_send(std::mem::take(&mut self.pending)) {
                Ok(rest) => self.pending = rest,
                Err(_) => return,
            }
        }
        if self.pending.is_empty() {
            conn.set_receive_window_open(true);
            if self.close_after {
                conn.close();
            }
        } else {
            conn.set_receive_window_open(false);
        }
    }
}

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if data.as_slice().starts_with(b"RESET") {
            conn.abort();
            return;
        }
        self.pending.push_back(data);
        self.flush(conn);
    }
    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.flush(conn);
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        self.close_after = true;
        self.flush(conn);
    }
    fn closed(&mut self, reason: CloseReason) {
        self.closes.borrow_mut().push(reason);
    }
}

/// The forwarder, the guest's stack and the wire between them.
struct Rig {
    usernet: UserNet,
    guest: Stack<FaultInjector<LinkEnd>, TcpLayer>,
    wire: LinkEnd,
    started: std::time::Instant,
    closes: Rc<RefCell<Vec<CloseReason>>>,
    /// Largest `buffered_bytes` seen.
    max_buffered: usize,
    /// Connections the guest accepted on [`OPEN_STALL_PORT`], and the bytes they read.
    stall_accepted: Rc<std::cell::Cell<usize>>,
    open_stall_received: Rc<std::cell::Cell<usize>>,
    /// The forwarder reads its epoll descriptor only when told (as on a device thread
    /// that sleeps between rounds): `run_until` tells it after each wake that found it
    /// readable, and counts how often in `reported`.
    on_readiness: bool,
    reported: u64,
    /// A hostile guest: each IPv4 frame it sends is padded to 60 KiB past its IP length
    /// (the endpoint must read the packet by its IP length and ignore the rest).
    pad_guest_frames: bool,
}

impl Rig {
    fn new() -> Rig {
        Rig::with_faults(FaultConfig::NONE)
    }

    /// A rig whose guest stack sees `faults` on both directions of its link (seeded).
    fn with_faults(faults: FaultConfig) -> Rig {
        Rig::build(faults, TcpConfig::default())
    }

    /// A rig whose guest stack runs TCP with `tcp`.
    fn with_guest_tcp(tcp: TcpConfig) -> Rig {
        Rig::build(FaultConfig::NONE, tcp)
    }

    fn build(faults: FaultConfig, guest_tcp: TcpConfig) -> Rig {
        let forwards = vec![
            PortForward {
                host_addr: Ipv4Addr::LOCALHOST,
                host_port: 0,
                guest_port: ECHO_PORT,
            },
            PortForward {
                host_addr: Ipv4Addr::LOCALHOST,
                host_port: 0,
                guest_port: CLOSED_PORT,
            },
            PortForward {
                host_addr: Ipv4Addr::LOCALHOST,
                host_port: 0,
                guest_port: STALL_PORT,
            },
            PortForward {
                host_addr: Ipv4Addr::LOCALHOST,
                host_port: 0,
                guest_port: OPEN_STALL_PORT,
            },
        ];
        let usernet = UserNet::new(&UserNetConfig::new(forwards), None).expect("usernet");
        let (guest_end, wire) = Link::new().with_capacity(4096).connect();
        let iface = InterfaceConfig::new_static(
            EthernetAddress(GUEST_MAC),
            Ipv4Cidr::new(GUEST_ADDR, 24).unwrap(),
            None,
        );
        let guest_end = FaultInjector::new(guest_end, 7)
            .with_rx_faults(faults)
            .with_tx_faults(faults);
        let guest = Stack::new(guest_end, iface, TcpLayer::new(guest_tcp));
        let closes = Rc::new(RefCell::new(Vec::new()));
        let on_accept = closes.clone();
        let stall_accepted = Rc::new(std::cell::Cell::new(0));
        let on_stall = stall_accepted.clone();
        let open_stall_received = Rc::new(std::cell::Cell::new(0));
        let open_received = open_stall_received.clone();
        guest
            .tcp()
            .listen(SocketAddrV4::new(GUEST_ADDR, ECHO_PORT), 256, move |conn| {
                conn.set_handler(Echo {
                    pending: IOBufChain::new(),
                    close_after: false,
                    closes: on_accept.clone(),
                })
            })
            .unwrap();
        guest
            .tcp()
            // A backlog for every client of the tests at once: a SYN the guest drops
            // waits a whole RTO for its retransmission.
            .listen(SocketAddrV4::new(GUEST_ADDR, STALL_PORT), 256, |conn| {
                conn.set_handler(Stall {
                    budget: 64 * 1024,
                    received: Rc::default(),
                })
            })
            .unwrap();
        guest
            .tcp()
            .listen(
                SocketAddrV4::new(GUEST_ADDR, OPEN_STALL_PORT),
                256,
                move |conn| {
                    on_stall.set(on_stall.get() + 1);
                    conn.set_handler(Stall {
                        budget: 1 << 30,
                        received: open_received.clone(),
                    })
                },
            )
            .unwrap();
        Rig {
            usernet,
            guest,
            wire,
            started: std::time::Instant::now(),
            closes,
            max_buffered: 0,
            stall_accepted,
            open_stall_received,
            on_readiness: false,
            reported: 0,
            pad_guest_frames: false,
        }
    }

    /// A rig whose guest advertises a 64 MiB window and acknowledges at once (until
    /// the test stops it with [`Rig::step_without_the_guest`]).
    fn with_huge_window_guest() -> Rig {
        Rig::with_guest_tcp(TcpConfig {
            receive_window: 64 << 20,
            max_receive_window: 64 << 20,
            max_out_of_order_bytes: 64 << 20,
            max_held_bytes: 1 << 30,
            delayed_ack: None,
            ..TcpConfig::default()
        })
    }

    /// One round of the forwarder with a guest that takes no frame and sends none.
    fn step_without_the_guest(&mut self) {
        let now = self.now();
        let mut rx = Vec::new();
        self.usernet.transmit(now, &mut VecDeque::new());
        self.usernet.drain();
        self.usernet.receive(now, &mut rx, 0);
    }

    /// [`Rig::new`] with the forwarder reading its epoll on readiness only.
    fn on_readiness() -> Rig {
        let mut rig = Rig::new();
        assert!(
            rig.usernet.read_on_readiness(),
            "the forwarder can read on readiness"
        );
        rig.on_readiness = true;
        rig
    }

    fn addr(&self, forward: usize) -> SocketAddrV4 {
        self.usernet.listening()[forward]
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// One round as the I/O thread does it; whether any frame moved.
    fn step(&mut self) -> bool {
        let now = self.now();
        self.guest.poll(now);
        let mut rx: Vec<RxFrame> = Vec::new();
        self.wire.receive(now, &mut rx, 256);
        let pad = self.pad_guest_frames;
        let mut from_guest: VecDeque<TxFrame> = rx
            .drain(..)
            .map(|f| {
                let frame = f.buf.as_slice();
                if pad && frame.len() > 54 && frame[12..14] == [8, 0] {
                    let mut padded = frame.to_vec();
                    padded.resize(60 * 1024, 0);
                    return TxFrame::new(IOBufChain::from(IOBuf::from_vec(padded)));
                }
                TxFrame::new(IOBufChain::from(f.buf))
            })
            .collect();
        let moved_out = !from_guest.is_empty();
        self.usernet.transmit(now, &mut from_guest);
        assert!(from_guest.is_empty(), "no rest: every frame is taken");
        self.usernet.drain();
        self.usernet.receive(now, &mut rx, 128);
        let moved_in = !rx.is_empty();
        // A guest without GUEST_CSUM: the device completes partial checksums first.
        let mut to_guest: VecDeque<TxFrame> = rx
            .drain(..)
            .map(|mut f| {
                f.complete();
                TxFrame::new(IOBufChain::from(f.buf))
            })
            .collect();
        // The link moves a burst per call; its ring (4096) holds all of them.
        while !to_guest.is_empty() {
            self.wire.transmit(now, &mut to_guest);
        }
        self.guest.poll(now);
        self.max_buffered = self.max_buffered.max(self.usernet.buffered_bytes());
        moved_out || moved_in
    }

    /// Runs rounds until `done` (panics after [`TIMEOUT`]); sleeps on the forwarder's
    /// descriptor when a round moved nothing, as the I/O thread does.
    fn run_until(&mut self, mut done: impl FnMut(&mut Rig) -> bool) {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
        epoll::add(
            &ep,
            self.usernet.fd().as_fd(),
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + TIMEOUT;
        let mut events = Vec::with_capacity(4);
        loop {
            let moved = self.step();
            if done(self) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out: {:?}, {} active, {} buffered, endpoint {} connections {:?} {:?}, guest {:?} {:?}",
                self.usernet.forwarder_counters(),
                self.usernet.active_connections(),
                self.usernet.buffered_bytes(),
                self.usernet.endpoint_connections(),
                self.usernet.endpoint_counters(),
                self.usernet.endpoint_tcp_counters(),
                self.guest.iface().counters(),
                self.guest.tcp().counters(),
            );
            if moved {
                continue;
            }
            let now = self.now();
            let mut sleep = Duration::from_millis(5);
            for at in [self.usernet.poll_at(), self.guest.device().poll_at()]
                .into_iter()
                .flatten()
            {
                sleep = sleep.min(at.saturating_duration_since(now));
            }
            let timeout = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: sleep.as_nanos() as i64,
            };
            events.clear();
            let _ = epoll::wait(
                &ep,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            );
            if self.on_readiness && !events.is_empty() {
                self.usernet.readable();
                self.reported += 1;
            }
        }
    }

    /// Runs until every thread in `clients` finished, then joins them.
    fn serve<T>(&mut self, clients: Vec<thread::JoinHandle<T>>) -> Vec<T> {
        self.run_until(|_| clients.iter().all(|c| c.is_finished()));
        clients
            .into_iter()
            .map(|c| c.join().expect("client"))
            .collect()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends `data` and reads the echo in another thread (so neither side's buffers
/// deadlock), then closes; returns what came back.
fn echo_client(addr: SocketAddrV4, data: Vec<u8>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || {
            w.write_all(&data).expect("write");
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        s.read_to_end(&mut back).expect("read the echo");
        writer.join().unwrap();
        back
    })
}

#[test]
fn one_megabyte_each_way() {
    let mut rig = Rig::new();
    let data = pattern(1 << 20, 1);
    let back = rig.serve(vec![echo_client(rig.addr(0), data.clone())]);
    assert_eq!(back[0].len(), data.len());
    assert!(back[0] == data, "the echo is the data");
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(
        (c.accepted, c.connect_failed, c.host_resets),
        (1, 0, 0),
        "{c:?}"
    );
    assert_eq!(rig.closes.borrow().as_slice(), &[CloseReason::Normal]);
}

#[test]
fn many_concurrent_connections() {
    let mut rig = Rig::new();
    let n = 64;
    let clients = (0..n)
        .map(|i| echo_client(rig.addr(0), pattern(32 * 1024 + i * 100, i as u8)))
        .collect();
    let backs = rig.serve(clients);
    for (i, back) in backs.iter().enumerate() {
        assert!(
            *back == pattern(32 * 1024 + i * 100, i as u8),
            "connection {i}"
        );
    }
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(c.accepted, n as u64);
    assert_eq!(c.host_resets, 0, "{c:?}");
    let e = rig.usernet.endpoint_counters();
    assert_eq!(
        e.tx_dropped.total(),
        0,
        "no SYN lost waiting for ARP: {e:?}"
    );
}

#[test]
fn on_readiness_the_forwarder_reads_its_epoll_only_when_told() {
    // As the device thread drives it when it sleeps between rounds (a CPU shared with the
    // vCPU): the forwarder reads its epoll descriptor once at start and then only after a
    // wake that found it readable — not once a round, a system call that nearly always
    // found nothing — and every connection still completes.
    let mut rig = Rig::on_readiness();
    let n = 16;
    let clients: Vec<_> = (0..n)
        .map(|i| echo_client(rig.addr(0), pattern(64 * 1024 + i * 100, i as u8)))
        .collect();
    let mut rounds = 0u64;
    rig.run_until(|_| {
        rounds += 1;
        clients.iter().all(|c| c.is_finished())
    });
    let backs: Vec<Vec<u8>> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    for (i, back) in backs.iter().enumerate() {
        assert!(
            *back == pattern(64 * 1024 + i * 100, i as u8),
            "connection {i}"
        );
    }
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(c.accepted, n as u64, "{c:?}");
    assert_eq!(c.host_resets, 0, "{c:?}");
    // A read that finds nothing is one the forwarder was told to make (or its first):
    // after a read that found events it reads again, unasked, as a busy host side needs.
    assert!(
        c.event_reads_empty <= rig.reported + 1,
        "{} of {} epoll reads found nothing, for {} reports (and the first): read \
         without being told",
        c.event_reads_empty,
        c.event_reads,
        rig.reported
    );
    assert!(
        rounds > 2 * c.event_reads,
        "{rounds} rounds, {} epoll reads: the reads did not drop below one a round",
        c.event_reads
    );
}

#[test]
fn half_close_keeps_the_other_direction() {
    // The host shuts its write side first and still reads everything the guest sends
    // after (the echo of what it sent before its FIN).
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(b"before the FIN").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).unwrap();
        back
    });
    let back = rig.serve(vec![client]);
    assert_eq!(back[0], b"before the FIN");
}

#[test]
fn stopping_the_forwarder_resets_its_open_connections() {
    // The VM stops with a client connected: the client sees its connection broken, not
    // a clean end of stream it could take for a complete reply.
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    let mut got = 0;
    let deadline = std::time::Instant::now() + TIMEOUT;
    while got < 4 {
        assert!(std::time::Instant::now() < deadline, "no echo");
        rig.step();
        s.set_nonblocking(true).unwrap();
        if let Ok(n) = s.read(&mut echo[got..]) {
            got += n;
        }
        s.set_nonblocking(false).unwrap();
    }
    assert_eq!(&echo, b"ping");
    drop(rig);
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    assert_eq!(
        end.map_err(|e| e.kind()),
        Err(ErrorKind::ConnectionReset),
        "the client saw {} more bytes and a clean end",
        rest.len()
    );
}

#[test]
fn a_guest_reset_resets_the_host_socket() {
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(b"RESET please").unwrap();
        let mut buf = [0u8; 16];
        s.read(&mut buf).map_err(|e| e.kind())
    });
    let got = rig.serve(vec![client]);
    assert_eq!(
        got[0],
        Err(ErrorKind::ConnectionReset),
        "the guest's RST carried over"
    );
    assert_eq!(rig.usernet.forwarder_counters().host_resets, 1);
}

#[test]
fn a_host_reset_resets_the_guest_connection() {
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        // Close with unread data in flight... and SO_LINGER 0: an RST.
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
        drop(s);
    });
    rig.serve(vec![client]);
    rig.run_until(|r| !r.closes.borrow().is_empty());
    assert_eq!(rig.closes.borrow().as_slice(), &[CloseReason::Reset]);
    rig.run_until(|r| r.usernet.active_connections() == 0);
}

#[test]
fn a_refused_guest_connect_closes_the_host_socket() {
    // Nobody listens on the guest's port 9: its stack answers the SYN with RST.
    let mut rig = Rig::new();
    let addr = rig.addr(1);
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut buf = [0u8; 16];
        s.read(&mut buf).map_err(|e| e.kind())
    });
    let got = rig.serve(vec![client]);
    assert!(
        matches!(got[0], Err(ErrorKind::ConnectionReset) | Ok(0)),
        "{:?}",
        got[0]
    );
    let c = rig.usernet.forwarder_counters();
    assert_eq!((c.connect_failed, c.host_resets), (1, 1), "{c:?}");
    assert_eq!(rig.usernet.active_connections(), 0);
}

#[test]
fn a_slow_host_reader_is_flow_controlled_with_bounded_memory() {
    // The host sends 8 MB and reads the echo slowly: the forwarder must stop reading
    // from the host instead of buffering the difference.
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let total = 8 << 20;
    let client = thread::spawn(move || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = thread::spawn(move || {
            let data = pattern(total, 7);
            w.write_all(&data).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut r = s;
        let mut back = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
            if back.len() < 2 << 20 {
                thread::sleep(Duration::from_millis(2));
            }
        }
        writer.join().unwrap();
        back
    });
    let back = rig.serve(vec![client]);
    assert!(back[0] == pattern(total, 7));
    // One read chunk toward the guest plus the window-closing threshold toward the
    // host, with one receive's slack.
    assert!(
        rig.max_buffered <= 64 * 1024 + 256 * 1024 + 64 * 1024,
        "buffered at most {} bytes",
        rig.max_buffered
    );
}

#[test]
fn malformed_frames_from_the_guest_are_dropped_and_counted() {
    let mut rig = Rig::new();
    let now = rig.now();
    let ep = ebb_usernet::ENDPOINT_ADDR.octets();
    let mut frames: VecDeque<TxFrame> = VecDeque::new();
    let mut push =
        |bytes: Vec<u8>| frames.push_back(TxFrame::new(IOBufChain::from(IOBuf::from_vec(bytes))));
    // Runts.
    for len in [0usize, 1, 13, 14, 20, 33] {
        let mut f = vec![0u8; len];
        if len >= 14 {
            f[12] = 0x08; // IPv4
        }
        push(f);
    }
    // IPv4 to the endpoint with a broken header: bad version, bad length, bad checksum,
    // a TCP header cut short.
    for variant in 0..4u8 {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[0..6].copy_from_slice(&ebb_usernet::ENDPOINT_MAC);
        f[6..12].copy_from_slice(&GUEST_MAC);
        f[12] = 0x08;
        f[14] = if variant == 0 { 0x65 } else { 0x45 };
        let total: u16 = if variant == 1 { 400 } else { 28 };
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&GUEST_ADDR.octets());
        f[30..34].copy_from_slice(&ep);
        if variant != 2 {
            let sum = ipv4_checksum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
        }
        push(f);
    }
    // ARP for the endpoint, cut short.
    let mut arp = vec![0u8; 14 + 28];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    arp[38..42].copy_from_slice(&ep);
    arp.truncate(41);
    push(arp);
    let sent = frames.len();
    rig.usernet.transmit(now, &mut frames);
    assert!(frames.is_empty());
    for _ in 0..10 {
        rig.step();
    }
    let c = rig.usernet.forwarder_counters();
    assert_eq!(c.guest_malformed, 7, "{c:?}");
    assert_eq!(c.guest_to_endpoint, 4, "{c:?}");
    assert_eq!(c.guest_malformed + c.guest_to_endpoint, sent as u64);
    let e = rig.usernet.endpoint_counters();
    assert!(e.rx_dropped.total() >= 4, "{e:?}");
    // And the forward still works.
    let back = rig.serve(vec![echo_client(rig.addr(0), b"still here".to_vec())]);
    assert_eq!(back[0], b"still here");
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in header.chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[test]
fn an_idle_forwarder_does_not_ask_to_be_polled_now() {
    let mut rig = Rig::new();
    let back = rig.serve(vec![echo_client(rig.addr(0), b"ping".to_vec())]);
    assert_eq!(back[0], b"ping");
    rig.run_until(|r| r.usernet.active_connections() == 0);
    for _ in 0..5 {
        rig.step();
    }
    let now = rig.now();
    let at = rig.usernet.poll_at();
    assert!(
        at.is_none_or(|at| at > now),
        "idle, yet poll_at is {at:?} at {now:?}"
    );
}

#[test]
fn forwards_survive_a_lossy_corrupting_reordering_link() {
    // What `--net-faults` does between the guest and the forwarder: ebb-net on both ends
    // repairs drops, reordering and duplicates, and checksums catch corruption.
    let faults = FaultConfig::NONE
        .with_drop(Probability::from_percent(2))
        .with_corrupt(Probability::from_percent(1))
        .with_duplicate(Probability::from_percent(2))
        .with_reorder(Probability::from_percent(2), Duration::from_millis(2));
    let mut rig = Rig::with_faults(faults);
    let clients = (0..8)
        .map(|i| echo_client(rig.addr(0), pattern(256 * 1024, i)))
        .collect();
    let backs = rig.serve(clients);
    for (i, back) in backs.iter().enumerate() {
        assert!(*back == pattern(256 * 1024, i as u8), "connection {i}");
    }
    let f = rig.guest.device().stats();
    assert!(f.rx.dropped > 0 && f.tx.dropped > 0, "{f:?}");
    assert!(f.rx.corrupted + f.tx.corrupted > 0, "{f:?}");
    let e = rig.usernet.endpoint_counters();
    assert!(e.rx_dropped.total() > 0, "corrupted frames caught: {e:?}");
}

#[test]
fn random_frames_to_the_endpoint_are_survived() {
    // A hostile guest: frames to the endpoint's address with valid Ethernet and IPv4
    // headers and whatever after (TCP headers with random flags, ports, offsets and
    // options), seeded; the forwarder must neither panic nor stop forwarding.
    let mut rig = Rig::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let ep = ebb_usernet::ENDPOINT_ADDR.octets();
    for round in 0..50 {
        let mut frames: VecDeque<TxFrame> = VecDeque::new();
        for _ in 0..40 {
            let tail = (next() % 80) as usize;
            let mut f = vec![0u8; 14 + 20 + tail];
            f[0..6].copy_from_slice(&ebb_usernet::ENDPOINT_MAC);
            f[6..12].copy_from_slice(&GUEST_MAC);
            f[12] = 0x08;
            f[14] = 0x45;
            let total = (20 + tail) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[22] = 64;
            f[23] = if next() % 4 == 0 { 1 } else { 6 };
            f[26..30].copy_from_slice(&GUEST_ADDR.octets());
            f[30..34].copy_from_slice(&ep);
            let sum = ipv4_checksum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            for b in &mut f[34..] {
                *b = next() as u8;
            }
            if tail >= 14 && next() % 2 == 0 {
                // A plausible TCP header: a data offset that fits, often a known port.
                f[34 + 12] = ((5 + (next() % ((tail as u64 - 14) / 4 + 1))) as u8) << 4;
                f[34 + 2..34 + 4].copy_from_slice(&(49152 + (next() % 64) as u16).to_be_bytes());
            }
            frames.push_back(TxFrame::new(IOBufChain::from(IOBuf::from_vec(f))));
        }
        let now = rig.now();
        rig.usernet.transmit(now, &mut frames);
        assert!(frames.is_empty(), "round {round}");
        rig.step();
    }
    let back = rig.serve(vec![echo_client(rig.addr(0), pattern(100_000, 3))]);
    assert!(back[0] == pattern(100_000, 3));
}

#[test]
fn a_guest_that_takes_no_frames_does_not_make_the_forwarder_spin() {
    // Host clients keep sending while the guest, its receive ring full, takes no frame:
    // the endpoint's queue toward the guest fills and its TCP waits on back-pressure. The
    // forwarder must not ask to be polled "now" on that account: it did, and the device
    // thread spun on the CPU the guest needed to free the queue (a flood of requests made
    // the main job serve half as many).
    let mut rig = Rig::new();
    // The guest's windows stay open: enough connections' data in flight to fill the
    // queue toward the guest. (With a 64 KiB budget per connection, those that had
    // taken it before the guest stopped sent nothing more, and on a loaded machine the
    // queue sometimes never filled. With 64 connections it once stopped at 382 of its
    // 512 frames, about six a connection: some windows had not grown or had shrunk by
    // then, so twice as many connections, enough at six frames each.)
    const CLIENTS: usize = 128;
    let addr = rig.addr(3);
    for _ in 0..CLIENTS {
        thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let chunk = vec![7u8; 64 * 1024];
            while s.write_all(&chunk).is_ok() {}
        });
    }
    rig.run_until(|r| r.usernet.active_connections() == CLIENTS);
    // The handshakes through the guest, every one, and data enough that the endpoint's
    // congestion windows have grown past their initial ten segments: once the guest stops,
    // no ACK comes, and what each connection may still send is its window (with a fixed
    // number of rounds, some connections had not started on a loaded machine, and their
    // first retransmission timeout shrank their windows before the queue was full).
    rig.run_until(|r| {
        r.stall_accepted.get() == CLIENTS && r.open_stall_received.get() >= CLIENTS * 64 * 1024
    });
    let (mut full_rounds, mut due_rounds, mut most) = (0, 0, 0);
    // Two seconds of rounds; on a loaded machine (128 client threads want the CPUs too)
    // the queue may take longer to fill, so up to ten while it has not.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(2)
        || (full_rounds == 0 && start.elapsed() < Duration::from_secs(10))
    {
        let now = rig.now();
        let mut rx = Vec::new();
        rig.usernet.drain();
        rig.usernet.receive(now, &mut rx, 0);
        assert!(rx.is_empty(), "the guest asked for no frame");
        let (queued, full) = rig.usernet.frames_for_guest();
        most = most.max(queued);
        if full {
            full_rounds += 1;
            if rig.usernet.poll_at().is_some_and(|at| at <= now) {
                due_rounds += 1;
            }
        }
        thread::sleep(Duration::from_micros(200));
    }
    assert!(
        full_rounds > 0,
        "the queue toward the guest never filled (at most {most} frames)"
    );
    assert_eq!(
        due_rounds, 0,
        "with the guest taking nothing, the forwarder asked to be polled at once in \
         {due_rounds} of {full_rounds} rounds"
    );
}

#[test]
fn a_guest_with_a_huge_window_that_stops_acknowledging_holds_the_endpoint_to_its_send_buffer() {
    // A hostile guest: a 64 MiB window, every segment acknowledged at once until the
    // endpoint's congestion window is large, then nothing — no frame taken, no ACK.
    // Without a send buffer the endpoint queued up to that congestion window (about
    // 40 MiB on one connection after 48 MiB); now at most its share of the budget, 4 MiB
    // for a lone connection, plus the frames toward the guest already cut.
    let mut rig = Rig::with_huge_window_guest();
    let addr = rig.addr(3);
    let _client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while s.write_all(&chunk).is_ok() {}
    });
    rig.run_until(|r| r.open_stall_received.get() >= 24 << 20);
    let mut most = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        rig.step_without_the_guest();
        most = most.max(rig.usernet.endpoint_send_queued_bytes());
        thread::sleep(Duration::from_micros(200));
    }
    eprintln!(
        "the endpoint held at most {most} bytes to send ({} buffered in the splice)",
        rig.usernet.buffered_bytes()
    );
    assert!(
        most <= 4 << 20,
        "the endpoint queued {most} bytes for a guest that stopped acknowledging"
    );
}

#[test]
fn a_guest_padding_each_small_segment_to_a_large_frame_pins_no_frames() {
    // The guest echoes what a host client sends, each segment padded to a 60 KiB frame,
    // and the client does not read: what waits for the host socket is a few bytes per
    // 60 KiB frame. Kept as views into those frames it pinned about 50 times its size;
    // compacted it occupies about what it holds.
    let mut rig = Rig::new();
    rig.pad_guest_frames = true;
    let addr = rig.addr(0);
    let _client = thread::spawn(move || {
        let s = TcpStream::connect(addr).unwrap();
        // A small receive buffer: the host side backs up soon.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&s, 4096);
        let mut s = s;
        let piece = [7u8; 700];
        while s.write_all(&piece).is_ok() {}
    });
    let (mut most_bytes, mut most_memory) = (0, 0);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(3) && most_bytes < 200 * 1024 {
        rig.step();
        most_bytes = most_bytes.max(rig.usernet.buffered_bytes());
        most_memory = most_memory.max(rig.usernet.buffered_memory());
    }
    eprintln!("waiting for the host: at most {most_bytes} bytes in {most_memory} bytes of buffers");
    assert!(
        most_bytes >= 64 * 1024,
        "the host side never backed up ({most_bytes} bytes waited)"
    );
    assert!(
        most_memory <= 2 * most_bytes + 256 * 1024,
        "{most_bytes} bytes from the guest kept {most_memory} bytes of buffers alive"
    );
}

#[test]
fn a_host_client_pacing_small_writes_pins_at_most_about_twice_its_bytes() {
    // A host client writes 2.5 KB at a time, slowly enough that each read returns one
    // piece, toward a guest with a huge window that stopped taking frames: the pieces
    // wait in the endpoint's send queue, up to the connection's send buffer. Each was
    // read into the forwarder's 64 KiB read buffer, and a piece over 2 KiB took that
    // buffer along: 2.5 KB pinned 64 KiB, 26 times its size (a 4 MiB send buffer then
    // held about 100 MiB). Now a read that fills less than half the buffer is copied
    // into a buffer of its own size.
    let mut rig = Rig::with_huge_window_guest();
    let addr = rig.addr(3);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        let piece = [7u8; 2500];
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) && s.write_all(&piece).is_ok() {
            thread::sleep(Duration::from_micros(200));
        }
    });
    // The guest takes some, then no frame at all.
    rig.run_until(|r| r.open_stall_received.get() >= 1 << 20);
    let (mut bytes, mut memory) = (0, 0);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(1) && bytes < 1 << 20 {
        rig.step_without_the_guest();
        bytes = rig.usernet.endpoint_send_queued_bytes();
        memory = rig.usernet.endpoint_send_queued_memory();
        thread::sleep(Duration::from_micros(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    eprintln!("toward the guest: {bytes} bytes queued in {memory} bytes of buffers");
    assert!(
        bytes >= 64 * 1024,
        "the endpoint's queue never filled ({bytes} bytes)"
    );
    assert!(
        memory <= 2 * bytes + 128 * 1024,
        "{bytes} bytes read in small pieces kept {memory} bytes of buffers alive"
    );
    drop(rig);
    client.join().unwrap();
}

#[test]
fn a_guest_that_stops_reading_stops_the_host_sender_with_bounded_memory() {
    // The guest takes 64 KiB and closes its window: the forwarder must stop reading the
    // host socket (the host's writes then block in its kernel) rather than buffer what
    // the host keeps sending.
    let mut rig = Rig::new();
    let addr = rig.addr(2);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = sent.clone();
    let _client = thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        // Until the forwarder stops taking data and the socket buffers fill (or the
        // test ends and the socket breaks).
        while s.write_all(&chunk).is_ok() {
            counted.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let started = std::time::Instant::now();
    rig.run_until(|r| {
        r.usernet.active_connections() == 1 && started.elapsed() > Duration::from_secs(2)
    });
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        sent < 32 << 20,
        "the host sender was not stopped: {sent} bytes taken"
    );
    assert!(
        rig.max_buffered <= 64 * 1024,
        "the forwarder held {} bytes",
        rig.max_buffered
    );
    assert!(
        rig.guest.tcp().held_bytes() <= 2 << 20,
        "the guest's stack held {} bytes",
        rig.guest.tcp().held_bytes()
    );
}

#[test]
fn thousands_of_short_connections_one_after_another() {
    // Each leaves the endpoint in TIME-WAIT (the host closes first): they must not use
    // up the endpoint's connection table (memcached's churn test opens 10,000).
    let mut rig = Rig::new();
    let addr = rig.addr(0);
    let n = 3000;
    let client = thread::spawn(move || {
        for i in 0..n {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s.write_all(b"hi").unwrap();
            let mut buf = [0u8; 2];
            s.read_exact(&mut buf)
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        }
    });
    rig.serve(vec![client]);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(
        (c.accepted, c.host_resets, c.connect_failed),
        (n, 0, 0),
        "{c:?}"
    );
}
