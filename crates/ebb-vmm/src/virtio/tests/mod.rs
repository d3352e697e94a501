//! The virtio-net device against a hostile guest, without KVM.
//!
//! A [`Guest`] is what a driver sees of the device: the MMIO register file
//! ([`VirtioNetDevice::mmio_read`]/[`mmio_write`](VirtioNetDevice::mmio_write), exactly
//! as the vCPU threads call them on an MMIO exit) and rings in guest memory (plain host
//! memory behind a [`GuestMem`]). The device side runs one I/O-thread round at a time ([`Engine::step`])
//! against an in-memory backend ([`Wire`]). Each case writes what a broken or malicious
//! driver could write and checks that the device either refuses the setting or marks
//! itself broken — `DEVICE_NEEDS_RESET` in the status register and a reason naming the
//! queue and the fault — and that it neither panics nor loops: every drive of the device
//! is bounded ([`Guest::settle`]).
//!
//! Rules the cases pin down (see also `docs/10-native-networking.md`, "Hostile guests"):
//!
//! * Overlapping buffers (within a chain, across chains, or over the rings) are allowed:
//!   the device copies bytes in and out through checked accesses only and keeps its own
//!   ring indices, so an overlap can garble only the guest's own data. Rings overlapping
//!   *each other* are refused at activation (that is also what a queue made ready before
//!   its addresses were written looks like).
//! * A received frame larger than the posted buffer is dropped and counted (`rx_dropped`),
//!   the buffer is returned with length 0: small buffers are legal, only unusable.
//! * Register writes that would change what the device already acts on (driver features
//!   after FEATURES_OK, queue registers of a ready queue or after DRIVER_OK) are ignored;
//!   accesses the device cannot make sense of (not 32 bits, misaligned) break it.

use super::host_link::{CopyingLink, Direct, HostLink};
use super::net::{
    Engine, GUEST_TURN, GuestTurn, Offload, PENDING_OUTPUT_RETRY, QUEUE_MAX, SLEEP_MAX,
    VirtioNetDevice, sleep_bound,
};
use crate::guest::GuestMem;
use ebb_abi::virtio::{
    DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE, MMIO_BASE, MMIO_SLOT_SIZE, NET_HDR_LEN, features,
    regs, status,
};
use ebb_core::{IOBuf, Instant as NetInstant};
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, FaultConfig, FaultInjector, FrameChecksum, NetDevice,
    Probability, RxFrame, TxFrame, complete_checksum,
};
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

// The cases, by what they attack; the harness below is theirs.
mod copying;
mod direct;
mod engine;
mod offload;
mod transport;
mod usernet;

/// Guest memory of the fake guest.
const MEM: u64 = 8 << 20;
/// Queue size the driver picks unless a case says otherwise.
const SIZE: u16 = 16;
/// Receive, transmit and control queue of the single pair.
const RX: u16 = 0;
const TX: u16 = 1;
const CTRL: u16 = 2;
/// Where buffers go.
const BUF: u64 = 0x40_0000;
/// A frame: Ethernet header and a little payload.
const FRAME: &[u8] = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00hello, hostile world";

/// The host side of the in-memory backend.
#[derive(Clone, Default)]
struct Wire {
    to_guest: Arc<Mutex<VecDeque<Vec<u8>>>>,
    from_guest: Arc<Mutex<Vec<Vec<u8>>>>,
    /// The checksum state of each frame in `to_guest` (missing: complete).
    to_guest_checksums: Arc<Mutex<VecDeque<FrameChecksum>>>,
    /// The checksum state the device gave each frame in `from_guest`.
    from_guest_checksums: Arc<Mutex<Vec<FrameChecksum>>>,
}

/// The in-memory backend the device drives: through the IOBuf path, or as a
/// [`CopyingLink`] (the AF_XDP backend's path) when `copying` is set.
struct WireEnd {
    wire: Wire,
    fd: EventFd,
    copying: Option<CopyingWire>,
}

