//! Connection ownership across cores, simulated in one thread: our side is two "cores",
//! each a whole `Stack` (own queue, interface and TCP layer) sharing one address, one
//! `FlowDirectory` and a two-queue device; the peer is an ordinary single stack.
//!
//! The two-queue device deals received frames to its queues **round-robin**, ignoring
//! flows — the worst case for ownership: about half of every connection's frames arrive
//! on the core that does not own it and must be steered to the one that does. Steered
//! frames reach the other core's stack through `Stack::inject` (in a runtime that is a
//! message to the other core; here a shared inbox drained before each poll).
//!
//! What must hold: every byte echoed intact on every connection, each accepted
//! connection owned by (and its handler run on) the core the listener's placement chose,
//! connections opened by either core answered there, frames actually steered, and the
//! directory empty once every connection has left TIME-WAIT.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::rcu::RcuDomain;
use ebb_core::{CoreId, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::phy::{DeviceCapabilities, DeviceCounters, Link, LinkEnd, NetDevice};
use ebb_net::stack::{FrameSteering, Stack};
use ebb_net::steering::{FlowDirectory, Placement, Steer};
use ebb_net::tcp::{FourTuple, TcpConfig, TcpLayer};
use ebb_net::wire::tcp::MAX_SACK_BLOCKS;
use ebb_net::wire::{
    ChecksumCapabilities, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

const US: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);
const OUR_PORT: u16 = 80;
const PEER_PORT: u16 = 7000;
const CORES: usize = 2;

/// Our side's two-queue device: one end of the link, its received frames dealt to the
/// queues round-robin.
struct Queues {
    end: LinkEnd,
    rx: Vec<VecDeque<IOBuf>>,
    next: usize,
    scratch: Vec<IOBuf>,
}

/// One queue of [`Queues`]: what one core's stack drives.
struct Queue {
    shared: Rc<RefCell<Queues>>,
    index: usize,
}

impl NetDevice for Queue {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = self.shared.borrow().end.capabilities();
        caps.queues = CORES;
        caps
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<IOBuf>, max: usize) -> usize {
        let mut q = self.shared.borrow_mut();
        let Queues {
            end,
            rx,
            next,
            scratch,
        } = &mut *q;
        end.receive(now, scratch, usize::MAX);
        for frame in scratch.drain(..) {
            rx[*next].push_back(frame);
            *next = (*next + 1) % CORES;
        }
        let mine = &mut rx[self.index];
        let n = mine.len().min(max);
        out.extend(mine.drain(..n));
        n
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<IOBufChain>) -> usize {
        self.shared.borrow_mut().end.transmit(now, frames)
    }
    fn poll_at(&self) -> Option<Instant> {
        let q = self.shared.borrow();
        let waiting = q.rx[self.index].len() + q.end.pending();
        (waiting > 0).then_some(Instant::ZERO)
    }
    fn counters(&self) -> DeviceCounters {
        self.shared.borrow().end.counters()
    }
}

/// Frames steered to each core, waiting for its next poll.
type Inboxes = Rc<Vec<RefCell<Vec<IOBuf>>>>;

/// One core's steering: asks the directory, puts other cores' frames in their inbox.
struct InboxSteering {
    here: CoreId,
    directory: Arc<FlowDirectory>,
    inboxes: Inboxes,
    forwarded: Rc<Cell<u64>>,
}

impl FrameSteering for InboxSteering {
    fn steer(&mut self, frames: &mut Vec<IOBuf>) {
        frames.retain(
            |frame| match self.directory.steer(self.here, frame.as_slice()) {
                Steer::Here => true,
                Steer::To(core) => {
                    self.inboxes[core.index()].borrow_mut().push(frame.clone());
                    self.forwarded.set(self.forwarded.get() + 1);
                    false
                }
                Steer::Everywhere => {
                    for (i, inbox) in self.inboxes.iter().enumerate() {
                        if i != self.here.index() {
                            inbox.borrow_mut().push(frame.clone());
                        }
                    }
                    true
                }
            },
        );
    }
}

