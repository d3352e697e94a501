//! The virtio-net driver: finds the device, negotiates, sets up one receive/transmit
//! queue pair per core, and drives each pair as an `ebb-net-driver` device ([`QueuePair`]).
//!
//! * **Receive**: every receive descriptor is one [`IOBuf`] of [`RX_BUFFER_LEN`] bytes,
//!   posted by address. A returned buffer becomes the received frame without a copy (its
//!   12-byte virtio-net header trimmed off) and its slot gets a fresh buffer.
//! * **Transmit**: a frame's `IOBufChain` becomes one descriptor chain — a shared, static
//!   virtio-net header and one descriptor per segment — without a copy; the chain is kept
//!   until the device returns it. When descriptors run out, `transmit` takes no more
//!   frames (back-pressure).
//! * **Checksum offload where negotiated** (`VIRTIO_NET_F_CSUM`, `VIRTIO_NET_F_GUEST_CSUM`,
//!   each accepted when offered): with CSUM the pair reports `tx_partial` for TCP and UDP,
//!   ebb-net writes only the pseudo-header sum, and the frame goes with a header that
//!   says `NEEDS_CSUM` at `csum_start`/`csum_offset` (one static header per TCP and UDP
//!   placement behind a 20-byte IPv4 header, which is all ebb-net sends; any other
//!   partial frame is completed here in software). With GUEST_CSUM a received frame's
//!   `DATA_VALID` becomes `FrameChecksum::Verified` and its `NEEDS_CSUM` (a partial
//!   checksum from a sender on the host) `FrameChecksum::Partial`, which ebb-net trusts
//!   as Linux does (the state travels with the frame, `RxFrame`). Without the features, exactly the old behaviour: zero headers, no flags.
//! * **TCP segmentation offload on transmit** (`VIRTIO_NET_F_HOST_TSO4`, accepted with
//!   CSUM): the pair reports `tso_max_len` 65,535, so ebb-net may hand it TCP frames up
//!   to a whole IPv4 packet, and such a frame goes out as one descriptor chain behind a
//!   `GSO_TCPV4` header (`gso_size` and `hdr_len` from `ebb_net_driver::Segmentation`; one static
//!   header per TCP header length, made once per pair). The device, or the host kernel
//!   behind it, cuts it into segments: one chain and one kick where there were up to 44.
//! * **Large receive** (`VIRTIO_NET_F_GUEST_TSO4`, accepted with GUEST_CSUM): the device
//!   may hand over TCP frames up to 64 KiB, so every receive buffer is
//!   [`LARGE_RX_BUFFER_LEN`] bytes (without merged buffers, any frame may land in any
//!   buffer) and only [`LARGE_RX_POSTED`] are posted. A large frame is handed to ebb-net
//!   in its buffer without a copy; a frame that fits the MTU is copied into a
//!   frame-sized buffer (from a pool of its own, so a stream of small frames allocates
//!   nothing once warm) and the large buffer posted again — so a small frame never pins
//!   64 KiB (an application may keep what it received).
//! * **Receive buffers come back** (`ebb_net_driver::ReceiveBuffers`): a buffer handed over with a
//!   frame is posted again once the stack and the application have dropped it, instead
//!   of a fresh one that would be zeroed whole before the device may write it.
//! * **Readiness**: each pair registers with its core's poll list (`crate::poll`): the
//!   core checks both used rings whenever it polls for events and arms `used_event`
//!   before it sleeps.
//!
//! Feature set: VERSION_1 and RING_EVENT_IDX are required; MAC, STATUS, MTU, MQ,
//! CTRL_VQ, CSUM, GUEST_CSUM, HOST_TSO4 and GUEST_TSO4 are used when offered. No merged
//! receive buffers.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net_driver::{
    ChecksumOffload, DeviceCapabilities, DeviceCounters, DeviceError, DeviceReady, DropReason,
    ETHERNET_HEADER_LEN, FrameChecksum, NetDevice, PlatformDevice, Readiness, ReceiveBuffers,
    RxFrame, Segmentation, TxFrame,
};

use super::mmio::Regs;
use super::ring::{Buffer, SplitRing, UsedWatch};
use crate::abi::virtio::{
    DEVICE_ID_NET, MMIO_SLOTS, MMIO_VERSION, NET_CTRL_MQ, NET_CTRL_MQ_VQ_PAIRS_SET,
    NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM, NET_HDR_LEN, NET_OK, NetHdr, ctrl_queue, features,
    regs, rx_queue, status, tx_queue,
};
use crate::poll::{self, PollId, PolledDevice};

