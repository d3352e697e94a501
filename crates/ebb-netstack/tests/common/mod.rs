//! Test devices for the runtime: the queue pairs of a "NIC" on each side of an
//! `ebb_net_driver::Link`, whose readiness is reported through ebb-core's [`TestPlatform`],
//! so the whole runtime (poll policy, timers, idle handler, steering) runs without root
//! and in virtual time.
//!
//! [`TestNic::new`] makes a link and gives each of its two sides some queues
//! ([`TestQueue`], a [`PlatformDevice`]). A frame one side transmits crosses the `Link`
//! (its capacity, MTU and counters apply) and is at once *dealt* to one of the other
//! side's queues by that side's [`Deal`] policy; if the queue is watched, an event is
//! injected on the watching core (`TestPlatform::inject_device_event`), which calls the
//! queue's `DeviceReady` there — the way an epoll edge or a virtio interrupt reaches a
//! core. The [`TestNic`] handle also lets a test refuse transmission on a queue and
//! report it writable again, and see whether a queue is still watched.
//!
//! The link's two ends share `Rc` state, and the runtime's cores are threads: both ends
//! live together under one mutex, which is the only way anything reaches them.

#![allow(dead_code)] // Each test file uses part of it.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ebb_core::testing::TestPlatform;
use ebb_core::{CoreId, IOBuf, IOBufChain, Instant, event};
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, Link, LinkEnd, NetDevice, RxFrame, TxFrame,
};
use ebb_net_driver::{DeviceError, DeviceReady, PlatformDevice, Readiness};

/// How a side's received frames are spread over its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deal {
    /// In turn, ignoring flows: about half of every connection's frames land on a core
    /// that does not own it (the worst case for steering).
    RoundRobin,
    /// Every frame to this queue: a hash that puts every flow in one bucket.
    AllTo(usize),
}

/// One side of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first end (`Link::connect().0`).
    A,
    /// The second end.
    B,
}