/// Echoes what it receives; counts bytes and records the core it ran on.
struct Echo {
    core: usize,
    ran_on: Rc<RefCell<Vec<(usize, FourTuple)>>>,
    tuple: FourTuple,
}

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.ran_on.borrow_mut().push((self.core, self.tuple));
        conn.send(IOBufChain::from(data)).expect("echo");
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        conn.close();
    }
    fn closed(&mut self, _: CloseReason) {}
}

/// Sends its bytes, checks the echo, closes when all came back.
struct Client {
    expected: Rc<Vec<u8>>,
    got: usize,
    intact: Rc<Cell<bool>>,
    done: Rc<Cell<u32>>,
}

impl TcpHandler for Client {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let bytes = data.as_slice();
        let end = self.got + bytes.len();
        if end > self.expected.len() || self.expected[self.got..end] != *bytes {
            self.intact.set(false);
        }
        self.got = end;
        if self.got == self.expected.len() {
            conn.close();
        }
    }
    fn closed(&mut self, reason: CloseReason) {
        if reason == CloseReason::Normal && self.got == self.expected.len() {
            self.done.set(self.done.get() + 1);
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn tcp_config(seed: u64) -> TcpConfig {
    TcpConfig {
        isn_seed: [seed, !seed],
        msl: Duration::from_secs(1),
        ..TcpConfig::default()
    }
}

fn mac(last: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 9, 1, last])
}

fn iface(last: u8, ip: Ipv4Addr) -> InterfaceConfig {
    let cidr = Ipv4Cidr::new(ip, 24).expect("valid /24");
    InterfaceConfig::new_static(mac(last), cidr, None)
}

struct World {
    cores: Vec<(Stack<Queue, TcpLayer>, TcpLayer)>,
    peer: (Stack<LinkEnd, TcpLayer>, TcpLayer),
    directory: Arc<FlowDirectory>,
    inboxes: Inboxes,
    forwarded: Rc<Cell<u64>>,
    now: Instant,
}

impl World {
    fn new(placement: Placement) -> World {
        let (ours, theirs) = Link::new().connect();
        let queues = Rc::new(RefCell::new(Queues {
            end: ours,
            rx: (0..CORES).map(|_| VecDeque::new()).collect(),
            next: 0,
            scratch: Vec::new(),
        }));
        let domain = Arc::new(RcuDomain::new(CORES));
        let directory = Arc::new(FlowDirectory::new(
            domain,
            (0..CORES as u32).map(CoreId).collect(),
        ));
        directory.set_placement(OUR_PORT, placement);
        let inboxes: Inboxes = Rc::new((0..CORES).map(|_| RefCell::new(Vec::new())).collect());
        let forwarded = Rc::new(Cell::new(0));
        let cores = (0..CORES)
            .map(|i| {
                let core = CoreId(i as u32);
                let tcp = TcpLayer::new(tcp_config(10 + i as u64));
                tcp.set_directory(Rc::new(directory.claims_for(core)));
                let device = Queue {
                    shared: queues.clone(),
                    index: i,
                };
                let mut stack = Stack::new(device, iface(1, US), tcp.clone());
                stack.set_steering(Box::new(InboxSteering {
                    here: core,
                    directory: directory.clone(),
                    inboxes: inboxes.clone(),
                    forwarded: forwarded.clone(),
                }));
                (stack, tcp)
            })
            .collect();
        let peer_tcp = TcpLayer::new(tcp_config(99));
        let peer = (
            Stack::new(theirs, iface(2, PEER), peer_tcp.clone()),
            peer_tcp,
        );
        World {
            cores,
            peer,
            directory,
            inboxes,
            forwarded,
            now: Instant::ZERO,
        }
    }

    /// Polls everything, advancing simulated time, until `done` (or panics after
    /// `limit` of simulated time).
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&World) -> bool) {
        let start = self.now;
        let mut spins = 0;
        while !done(self) {
            assert!(self.now - start < limit, "stuck: {:?}", self.status());
            let mut next = self.peer.0.poll(self.now);
            for (i, (stack, _)) in self.cores.iter_mut().enumerate() {
                let steered: Vec<IOBuf> = self.inboxes[i].borrow_mut().drain(..).collect();
                stack.inject(steered);
                next = [next, stack.poll(self.now)].into_iter().flatten().min();
            }
            let waiting = self.inboxes.iter().any(|i| !i.borrow().is_empty());
            match next {
                _ if waiting && spins < 1000 => spins += 1,
                Some(t) if t <= self.now && spins < 1000 => spins += 1,
                Some(t) => {
                    self.now = t.max(self.now + Duration::from_micros(1));
                    spins = 0;
                }
                None => {
                    self.now = self.now + Duration::from_millis(1);
                    spins = 0;
                }
            }
        }
    }

    fn status(&self) -> String {
        let layers: Vec<_> = self
            .cores
            .iter()
            .map(|(_, tcp)| (tcp.connection_count(), tcp.counters()))
            .collect();
        format!(
            "directory {:?}, forwarded {}, cores {layers:?}",
            self.directory,
            self.forwarded.get()
        )
    }
}