/// Bytes of each receive buffer: the virtio-net header and a full Ethernet frame.
pub const RX_BUFFER_LEN: usize = NET_HDR_LEN + 1514;
/// Bytes of each receive buffer with GUEST_TSO4: the header and a whole IPv4 packet.
pub const LARGE_RX_BUFFER_LEN: usize = NET_HDR_LEN + ETHERNET_HEADER_LEN + TSO_MAX_LEN;
/// Frame-sized buffers (copies of small frames out of large ones) kept to come back.
const FRAME_POOL_LENT: usize = 256;
/// Large receive buffers posted per queue (4 MiB): more than any receive window, and
/// frames wait in the backend (a TAP device's queue) while none is free.
pub const LARGE_RX_POSTED: usize = 64;
/// Entries per queue we ask for (less if the device offers less).
pub const QUEUE_SIZE: u16 = 256;

/// Why the device could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VirtioError {
    /// No virtio-net transport answered.
    #[error("no virtio-net device found (probed {MMIO_SLOTS} virtio-MMIO slots)")]
    NotFound,
    /// A legacy (version 1) transport.
    #[error(
        "virtio-MMIO slot at {0:#x} is a legacy (version 1) transport: under QEMU add \
         -global virtio-mmio.force-legacy=false"
    )]
    Legacy(u64),
    /// The device lacks a feature we require.
    #[error("the virtio-net device does not offer {0}")]
    MissingFeature(&'static str),
    /// The device refused our features.
    #[error("the virtio-net device refused the negotiated features")]
    FeaturesRefused,
    /// A queue we need does not exist or is already live.
    #[error("virtio-net queue {0} is unavailable")]
    Queue(u16),
    /// The device did not accept the number of queue pairs.
    #[error("the virtio-net device refused {0} queue pairs")]
    QueuePairs(u16),
}

/// What the driver found and set up.
pub struct VirtioNetDriver {
    /// The device's MAC address (or a locally administered default without one).
    pub mac: [u8; 6],
    /// The device's MTU (1500 unless it reports one).
    pub mtu: u16,
    /// The transport's address.
    pub base: u64,
    /// The feature bits negotiated (`features::bit`).
    pub features: u64,
    /// One queue pair per core, pair `i` for core `i`.
    pub pairs: Vec<QueuePair>,
}

impl core::fmt::Debug for VirtioNetDriver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VirtioNetDriver")
            .field("base", &self.base)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