/// What the copying backend's buffers allow, and what the device did with it.
#[derive(Clone, Default)]
struct CopyingWire {
    /// Longest frame a buffer holds (an AF_XDP chunk less its headroom); 0: no limit.
    buffer_len: usize,
    /// Frames it takes before it is full (`None`: no limit), until raised.
    room: Arc<Mutex<Option<usize>>>,
    /// Frames queued since the last flush, and the flushes that sent some.
    unflushed: Arc<Mutex<usize>>,
    flushes: Arc<Mutex<Vec<usize>>>,
}

thread_local! {
    /// [`Guest::build`] makes its backend a copying one: set by the cases of
    /// `copying.rs` that run the backend-generic cases of the other files again.
    static COPYING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// [`Guest::build`] puts the in-memory backend behind ebb-usernet's forwarder (as
    /// its rest, the place of passt): set by the cases of `usernet.rs`.
    static USERNET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl CopyingLink for WireEnd {
    fn transmit_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> std::io::Result<bool> {
        let copying = self.copying.as_ref().expect("a copying wire");
        if copying.buffer_len != 0 && len > copying.buffer_len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "longer than a buffer",
            ));
        }
        let mut room = copying.room.lock().expect("not poisoned");
        if *room == Some(0) {
            return Ok(false);
        }
        // Junk first: `fill` must write every byte.
        let mut buf = vec![0x5a; len];
        if !fill(&mut buf) {
            return Ok(false);
        }
        if let Some(r) = room.as_mut() {
            *r -= 1;
        }
        self.wire.from_guest.lock().expect("not poisoned").push(buf);
        self.wire
            .from_guest_checksums
            .lock()
            .expect("not poisoned")
            .push(FrameChecksum::Complete);
        *copying.unflushed.lock().expect("not poisoned") += 1;
        Ok(true)
    }

    fn receive_with(&mut self, max: usize, take: &mut dyn FnMut(&[u8])) -> usize {
        let mut to_guest = self.wire.to_guest.lock().expect("not poisoned");
        let mut n = 0;
        while n < max
            && let Some(frame) = to_guest.pop_front()
        {
            take(&frame);
            n += 1;
        }
        n
    }

    fn has_received(&self) -> bool {
        !self.wire.to_guest.lock().expect("not poisoned").is_empty()
    }

    fn flush(&mut self) {
        let copying = self.copying.as_ref().expect("a copying wire");
        let mut unflushed = copying.unflushed.lock().expect("not poisoned");
        if *unflushed > 0 {
            copying
                .flushes
                .lock()
                .expect("not poisoned")
                .push(*unflushed);
            *unflushed = 0;
        }
    }
}

impl NetDevice for WireEnd {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::ETHERNET
    }
    fn receive(&mut self, _now: NetInstant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let mut to_guest = self.wire.to_guest.lock().expect("not poisoned");
        let mut states = self.wire.to_guest_checksums.lock().expect("not poisoned");
        let n = max.min(to_guest.len());
        for buf in to_guest.drain(..n) {
            out.push(RxFrame {
                buf: IOBuf::from_vec(buf),
                checksum: states.pop_front().unwrap_or_default(),
            });
        }
        n
    }
    fn transmit(&mut self, _now: NetInstant, frames: &mut VecDeque<TxFrame>) -> usize {
        let n = frames.len();
        let mut from_guest = self.wire.from_guest.lock().expect("not poisoned");
        let mut states = self.wire.from_guest_checksums.lock().expect("not poisoned");
        for frame in frames.drain(..) {
            from_guest.push(frame.chain.to_vec());
            states.push(frame.checksum);
        }
        n
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

impl HostLink for WireEnd {
    fn fd(&self) -> BorrowedFd<'_> {
        crate::sys::borrow_eventfd(&self.fd)
    }
    fn copying(&mut self) -> Option<&mut dyn CopyingLink> {
        self.copying
            .is_some()
            .then_some(self as &mut dyn CopyingLink)
    }
}