impl Side {
    fn index(self) -> usize {
        self as usize
    }
    fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// The link's two ends. They share an `Rc`, so they are `!Send`.
struct Ends([LinkEnd; 2]);

// SAFETY: both `LinkEnd`s holding the link's `Rc` are in this one value, are never cloned
// or handed out, and are reached only through the `Mutex` in `Nic`: no two threads ever
// touch the `Rc`'s count or the `RefCell` at once, and the last handle drops with this
// value. The frames they pass out are `IOBuf`s, which are `Send` themselves.
unsafe impl Send for Ends {}

#[derive(Default)]
struct QueueState {
    rx: VecDeque<RxFrame>,
    /// The core watching this queue and the key of its `DeviceReady` there.
    watcher: Option<(CoreId, u64)>,
    /// What the next injected event reports; `None` when no event is on its way.
    pending: Option<Readiness>,
    /// Transmission refused until `TestNic::allow_tx`.
    refuse_tx: bool,
    /// Frames dealt here.
    dealt: u64,
    /// Frames dropped because `rx` held a link's capacity.
    dropped: u64,
    /// Transmit calls refused.
    refused: u64,
    /// Its `TestQueue` is not dropped yet.
    alive: bool,
}

struct SideState {
    queues: Vec<QueueState>,
    /// Frames arriving at this side are lost (a cut cable), counted in `lost`.
    blackhole: bool,
    lost: u64,
    deal: Deal,
    next: usize,
}

struct Nic {
    ends: Ends,
    sides: [SideState; 2],
    capacity: usize,
}

/// The handle on a test NIC: see the module docs. `Clone + Send`.
#[derive(Clone)]
pub struct TestNic {
    nic: Arc<Mutex<Nic>>,
    platform: Arc<TestPlatform>,
}

/// One queue pair of a [`TestNic`] side: what one core's stack drives.
pub struct TestQueue {
    nic: TestNic,
    side: Side,
    queue: usize,
}

thread_local! {
    /// The `DeviceReady` callbacks of the queues watched on this thread's core.
    static WATCHERS: RefCell<HashMap<u64, DeviceReady>> = RefCell::new(HashMap::new());
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

impl TestNic {
    /// A NIC on each side of `link`: `queues[s]` queues on side `s`, dealt by `deal[s]`.
    pub fn new(
        platform: &Arc<TestPlatform>,
        link: Link,
        queues: [usize; 2],
        deal: [Deal; 2],
    ) -> (TestNic, [Vec<TestQueue>; 2]) {
        let (a, b) = link.connect();
        let side = |s: usize| SideState {
            queues: (0..queues[s])
                .map(|_| QueueState {
                    alive: true,
                    ..QueueState::default()
                })
                .collect(),
            deal: deal[s],
            next: 0,
            blackhole: false,
            lost: 0,
        };
        let nic = TestNic {
            nic: Arc::new(Mutex::new(Nic {
                ends: Ends([a, b]),
                sides: [side(0), side(1)],
                capacity: link.capacity,
            })),
            platform: platform.clone(),
        };
        let make = |side: Side| {
            (0..queues[side.index()])
                .map(|queue| TestQueue {
                    nic: nic.clone(),
                    side,
                    queue,
                })
                .collect()
        };
        let queues = [make(Side::A), make(Side::B)];
        (nic, queues)
    }

    fn lock(&self) -> MutexGuard<'_, Nic> {
        self.nic.lock().expect("test NIC lock")
    }

    /// Refuses every transmission on a queue (a full transmit ring) until
    /// [`allow_tx`](Self::allow_tx).
    pub fn refuse_tx(&self, side: Side, queue: usize) {
        self.lock().sides[side.index()].queues[queue].refuse_tx = true;
    }

    /// Takes frames again on a queue and, with `report`, reports it writable to its core
    /// (without: the runtime finds out only by trying again).
    pub fn allow_tx(&self, side: Side, queue: usize, report: bool) {
        let mut nic = self.lock();
        nic.sides[side.index()].queues[queue].refuse_tx = false;
        if !report {
            return;
        }
        self.notify(
            &mut nic,
            side,
            queue,
            Readiness {
                readable: false,
                writable: true,
            },
        );
    }

    /// Transmits `frames` from `side`'s end, as if a stack there had sent them.
    pub fn send_raw(&self, side: Side, frames: Vec<IOBuf>) {
        let mut nic = self.lock();
        let mut queue: VecDeque<TxFrame> = frames.into_iter().map(TxFrame::from).collect();
        while !queue.is_empty() {
            if nic.ends.0[side.index()].transmit(Instant::ZERO, &mut queue) == 0 {
                break;
            }
            self.deal(&mut nic, side.other());
        }
    }

    /// Whether a queue is watched (between `watch` and `unwatch`).
    pub fn watched(&self, side: Side, queue: usize) -> bool {
        self.lock().sides[side.index()].queues[queue]
            .watcher
            .is_some()
    }

    /// Frames dealt to each queue of `side`.
    pub fn dealt(&self, side: Side) -> Vec<u64> {
        self.lock().sides[side.index()]
            .queues
            .iter()
            .map(|q| q.dealt)
            .collect()
    }

    /// Transmit calls refused on a queue.
    pub fn refused(&self, side: Side, queue: usize) -> u64 {
        self.lock().sides[side.index()].queues[queue].refused
    }

    /// Loses every frame arriving at `side` (`true`) or delivers them again (`false`).
    pub fn blackhole(&self, side: Side, on: bool) {
        self.lock().sides[side.index()].blackhole = on;
    }

    /// Frames lost at `side` to [`blackhole`](Self::blackhole).
    pub fn lost(&self, side: Side) -> u64 {
        self.lock().sides[side.index()].lost
    }

    /// Frames waiting in a queue for its stack.
    pub fn pending(&self, side: Side, queue: usize) -> usize {
        self.lock().sides[side.index()].queues[queue].rx.len()
    }

    /// Whether a queue is still alive (its `TestQueue` not dropped).
    pub fn alive(&self, side: Side, queue: usize) -> bool {
        self.lock().sides[side.index()].queues[queue].alive
    }

    /// Frames dropped at `side`'s queues for want of room.
    pub fn dropped(&self, side: Side) -> u64 {
        self.lock().sides[side.index()]
            .queues
            .iter()
            .map(|q| q.dropped)
            .sum()
    }

    /// Moves what arrived at `side`'s end to its queues, and tells their cores.
    fn deal(&self, nic: &mut Nic, side: Side) {
        let mut frames = Vec::new();
        let end = &mut nic.ends.0[side.index()];
        while end.receive(Instant::ZERO, &mut frames, usize::MAX) > 0 {}
        let capacity = nic.capacity;
        for frame in frames {
            let state = &mut nic.sides[side.index()];
            if state.blackhole {
                state.lost += 1;
                continue;
            }
            let queue = match state.deal {
                Deal::RoundRobin => {
                    let q = state.next;
                    state.next = (q + 1) % state.queues.len();
                    q
                }
                Deal::AllTo(q) => q,
            };
            let q = &mut state.queues[queue];
            if q.rx.len() >= capacity {
                q.dropped += 1;
                continue;
            }
            q.rx.push_back(frame);
            q.dealt += 1;
            self.notify(nic, side, queue, Readiness::READABLE);
        }
    }

    /// Reports `readiness` on the queue's core, by an event injected there (never from
    /// inside a device method: the runtime holds the device borrowed then). Reports
    /// made while one is on its way join it.
    fn notify(&self, nic: &mut Nic, side: Side, queue: usize, readiness: Readiness) {
        let q = &mut nic.sides[side.index()].queues[queue];
        let Some((core, key)) = q.watcher else { return };
        if let Some(pending) = &mut q.pending {
            pending.readable |= readiness.readable;
            pending.writable |= readiness.writable;
            return;
        }
        q.pending = Some(readiness);
        let handle = self.clone();
        self.platform.inject_device_event(core, move || {
            let readiness = {
                let mut nic = handle.lock();
                let q = &mut nic.sides[side.index()].queues[queue];
                if q.watcher.map(|(_, k)| k) != Some(key) {
                    return; // Unwatched since.
                }
                q.pending.take()
            };
            let ready = WATCHERS.with(|w| w.borrow().get(&key).cloned());
            if let (Some(ready), Some(readiness)) = (ready, readiness) {
                ready.ready(readiness);
            }
        });
    }
}

impl NetDevice for TestQueue {
    fn capabilities(&self) -> DeviceCapabilities {
        let nic = self.nic.lock();
        let mut caps = nic.ends.0[self.side.index()].capabilities();
        caps.queues = nic.sides[self.side.index()].queues.len();
        caps
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let mut nic = self.nic.lock();
        let burst = nic.ends.0[0].link().capabilities().max_burst;
        let rx = &mut nic.sides[self.side.index()].queues[self.queue].rx;
        let n = rx.len().min(max).min(burst);
        out.extend(rx.drain(..n));
        n
    }

    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mut nic = self.nic.lock();
        let q = &mut nic.sides[self.side.index()].queues[self.queue];
        if q.refuse_tx {
            if !frames.is_empty() {
                q.refused += 1;
            }
            return 0;
        }
        let sent = nic.ends.0[self.side.index()].transmit(now, frames);
        self.nic.deal(&mut nic, self.side.other());
        sent
    }