/// Finds the first virtio-net device and sets it up with up to `want_pairs` queue pairs.
pub fn open(want_pairs: u16) -> Result<VirtioNetDriver, VirtioError> {
    let regs = find()?;
    regs.write(regs::STATUS, 0);
    while regs.read(regs::STATUS) != 0 {
        core::hint::spin_loop();
    }
    regs.write(regs::STATUS, status::ACKNOWLEDGE);
    regs.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
    let offered = {
        regs.write(regs::DEVICE_FEATURES_SEL, 0);
        let low = regs.read(regs::DEVICE_FEATURES);
        regs.write(regs::DEVICE_FEATURES_SEL, 1);
        let high = regs.read(regs::DEVICE_FEATURES);
        u64::from(low) | (u64::from(high) << 32)
    };
    let has = |bit: u32| offered & features::bit(bit) != 0;
    for (bit, name) in [
        (features::VERSION_1, "VERSION_1"),
        (features::RING_EVENT_IDX, "RING_EVENT_IDX"),
    ] {
        if !has(bit) {
            fail(regs);
            return Err(VirtioError::MissingFeature(name));
        }
    }
    let mut accepted = features::bit(features::VERSION_1) | features::bit(features::RING_EVENT_IDX);
    for bit in [
        features::NET_MAC,
        features::NET_STATUS,
        features::NET_MTU,
        features::NET_CSUM,
        features::NET_GUEST_CSUM,
    ] {
        if has(bit) {
            accepted |= features::bit(bit);
        }
    }
    // Segmentation offload needs the device to complete each segment's checksum, and
    // large receive needs us to take partial checksums (the spec's dependencies).
    if has(features::NET_HOST_TSO4) && accepted & features::bit(features::NET_CSUM) != 0 {
        accepted |= features::bit(features::NET_HOST_TSO4);
    }
    if has(features::NET_GUEST_TSO4) && accepted & features::bit(features::NET_GUEST_CSUM) != 0 {
        accepted |= features::bit(features::NET_GUEST_TSO4);
    }
    let multi = want_pairs > 1 && has(features::NET_MQ) && has(features::NET_CTRL_VQ);
    if multi {
        accepted |= features::bit(features::NET_MQ) | features::bit(features::NET_CTRL_VQ);
    }
    for sel in 0..2u32 {
        regs.write(regs::DRIVER_FEATURES_SEL, sel);
        regs.write(regs::DRIVER_FEATURES, (accepted >> (32 * sel)) as u32);
    }
    let negotiating = status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK;
    regs.write(regs::STATUS, negotiating);
    if regs.read(regs::STATUS) & status::FEATURES_OK == 0 {
        fail(regs);
        return Err(VirtioError::FeaturesRefused);
    }
    let (mac, mtu, max_pairs) = read_config(regs, accepted);
    let pairs_used = if multi {
        want_pairs.min(max_pairs).max(1)
    } else {
        1
    };
    let mut pairs = Vec::new();
    for pair in 0..pairs_used {
        let rx = setup_queue(regs, rx_queue(pair))?;
        let tx = setup_queue(regs, tx_queue(pair))?;
        let mut queue_pair = QueuePair::new(pair, pairs_used, mtu, rx, tx);
        queue_pair.csum = accepted & features::bit(features::NET_CSUM) != 0;
        queue_pair.guest_csum = accepted & features::bit(features::NET_GUEST_CSUM) != 0;
        if accepted & features::bit(features::NET_HOST_TSO4) != 0 {
            queue_pair.tso_headers = Some(TsoHeaders::leak(mtu));
        }
        if accepted & features::bit(features::NET_GUEST_TSO4) != 0 {
            queue_pair.rx_buffer_len = LARGE_RX_BUFFER_LEN;
            queue_pair.rx_posted_max = LARGE_RX_POSTED;
            queue_pair.rx_pool = ReceiveBuffers::new(LARGE_RX_BUFFER_LEN, 2 * LARGE_RX_POSTED);
        }
        pairs.push(queue_pair);
    }
    let ctrl = if multi {
        Some(setup_queue(regs, ctrl_queue(max_pairs))?)
    } else {
        None
    };
    regs.write(regs::STATUS, negotiating | status::DRIVER_OK);
    for pair in &mut pairs {
        pair.refill();
    }
    if let Some(mut ctrl) = ctrl
        && pairs_used > 1
    {
        set_queue_pairs(&mut ctrl, pairs_used)?;
    }
    Ok(VirtioNetDriver {
        mac,
        mtu,
        base: regs.base(),
        features: accepted,
        pairs,
    })
}

/// The first transport with a network device.
fn find() -> Result<Regs, VirtioError> {
    for n in 0..MMIO_SLOTS {
        let Some(regs) = Regs::slot(n) else { break };
        if !regs.present() {
            break;
        }
        if regs.read(regs::DEVICE_ID) != DEVICE_ID_NET {
            continue;
        }
        if regs.read(regs::VERSION) != MMIO_VERSION {
            return Err(VirtioError::Legacy(regs.base()));
        }
        return Ok(regs);
    }
    Err(VirtioError::NotFound)
}

fn fail(regs: Regs) {
    regs.write(regs::STATUS, regs.read(regs::STATUS) | status::FAILED);
}

/// MAC, MTU and queue pairs from the config space (generation-checked).
fn read_config(regs: Regs, accepted: u64) -> ([u8; 6], u16, u16) {
    loop {
        let generation = regs.read(regs::CONFIG_GENERATION);
        let mut mac = [0x02, 0xeb, 0xb0, 0, 0, 1];
        if accepted & features::bit(features::NET_MAC) != 0 {
            for (i, byte) in mac.iter_mut().enumerate() {
                *byte = regs.config_u8(i as u64);
            }
        }
        let le16 = |at: u64| u16::from_le_bytes([regs.config_u8(at), regs.config_u8(at + 1)]);
        let max_pairs = if accepted & features::bit(features::NET_MQ) != 0 {
            le16(8).max(1)
        } else {
            1
        };
        let mtu = if accepted & features::bit(features::NET_MTU) != 0 {
            le16(10)
        } else {
            1500
        };
        if regs.read(regs::CONFIG_GENERATION) == generation {
            return (mac, mtu, max_pairs);
        }
    }
}