/// Listens on every core (as a multi-core runtime does: one listener per core's layer),
/// echoing; records where each connection was accepted.
fn listen_everywhere(
    world: &World,
    accepted: &Rc<RefCell<Vec<(usize, FourTuple)>>>,
) -> Rc<RefCell<Vec<(usize, FourTuple)>>> {
    let ran_on = Rc::new(RefCell::new(Vec::new()));
    for (core, (_, tcp)) in world.cores.iter().enumerate() {
        let (accepted, ran_on) = (accepted.clone(), ran_on.clone());
        tcp.listen(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, OUR_PORT),
            64,
            move |conn| {
                let tuple = conn.four_tuple();
                accepted.borrow_mut().push((core, tuple));
                conn.set_handler(Echo {
                    core,
                    ran_on: ran_on.clone(),
                    tuple,
                });
            },
        )
        .expect("listen");
    }
    ran_on
}

fn client(expected: &Rc<Vec<u8>>, intact: &Rc<Cell<bool>>, done: &Rc<Cell<u32>>) -> Client {
    Client {
        expected: expected.clone(),
        got: 0,
        intact: intact.clone(),
        done: done.clone(),
    }
}

/// Sends all of `bytes` on `conn` in 16 KiB buffers.
fn send_all(conn: &dyn TcpConnection, bytes: &[u8]) {
    for chunk in bytes.chunks(16 << 10) {
        conn.send(IOBufChain::from(IOBuf::copy_from_slice(chunk)))
            .expect("send");
    }
}

#[test]
fn connections_live_on_the_core_their_placement_chose_with_frames_on_any_queue() {
    let mut world = World::new(Placement::Hashed);
    let accepted = Rc::new(RefCell::new(Vec::new()));
    let ran_on = listen_everywhere(&world, &accepted);

    // The peer echoes too, for the connections our cores open.
    world
        .peer
        .1
        .listen(SocketAddrV4::new(PEER, PEER_PORT), 64, |conn| {
            let tuple = conn.four_tuple();
            conn.set_handler(Echo {
                core: usize::MAX,
                ran_on: Rc::new(RefCell::new(Vec::new())),
                tuple,
            });
        })
        .expect("peer listen");

    let (intact, done) = (Rc::new(Cell::new(true)), Rc::new(Cell::new(0)));
    const INBOUND: u32 = 12;
    for i in 0..INBOUND {
        let data = Rc::new(pattern(u64::from(i) + 1, 100_000 + 977 * i as usize));
        let (intact, done) = (intact.clone(), done.clone());
        world
            .peer
            .1
            .connect(
                SocketAddrV4::new(PEER, 0),
                SocketAddrV4::new(US, OUR_PORT),
                move |result| {
                    let conn = result.expect("peer connects");
                    conn.set_handler(client(&data, &intact, &done));
                    send_all(&conn, &data);
                },
            )
            .expect("connect");
    }
    // Each of our cores opens one connection out; its answers arrive on either queue.
    for (core, (_, tcp)) in world.cores.iter().enumerate() {
        let data = Rc::new(pattern(1000 + core as u64, 150_000));
        let (intact, done) = (intact.clone(), done.clone());
        tcp.connect(
            SocketAddrV4::new(US, 0),
            SocketAddrV4::new(PEER, PEER_PORT),
            move |result| {
                let conn = result.expect("our core connects");
                conn.set_handler(client(&data, &intact, &done));
                send_all(&conn, &data);
            },
        )
        .expect("connect out");
    }

    let total = INBOUND + CORES as u32;
    world.run_until(Duration::from_secs(120), |_| done.get() == total);
    assert!(intact.get(), "every echo intact and in order");

    // Ownership: each inbound connection was accepted, and served, where the placement
    // said; the directory agreed while it lived.
    let accepted = accepted.borrow();
    assert_eq!(accepted.len(), INBOUND as usize);
    for &(core, tuple) in accepted.iter() {
        let chosen = world.directory.place(CoreId(0), &tuple, Placement::Hashed);
        assert_eq!(core, chosen.index(), "{tuple:?} accepted on core {core}");
    }
    for &(core, tuple) in ran_on.borrow().iter() {
        let owner = accepted.iter().find(|(_, t)| *t == tuple).map(|(c, _)| *c);
        assert_eq!(Some(core), owner, "{tuple:?}'s handler ran on core {core}");
    }
    for core in 0..CORES {
        assert!(
            accepted.iter().any(|&(c, _)| c == core),
            "hashing used core {core} too: {accepted:?}"
        );
    }
    assert!(
        world.forwarded.get() > 100,
        "round-robin queues made the cores steer frames: {}",
        world.status()
    );
    for (core, (_, tcp)) in world.cores.iter().enumerate() {
        let c = tcp.counters();
        assert_eq!(c.dropped_no_listener, 0, "core {core} reset nothing: {c:?}");
        assert_eq!(c.dropped_owned_elsewhere, 0, "core {core}: {c:?}");
    }

    // After TIME-WAIT (2 MSL = 2 s here) every claim is released.
    world.run_until(Duration::from_secs(10), |w| {
        w.cores.iter().all(|(_, tcp)| tcp.connection_count() == 0)
    });
    assert_eq!(world.directory.connection_count(), 0, "{}", world.status());
}

