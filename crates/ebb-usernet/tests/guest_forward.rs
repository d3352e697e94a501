//! Guest-to-host forwards (QEMU's `guestfwd`) end to end in one process: a guest-side
//! ebb-net stack opens connections to the endpoint (10.0.2.3) at a guest forward's
//! port; the forwarder connects a host socket to a real host server (threads with std
//! sockets) and splices the two. Driven as the monitor's I/O thread drives a backend, as
//! in `forward.rs`: frames from the guest into `transmit`, frames for the guest out of
//! `receive`, sleeping on the forwarder's descriptor until its `poll_at`.
//!
//! Shown: bytes both ways with half-close each way (the host server reads to EOF, then
//! answers and closes), many connections at once, a refused host connect resetting the
//! guest's connection, a guest reset resetting the host socket, and the buffers bounded
//! while a host server does not read.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::thread;
use std::time::Duration;

use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{Link, LinkEnd, NetDevice, RxFrame, TxFrame};
use ebb_usernet::{ENDPOINT_ADDR, GUEST_ADDR, GuestForward, UserNet, UserNetConfig};
use ebb_vmm::virtio::HostLink;
use rustix::event::epoll;

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
const TIMEOUT: Duration = Duration::from_secs(20);
/// The endpoint's port of the rig's first guest forward (to the host server).
const SERVER_PORT: u16 = 5000;
/// ... and of its second (to a host port nobody listens on).
const REFUSED_PORT: u16 = 5001;

/// How a guest connection ended, and what it received.
#[derive(Default)]
struct Seen {
    got: Vec<u8>,
    connect_error: Option<TcpErrorKind>,
    closed: Option<CloseReason>,
}

/// The guest's client: keeps what arrives, closes when the host closed.
struct Client(Rc<RefCell<Seen>>);

impl TcpHandler for Client {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        self.0.borrow_mut().got.extend_from_slice(data.as_slice());
    }
    fn closed(&mut self, reason: CloseReason) {
        self.0.borrow_mut().closed = Some(reason);
    }
}

/// The forwarder and the guest's stack, joined by an in-memory link.
struct Rig {
    usernet: UserNet,
    guest: Stack<LinkEnd, TcpLayer>,
    wire: LinkEnd,
    started: std::time::Instant,
    max_buffered: usize,
}

impl Rig {
    /// Guest forwards: [`SERVER_PORT`] to `server`, [`REFUSED_PORT`] to `refused`.
    fn new(server: SocketAddrV4, refused: SocketAddrV4) -> Rig {
        Rig::with_config(server, refused, |_| {})
    }