fn setup_queue(regs: Regs, queue: u16) -> Result<SplitRing, VirtioError> {
    regs.write(regs::QUEUE_SEL, u32::from(queue));
    if regs.read(regs::QUEUE_READY) != 0 {
        return Err(VirtioError::Queue(queue));
    }
    let max = regs.read(regs::QUEUE_NUM_MAX);
    if max == 0 {
        return Err(VirtioError::Queue(queue));
    }
    let size = QUEUE_SIZE.min(u16::try_from(max).unwrap_or(u16::MAX));
    // The largest power of two not above the device's maximum.
    let size = 1u16 << (15 - size.leading_zeros());
    let ring = SplitRing::new(regs, queue, size);
    regs.write(regs::QUEUE_READY, 1);
    Ok(ring)
}

/// Sends VIRTIO_NET_CTRL_MQ / VQ_PAIRS_SET on the control queue and waits for the ack.
fn set_queue_pairs(ctrl: &mut SplitRing, pairs: u16) -> Result<(), VirtioError> {
    // Command, argument and ack in one (leaked, tiny) buffer: the device may write the
    // ack after we stop looking if it misbehaves, so it must stay valid.
    let buf: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
    buf[0] = NET_CTRL_MQ;
    buf[1] = NET_CTRL_MQ_VQ_PAIRS_SET;
    buf[2..4].copy_from_slice(&pairs.to_le_bytes());
    buf[4] = 0xff;
    let at = buf.as_ptr() as u64;
    let chain = [
        Buffer {
            addr: at,
            len: 2,
            write: false,
        },
        Buffer {
            addr: at + 2,
            len: 2,
            write: false,
        },
        Buffer {
            addr: at + 4,
            len: 1,
            write: true,
        },
    ];
    ctrl.push(&chain).ok_or(VirtioError::QueuePairs(pairs))?;
    ctrl.publish();
    // The device answers at once (it processes the control queue on the kick); bounded
    // by a generous spin so a dead device fails the open instead of hanging it.
    for _ in 0..100_000_000u64 {
        if ctrl.pop_used().is_some() {
            let ack = super::mmio::shared::read_u16(at + 4) as u8;
            return if ack == NET_OK {
                Ok(())
            } else {
                Err(VirtioError::QueuePairs(pairs))
            };
        }
        core::hint::spin_loop();
    }
    Err(VirtioError::QueuePairs(pairs))
}

/// The transmit header of a frame with complete checksums: all zero (no checksum or
/// segmentation offload). Read-only for the device; one for every chain.
static TX_HEADER: [u8; NET_HDR_LEN] = [0; NET_HDR_LEN];

/// A transmit header asking the device to complete the checksum at `start + offset`.
const fn needs_csum(start: u16, offset: u16) -> [u8; NET_HDR_LEN] {
    let s = start.to_le_bytes();
    let o = offset.to_le_bytes();
    [
        NET_HDR_F_NEEDS_CSUM,
        0,
        0,
        0,
        0,
        0,
        s[0],
        s[1],
        o[0],
        o[1],
        0,
        0,
    ]
}
/// Where the checksum starts behind Ethernet and a 20-byte IPv4 header.
const L4_START: u16 = 14 + 20;
/// `NEEDS_CSUM` for TCP behind a 20-byte IPv4 header (the field is 16 bytes in).
static TX_HEADER_TCP: [u8; NET_HDR_LEN] = needs_csum(L4_START, 16);
/// `NEEDS_CSUM` for UDP behind a 20-byte IPv4 header (the field is 6 bytes in).
static TX_HEADER_UDP: [u8; NET_HDR_LEN] = needs_csum(L4_START, 6);

/// The largest IPv4 packet a TCP frame may carry with HOST_TSO4.
const TSO_MAX_LEN: usize = u16::MAX as usize;