#[test]
fn a_syn_for_a_connection_another_core_holds_is_dropped_not_doubled() {
    let mut world = World::new(Placement::AcceptingCore);
    let accepted = Rc::new(RefCell::new(Vec::new()));
    let _ran_on = listen_everywhere(&world, &accepted);
    let tuple = FourTuple {
        local: SocketAddrV4::new(US, OUR_PORT),
        remote: SocketAddrV4::new(PEER, 40_000),
    };
    // Core 0 holds the tuple (as if it had just accepted the first copy of the SYN).
    assert!(ebb_net::tcp::ConnectionDirectory::claim(
        &world.directory.claims_for(CoreId(0)),
        &tuple
    ));
    // A copy of that SYN reaches core 1's layer directly (a steering decision made
    // before the claim was visible).
    let syn = syn_frame(40_000);
    world.cores[1].0.inject([syn]);
    let now = world.now;
    world.cores[1].0.poll(now);
    let c = world.cores[1].1.counters();
    assert_eq!(c.dropped_owned_elsewhere, 1, "{c:?}");
    assert_eq!(world.cores[1].1.connection_count(), 0);
    assert_eq!(
        world.directory.owner(&tuple),
        Some(CoreId(0)),
        "still core 0's"
    );
}

/// A SYN from the peer's port `port` to our port, as the peer's stack would send it.
fn syn_frame(port: u16) -> IOBuf {
    let caps = ChecksumCapabilities::default();
    let tcp = TcpRepr {
        src_port: port,
        dst_port: OUR_PORT,
        control: TcpControl::Syn,
        push: false,
        seq_number: TcpSeqNumber(1234),
        ack_number: None,
        window_len: 65535,
        window_scale: None,
        max_seg_size: Some(1460),
        sack_permitted: false,
        sack_ranges: [None; MAX_SACK_BLOCKS],
        timestamp: None,
        payload: &[],
    };
    let ip = Ipv4Repr {
        src_addr: PEER,
        dst_addr: US,
        protocol: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        ttl: 64,
        ident: 1,
        dont_frag: true,
    };
    let mut frame = vec![0u8; 14 + ip.buffer_len()];
    EthernetRepr {
        src_addr: mac(2),
        dst_addr: mac(1),
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    let mut packet = Ipv4Packet::new_unchecked(&mut frame[14..]);
    ip.emit(&mut packet, &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(packet.payload_mut()),
        PEER,
        US,
        &caps,
    );
    IOBuf::copy_from_slice(&frame)
}