/// What the device asked of a backend's large receive ([`HostLink::set_large_receive`]),
/// shared between the backend and the test.
#[derive(Clone, Default)]
struct LargeReceiveLog {
    /// Every call's `on`, in order.
    calls: Arc<Mutex<Vec<bool>>>,
    /// Calls with this `on` fail (as `TUNSETOFFLOAD` might).
    refuse: Arc<Mutex<Option<bool>>>,
}

impl LargeReceiveLog {
    fn calls(&self) -> Vec<bool> {
        self.calls.lock().expect("not poisoned").clone()
    }

    fn refuse(&self, on: Option<bool>) {
        *self.refuse.lock().expect("not poisoned") = on;
    }

    /// Records a call and answers it.
    fn set(&self, on: bool) -> std::io::Result<()> {
        self.calls.lock().expect("not poisoned").push(on);
        if *self.refuse.lock().expect("not poisoned") == Some(on) {
            return Err(std::io::Error::other("TUNSETOFFLOAD refused (a test)"));
        }
        Ok(())
    }
}

/// A backend with TAP's one-frame-per-call semantics for the direct path: one end of a
/// Unix datagram socket pair (a `readv` takes one datagram and drops what does not fit; a
/// `writev` sends one; a full peer says `EAGAIN`). Only [`HostLink::direct`] is used: the
/// copying calls are never made for a direct backend the guest can read headers of.
/// Large receive is only recorded: what the host end sends is what the guest gets.
struct DatagramEnd {
    sock: UnixDatagram,
    vnet_hdr: bool,
    large_receive: LargeReceiveLog,
}

impl NetDevice for DatagramEnd {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::default()
    }
    fn receive(&mut self, _: NetInstant, _: &mut Vec<RxFrame>, _: usize) -> usize {
        unreachable!("a direct backend is read with readv")
    }
    fn transmit(&mut self, _: NetInstant, _: &mut VecDeque<TxFrame>) -> usize {
        unreachable!("a direct backend is written with writev")
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

impl HostLink for DatagramEnd {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn direct(&self) -> Option<Direct<'_>> {
        Some(Direct {
            fd: self.sock.as_fd(),
            vnet_hdr: self.vnet_hdr,
        })
    }
    fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        self.large_receive.set(on)
    }
}

/// Transmit chain `head` (slots `head`, `head + 1`): `header` then `frame`, in two
/// descriptors at `at`.
fn post_tx(g: &mut Guest, head: u16, at: u64, header: &[u8; NET_HDR_LEN], frame: &[u8]) {
    g.mem.write_bytes(at, header).expect("in memory");
    g.mem.write_bytes(at + 0x100, frame).expect("in memory");
    g.desc(TX, head, d(at, NET_HDR_LEN as u32, DESC_F_NEXT, head + 1));
    g.desc(TX, head + 1, d(at + 0x100, frame.len() as u32, 0, 0));
    g.publish(TX, head);
}

/// Runs `f` on its own thread and fails the test if it takes more than ten seconds: a
/// device that loops inside one round (where [`Guest::settle`]'s bound cannot reach)
/// fails the case instead of hanging the suite.
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = done.send(result);
    });
    match wait.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(Ok(value)) => value,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("the device did not return within 10 s: it hangs"),
    }
}

/// What queue `q` is called in a reason.
fn queue_name(q: u16) -> &'static str {
    match q {
        RX => "queue 0 (receive",
        TX => "queue 1 (transmit",
        _ => "queue 2 (control",
    }
}

fn d(addr: u64, len: u32, flags: u16, next: u16) -> (u64, u32, u16, u16) {
    (addr, len, flags, next)
}

/// A driver's view of the device, plus the device's I/O-thread side.
struct Guest {
    mem: GuestMem,
    dev: VirtioNetDevice,
    engine: Engine,
    backends: Vec<Box<dyn HostLink>>,
    wire: Wire,
    /// What the device asked of a direct backend's large receive.
    large_receive: LargeReceiveLog,
    wakes: Vec<EventFd>,
    /// Per queue: size and the driver's next available index.
    sizes: [u16; 3],
    avail_idx: [u16; 3],
}

impl Guest {
    fn new() -> Guest {
        Guest::with_pairs(1)
    }