/// The transmit headers of segmentation offload, by TCP header length in 32-bit words
/// (5 to 15): `NEEDS_CSUM` for TCP behind a 20-byte IPv4 header and `GSO_TCPV4` with the
/// segment size the MTU leaves. Made once per pair and never freed: the device may read
/// them for as long as it runs (as it may the frames in flight, see `Drop`).
#[derive(Clone, Copy)]
struct TsoHeaders(&'static [[u8; NET_HDR_LEN]; 16]);

impl TsoHeaders {
    fn leak(mtu: u16) -> TsoHeaders {
        let mut table = [[0u8; NET_HDR_LEN]; 16];
        for (words, header) in table.iter_mut().enumerate().skip(5) {
            let tcp_len = 4 * words as u16;
            let segment = mtu.saturating_sub(20 + tcp_len);
            *header = NetHdr::needs_csum(L4_START, 16)
                .with_tcpv4_gso(L4_START + tcp_len, segment)
                .to_bytes();
        }
        TsoHeaders(Box::leak(Box::new(table)))
    }

    /// The header for a frame `cut` as this pair's MTU says, if the frame's headers are
    /// what ebb-net sends (Ethernet, a 20-byte IPv4 header, TCP).
    fn get(self, cut: Segmentation) -> Option<&'static [u8; NET_HDR_LEN]> {
        let tcp_len = usize::from(cut.header_len).checked_sub(usize::from(L4_START))?;
        let header = self
            .0
            .get(tcp_len / 4)
            .filter(|_| tcp_len % 4 == 0 && tcp_len >= 20)?;
        let gso_size = u16::from_le_bytes([header[4], header[5]]);
        (gso_size == cut.segment_payload).then_some(header)
    }
}

/// One receive/transmit queue pair, as the stack drives it (see the module docs).
pub struct QueuePair {
    pair: u16,
    pairs: u16,
    mtu: u16,
    rx: SplitRing,
    tx: SplitRing,
    /// The buffer posted under each receive descriptor head.
    rx_buffers: Vec<Option<IOBuf>>,
    /// Bytes of each receive buffer ([`RX_BUFFER_LEN`], or [`LARGE_RX_BUFFER_LEN`] with
    /// GUEST_TSO4).
    rx_buffer_len: usize,
    /// At most this many receive buffers are posted at once.
    rx_posted_max: usize,
    /// Receive buffers posted now.
    rx_posted: usize,
    /// Where receive buffers come from: handed-over ones come back once released,
    /// without being zeroed again.
    rx_pool: ReceiveBuffers,
    /// With large receive buffers: the frame-sized buffers small frames are copied
    /// into, which come back the same way (a request-response stream then allocates
    /// nothing per frame).
    frame_pool: ReceiveBuffers,
    /// The frame in flight under each transmit descriptor head.
    tx_frames: Vec<Option<IOBufChain>>,
    counters: DeviceCounters,
    /// Chains the device returned that we did not post, or receive lengths out of range.
    device_errors: u64,
    watch: Option<PollId>,
    /// VIRTIO_NET_F_CSUM negotiated: the device completes partial checksums we send.
    csum: bool,
    /// VIRTIO_NET_F_GUEST_CSUM negotiated: received headers carry checksum flags.
    guest_csum: bool,
    /// VIRTIO_NET_F_HOST_TSO4 negotiated: the device cuts TCP frames longer than the MTU.
    tso_headers: Option<TsoHeaders>,
}

impl QueuePair {
    fn new(pair: u16, pairs: u16, mtu: u16, rx: SplitRing, tx: SplitRing) -> QueuePair {
        QueuePair {
            pair,
            pairs,
            mtu,
            rx_buffers: vec![None; usize::from(rx.size())],
            rx_buffer_len: RX_BUFFER_LEN,
            rx_posted_max: usize::from(rx.size()),
            rx_posted: 0,
            rx_pool: ReceiveBuffers::new(RX_BUFFER_LEN, 2 * usize::from(rx.size())),
            // A header and the largest frame this device's MTU allows.
            frame_pool: ReceiveBuffers::new(
                NET_HDR_LEN + ETHERNET_HEADER_LEN + usize::from(mtu),
                FRAME_POOL_LENT,
            ),
            tx_frames: vec![None; usize::from(tx.size())],
            rx,
            tx,
            counters: DeviceCounters::default(),
            device_errors: 0,
            watch: None,
            csum: false,
            guest_csum: false,
            tso_headers: None,
        }
    }

    /// Whether checksum offload was negotiated: (CSUM, GUEST_CSUM).
    pub fn checksum_offload(&self) -> (bool, bool) {
        (self.csum, self.guest_csum)
    }

