//! The `guest_frames` target's harness (also run on the checked-in seeds by `cargo test`).
//!
//! What a guest can send the monitor's user-mode network, arbitrary: the input is a
//! sequence of records, each a kind byte, a length (u16 LE) and that many bytes of a
//! frame (Ethernet header first). The kind's low two bits say what the guest's virtio-net
//! header claimed of the checksum: 0 or 3 complete, 1 partial TCP (`start` 34, `offset`
//! 16), 2 partial UDP (offset 6). The frames go through one `UserNet` that lives across
//! inputs (as a VM's does across frames; nothing it keeps is allowed to break it), with no
//! port forwards (none binds a host port) and a stand-in for passt that takes every frame
//! routed to it. Its clock moves 1 ms per input.
//!
//! Promised, and asserted: nothing panics; every frame is taken; every frame handed to
//! passt fits the MTU (a TSO frame is cut first); every frame
//! toward the guest fits the MTU (this guest did not ask for large receive); the routing
//! counters account for every frame.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, FrameChecksum, NetDevice, RxFrame, TxFrame,
};
use ebb_usernet::{UserNet, UserNetConfig};
use ebb_vmm::virtio::HostLink;

/// The largest frame of a 1500-byte MTU.
const MAX_FRAME: usize = 1514;

/// What [`frames`] saw, for the seeds test (every outcome reached).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes {
    /// Frames routed to the endpoint (its stack parsed them).
    pub to_endpoint: u64,
    /// Frames routed to passt.
    pub to_rest: u64,
    /// Frames too short to route, or for passt but unfit for it.
    pub malformed: u64,
    /// Frames passt received (a cut TSO frame is several).
    pub rest_received: u64,
    /// Frames the endpoint sent toward the guest (ARP replies, resets, ...).
    pub to_guest: u64,
}

/// passt's stand-in: takes every frame, remembering how many and the largest.
struct Sink {
    doorbell: OwnedFd,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Default)]
struct Seen {
    frames: u64,
    largest: usize,
}

impl NetDevice for Sink {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::ETHERNET
    }
    fn receive(&mut self, _now: Instant, _out: &mut Vec<RxFrame>, _max: usize) -> usize {
        0
    }
    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mut seen = self.seen.lock().unwrap();
        let taken = frames.len();
        for frame in frames.drain(..) {
            seen.frames += 1;
            seen.largest = seen.largest.max(frame.chain.len());
        }
        taken
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
}

impl HostLink for Sink {
    fn fd(&self) -> BorrowedFd<'_> {
        self.doorbell.as_fd()
    }
}

struct Harness {
    net: UserNet,
    seen: Arc<Mutex<Seen>>,
    clock: u64,
}

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

fn harness() -> Harness {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let doorbell = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
        .expect("an eventfd for passt's stand-in");
    let sink = Sink {
        doorbell,
        seen: seen.clone(),
    };
    let net = UserNet::new(&UserNetConfig::new(Vec::new()), Some(Box::new(sink)))
        .expect("a user-mode network without forwards");
    Harness {
        net,
        seen,
        clock: 0,
    }
}

/// Parses `data` into frames (see the module docs).
fn parse(data: &[u8]) -> VecDeque<TxFrame> {
    let mut frames = VecDeque::new();
    let mut rest = data;
    while let Some((&[kind, lo, hi], tail)) = rest.split_first_chunk::<3>().map(|(h, t)| (h, t)) {
        let len = usize::from(u16::from_le_bytes([lo, hi])).min(tail.len());
        let (bytes, after) = tail.split_at(len);
        let checksum = match kind & 3 {
            1 => FrameChecksum::Partial {
                start: 34,
                offset: 16,
            },
            2 => FrameChecksum::Partial {
                start: 34,
                offset: 6,
            },
            _ => FrameChecksum::Complete,
        };
        frames.push_back(TxFrame {
            chain: IOBufChain::from(IOBuf::copy_from_slice(bytes)),
            checksum,
        });
        rest = after;
    }
    frames
}

/// Sends the frames `data` describes from the guest, then takes what the network has for
/// the guest; asserts the promises of the module docs.
pub fn frames(data: &[u8]) -> Outcomes {
    let mut frames = parse(data);
    let count = frames.len() as u64;
    HARNESS.with(|cell| {
        let mut cell = cell.borrow_mut();
        let h = cell.get_or_insert_with(harness);
        h.clock += 1_000_000;
        let now = Instant::from_nanos(h.clock);
        let before = h.net.forwarder_counters();
        let rest_before = h.seen.lock().unwrap().frames;
        let taken = h.net.transmit(now, &mut frames);
        assert_eq!(taken as u64, count, "every frame from the guest is taken");
        assert!(frames.is_empty());
        let mut to_guest = 0;
        loop {
            let mut out = Vec::new();
            h.net.drain();
            let n = h.net.receive(now, &mut out, 64);
            for frame in &out {
                assert!(
                    frame.buf.len() <= MAX_FRAME,
                    "a {}-byte frame toward a guest without large receive",
                    frame.buf.len()
                );
            }
            to_guest += n as u64;
            if n == 0 {
                break;
            }
        }
        let after = h.net.forwarder_counters();
        let seen = h.seen.lock().unwrap();
        assert!(
            seen.largest <= MAX_FRAME,
            "passt got a {}-byte frame",
            seen.largest
        );
        let routed = (after.guest_to_endpoint - before.guest_to_endpoint)
            + (after.guest_to_rest - before.guest_to_rest)
            + (after.guest_malformed - before.guest_malformed)
            + (after.guest_unrouted - before.guest_unrouted)
            + (after.guest_to_rest_dropped - before.guest_to_rest_dropped);
        assert_eq!(
            routed, count,
            "every frame is counted once: {before:?} -> {after:?}"
        );
        Outcomes {
            to_endpoint: after.guest_to_endpoint - before.guest_to_endpoint,
            to_rest: after.guest_to_rest - before.guest_to_rest,
            malformed: after.guest_malformed - before.guest_malformed,
            rest_received: seen.frames - rest_before,
            to_guest,
        }
    })
}