    /// A device with `pairs` queue pairs; the ring helpers cover queues 0..3 only.
    fn with_pairs(pairs: u16) -> Guest {
        Guest::build(pairs, Offload::NONE, None)
    }

    /// One pair, checksum offload offered; with `faults`, the backend behind a fault
    /// injector making them both ways (as `--net-faults` does).
    fn with_offload(faults: Option<FaultConfig>) -> Guest {
        Guest::build(1, Offload::CHECKSUM, faults)
    }

    /// One pair over the in-memory backend (the copying path), offering `offload`.
    fn build(pairs: u16, offload: Offload, faults: Option<FaultConfig>) -> Guest {
        let wire = Wire::default();
        let end = WireEnd {
            wire: wire.clone(),
            fd: EventFd::new(EFD_NONBLOCK).expect("an eventfd"),
            copying: COPYING.get().then(CopyingWire::default),
        };
        let backend: Box<dyn HostLink> = match faults {
            Some(f) => Box::new(
                FaultInjector::new(end, 7)
                    .with_rx_faults(f)
                    .with_tx_faults(f),
            ),
            None => Box::new(end),
        };
        let backend = if USERNET.get() {
            usernet::behind_the_forwarder(backend)
        } else {
            backend
        };
        Guest::with_backend(pairs, offload, backend, wire)
    }

    /// One pair over a [`DatagramEnd`] (the direct path, as with TAP), with a
    /// virtio-net header on the socket and checksum offload offered when `vnet_hdr`;
    /// and the socket's other end, the "host".
    fn with_direct(vnet_hdr: bool) -> (Guest, UnixDatagram) {
        let offload = if vnet_hdr {
            Offload::CHECKSUM
        } else {
            Offload::NONE
        };
        Guest::with_direct_offering(vnet_hdr, offload)
    }

    /// [`with_direct`](Self::with_direct), offering `offload`.
    fn with_direct_offering(vnet_hdr: bool, offload: Offload) -> (Guest, UnixDatagram) {
        let (ours, host) = UnixDatagram::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("non-blocking");
        host.set_nonblocking(true).expect("non-blocking");
        let large_receive = LargeReceiveLog::default();
        let backend = Box::new(DatagramEnd {
            sock: ours,
            vnet_hdr,
            large_receive: large_receive.clone(),
        });
        let guest = Guest {
            large_receive,
            ..Guest::with_backend(1, offload, backend, Wire::default())
        };
        (guest, host)
    }