    /// Which pair this is (pair `i` serves core `i`).
    pub fn index(&self) -> u16 {
        self.pair
    }

    /// Kicks sent to the device on (receive, transmit).
    pub fn kicks(&self) -> (u64, u64) {
        (self.rx.kicks(), self.tx.kicks())
    }

    /// Posts a fresh buffer in every free receive descriptor, then publishes.
    fn refill(&mut self) {
        while self.rx.free() > 0 && self.rx_posted < self.rx_posted_max {
            let mut buffer = self.rx_pool.take();
            let Ok(space) = buffer.spare_capacity_mut() else {
                break;
            };
            let chain = [Buffer {
                addr: space.as_mut_ptr() as u64,
                len: self.rx_buffer_len as u32,
                write: true,
            }];
            let Some(head) = self.rx.push(&chain) else {
                self.rx_pool.give_back(buffer);
                break;
            };
            self.rx_buffers[usize::from(head)] = Some(buffer);
            self.rx_posted += 1;
        }
        self.rx.publish();
    }

    /// Takes back every frame the device has sent.
    fn reclaim_tx(&mut self) {
        while let Some((head, _)) = self.tx.pop_used() {
            if self.tx_frames[usize::from(head)].take().is_none() {
                self.device_errors += 1;
            }
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let Some(id) = self.watch.take() {
            poll::deregister(id);
        }
        // The device is not reset here and may still write posted receive buffers and
        // read frames in flight: their memory must never be reused.
        core::mem::forget(core::mem::take(&mut self.rx_buffers));
        core::mem::forget(core::mem::take(&mut self.tx_frames));
    }
}

impl NetDevice for QueuePair {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::ETHERNET;
        caps.mtu = usize::from(self.mtu);
        caps.queues = usize::from(self.pairs);
        if self.csum {
            caps.checksum.tcp = ChecksumOffload::PARTIAL;
            caps.checksum.udp = ChecksumOffload::PARTIAL;
        }
        if self.tso_headers.is_some() {
            caps.tso_max_len = TSO_MAX_LEN;
        }
        caps
    }