    /// [`Rig::new`] with `adjust` applied to the forwarder's configuration.
    fn with_config(
        server: SocketAddrV4,
        refused: SocketAddrV4,
        adjust: impl FnOnce(&mut UserNetConfig),
    ) -> Rig {
        let mut config = UserNetConfig::new(Vec::new());
        config.guest_forwards = vec![
            GuestForward {
                endpoint_port: SERVER_PORT,
                host: server,
            },
            GuestForward {
                endpoint_port: REFUSED_PORT,
                host: refused,
            },
        ];
        adjust(&mut config);
        let usernet = UserNet::new(&config, None).expect("usernet");
        let (guest_end, wire) = Link::new().with_capacity(4096).connect();
        let iface = InterfaceConfig::new_static(
            EthernetAddress(GUEST_MAC),
            Ipv4Cidr::new(GUEST_ADDR, 24).unwrap(),
            None,
        );
        let guest = Stack::new(guest_end, iface, TcpLayer::new(TcpConfig::default()));
        Rig {
            usernet,
            guest,
            wire,
            started: std::time::Instant::now(),
            max_buffered: 0,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// Opens a guest connection to the endpoint's `port`, sends `data` and FIN.
    fn connect(&self, port: u16, data: Vec<u8>) -> Rc<RefCell<Seen>> {
        let seen = Rc::new(RefCell::new(Seen::default()));
        let on_result = seen.clone();
        self.guest
            .tcp()
            .connect(
                SocketAddrV4::new(GUEST_ADDR, 0),
                SocketAddrV4::new(ENDPOINT_ADDR, port),
                move |result| match result {
                    Ok(conn) => {
                        conn.set_handler(Client(on_result.clone()));
                        if !data.is_empty() {
                            conn.send(IOBufChain::from(IOBuf::from_vec(data)))
                                .expect("send");
                        }
                        conn.close();
                    }
                    Err(kind) => on_result.borrow_mut().connect_error = Some(kind),
                },
            )
            .expect("connect");
        seen
    }

    /// One round as the I/O thread does it; whether any frame moved.
    fn step(&mut self) -> bool {
        let now = self.now();
        self.guest.poll(now);
        let mut rx: Vec<RxFrame> = Vec::new();
        self.wire.receive(now, &mut rx, 256);
        let mut from_guest: VecDeque<TxFrame> = rx
            .drain(..)
            .map(|f| TxFrame::new(IOBufChain::from(f.buf)))
            .collect();
        let moved_out = !from_guest.is_empty();
        self.usernet.transmit(now, &mut from_guest);
        assert!(from_guest.is_empty(), "no rest: every frame is taken");
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
        while !to_guest.is_empty() {
            self.wire.transmit(now, &mut to_guest);
        }
        self.guest.poll(now);
        self.max_buffered = self.max_buffered.max(self.usernet.buffered_bytes());
        moved_out || moved_in
    }

    /// Runs rounds until `done` (panics after [`TIMEOUT`]).
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
                "timed out: {:?}, {} active, {} buffered",
                self.usernet.forwarder_counters(),
                self.usernet.active_connections(),
                self.usernet.buffered_bytes(),
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
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A host server for `connections` connections, each in its own thread: reads to EOF
/// (the guest's FIN), answers `b"got N:"` and the bytes reversed, closes.
fn reversing_server(connections: usize) -> (SocketAddrV4, thread::JoinHandle<()>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else {
        unreachable!()
    };
    let server = thread::spawn(move || {
        let mut workers = Vec::new();
        for _ in 0..connections {
            let (mut s, _) = listener.accept().expect("accept");
            workers.push(thread::spawn(move || {
                s.set_read_timeout(Some(TIMEOUT)).unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).expect("read to the guest's FIN");
                let mut answer = format!("got {}:", got.len()).into_bytes();
                answer.extend(got.iter().rev());
                s.write_all(&answer).expect("answer");
            }));
        }
        for w in workers {
            w.join().expect("server worker");
        }
    });
    (addr, server)
}

/// A loopback address nobody listens on.
fn closed_port() -> SocketAddrV4 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let std::net::SocketAddr::V4(addr) = l.local_addr().unwrap() else {
        unreachable!()
    };
    addr
}

fn answer_to(data: &[u8]) -> Vec<u8> {
    let mut answer = format!("got {}:", data.len()).into_bytes();
    answer.extend(data.iter().rev());
    answer
}

#[test]
fn a_guest_connection_reaches_a_host_server_both_ways_with_half_close() {
    let (server_addr, server) = reversing_server(1);
    let mut rig = Rig::new(server_addr, closed_port());
    let data = pattern(1 << 20, 3);
    let seen = rig.connect(SERVER_PORT, data.clone());
    rig.run_until(|_| seen.borrow().closed.is_some());
    server.join().unwrap();
    let seen = seen.borrow();
    assert_eq!(seen.closed, Some(CloseReason::Normal));
    assert_eq!(seen.got.len(), answer_to(&data).len());
    assert!(
        seen.got == answer_to(&data),
        "the host's answer, byte for byte"
    );
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(
        (c.guest_accepted, c.host_connect_failed, c.host_resets),
        (1, 0, 0),
        "{c:?}"
    );
    assert!(
        rig.max_buffered <= 64 * 1024 + 256 * 1024 + 64 * 1024,
        "bounded: {}",
        rig.max_buffered
    );
}

#[test]
fn many_guest_connections_at_once() {
    let n = 48;
    let (server_addr, server) = reversing_server(n);
    let mut rig = Rig::new(server_addr, closed_port());
    let sent: Vec<Vec<u8>> = (0..n).map(|i| pattern(20_000 + i * 331, i as u8)).collect();
    let seen: Vec<_> = sent
        .iter()
        .map(|d| rig.connect(SERVER_PORT, d.clone()))
        .collect();
    rig.run_until(|_| seen.iter().all(|s| s.borrow().closed.is_some()));
    server.join().unwrap();
    for (i, (s, d)) in seen.iter().zip(&sent).enumerate() {
        let s = s.borrow();
        assert_eq!(s.closed, Some(CloseReason::Normal), "connection {i}");
        assert!(s.got == answer_to(d), "connection {i}");
    }
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(c.guest_accepted, n as u64, "{c:?}");
    assert_eq!((c.host_connect_failed, c.host_resets), (0, 0), "{c:?}");
}

#[test]
fn a_refused_host_connect_resets_the_guest_connection() {
    let (server_addr, _server) = reversing_server(0);
    let mut rig = Rig::new(server_addr, closed_port());
    let seen = rig.connect(REFUSED_PORT, b"anyone there?".to_vec());
    rig.run_until(|_| seen.borrow().closed.is_some() || seen.borrow().connect_error.is_some());
    let s = seen.borrow();
    assert_eq!(
        s.connect_error, None,
        "the endpoint accepts first, as QEMU does"
    );
    assert_eq!(s.closed, Some(CloseReason::Reset), "then resets");
    assert!(s.got.is_empty());
    drop(s);
    rig.run_until(|r| r.usernet.active_connections() == 0);
    let c = rig.usernet.forwarder_counters();
    assert_eq!(
        (c.guest_accepted, c.host_connect_failed, c.host_resets),
        (1, 1, 0),
        "{c:?}"
    );
}

#[test]
fn a_port_without_a_guest_forward_is_refused_by_the_endpoint() {
    let (server_addr, _server) = reversing_server(0);
    let mut rig = Rig::new(server_addr, closed_port());
    let seen = rig.connect(SERVER_PORT + 100, b"x".to_vec());
    rig.run_until(|_| seen.borrow().connect_error.is_some());
    assert_eq!(
        seen.borrow().connect_error,
        Some(TcpErrorKind::ConnectionRefused)
    );
    assert_eq!(rig.usernet.forwarder_counters().guest_accepted, 0);
}

/// Aborts the connection as soon as it receives anything.
struct AbortOnData;

impl TcpHandler for AbortOnData {
    fn receive(&mut self, conn: &dyn TcpConnection, _data: IOBuf) {
        conn.abort();
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

#[test]
fn a_guest_abort_resets_the_host_socket() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let std::net::SocketAddr::V4(server_addr) = listener.local_addr().unwrap() else {
        unreachable!()
    };
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(b"hello guest").unwrap();
        let mut rest = [0u8; 16];
        s.read(&mut rest).map_err(|e| e.kind())
    });
    let mut rig = Rig::new(server_addr, closed_port());
    rig.guest
        .tcp()
        .connect(
            SocketAddrV4::new(GUEST_ADDR, 0),
            SocketAddrV4::new(ENDPOINT_ADDR, SERVER_PORT),
            |result| result.expect("established").set_handler(AbortOnData),
        )
        .unwrap();
    rig.run_until(|_| server.is_finished());
    assert_eq!(
        server.join().unwrap(),
        Err(ErrorKind::ConnectionReset),
        "the guest's RST carried over to the host"
    );
    rig.run_until(|r| r.usernet.active_connections() == 0);
    assert_eq!(rig.usernet.forwarder_counters().host_resets, 1);
}