    fn poll_at(&self) -> Option<Instant> {
        let nic = self.nic.lock();
        let waiting = !nic.sides[self.side.index()].queues[self.queue]
            .rx
            .is_empty();
        waiting.then_some(Instant::ZERO)
    }

    fn counters(&self) -> DeviceCounters {
        self.nic.lock().ends.0[self.side.index()].counters()
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        if let Ok(mut nic) = self.nic.nic.lock() {
            nic.sides[self.side.index()].queues[self.queue].alive = false;
        }
    }
}

impl PlatformDevice for TestQueue {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        WATCHERS.with(|w| w.borrow_mut().insert(key, ready));
        let mut nic = self.nic.lock();
        let q = &mut nic.sides[self.side.index()].queues[self.queue];
        q.watcher = Some((event::core_id(), key));
        q.pending = None;
        // Frames that arrived before the watch are reported too (the trait's contract).
        if !q.rx.is_empty() {
            self.nic
                .notify(&mut nic, self.side, self.queue, Readiness::READABLE);
        }
        Ok(())
    }

    fn unwatch(&mut self) {
        let mut nic = self.nic.lock();
        let q = &mut nic.sides[self.side.index()].queues[self.queue];
        if let Some((_, key)) = q.watcher.take() {
            WATCHERS.with(|w| w.borrow_mut().remove(&key));
        }
        q.pending = None;
    }

    fn name(&self) -> String {
        format!("test-{:?}{}", self.side, self.queue)
    }
}

// ---------------------------------------------------------------------------------------
// Stacks and applications.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use ebb_core::event::{Runtime, run_on_threads};
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_net::iface::Ipv4Cidr;
use ebb_net::tcp::TcpConfig;
use ebb_net::wire::EthernetAddress;
use ebb_netstack::{AddressConfig, NetStackConfig, SendableDevice};

/// Our address (side A).
pub const US: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 1);
/// The peer's address (side B).
pub const PEER: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);

/// Runs `main` on core 0 of a runtime of `cores` cores on `platform`; returns its output.
pub fn run<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    platform: &Arc<TestPlatform>,
    cores: usize,
    main: impl FnOnce() -> F + Send,
) -> T {
    let runtime = Runtime::new(platform.clone(), cores).expect("runtime");
    // A core that never sleeps never lets virtual time move, and the TestPlatform's hang
    // check only sees sleeps: bound the whole run in real time so such a regression
    // fails instead of hanging the suite.
    let (finished, watched) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            watched.recv_timeout(Duration::from_secs(60))
        {
            eprintln!("the runtime ran 60 s of real time: a core busy-polls without end");
            std::process::abort();
        }
    });
    let output = run_on_threads(runtime, |_| {}, main).expect("runtime ran");
    drop(finished);
    let _ = watchdog.join();
    output
}