    /// Each frame with what its header said of its checksum.
    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.reclaim_tx();
        let mut received = 0;
        while received < max {
            let Some((head, len)) = self.rx.pop_used() else {
                break;
            };
            let Some(mut buffer) = self.rx_buffers[usize::from(head)].take() else {
                self.device_errors += 1;
                continue;
            };
            self.rx_posted -= 1;
            let len = len as usize;
            if !(NET_HDR_LEN..=self.rx_buffer_len).contains(&len) || buffer.commit(len).is_err() {
                self.device_errors += 1;
                self.counters.rx_dropped.record(DropReason::Oversized);
                continue;
            }
            let mut copied = false;
            let small_frame = usize::from(self.mtu) + ETHERNET_HEADER_LEN;
            if self.rx_buffer_len > RX_BUFFER_LEN && len - NET_HDR_LEN <= small_frame {
                // A large buffer with a small frame: the frame is copied out and the
                // buffer posted again (see the module docs).
                let small = self.frame_pool.take_copy(&buffer.as_slice()[..len]);
                self.rx_pool.give_back(buffer);
                buffer = small;
                copied = true;
            }
            let header = &buffer.as_slice()[..NET_HDR_LEN];
            let le16 = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
            let (flags, start, offset) = (header[0], le16(6), le16(8));
            if buffer.trim_front(NET_HDR_LEN).is_err() {
                self.device_errors += 1;
                continue;
            }
            let mut checksum = FrameChecksum::Complete;
            if self.guest_csum && flags & NET_HDR_F_NEEDS_CSUM != 0 {
                let end = usize::from(start) + usize::from(offset) + 2;
                if end > buffer.len() {
                    // Out of the frame: nothing to trust; ebb-net verifies (and drops) it.
                    self.device_errors += 1;
                } else {
                    checksum = FrameChecksum::Partial { start, offset };
                }
            } else if self.guest_csum && flags & NET_HDR_F_DATA_VALID != 0 {
                checksum = FrameChecksum::Verified;
            }
            self.counters.record_rx(buffer.len());
            if copied {
                self.frame_pool.lend(&buffer);
            } else {
                self.rx_pool.lend(&buffer);
            }
            out.push(RxFrame {
                buf: buffer,
                checksum,
            });
            received += 1;
        }
        if received > 0 || self.rx.free() > 0 {
            self.refill();
        }
        received
    }

    /// With CSUM negotiated, partial checksums go to the device with `NEEDS_CSUM`; else
    /// they are completed here first.
    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.reclaim_tx();
        let max_frame = self.capabilities().max_frame_len();
        let mut taken = 0;
        let mut chain: Vec<Buffer> = Vec::new();
        while let Some(front) = frames.front() {
            let checksum = front.checksum;
            // A TCP frame longer than the MTU is for the device to cut (ebb-net sends
            // one only under `tso_max_len`, with its checksum left partial).
            let segmentation = match (self.tso_headers, checksum) {
                (
                    Some(headers),
                    FrameChecksum::Partial {
                        start: L4_START,
                        offset: 16,
                    },
                ) => front
                    .chain
                    .segments()
                    .next()
                    .and_then(|head| Segmentation::of(head, usize::from(self.mtu)))
                    .and_then(|cut| headers.get(cut)),
                _ => None,
            };
            let header: &'static [u8; NET_HDR_LEN] = match (segmentation, checksum) {
                (Some(header), _) => header,
                (None, FrameChecksum::Partial { start, offset })
                    if self.csum && start == L4_START =>
                {
                    match offset {
                        16 => &TX_HEADER_TCP,
                        6 => &TX_HEADER_UDP,
                        _ => &TX_HEADER,
                    }
                }
                _ => &TX_HEADER,
            };
            if matches!(checksum, FrameChecksum::Partial { .. })
                && core::ptr::eq(header, &TX_HEADER)
                && let Some(frame) = frames.front_mut()
            {
                // A placement the static headers do not cover, or no CSUM: complete it,
                // once (left in the queue for want of descriptors, it stays complete).
                frame.complete();
            }
            let Some(TxFrame { chain: frame, .. }) = frames.front() else {
                break;
            };
            chain.clear();
            chain.push(Buffer {
                addr: header.as_ptr() as u64,
                len: NET_HDR_LEN as u32,
                write: false,
            });
            for segment in frame.segments().filter(|s| !s.is_empty()) {
                chain.push(Buffer {
                    addr: segment.as_ptr() as u64,
                    len: segment.len() as u32,
                    write: false,
                });
            }
            let len = frame.len();
            let max_len = match segmentation {
                Some(_) => ETHERNET_HEADER_LEN + TSO_MAX_LEN,
                None => max_frame,
            };
            if len > max_len || chain.len() > usize::from(self.tx.size()) {
                frames.pop_front();
                self.counters.tx_dropped.record(DropReason::Oversized);
                taken += 1;
                continue;
            }
            let Some(head) = self.tx.push(&chain) else {
                break; // out of descriptors: the rest waits (back-pressure)
            };
            self.tx_frames[usize::from(head)] = frames.pop_front().map(|frame| frame.chain);
            self.counters.record_tx(len);
            taken += 1;
        }
        if taken > 0 {
            self.tx.publish();
        }
        taken
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

/// A queue pair's entry in its core's poll list.
struct PairWatch {
    rx: UsedWatch,
    tx: UsedWatch,
    ready: DeviceReady,
}

impl PolledDevice for PairWatch {
    fn has_work(&self) -> bool {
        self.rx.has_used() || self.tx.has_used()
    }
    fn arm(&self) -> bool {
        // Both: a returned transmit chain may be what a blocked sender waits for.
        let rx = self.rx.arm();
        let tx = self.tx.arm();
        rx || tx
    }
    fn dispatch(&self) {
        self.ready.ready(Readiness {
            readable: true,
            writable: true,
        });
    }
}

impl PlatformDevice for QueuePair {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        let watch = Rc::new(PairWatch {
            rx: self.rx.watch(),
            tx: self.tx.watch(),
            ready,
        });
        let id = poll::register(watch).ok_or_else(|| {
            DeviceError(String::from("cannot create this core's device poll list"))
        })?;
        self.watch = Some(id);
        Ok(())
    }

    fn unwatch(&mut self) {
        if let Some(id) = self.watch.take() {
            poll::deregister(id);
        }
    }

    fn name(&self) -> String {
        format!("virtio-net pair {}", self.pair)
    }

    fn io_errors(&self) -> u64 {
        self.device_errors
    }
}