#[test]
fn a_host_server_that_does_not_read_holds_the_guest_with_bounded_memory() {
    // The host server accepts and never reads: the host socket's buffers fill, then the
    // splice's, then the guest connection's window closes. Nothing grows past the bound.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let std::net::SocketAddr::V4(server_addr) = listener.local_addr().unwrap() else {
        unreachable!()
    };
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let _ = release_rx.recv_timeout(TIMEOUT);
        drop(s);
    });
    let mut rig = Rig::new(server_addr, closed_port());
    let seen = rig.connect(SERVER_PORT, pattern(32 << 20, 9));
    // Until the splice holds what closes the guest's window (256 KiB), then on a while.
    rig.run_until(|r| r.max_buffered >= 256 * 1024);
    let mut rounds = 0;
    rig.run_until(|_| {
        rounds += 1;
        rounds > 300
    });
    let held = rig.usernet.buffered_bytes();
    assert!(
        rig.max_buffered <= 64 * 1024 + 256 * 1024 + 64 * 1024,
        "the splice holds {held} now, at most {} (bounded)",
        rig.max_buffered
    );
    assert!(seen.borrow().closed.is_none());
    release_tx.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn a_guest_forward_spec_parses() {
    let g: GuestForward = "5000:127.0.0.1:7000".parse().unwrap();
    assert_eq!(g.endpoint_port, 5000);
    assert_eq!(g.host, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7000));
    assert!("5000".parse::<GuestForward>().is_err());
    assert!("x:127.0.0.1:1".parse::<GuestForward>().is_err());
}

/// Host clients hold every connection they may: an eighth of the limit stays the guest's,
/// so a native node can still reach its front end through a guest forward.
#[test]
fn host_clients_cannot_take_the_guests_share_of_the_connections() {
    const HOLD_PORT: u16 = 7300;
    const MAX: usize = 16;
    let (server_addr, server) = reversing_server(1);
    let mut rig = Rig::with_config(server_addr, closed_port(), |config| {
        config.max_connections = MAX;
        config.forwards = vec![ebb_vmm::virtio::PortForward {
            host_addr: Ipv4Addr::LOCALHOST,
            host_port: 0,
            guest_port: HOLD_PORT,
        }];
    });
    // The guest accepts on HOLD_PORT and keeps every connection open.
    let held = Rc::new(RefCell::new(Vec::new()));
    let keep = held.clone();
    rig.guest
        .tcp()
        .listen(SocketAddrV4::new(GUEST_ADDR, HOLD_PORT), 64, move |conn| {
            keep.borrow_mut().push(conn)
        })
        .unwrap();
    let forward = rig.usernet.listening()[0];
    let clients: Vec<_> = (0..MAX)
        .map(|_| std::net::TcpStream::connect(forward).unwrap())
        .collect();
    let side_limit = MAX - MAX / 8;
    rig.run_until(|r| {
        r.usernet.active_connections() == side_limit && held.borrow().len() == side_limit
    });
    // More rounds: no more host clients get in (they wait in the kernel's backlog).
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        rig.step();
    }
    assert_eq!(rig.usernet.active_connections(), side_limit);
    // The guest still reaches the host through its guest forward.
    let data = pattern(5000, 3);
    let seen = rig.connect(SERVER_PORT, data.clone());
    rig.run_until(|_| seen.borrow().closed.is_some());
    server.join().unwrap();
    assert_eq!(seen.borrow().closed, Some(CloseReason::Normal));
    assert!(seen.borrow().got == answer_to(&data));
    drop(clients);
}