/// The MAC of the host `last` on the test subnet.
pub fn mac(last: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 9, 1, last])
}

/// A static configuration for `ip` (10.9.1.x/24); TIME-WAIT lasts 2 s.
pub fn config(ip: Ipv4Addr, seed: u64) -> NetStackConfig {
    let mut config = NetStackConfig::new(
        AddressConfig::Static {
            cidr: Ipv4Cidr::new(ip, 24).expect("valid /24"),
            gateway: None,
        },
        [seed, !seed],
    );
    config.mac = mac(ip.octets()[3]);
    config.tcp = TcpConfig {
        isn_seed: [seed, !seed],
        msl: Duration::from_secs(1),
        ..TcpConfig::default()
    };
    config
}

/// Boxes test queues as `NetStack::start` takes them.
pub fn devices(queues: Vec<TestQueue>) -> Vec<SendableDevice> {
    queues
        .into_iter()
        .map(|q| Box::new(q) as SendableDevice)
        .collect()
}

/// Deterministic bytes (xorshift), different for each seed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
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

/// Sends all of `bytes` on `conn` in 16 KiB buffers (queued as the window allows).
pub fn send_all(conn: &dyn TcpConnection, bytes: &[u8]) {
    for chunk in bytes.chunks(16 << 10) {
        conn.send(IOBufChain::from(IOBuf::copy_from_slice(chunk)))
            .expect("send");
    }
}

/// Where a handler ran: `(core, local port, remote port)` per call.
pub type RanOn = Arc<Mutex<Vec<(CoreId, SocketAddrV4, SocketAddrV4)>>>;

/// Echoes what it receives; records the core each call ran on.
pub struct Echo {
    /// Every `receive`'s core and connection.
    pub ran_on: RanOn,
}

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let (std::net::SocketAddr::V4(local), std::net::SocketAddr::V4(remote)) =
            (conn.local_addr(), conn.peer_addr())
        else {
            unreachable!("IPv4 only");
        };
        self.ran_on
            .lock()
            .expect("ran_on")
            .push((event::core_id(), local, remote));
        conn.send(IOBufChain::from(data)).expect("echo");
    }
    fn closed(&mut self, _: CloseReason) {}
}

/// How a [`Client`] ended.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Bytes echoed back.
    pub got: usize,
    /// Every byte equal to what was sent, in order.
    pub intact: bool,
    /// How it closed, once it did.
    pub closed: Option<CloseReason>,
    /// The core its callbacks ran on (the last one's).
    pub core: Option<CoreId>,
}

/// Sends its bytes (see [`Client::start`]), checks the echo, closes when all came back;
/// reports through `outcome` (with the core if every callback ran on the one that
/// started it).
pub struct Client {
    expected: Rc<Vec<u8>>,
    got: usize,
    intact: bool,
    outcome: Arc<Mutex<Outcome>>,
    done: Arc<AtomicU32>,
    /// Every callback ran on this core.
    core: CoreId,
    same_core: bool,
}

impl Client {
    /// Installs a client on `conn` and sends `data`; `done` counts clients that ended.
    pub fn start(
        conn: &ebb_netstack::TcpConn,
        data: Vec<u8>,
        outcome: Arc<Mutex<Outcome>>,
        done: Arc<AtomicU32>,
    ) {
        let data = Rc::new(data);
        conn.set_handler(Client {
            expected: data.clone(),
            got: 0,
            intact: true,
            outcome,
            done,
            core: event::core_id(),
            same_core: true,
        });
        send_all(conn, &data);
    }
}

impl TcpHandler for Client {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.same_core &= event::core_id() == self.core;
        let bytes = data.as_slice();
        let end = self.got + bytes.len();
        if end > self.expected.len() || self.expected[self.got..end] != *bytes {
            self.intact = false;
        }
        self.got = end;
        if self.got == self.expected.len() {
            conn.close();
        }
    }
    fn closed(&mut self, reason: CloseReason) {
        *self.outcome.lock().expect("outcome") = Outcome {
            got: self.got,
            intact: self.intact && self.got == self.expected.len(),
            closed: Some(reason),
            core: (self.same_core && event::core_id() == self.core).then_some(self.core),
        };
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (in virtual time, looking every 5 ms) until `cond`, for at most `limit`;
/// panics with `what` after that.
pub async fn wait_until(limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_for(limit, cond).await,
        "{what}: not after {limit:?} of virtual time"
    );
}

/// Waits (in virtual time, looking every 5 ms) until `cond`, for at most `limit`;
/// returns whether it came true.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = event::now();
    while !cond() {
        if event::now().saturating_duration_since(start) >= limit {
            return false;
        }
        event::sleep(Duration::from_millis(5)).await;
    }
    true
}