    fn with_backend(pairs: u16, offload: Offload, backend: Box<dyn HostLink>, wire: Wire) -> Guest {
        let mmap = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM as usize)])
            .expect("host memory for the fake guest");
        Guest {
            mem: GuestMem::new(mmap, MEM),
            dev: VirtioNetDevice::new([2, 0, 0, 0, 0, 1], pairs, offload).expect("a device"),
            engine: Engine::new(),
            backends: vec![backend],
            wire,
            large_receive: LargeReceiveLog::default(),
            wakes: vec![EventFd::new(EFD_NONBLOCK).expect("an eventfd")],
            sizes: [SIZE; 3],
            avail_idx: [0; 3],
        }
    }

    // ---- the register file, as a driver uses it ----

    fn read(&self, offset: u64) -> u32 {
        let mut data = [0u8; 4];
        self.dev.mmio_read(MMIO_BASE + offset, &mut data);
        u32::from_le_bytes(data)
    }

    fn write(&self, offset: u64, value: u32) {
        self.dev
            .mmio_write(MMIO_BASE + offset, &value.to_le_bytes());
    }

    fn status(&self) -> u32 {
        self.read(regs::STATUS)
    }

    fn features(&self, accepted: u64) {
        self.write(regs::DRIVER_FEATURES_SEL, 0);
        self.write(regs::DRIVER_FEATURES, accepted as u32);
        self.write(regs::DRIVER_FEATURES_SEL, 1);
        self.write(regs::DRIVER_FEATURES, (accepted >> 32) as u32);
    }

    /// ACKNOWLEDGE, DRIVER, the features, FEATURES_OK; whether the device kept it.
    fn negotiate(&self, accepted: u64) -> bool {
        self.write(regs::STATUS, status::ACKNOWLEDGE);
        self.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        self.features(accepted);
        self.write(
            regs::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
        );
        self.status() & status::FEATURES_OK != 0
    }

    /// Where queue `q`'s rings go when the driver is well behaved.
    fn rings(q: u16) -> (u64, u64, u64) {
        let desc = 0x10_0000 + 0x1_0000 * u64::from(q);
        (desc, desc + 0x1000, desc + 0x2000)
    }

    /// Sets queue `q` up at `(desc, avail, used)` with `size` entries and makes it ready.
    fn queue(&mut self, q: u16, size: u32, (desc, avail, used): (u64, u64, u64)) {
        self.write(regs::QUEUE_SEL, u32::from(q));
        assert_eq!(
            self.read(regs::QUEUE_READY),
            0,
            "queue {q} starts not ready"
        );
        assert_eq!(self.read(regs::QUEUE_NUM_MAX), u32::from(QUEUE_MAX));
        self.write(regs::QUEUE_NUM, size);
        for (low, addr) in [
            (regs::QUEUE_DESC_LOW, desc),
            (regs::QUEUE_DRIVER_LOW, avail),
            (regs::QUEUE_DEVICE_LOW, used),
        ] {
            self.write(low, addr as u32);
            self.write(low + 4, (addr >> 32) as u32);
        }
        self.write(regs::QUEUE_READY, 1);
        if let Some(s) = self.sizes.get_mut(usize::from(q)) {
            *s = size as u16;
        }
    }

    fn driver_ok(&self) {
        self.write(
            regs::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK,
        );
    }

    /// What a good driver accepts.
    fn good_features() -> u64 {
        [
            features::VERSION_1,
            features::RING_EVENT_IDX,
            features::NET_MAC,
            features::NET_CTRL_VQ,
        ]
        .into_iter()
        .fold(0, |acc, bit| acc | features::bit(bit))
    }

    /// A good driver's whole setup: features, the three queues, DRIVER_OK.
    fn start(&mut self) {
        assert!(self.negotiate(Self::good_features()));
        for q in [RX, TX, CTRL] {
            self.queue(q, u32::from(SIZE), Self::rings(q));
        }
        self.driver_ok();
        self.settle();
        assert_eq!(self.dev.broken(), None);
    }

    // ---- the rings, as a driver writes them ----

    fn desc(&self, q: u16, i: u16, (addr, len, flags, next): (u64, u32, u16, u16)) {
        let at = Self::rings(q).0 + 16 * u64::from(i);
        let mut raw = [0u8; 16];
        raw[0..8].copy_from_slice(&addr.to_le_bytes());
        raw[8..12].copy_from_slice(&len.to_le_bytes());
        raw[12..14].copy_from_slice(&flags.to_le_bytes());
        raw[14..16].copy_from_slice(&next.to_le_bytes());
        self.mem.write_bytes(at, &raw).expect("in memory");
    }

    /// Puts `head` in the next available slot and publishes it.
    fn publish(&mut self, q: u16, head: u16) {
        let (_, avail, _) = Self::rings(q);
        let size = self.sizes[usize::from(q)];
        let idx = self.avail_idx[usize::from(q)];
        let slot = u64::from(idx % size);
        self.mem
            .store_u16(avail + 4 + 2 * slot, head, Ordering::Release)
            .expect("in memory");
        self.set_avail_idx(q, idx.wrapping_add(1));
    }

    fn set_avail_idx(&mut self, q: u16, idx: u16) {
        self.avail_idx[usize::from(q)] = idx;
        let (_, avail, _) = Self::rings(q);
        self.mem
            .store_u16(avail + 2, idx, Ordering::Release)
            .expect("in memory");
    }

    /// The driver's `used_event` for queue `q`.
    fn set_used_event(&self, q: u16, event: u16) {
        let (_, avail, _) = Self::rings(q);
        let size = self.sizes[usize::from(q)];
        self.mem
            .store_u16(avail + 4 + 2 * u64::from(size), event, Ordering::Release)
            .expect("in memory");
    }

    /// The device's `avail_event` for queue `q`: the available index it wants a kick at.
    fn avail_event(&self, q: u16) -> u16 {
        let (_, _, used) = Self::rings(q);
        let size = self.sizes[usize::from(q)];
        self.mem
            .load_u16(used + 4 + 8 * u64::from(size), Ordering::Acquire)
            .expect("in memory")
    }

    /// Whether the device asks the driver to kick queue `q` when it next publishes.
    fn wants_kick(&self, q: u16) -> bool {
        self.avail_event(q) == self.avail_idx[usize::from(q)]
    }

    /// The used ring of queue `q`: `(id, len)` of every element the device produced.
    fn used(&self, q: u16) -> Vec<(u32, u32)> {
        let (_, _, used) = Self::rings(q);
        let size = self.sizes[usize::from(q)];
        let idx = self
            .mem
            .load_u16(used + 2, Ordering::Acquire)
            .expect("in memory");
        (0..idx)
            .map(|i| {
                let at = used + 4 + 8 * u64::from(i % size);
                let id = self.mem.read_u32(at).expect("in memory");
                (id, self.mem.read_u32(at + 4).expect("in memory"))
            })
            .collect()
    }

    // ---- the device side ----

    fn step(&mut self) -> bool {
        self.engine.step(
            &self.dev,
            &self.mem,
            NetInstant::from_nanos(0),
            &mut self.backends,
            &self.wakes,
        )
    }

    /// Steps until the device has nothing more to do: a bound, not a wait. A device that
    /// is still busy after 64 rounds with a guest that publishes nothing new loops.
    fn settle(&mut self) {
        for _ in 0..64 {
            if !self.step() {
                return;
            }
        }
        panic!("the device is still busy after 64 rounds: it loops");
    }

    fn sent(&self) -> Vec<Vec<u8>> {
        self.wire.from_guest.lock().expect("not poisoned").clone()
    }

    fn arrive(&self, frame: &[u8]) {
        self.arrive_with(frame, FrameChecksum::Complete);
    }

    /// A frame from the backend in checksum state `checksum`.
    fn arrive_with(&self, frame: &[u8], checksum: FrameChecksum) {
        let mut to_guest = self.wire.to_guest.lock().expect("not poisoned");
        let mut states = self.wire.to_guest_checksums.lock().expect("not poisoned");
        states.resize(to_guest.len(), FrameChecksum::Complete);
        to_guest.push_back(frame.to_vec());
        states.push_back(checksum);
    }

    /// The checksum states the device handed the backend, one per frame sent.
    fn sent_checksums(&self) -> Vec<FrameChecksum> {
        self.wire
            .from_guest_checksums
            .lock()
            .expect("not poisoned")
            .clone()
    }

    /// The device says it is broken, for a reason containing every one of `words`.
    #[track_caller]
    fn assert_broken(&self, words: &[&str]) {
        assert_ne!(
            self.status() & status::DEVICE_NEEDS_RESET,
            0,
            "DEVICE_NEEDS_RESET is set (reason: {:?})",
            self.dev.broken()
        );
        let why = self.dev.broken().expect("broken() gives a reason");
        for word in words {
            assert!(why.contains(word), "{why:?} names {word:?}");
        }
    }

    #[track_caller]
    fn assert_healthy(&self) {
        assert_eq!(self.dev.broken(), None);
        assert_eq!(self.status() & status::DEVICE_NEEDS_RESET, 0);
    }

    /// Writes the virtio-net header and `frame` at `addr` as one transmit buffer.
    fn tx_buffer(&self, addr: u64, frame: &[u8]) -> u32 {
        let mut bytes = vec![0u8; NET_HDR_LEN];
        bytes.extend_from_slice(frame);
        self.mem.write_bytes(addr, &bytes).expect("in memory");
        bytes.len() as u32
    }
}
