//! The virtio-net device: its MMIO transport (registers served on the vCPU threads'
//! MMIO exits) and its I/O thread (rings ⇄ backend).
//!
//! * **Transport.** Modern virtio-MMIO at [`MMIO_BASE`] (slot 0; other slots read as
//!   absent). Offers VERSION_1, RING_EVENT_IDX, MAC, STATUS, MTU, MQ and CTRL_VQ, one queue
//!   pair per vCPU, CSUM and GUEST_CSUM when the backend completes partial checksums (see
//!   "Checksum offload" below), and HOST_TSO4 and GUEST_TSO4 when it also segments and
//!   hands over large frames (see "Segmentation offload"). Writing 0 to Status resets;
//!   features outside the offer (or without VERSION_1 and RING_EVENT_IDX, or HOST_TSO4
//!   without CSUM, or GUEST_TSO4 without GUEST_CSUM) are refused by leaving FEATURES_OK
//!   clear; feature writes after FEATURES_OK and queue registers of a ready
//!   queue or after DRIVER_OK are ignored. A bad access, DRIVER_OK without FEATURES_OK or a
//!   bad ring or chain marks the device broken (DEVICE_NEEDS_RESET, one log line naming the
//!   queue and the fault); the VM keeps running.
//! * **Kicks** from the guest arrive on ioeventfds (one per queue; registered by the VM)
//!   and are suppressed with EVENT_IDX while the I/O thread polls: it asks for kicks
//!   (`avail_event`) only just before it sleeps.
//! * **Wake-ups** of the guest: after returning receive buffers the device writes the
//!   kick eventfd of the pair's vCPU only if the driver's `used_event` asks for it, which
//!   the guest arms only just before it sleeps in WAIT.
//! * **The I/O thread** polls the transmit queues and the backend; after its poll window
//!   without work ([`IDLE_POLL`], or none on CPUs shared with the vCPUs) it sleeps in
//!   epoll on the backend (edge-triggered), the ioeventfds and its control eventfd.
//!   Receive buffers the guest keeps posted are not work (`Engine::want_kicks`); frames
//!   a full backend refused and a fault injector's delayed frames cut the sleep short.
//! * **Moving frames.** A TAP backend is *direct* ([`Backend::direct`]): each frame goes
//!   between the TAP descriptor and the guest's descriptor chain with one `readv` or
//!   `writev` over guest memory, no copy in the monitor (the header sent is the device's
//!   own, built from the validated request). passt (a byte stream that needs framing)
//!   and the fault injector (which must see every frame) take the copying path: each
//!   frame copied out of or into guest memory once, through an IOBuf.
//! * **Checksum offload.** Offered only with a backend that takes and gives per-frame
//!   checksum state ([`FrameChecksum`]): the TAP backend opened with `IFF_VNET_HDR` and
//!   `TUN_F_CSUM`, where the kernel completes our partial checksums — or, for a local
//!   receiver, never computes them — and marks what it verified. The guest's header is
//!   passed through as that state: `NEEDS_CSUM` (validated: CSUM negotiated and the
//!   two-byte field inside the frame, else the device is broken like for any bad
//!   chain) becomes `FrameChecksum::Partial`; toward the guest `Partial` becomes
//!   `NEEDS_CSUM` and `Verified` `DATA_VALID` when GUEST_CSUM was negotiated (without
//!   it each received frame is made `Complete` first, `RxFrame::complete`). Not offered
//!   with passt: its socket protocol has no header to carry the state, so the monitor's
//!   one I/O thread would compute every checksum the guest skipped — moving the work,
//!   not removing it — and passt's frames would have to be trusted unverified. The
//!   `--net-faults` injector between device and backend takes frames through the plain
//!   calls, whose default completes a partial checksum in software *before* the
//!   injector corrupts it, and reports every frame `Complete`: a corrupted frame is
//!   never marked `DATA_VALID` nor completed over the corrupted bytes, so the guest's
//!   stack or Linux's catches it. No backend is ever handed an incomplete checksum
//!   it has not said it completes.
//! * **Segmentation offload (TSO) on transmit.** With HOST_TSO4 the driver may send one
//!   TCPv4 frame of up to 64 KiB (an Ethernet header and an IPv4 packet of up to 65,535
//!   bytes) instead of MTU-sized segments; the header says how to cut it (`gso_type` TCPV4,
//!   `hdr_len` bytes of Ethernet, IPv4 and TCP headers to repeat, `gso_size` payload bytes
//!   per segment) and, as the spec requires, has `NEEDS_CSUM` on the TCP checksum, to be
//!   completed in every segment. The device does not cut: it hands the request on in the
//!   TAP's header with the usual single `writev`, and Linux segments where it has to. So it
//!   is offered only where the request reaches a TAP's header unchanged — checksum offload
//!   on and the direct path, not with `--net-faults` (`NetConfig::segmentation_offload`) —
//!   and the copying path refuses any GSO request as not negotiated. Validated before
//!   anything is written ([`QueueError::BadGsoRequest`], the device broken as for a bad
//!   chain): TCPV4 only with HOST_TSO4 negotiated and `NEEDS_CSUM` (itself validated as
//!   above), `gso_size` at least 1, `hdr_len` inside the frame; the ECN bit and every other
//!   type (UDP, TCPv6, undefined) are refused. A chain may then hold 12 + 14 + 65,535 bytes
//!   instead of 64 KiB. The backend's header is the device's own (`backend_header`), built
//!   from those validated fields only. Linux checks the frame's own headers against the
//!   request when it segments; what it cannot know is what was negotiated here.
//! * **Segmentation offload on receive (large receive).** With GUEST_TSO4 (offered where
//!   HOST_TSO4 is, [`Offload::guest_tso4`]; refused without GUEST_CSUM) the driver takes
//!   TCPv4 frames of up to 64 KiB behind a `GSO_TCPV4` header. The device coalesces
//!   nothing: Linux hands the TAP's reader such frames once `TUN_F_TSO4` is on
//!   ([`Backend::set_large_receive`]), and the direct path passes its header through.
//!   That is a setting of the whole TAP, so the I/O thread switches it when it learns the
//!   negotiated features (`Engine::rebuild`, at DRIVER_OK): on for a driver that took
//!   GUEST_TSO4, off for one that did not, off at every reset and breakage. Turning it on
//!   may fail (logged; frames stay MTU-sized, which GUEST_TSO4 allows); turning it off for
//!   a driver without GUEST_TSO4 must not (the device breaks, logged as a backend
//!   failure). On receive a frame longer than the guest's chain is dropped and counted
//!   as ever, so no length limit is needed; a GSO header reaches the guest only if it is
//!   TCPV4 and GUEST_TSO4 was negotiated — a large frame the kernel queued before large
//!   receive went off is dropped and counted. Counted in `rx_gso`.

use super::backend::{Backend, Direct};
use super::queue::{Buf, Chain, DeviceQueue, Direction, GsoFault, QueueConfig, QueueError};
use crate::guest::GuestMem;
use crate::sys::IoVecs;
use crate::vm::Shared;
use ebb_abi::virtio::{
    DEVICE_ID_NET, MAGIC, MMIO_BASE, MMIO_SLOT_SIZE, MMIO_VERSION, NET_CTRL_MQ,
    NET_CTRL_MQ_VQ_PAIRS_SET, NET_ERR, NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM,
    NET_HDR_GSO_NONE, NET_HDR_GSO_TCPV4, NET_HDR_LEN, NET_OK, NET_S_LINK_UP, NetHdr, VENDOR_ID_EBB,
    features, regs, status,
};
use ebb_core::{IOBuf, IOBufChain, Instant as NetInstant};
use ebb_net_driver::{FaultCounts, FaultStats, FrameChecksum, RxFrame, TxFrame};
use rustix::event::epoll;
use rustix::io::Errno;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

/// How long the I/O thread keeps polling after its last work before it sleeps.
pub const IDLE_POLL: Duration = Duration::from_micros(50);
/// Entries per queue the device accepts at most.
pub const QUEUE_MAX: u16 = 256;
/// Frames received from the backend that may wait for guest buffers, per pair.
const RX_BACKLOG: usize = 256;
/// Longest sleep of the I/O thread (it checks for the VM's end this often).
pub(crate) const SLEEP_MAX: Duration = Duration::from_millis(20);
/// The sleep while frames wait for a full backend to take them ([`sleep_bound`]).
pub(crate) const PENDING_OUTPUT_RETRY: Duration = Duration::from_micros(100);

/// Counters of the device.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Guest kicks (ioeventfd signals) — each one a VM exit.
    pub kicks: AtomicU64,
    /// Times the device woke a vCPU (wrote its kick eventfd).
    pub wakes: AtomicU64,
    /// MMIO register accesses (each one a VM exit to this process).
    pub mmio_exits: AtomicU64,
    /// Frames moved guest → backend.
    pub tx_frames: AtomicU64,
    /// Frames moved backend → guest.
    pub rx_frames: AtomicU64,
    /// Frames from the backend dropped for want of guest buffers or room, or (direct
    /// path) with a GSO header the driver did not negotiate.
    pub rx_dropped: AtomicU64,
    /// Frames from the guest a direct backend failed on with an error other than "full"
    /// (the interface is down or gone).
    pub tx_dropped: AtomicU64,
    /// Frames from the guest with `NEEDS_CSUM`, handed to the backend to complete.
    pub tx_csum_partial: AtomicU64,
    /// Frames from the guest with a GSO request (HOST_TSO4), handed to the backend to cut
    /// into TCP segments.
    pub tx_gso: AtomicU64,
    /// Frames to the guest with a GSO header (GUEST_TSO4): TCPv4 frames larger than the
    /// MTU, from a local sender through a TAP with large receive on.
    pub rx_gso: AtomicU64,
    /// Frames to the guest with `NEEDS_CSUM` (a partial checksum from a local sender).
    pub rx_csum_partial: AtomicU64,
    /// Frames to the guest with `DATA_VALID`.
    pub rx_csum_valid: AtomicU64,
    /// What the `--net-faults` injectors did, summed over the backends (`None`: no
    /// injector). Published by the I/O thread when it changes.
    pub faults: Mutex<Option<FaultStats>>,
}

/// `a + b`, counter by counter.
fn add_faults(a: FaultStats, b: FaultStats) -> FaultStats {
    let add = |x: FaultCounts, y: FaultCounts| FaultCounts {
        seen: x.seen + y.seen,
        dropped: x.dropped + y.dropped,
        duplicated: x.duplicated + y.duplicated,
        corrupted: x.corrupted + y.corrupted,
        delayed: x.delayed + y.delayed,
        reordered: x.reordered + y.reordered,
    };
    FaultStats {
        rx: add(a.rx, b.rx),
        tx: add(a.tx, b.tx),
    }
}

/// A fault on one queue: what `broken()` reports, so a driver's author sees which queue
/// (and so which ring in their memory) holds the bad index or descriptor.
#[derive(Debug, thiserror::Error)]
#[error("queue {queue} ({}): {error}", role(*.queue, *.pairs))]
pub(crate) struct QueueFault {
    queue: u16,
    pairs: u16,
    error: QueueError,
}

/// What queue `queue` of a device with `pairs` pairs is for.
fn role(queue: u16, pairs: u16) -> String {
    match queue {
        q if q == 2 * pairs => "control".to_string(),
        q if q % 2 == 0 => format!("receive, pair {}", q / 2),
        q => format!("transmit, pair {}", q / 2),
    }
}

/// Tags a queue error with its queue.
fn on(queue: usize, pairs: u16) -> impl Fn(QueueError) -> QueueFault {
    move |error| QueueFault {
        queue: queue as u16,
        pairs,
        error,
    }
}

/// Why an access of `len` bytes to register `offset` is not one the transport takes (the
/// spec allows only aligned 32-bit accesses below the config space), or `None`.
fn bad_access(what: &str, len: usize, offset: u64) -> Option<String> {
    if len != 4 {
        Some(format!("{len}-byte {what} register {offset:#x}"))
    } else if !offset.is_multiple_of(4) {
        Some(format!("misaligned {what} register {offset:#x}"))
    } else {
        None
    }
}

/// Register state, behind a lock the vCPU threads and the I/O thread share.
#[derive(Debug, Default)]
struct Transport {
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    queues: Vec<(QueueConfig, bool)>,
    broken: Option<String>,
    /// Bumped on every activation or reset: the I/O thread rebuilds its queues.
    epoch: u64,
}

/// The offloads a device offers, as far as its backend can honour them (see the module
/// docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// CSUM and GUEST_CSUM: the backend takes and gives per-frame checksum state (a TAP
    /// with a virtio-net header).
    pub checksum: bool,
    /// HOST_TSO4 (segmentation on transmit): the backend cuts TCPv4 frames of up to
    /// 64 KiB into segments itself — only a direct backend with a virtio-net header,
    /// which hands the request on (a TAP without `--net-faults`). Offered only together
    /// with `checksum`, which the spec makes it depend on.
    pub tso4: bool,
    /// GUEST_TSO4 (large receive): the backend can hand over TCPv4 frames of up to 64 KiB
    /// behind a GSO header ([`Backend::set_large_receive`]), which the direct path passes
    /// to the guest as it is — again only a TAP without `--net-faults`. Offered only
    /// together with `checksum` (GUEST_TSO4 depends on GUEST_CSUM).
    pub guest_tso4: bool,
}

impl Offload {
    /// No offload: every frame complete and at most an MTU long.
    pub const NONE: Offload = Offload {
        checksum: false,
        tso4: false,
        guest_tso4: false,
    };
    /// Checksum offload only.
    pub const CHECKSUM: Offload = Offload {
        checksum: true,
        tso4: false,
        guest_tso4: false,
    };
    /// Checksum offload and TCPv4 segmentation both ways: what a direct TAP backend with
    /// a virtio-net header gets.
    pub const CHECKSUM_AND_TSO4: Offload = Offload {
        checksum: true,
        tso4: true,
        guest_tso4: true,
    };
}

/// The device: see the module docs.
pub struct VirtioNet {
    mac: [u8; 6],
    pairs: u16,
    /// What the device offers beyond the basics.
    offload: Offload,
    transport: Mutex<Transport>,
    /// Tells a sleeping I/O thread that the transport changed.
    control: EventFd,
    /// Counts transport changes (reset, activation, breakage): the I/O thread compares it
    /// with what it last saw each round — one load — instead of locking the transport.
    changes: AtomicU64,
    /// Counters.
    pub stats: NetStats,
}

impl std::fmt::Debug for VirtioNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioNet")
            .field("pairs", &self.pairs)
            .finish()
    }
}

/// The features the device offers: the basics, and those of `offload` (HOST_TSO4 and
/// GUEST_TSO4 only with the checksum offload they depend on).
fn offered_features(offload: Offload) -> u64 {
    let bits = |list: &[u32]| list.iter().fold(0, |acc, &bit| acc | features::bit(bit));
    let mut offered = bits(&[
        features::VERSION_1,
        features::RING_EVENT_IDX,
        features::NET_MAC,
        features::NET_STATUS,
        features::NET_MTU,
        features::NET_MQ,
        features::NET_CTRL_VQ,
    ]);
    if offload.checksum {
        offered |= bits(&[features::NET_CSUM, features::NET_GUEST_CSUM]);
        if offload.tso4 {
            offered |= bits(&[features::NET_HOST_TSO4]);
        }
        if offload.guest_tso4 {
            offered |= bits(&[features::NET_GUEST_TSO4]);
        }
    }
    offered
}

/// Features the spec makes depend on others (virtio 1.2 §5.1.3.1): `(feature, needs)`.
/// Segmentation needs the segments' checksums completed — by the device on transmit
/// (CSUM), by the driver's trust in a partial checksum on receive (GUEST_CSUM). A driver
/// accepting a feature without what it needs is refused.
const FEATURE_DEPENDENCIES: [(u32, u32); 2] = [
    (features::NET_HOST_TSO4, features::NET_CSUM),
    (features::NET_GUEST_TSO4, features::NET_GUEST_CSUM),
];

/// Whether `accepted` holds a feature without what it depends on
/// ([`FEATURE_DEPENDENCIES`]).
fn misses_a_dependency(accepted: u64) -> bool {
    let has = |bit| accepted & features::bit(bit) != 0;
    FEATURE_DEPENDENCIES
        .iter()
        .any(|&(feature, needs)| has(feature) && !has(needs))
}

impl VirtioNet {
    /// A device with `pairs` queue pairs (one per vCPU) and MAC `mac`, offering `offload`
    /// (only what the backend can honour: see [`Offload`] and the module docs).
    pub fn new(mac: [u8; 6], pairs: u16, offload: Offload) -> std::io::Result<VirtioNet> {
        Ok(VirtioNet {
            mac,
            pairs,
            offload,
            transport: Mutex::new(Transport {
                queues: vec![(QueueConfig::default(), false); usize::from(2 * pairs + 1)],
                ..Transport::default()
            }),
            control: EventFd::new(EFD_NONBLOCK)?,
            changes: AtomicU64::new(0),
            stats: NetStats::default(),
        })
    }

    /// Queues: two per pair and the control queue.
    pub fn queue_count(&self) -> u16 {
        2 * self.pairs + 1
    }

    /// Whether `addr` is in the window this device answers for (every slot).
    pub fn claims(addr: u64) -> bool {
        (ebb_abi::virtio::MMIO_WINDOW_START..ebb_abi::virtio::MMIO_WINDOW_END).contains(&addr)
    }

    /// The transport changed: the I/O thread rebuilds its queues next round (and wakes
    /// for it if asleep).
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
        let _ = self.control.write(1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Transport> {
        self.transport.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn config_bytes(&self) -> [u8; 12] {
        let mut c = [0u8; 12];
        c[..6].copy_from_slice(&self.mac);
        c[6..8].copy_from_slice(&NET_S_LINK_UP.to_le_bytes());
        c[8..10].copy_from_slice(&self.pairs.to_le_bytes());
        c[10..12].copy_from_slice(&1500u16.to_le_bytes());
        c
    }

    /// A read exit at `addr`: fills `data`.
    pub fn mmio_read(&self, addr: u64, data: &mut [u8]) {
        self.stats.mmio_exits.fetch_add(1, Ordering::Relaxed);
        data.fill(0);
        if !(MMIO_BASE..MMIO_BASE + MMIO_SLOT_SIZE).contains(&addr) {
            return; // other slots: no transport (magic reads 0)
        }
        let offset = addr - MMIO_BASE;
        if offset >= regs::CONFIG {
            let config = self.config_bytes();
            for (i, byte) in data.iter_mut().enumerate() {
                *byte = config
                    .get((offset - regs::CONFIG) as usize + i)
                    .copied()
                    .unwrap_or(0);
            }
            return;
        }
        if let Some(why) = bad_access("read of", data.len(), offset) {
            self.break_device(&why);
            return;
        }
        let t = self.lock();
        let queue = t.queues.get(t.queue_sel as usize);
        let value = match offset {
            regs::MAGIC => MAGIC,
            regs::VERSION => MMIO_VERSION,
            regs::DEVICE_ID => DEVICE_ID_NET,
            regs::VENDOR_ID => VENDOR_ID_EBB,
            regs::DEVICE_FEATURES => match t.device_features_sel {
                0 => self.offered() as u32,
                1 => (self.offered() >> 32) as u32,
                _ => 0,
            },
            regs::QUEUE_NUM_MAX => queue.map_or(0, |_| u32::from(QUEUE_MAX)),
            regs::QUEUE_READY => queue.map_or(0, |q| u32::from(q.1)),
            regs::INTERRUPT_STATUS => 0,
            regs::STATUS => t.status,
            regs::CONFIG_GENERATION => 0,
            _ => 0,
        };
        data.copy_from_slice(&value.to_le_bytes());
    }

    /// A write exit at `addr` of `data`.
    pub fn mmio_write(&self, addr: u64, data: &[u8]) {
        self.stats.mmio_exits.fetch_add(1, Ordering::Relaxed);
        if !(MMIO_BASE..MMIO_BASE + regs::CONFIG).contains(&addr) {
            return; // config space is read-only here; other slots are empty
        }
        let offset = addr - MMIO_BASE;
        if let Some(why) = bad_access("write to", data.len(), offset) {
            self.break_device(&why);
            return;
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            return; // four bytes: checked just above
        };
        let value = u32::from_le_bytes(bytes);
        let mut t = self.lock();
        let sel = t.queue_sel as usize;
        // The selected queue's registers are read-only once it is ready, and every
        // queue's once the driver is running: the device uses (or, for a queue not ready
        // at DRIVER_OK, ignores) what it saw at DRIVER_OK until a reset.
        let frozen = t.queues.get(sel).is_some_and(|q| q.1) || t.status & status::DRIVER_OK != 0;
        let set_queue = |t: &mut Transport, f: &dyn Fn(&mut QueueConfig)| {
            if let Some((config, _)) = t.queues.get_mut(sel)
                && !frozen
            {
                f(config);
            }
        };
        let low = |old: u64| (old & !0xffff_ffff) | u64::from(value);
        let high = |old: u64| (old & 0xffff_ffff) | (u64::from(value) << 32);
        match offset {
            regs::DEVICE_FEATURES_SEL => t.device_features_sel = value,
            regs::DRIVER_FEATURES_SEL => t.driver_features_sel = value,
            // Negotiated is negotiated: the device acts on the accepted set from here on.
            regs::DRIVER_FEATURES if t.status & status::FEATURES_OK != 0 => {}
            regs::DRIVER_FEATURES => match t.driver_features_sel {
                0 => t.driver_features = (t.driver_features & !0xffff_ffff) | u64::from(value),
                1 => {
                    t.driver_features = (t.driver_features & 0xffff_ffff) | (u64::from(value) << 32)
                }
                _ => {}
            },
            regs::QUEUE_SEL => t.queue_sel = value,
            regs::QUEUE_NUM => match u16::try_from(value) {
                Ok(size) => set_queue(&mut t, &|q| q.size = size),
                // Kept as 16 bits, 0x1_0010 would become a valid 16.
                Err(_) if t.queues.get(sel).is_some() && !frozen => {
                    let fault = on(sel, self.pairs)(QueueError::BadSize(value));
                    self.break_locked(&mut t, &fault.to_string());
                }
                Err(_) => {}
            },
            regs::QUEUE_DESC_LOW => set_queue(&mut t, &|q| q.desc = low(q.desc)),
            regs::QUEUE_DESC_HIGH => set_queue(&mut t, &|q| q.desc = high(q.desc)),
            regs::QUEUE_DRIVER_LOW => set_queue(&mut t, &|q| q.avail = low(q.avail)),
            regs::QUEUE_DRIVER_HIGH => set_queue(&mut t, &|q| q.avail = high(q.avail)),
            regs::QUEUE_DEVICE_LOW => set_queue(&mut t, &|q| q.used = low(q.used)),
            regs::QUEUE_DEVICE_HIGH => set_queue(&mut t, &|q| q.used = high(q.used)),
            regs::QUEUE_READY => {
                if let Some(q) = t.queues.get_mut(sel)
                    && !frozen
                {
                    q.1 = value == 1;
                }
            }
            regs::QUEUE_NOTIFY => {} // kicks arrive through the ioeventfd
            regs::INTERRUPT_ACK => {}
            regs::STATUS => self.write_status(&mut t, value),
            _ => {}
        }
    }

    fn write_status(&self, t: &mut Transport, value: u32) {
        if value == 0 {
            let queues = t.queues.len();
            *t = Transport {
                queues: vec![(QueueConfig::default(), false); queues],
                epoch: t.epoch + 1,
                ..Transport::default()
            };
            self.changed();
            return;
        }
        let mut value = value;
        if value & status::FEATURES_OK != 0 && t.status & status::FEATURES_OK == 0 {
            // The device implements only EVENT_IDX notification suppression: a driver
            // without it would wait for notifications (and skip kicks) by rules the device
            // does not follow.
            let required =
                features::bit(features::VERSION_1) | features::bit(features::RING_EVENT_IDX);
            let acceptable = t.driver_features & !self.offered() == 0
                && t.driver_features & required == required
                && !misses_a_dependency(t.driver_features);
            if !acceptable {
                value &= !status::FEATURES_OK;
            }
        }
        let activated = value & status::DRIVER_OK != 0 && t.status & status::DRIVER_OK == 0;
        t.status = value | (t.status & status::DEVICE_NEEDS_RESET);
        if activated && value & status::FEATURES_OK == 0 {
            // Never negotiated, or refused and the driver went on: the device does not know
            // which ring layout and notification rules the driver expects.
            self.break_locked(t, "DRIVER_OK without FEATURES_OK: no features were agreed");
            return;
        }
        if activated {
            t.epoch += 1;
            self.changed();
        }
    }

    /// The features offered.
    pub fn offered(&self) -> u64 {
        offered_features(self.offload)
    }

    /// Marks the device broken: the guest sees DEVICE_NEEDS_RESET, the I/O thread stops.
    pub fn break_device(&self, why: &str) {
        self.break_locked(&mut self.lock(), why);
    }

    /// [`break_device`](Self::break_device) with the transport already locked.
    fn break_locked(&self, t: &mut Transport, why: &str) {
        self.stop_locked(t, "guest driver error", why);
    }

    /// Marks the device broken for a failure of the host side, not of the driver: the
    /// guest sees DEVICE_NEEDS_RESET all the same, the log line says whose fault it is.
    fn break_for_backend(&self, why: &str) {
        self.stop_locked(&mut self.lock(), "backend failure", why);
    }

    /// Stops the device: `cause` (whose fault) and `why` logged once, `why` kept for
    /// [`broken`](Self::broken).
    fn stop_locked(&self, t: &mut Transport, cause: &str, why: &str) {
        if t.broken.is_none() {
            log::error!("virtio-net: {cause}, device stopped: {why}");
            t.broken = Some(why.to_string());
        }
        t.status |= status::DEVICE_NEEDS_RESET;
        t.epoch += 1;
        self.changed();
    }

    /// The features the driver accepted, once the device has agreed to them (FEATURES_OK).
    pub fn features(&self) -> Option<u64> {
        let t = self.lock();
        (t.status & status::FEATURES_OK != 0).then_some(t.driver_features)
    }

    /// Why the device is broken, if it is.
    pub fn broken(&self) -> Option<String> {
        self.lock().broken.clone()
    }

    /// The live queues if the driver is done setting up, validated against `mem`.
    fn activation(
        &self,
        mem: &GuestMem,
    ) -> Result<Option<(u64, Vec<QueueConfig>, u64)>, QueueFault> {
        let t = self.lock();
        if t.broken.is_some() || t.status & status::DRIVER_OK == 0 {
            return Ok(None);
        }
        let mut configs = Vec::new();
        for (i, (config, ready)) in t.queues.iter().enumerate() {
            if *ready {
                config
                    .validate(QUEUE_MAX, mem.size())
                    .map_err(on(i, self.pairs))?;
                configs.push(*config);
            } else {
                configs.push(QueueConfig::default());
            }
        }
        Ok(Some((t.epoch, configs, t.driver_features)))
    }
}

/// What the I/O thread needs.
pub struct IoThread {
    /// The device.
    pub device: Arc<VirtioNet>,
    /// The VM.
    pub shared: Arc<Shared>,
    /// One backend per pair, or one for all.
    pub backends: Vec<Box<dyn Backend>>,
    /// The guest's kick eventfd per queue (ioeventfds on QueueNotify).
    pub queue_kicks: Vec<EventFd>,
    /// Each vCPU's wake-up eventfd (the one WAIT sleeps on), pair `i` ↔ vCPU `i`.
    pub vcpu_wakes: Vec<EventFd>,
    /// How long to poll after the last work before sleeping ([`io_poll_window`]).
    pub idle_poll: Duration,
}

/// One live queue pair in the I/O thread.
struct Pair {
    rx: Option<DeviceQueue>,
    tx: Option<DeviceQueue>,
    backlog: VecDeque<(IOBuf, FrameChecksum)>,
    /// Direct backends ([`Backend::direct`]): a transmit chain the backend refused (full),
    /// written first next round.
    held_tx: Option<Chain>,
    /// Direct backends: a receive chain taken when the backend had no frame, filled
    /// first next round.
    held_rx: Option<Chain>,
    /// Direct backends: the receive ring was empty when frames were looked for, so any
    /// frames wait in the backend (not in `backlog`) for buffers.
    rx_starved: bool,
}

/// The I/O thread's live queues and what it carries from one round to the next. One
/// [`step`](Self::step) is one round of processing without the sleeping, so the
/// hostile-guest tests drive the device a round at a time over fake guest memory and an
/// in-memory backend, without KVM or a thread.
pub(crate) struct Engine {
    /// The transport epoch the queues were built for (`u64::MAX`: none).
    epoch: u64,
    /// `VirtioNet::changes` when the transport was last looked at (`None`: never).
    seen_changes: Option<u64>,
    pairs: Vec<Pair>,
    ctrl: Option<DeviceQueue>,
    active_pairs: usize,
    /// The features negotiated for the current epoch.
    features: u64,
    /// Large receive may be on in the backends ([`Backend::set_large_receive`]): set
    /// for a driver that negotiated GUEST_TSO4, cleared once every backend turned it off.
    large_receive: bool,
    frames: Vec<RxFrame>,
    /// Frames for the backend, each with its checksum state.
    outgoing: VecDeque<TxFrame>,
}

impl Engine {
    pub(crate) fn new() -> Engine {
        Engine {
            epoch: u64::MAX,
            seen_changes: None,
            pairs: Vec::new(),
            ctrl: None,
            active_pairs: 1,
            features: 0,
            // Backends start with it off (the TAP is opened without TUN_F_TSO4).
            large_receive: false,
            frames: Vec::new(),
            outgoing: VecDeque::new(),
        }
    }

    /// Rebuilds the queues if the transport changed, then moves what can move between
    /// the rings and `backends`, writing `wakes[pair]` when the driver asked to hear.
    /// A queue fault breaks the device. Returns whether there was work.
    pub(crate) fn step(
        &mut self,
        device: &VirtioNet,
        mem: &GuestMem,
        now: NetInstant,
        backends: &mut [Box<dyn Backend>],
        wakes: &[EventFd],
    ) -> bool {
        // Acquire: pairs with `changed`, so the transport's new state is visible below.
        let changes = device.changes.load(Ordering::Acquire);
        if self.seen_changes != Some(changes) {
            self.seen_changes = Some(changes);
            self.rebuild(device, mem, backends);
        }
        match self.work(device, mem, now, backends, wakes) {
            Ok(worked) => worked,
            Err(e) => {
                device.break_device(&e.to_string());
                self.pairs.clear();
                self.ctrl = None;
                false
            }
        }
    }

    /// Builds the queues the transport now describes (none unless it is live), with
    /// large receive in `backends` on for a driver that negotiated GUEST_TSO4 and off
    /// otherwise (see [`switch_large_receive`](Self::switch_large_receive)).
    fn rebuild(&mut self, device: &VirtioNet, mem: &GuestMem, backends: &mut [Box<dyn Backend>]) {
        match device.activation(mem) {
            Ok(Some((e, configs, negotiated))) if e != self.epoch => {
                let guest_tso4 = negotiated & features::bit(features::NET_GUEST_TSO4) != 0;
                if let Err(e) = self.switch_large_receive(backends, device.pairs, guest_tso4) {
                    // Frames up to 64 KiB would keep coming to a driver whose buffers
                    // hold an MTU: each dropped, the guest's TCP stalled for no reason it
                    // could see. Better a device that says it is broken.
                    device.break_for_backend(&format!(
                        "cannot turn large receive off for a driver without GUEST_TSO4: {e}"
                    ));
                    self.pairs.clear();
                    self.ctrl = None;
                    return;
                }
                self.epoch = e;
                self.features = negotiated;
                let queue = |i: usize, want| {
                    configs
                        .get(i)
                        .filter(|c| c.size != 0)
                        .map(|c| DeviceQueue::new(*c, want))
                };
                self.pairs = (0..usize::from(device.pairs))
                    .map(|p| Pair {
                        rx: queue(2 * p, Direction::Write),
                        tx: queue(2 * p + 1, Direction::Read),
                        backlog: VecDeque::new(),
                        held_tx: None,
                        held_rx: None,
                        rx_starved: false,
                    })
                    .collect();
                self.ctrl = queue(2 * usize::from(device.pairs), Direction::ReadThenWrite);
                self.active_pairs = 1;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                self.pairs.clear();
                self.ctrl = None;
                self.epoch = u64::MAX;
                // Reset (or broken): the next driver may not take large frames. A
                // failure here is tried again at its DRIVER_OK, which breaks the device
                // if it still fails and that driver has no GUEST_TSO4.
                if let Err(e) = self.switch_large_receive(backends, device.pairs, false) {
                    log::warn!("virtio-net: cannot turn large receive off at reset: {e}");
                }
            }
            Err(e) => {
                device.break_device(&e.to_string());
                self.pairs.clear();
            }
        }
    }

    /// Turns large receive on or off in every backend ([`Backend::set_large_receive`])
    /// unless it already is, for a device with `pairs` queue pairs.
    ///
    /// On, it is only where large frames can reach the guest whole, GSO header and all:
    /// on the direct receive path, so every backend direct with a virtio-net header and
    /// one per pair. Where it is not — or a backend refuses — it stays off, logged, and
    /// the driver that negotiated GUEST_TSO4 gets MTU-sized frames, which the feature
    /// allows (it lets the device send large frames, it does not oblige it).
    ///
    /// Off, it must be: the error of any backend that failed (the others are still
    /// turned off, and the next call tries again).
    fn switch_large_receive(
        &mut self,
        backends: &mut [Box<dyn Backend>],
        pairs: u16,
        on: bool,
    ) -> std::io::Result<()> {
        if self.large_receive == on {
            return Ok(());
        }
        let set_all = |backends: &mut [Box<dyn Backend>], on| {
            backends
                .iter_mut()
                .map(|b| b.set_large_receive(on))
                .fold(Ok(()), std::io::Result::and)
        };
        if !on {
            set_all(backends, false)?;
            self.large_receive = false;
            return Ok(());
        }
        let whole_to_the_guest = backends.len() == usize::from(pairs)
            && backends
                .iter()
                .all(|b| b.direct().is_some_and(|d| d.vnet_hdr));
        let unavailable = |why: &dyn std::fmt::Display| {
            log::warn!(
                "virtio-net: GUEST_TSO4 negotiated but large receive is unavailable ({why}): \
                 frames to the guest stay MTU-sized"
            );
        };
        if !whole_to_the_guest {
            unavailable(&"the backend's frames take the copying path, without GSO headers");
            return Ok(());
        }
        match set_all(backends, true) {
            Ok(()) => self.large_receive = true,
            Err(e) => {
                unavailable(&e);
                // Backends that did turn it on turn it off again. Should that fail too,
                // their large frames still suit this driver; the flag stays set so that
                // the next driver's activation tries again.
                self.large_receive = set_all(backends, false).is_err();
            }
        }
        Ok(())
    }

    /// EVENT_IDX on the live queues: asks for kicks (before sleeping) or stops asking
    /// (while polling). Returns whether work arrived meanwhile.
    ///
    /// Transmit and control chains are work whenever they are there. Receive buffers
    /// are work only for a queue whose backlog waits for them: the guest keeps its
    /// receive ring stocked, so "buffers are available" is true nearly always, and
    /// counting it kept this thread from ever sleeping (it spun on the CPU it was meant
    /// to leave to a vCPU). The same goes for kicks: a receive queue with no backlog
    /// does not ask for them, or every buffer the guest re-posts would wake this thread
    /// for nothing.
    pub(crate) fn want_kicks(&self, mem: &GuestMem, wanted: bool) -> bool {
        let mut arrived = false;
        for pair in &self.pairs {
            if let Some(tx) = &pair.tx {
                arrived |= tx.set_kicks_wanted(mem, wanted).unwrap_or(false);
            }
            if let Some(rx) = &pair.rx {
                let waiting = !pair.backlog.is_empty() || pair.rx_starved;
                arrived |= rx.set_kicks_wanted(mem, wanted && waiting).unwrap_or(false) && waiting;
            }
        }
        if let Some(ctrl) = &self.ctrl {
            arrived |= ctrl.set_kicks_wanted(mem, wanted).unwrap_or(false);
        }
        arrived
    }

    /// Whether frames taken from the guest still wait for the backend to accept them
    /// (it was full): the thread must come back soon even if nothing wakes it.
    pub(crate) fn has_pending_output(&self) -> bool {
        !self.outgoing.is_empty() || self.pairs.iter().any(|p| p.held_tx.is_some())
    }

    fn work(
        &mut self,
        device: &VirtioNet,
        mem: &GuestMem,
        now: NetInstant,
        backends: &mut [Box<dyn Backend>],
        wakes: &[EventFd],
    ) -> Result<bool, QueueFault> {
        if self.pairs.is_empty() {
            return Ok(false);
        }
        let pairs = device.pairs;
        let wake = |pair: usize| {
            if let Some(fd) = wakes.get(pair) {
                let _ = fd.write(1);
                device.stats.wakes.fetch_add(1, Ordering::Relaxed);
            }
        };
        let outgoing = &mut self.outgoing;
        let negotiated = TxOffload {
            csum: self.features & features::bit(features::NET_CSUM) != 0,
            tso4: self.features & features::bit(features::NET_HOST_TSO4) != 0,
        };
        let guest_csum = self.features & features::bit(features::NET_GUEST_CSUM) != 0;
        let guest_tso4 = self.features & features::bit(features::NET_GUEST_TSO4) != 0;
        let mut worked = false;
        // Control commands.
        if let Some(q) = &mut self.ctrl {
            let on = on(2 * usize::from(pairs), pairs);
            while let Some(chain) = q.pop(mem).map_err(&on)? {
                let ack = control_command(mem, &chain, device.pairs, &mut self.active_pairs);
                let written = match chain.writable.first() {
                    Some(buf) => {
                        mem.write_bytes(buf.addr, &[ack])
                            .ok_or(QueueError::Access("control ack"))
                            .map_err(&on)?;
                        1
                    }
                    None => 0,
                };
                q.push_used(mem, chain.head, written).map_err(&on)?;
                worked = true;
            }
        }
        // Transmit: guest → backend.
        let n_backends = backends.len();
        for (p, pair) in self.pairs.iter_mut().enumerate() {
            let Some(tx) = &mut pair.tx else { continue };
            let on = on(2 * p + 1, pairs);
            let backend = &mut backends[p.min(n_backends - 1)];
            if let Some(direct) = backend.direct() {
                let (moved, returned) = transmit_direct(
                    mem,
                    tx,
                    &mut pair.held_tx,
                    direct,
                    negotiated,
                    &device.stats,
                )
                .map_err(&on)?;
                worked |= moved;
                if wake_asked(mem, tx, returned).map_err(&on)? {
                    wake(p);
                }
                continue;
            }
            // The copying path hands a backend frames and checksum states, never a GSO
            // request (HOST_TSO4 is offered only for a direct backend): one is refused as
            // not negotiated, and a chain may hold no more than without HOST_TSO4.
            let copying = TxOffload {
                tso4: false,
                ..negotiated
            };
            let mut returned = None;
            while outgoing.len() < 256 {
                let Some(chain) = tx.pop(mem).map_err(&on)? else {
                    break;
                };
                let (frame, header) = gather(mem, &chain, copying).map_err(&on)?;
                let request = tx_request(&header, chain.head, frame.len(), copying).map_err(&on)?;
                request.count(&device.stats);
                let old = tx.push_used(mem, chain.head, 0).map_err(&on)?;
                returned.get_or_insert(old);
                outgoing.push_back(TxFrame {
                    chain: IOBufChain::from(frame),
                    checksum: request.checksum,
                });
                worked = true;
            }
            if wake_asked(mem, tx, returned).map_err(&on)? {
                wake(p);
            }
            let before = outgoing.len();
            backend.transmit(now, outgoing);
            device
                .stats
                .tx_frames
                .fetch_add((before - outgoing.len()) as u64, Ordering::Relaxed);
            // What the backend could not take now is dropped only if it is still
            // full next round; keep it for now (bounded above).
        }
        // Receive: backend → guest. Only as many frames as the backlog has room for:
        // the rest waits in the backend (passt's are read out of its socket all the same,
        // by `drain`), so nothing is dropped here for want of guest buffers.
        let frames = &mut self.frames;
        for (b, backend) in backends.iter_mut().enumerate() {
            // Straight into the guest's buffers when the backend can and no frame needs
            // its checksum completed on the way (a header the driver cannot read).
            if let Some(direct) = backend.direct()
                && n_backends == self.pairs.len()
                && (guest_csum || !direct.vnet_hdr)
            {
                let pair = &mut self.pairs[b];
                let Some(rx) = &mut pair.rx else { continue };
                let on = on(2 * b, pairs);
                let (moved, returned) = receive_direct(
                    mem,
                    rx,
                    &mut pair.held_rx,
                    &mut pair.rx_starved,
                    direct,
                    guest_tso4,
                    &device.stats,
                )
                .map_err(&on)?;
                worked |= moved;
                if wake_asked(mem, rx, returned).map_err(&on)? {
                    wake(b);
                }
                continue;
            }
            backend.drain();
            let room = if n_backends == self.pairs.len() {
                RX_BACKLOG.saturating_sub(self.pairs[b].backlog.len())
            } else {
                self.pairs
                    .iter()
                    .map(|p| RX_BACKLOG.saturating_sub(p.backlog.len()))
                    .min()
                    .unwrap_or(0)
            };
            frames.clear();
            let n = backend.receive(now, frames, room.min(64));
            if n > 0 {
                worked = true;
            }
            for mut received in frames.drain(..) {
                if !guest_csum {
                    // Complete checksums only: a driver without GUEST_CSUM reads no flags.
                    received.complete();
                }
                let RxFrame {
                    buf: frame,
                    checksum,
                } = received;
                let p = if n_backends == self.pairs.len() {
                    b
                } else {
                    flow_pair(frame.as_slice(), self.active_pairs)
                };
                let last = self.pairs.len() - 1;
                let backlog = &mut self.pairs[p.min(last)].backlog;
                if backlog.len() >= RX_BACKLOG {
                    device.stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    backlog.push_back((frame, checksum));
                }
            }
        }
        for (p, pair) in self.pairs.iter_mut().enumerate() {
            let Some(rx) = &mut pair.rx else { continue };
            let on = on(2 * p, pairs);
            let mut returned = None;
            while let Some((frame, checksum)) = pair.backlog.front() {
                let Some(chain) = rx.pop(mem).map_err(&on)? else {
                    break;
                };
                let written = scatter(mem, &chain, frame.as_slice(), *checksum).map_err(&on)?;
                if written.is_none() {
                    device.stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    device.stats.rx_frames.fetch_add(1, Ordering::Relaxed);
                    let counter = match checksum {
                        FrameChecksum::Partial { .. } => Some(&device.stats.rx_csum_partial),
                        FrameChecksum::Verified => Some(&device.stats.rx_csum_valid),
                        FrameChecksum::Complete => None,
                    };
                    if let Some(c) = counter {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let old = rx
                    .push_used(mem, chain.head, written.unwrap_or(0))
                    .map_err(&on)?;
                returned.get_or_insert(old);
                pair.backlog.pop_front();
                worked = true;
            }
            if wake_asked(mem, rx, returned).map_err(&on)? {
                wake(p);
            }
        }
        Ok(worked)
    }
}

impl IoThread {
    /// Runs until the VM stops.
    pub fn run(mut self) {
        let epoll = match epoll::create(epoll::CreateFlags::CLOEXEC) {
            Ok(e) => e,
            Err(e) => {
                log::error!("virtio-net: epoll: {e}");
                return;
            }
        };
        let add = |fd: std::os::fd::BorrowedFd<'_>, flags| {
            let _ = epoll::add(&epoll, fd, epoll::EventData::new_u64(0), flags);
        };
        // The eventfds are read empty after each wake (level-triggered is right). A
        // backend is edge-triggered: frames left in it because the guest's backlog is
        // full must not wake this thread again and again; what frees the backlog is the
        // guest re-posting receive buffers, a kick this thread asks for (`want_kicks`).
        add(
            crate::sys::borrow_eventfd(&self.device.control),
            epoll::EventFlags::IN,
        );
        for kick in &self.queue_kicks {
            add(crate::sys::borrow_eventfd(kick), epoll::EventFlags::IN);
        }
        for backend in &self.backends {
            add(backend.fd(), epoll::EventFlags::IN | epoll::EventFlags::ET);
        }
        let shared = self.shared.clone();
        let mem = &shared.mem;
        let mut engine = Engine::new();
        let mut last_work = Instant::now();
        let started = Instant::now();
        let mut events = Vec::with_capacity(16);
        let idle_poll = self.idle_poll;
        log::debug!("virtio-net: the I/O thread polls {idle_poll:?} before it sleeps");
        let mut last_faults: Option<FaultStats> = None;
        while !self.shared.stopping() {
            let now = NetInstant::from_nanos(started.elapsed().as_nanos() as u64);
            let worked = engine.step(&self.device, mem, now, &mut self.backends, &self.vcpu_wakes);
            let faults = self
                .backends
                .iter()
                .filter_map(|b| b.fault_stats())
                .reduce(add_faults);
            if faults != last_faults {
                last_faults = faults;
                *self
                    .device
                    .stats
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = faults;
            }
            if worked {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < idle_poll {
                std::hint::spin_loop();
                continue;
            }
            // Sleep: ask for kicks, look once more, then wait.
            if !engine.want_kicks(mem, true) {
                events.clear();
                let now = NetInstant::from_nanos(started.elapsed().as_nanos() as u64);
                let timeout = sleep_bound(
                    now,
                    engine.has_pending_output()
                        || self.backends.iter().any(|b| b.has_pending_output()),
                    self.backends.iter().filter_map(|b| b.poll_at()).min(),
                );
                let timeout = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: timeout.as_nanos() as i64,
                };
                let _ = epoll::wait(
                    &epoll,
                    rustix::buffer::spare_capacity(&mut events),
                    Some(&timeout),
                );
            }
            // Clear what woke us; a transport change is seen through `changes`.
            let _ = self.device.control.read();
            for kick in &self.queue_kicks {
                if let Ok(n) = kick.read() {
                    self.device.stats.kicks.fetch_add(n, Ordering::Relaxed);
                }
            }
            engine.want_kicks(mem, false);
            last_work = Instant::now();
        }
    }
}

/// How long the I/O thread may sleep when nothing wakes it: [`SLEEP_MAX`], less when
/// output waits for a full backend ([`PENDING_OUTPUT_RETRY`]: TAP and passt's socket
/// say nothing when they drain) or a backend (the fault injector holding a delayed
/// frame) wants to be polled at `poll_at`.
pub(crate) fn sleep_bound(
    now: NetInstant,
    pending_output: bool,
    poll_at: Option<NetInstant>,
) -> Duration {
    let mut bound = SLEEP_MAX;
    if pending_output {
        bound = bound.min(PENDING_OUTPUT_RETRY);
    }
    if let Some(at) = poll_at {
        bound = bound.min(at.saturating_duration_since(now));
    }
    bound
}

/// Environment variable overriding the I/O thread's poll window, in microseconds.
pub const IO_POLL_ENV: &str = "EBB_VMM_IO_POLL_US";

/// How long the I/O thread polls after its last work before it sleeps: [`IDLE_POLL`]
/// when it has a CPU to poll on; zero when it shares every CPU with a vCPU
/// (`cpus_shared`, [`shares_cpus_with_vcpus`]), where each microsecond of its polling is
/// taken from a guest with work to do (measured with native memcached on one CPU: 1.4×
/// the requests per second without it). [`IO_POLL_ENV`] overrides both.
pub(crate) fn io_poll_window(cpus_shared: bool) -> Duration {
    if let Some(us) = std::env::var(IO_POLL_ENV).ok().and_then(|v| v.parse().ok()) {
        return Duration::from_micros(us);
    }
    if cpus_shared {
        Duration::ZERO
    } else {
        IDLE_POLL
    }
}

/// Whether this process may run on no more CPUs than it has vCPUs (its affinity mask,
/// as `taskset` sets it), so that a device thread always competes with a vCPU for a CPU.
/// An unreadable mask counts as "not sharing" (polling stays on, as before).
pub(crate) fn shares_cpus_with_vcpus(vcpus: usize) -> bool {
    rustix::thread::sched_getaffinity(None).is_ok_and(|set| set.count() as usize <= vcpus)
}

/// Largest transmit chain, header included, without segmentation offload: a frame is
/// then at most the MTU and an Ethernet header; this is generous.
const TX_CHAIN_MAX: u64 = 65_536;
/// Largest transmit chain with HOST_TSO4: the header, an Ethernet header and the largest
/// IPv4 packet (its 16-bit total length), which the backend cuts into segments.
const TX_CHAIN_MAX_TSO4: u64 = (NET_HDR_LEN + 14 + 65_535) as u64;

/// What the driver negotiated that bears on one transmit path: what its headers may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TxOffload {
    /// CSUM: `NEEDS_CSUM` is allowed.
    csum: bool,
    /// HOST_TSO4, on a path whose backend is handed the request: TCPv4 GSO requests and
    /// frames up to [`TX_CHAIN_MAX_TSO4`] are allowed.
    tso4: bool,
}

impl TxOffload {
    /// The most bytes a transmit chain may hold.
    fn chain_max(self) -> u64 {
        if self.tso4 {
            TX_CHAIN_MAX_TSO4
        } else {
            TX_CHAIN_MAX
        }
    }
}

/// A transmit chain's virtio-net header and the length of the frame behind it. A chain
/// with no frame in it (the header or less) or too long for one (`offload` says how long
/// one may be) is the driver's error, not a frame to drop silently.
fn chain_header(
    mem: &GuestMem,
    chain: &Chain,
    offload: TxOffload,
) -> Result<(NetHdr, usize), QueueError> {
    let total: u64 = chain.readable.iter().map(|b| u64::from(b.len)).sum();
    let max = offload.chain_max();
    if total <= NET_HDR_LEN as u64 || total > max {
        return Err(QueueError::NotAFrame {
            head: chain.head,
            len: total,
            max,
        });
    }
    let mut header = [0u8; NET_HDR_LEN];
    read_at(mem, &chain.readable, 0, &mut header).ok_or(QueueError::Access("a transmit buffer"))?;
    Ok((NetHdr::from_bytes(&header), total as usize - NET_HDR_LEN))
}

/// The frame of a transmit chain (its bytes after the virtio-net header) and the header,
/// copied out once each.
fn gather(
    mem: &GuestMem,
    chain: &Chain,
    offload: TxOffload,
) -> Result<(IOBuf, NetHdr), QueueError> {
    let (header, len) = chain_header(mem, chain, offload)?;
    let mut frame = vec![0u8; len];
    read_at(mem, &chain.readable, NET_HDR_LEN, &mut frame)
        .ok_or(QueueError::Access("a transmit buffer"))?;
    Ok((IOBuf::from_vec(frame), header))
}

/// The pieces of bytes `at..at + len` of the chain made of `bufs` (guest ranges, in
/// order): each a guest address and the range, counted from `at`, of the bytes it holds.
/// They cover fewer than `len` bytes when the chain is shorter.
fn chain_spans(
    bufs: &[Buf],
    at: usize,
    len: usize,
) -> impl Iterator<Item = (u64, core::ops::Range<usize>)> + '_ {
    let (mut skip, mut done) = (at, 0);
    bufs.iter().filter_map(move |buf| {
        let here = buf.len as usize;
        if done == len {
            return None;
        }
        if skip >= here {
            skip -= here;
            return None;
        }
        let n = (here - skip).min(len - done);
        let span = (buf.addr + skip as u64, done..done + n);
        (skip, done) = (0, done + n);
        Some(span)
    })
}

/// Copies `out.len()` bytes from offset `at` of the chain made of `bufs`; `None` if the
/// chain is shorter or a range is not guest memory.
fn read_at(mem: &GuestMem, bufs: &[Buf], at: usize, out: &mut [u8]) -> Option<()> {
    let mut covered = 0;
    for (addr, range) in chain_spans(bufs, at, out.len()) {
        covered = range.end;
        mem.read_into(addr, &mut out[range])?;
    }
    (covered == out.len()).then_some(())
}

/// Copies `bytes` to offset `at` of the chain made of `bufs`; `None` as for [`read_at`].
fn write_at(mem: &GuestMem, bufs: &[Buf], at: usize, bytes: &[u8]) -> Option<()> {
    let mut covered = 0;
    for (addr, range) in chain_spans(bufs, at, bytes.len()) {
        covered = range.end;
        mem.write_bytes(addr, &bytes[range])?;
    }
    (covered == bytes.len()).then_some(())
}

/// Adds the chain made of `bufs`, from byte `skip` on, to `iov`.
fn push_chain<'a>(
    iov: &mut IoVecs<'a>,
    mem: &'a GuestMem,
    bufs: &[Buf],
    skip: usize,
    what: &'static str,
) -> Result<(), QueueError> {
    for (addr, range) in chain_spans(bufs, skip, usize::MAX) {
        iov.push_guest(mem, addr, range.len())
            .ok_or(QueueError::Access(what))?;
    }
    Ok(())
}

/// The virtio-net header a backend is handed with a frame the guest sent with
/// `request` (validated by [`tx_request`]): `NEEDS_CSUM` and its two offsets, the GSO
/// type and sizes — nothing else of the guest's header goes through.
fn backend_header(request: TxRequest) -> NetHdr {
    let header = match request.checksum {
        FrameChecksum::Partial { start, offset } => NetHdr::needs_csum(start, offset),
        FrameChecksum::Complete | FrameChecksum::Verified => NetHdr::PLAIN,
    };
    match request.gso {
        Some(Tcpv4Gso { hdr_len, gso_size }) => header.with_tcpv4_gso(hdr_len, gso_size),
        None => header,
    }
}

/// The virtio-net header in front of a frame to the guest in `checksum` state (one
/// buffer per frame: no MRG_RXBUF).
fn guest_header(checksum: FrameChecksum) -> NetHdr {
    let header = match checksum {
        FrameChecksum::Partial { start, offset } => NetHdr::needs_csum(start, offset),
        FrameChecksum::Verified => NetHdr {
            flags: NET_HDR_F_DATA_VALID,
            ..NetHdr::PLAIN
        },
        FrameChecksum::Complete => NetHdr::PLAIN,
    };
    NetHdr {
        num_buffers: 1,
        ..header
    }
}

/// Whether the driver asked to be woken for the used entries returned this round, the
/// first at used index `returned` (`None`: none were).
fn wake_asked(mem: &GuestMem, q: &DeviceQueue, returned: Option<u16>) -> Result<bool, QueueError> {
    match returned {
        Some(old) => q.needs_notification(mem, old),
        None => Ok(false),
    }
}

/// Most chains one round moves each way per pair on the direct path.
const DIRECT_BATCH: usize = 64;

/// Transmit on a direct backend: each chain goes to the backend with one `writev` of the
/// device's own header (validated, see `backend_header`) and the guest's frame
/// buffers, no copy in between. A chain the backend refuses (full) is kept in `held` and
/// written first next round. `negotiated`: what the driver's headers may ask for. Returns
/// whether a chain moved and the used index before the first one returned (for
/// [`DeviceQueue::needs_notification`]).
fn transmit_direct(
    mem: &GuestMem,
    tx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    direct: Direct<'_>,
    negotiated: TxOffload,
    stats: &NetStats,
) -> Result<(bool, Option<u16>), QueueError> {
    // A GSO request reaches the backend only in its header (HOST_TSO4 is offered only
    // for a backend with one; this keeps a backend without one from ever being handed
    // a frame to segment).
    let offload = TxOffload {
        tso4: negotiated.tso4 && direct.vnet_hdr,
        ..negotiated
    };
    let (mut worked, mut returned) = (false, None);
    for _ in 0..DIRECT_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match tx.pop(mem)? {
                Some(chain) => chain,
                None => break,
            },
        };
        let (header, len) = chain_header(mem, &chain, offload)?;
        let request = tx_request(&header, chain.head, len, offload)?;
        // CSUM is offered only with a backend that has a header to carry NEEDS_CSUM.
        debug_assert!(direct.vnet_hdr || request.checksum == FrameChecksum::Complete);
        let header = backend_header(request).to_bytes();
        let mut iov = IoVecs::with_capacity(chain.readable.len() + 1);
        if direct.vnet_hdr {
            iov.push_host(&header);
        }
        push_chain(
            &mut iov,
            mem,
            &chain.readable,
            NET_HDR_LEN,
            "a transmit buffer",
        )?;
        match iov.write_to(direct.fd) {
            Ok(_) => {
                stats.tx_frames.fetch_add(1, Ordering::Relaxed);
                request.count(stats);
            }
            Err(Errno::AGAIN | Errno::INTR) => {
                *held = Some(chain);
                break;
            }
            // The interface is down or gone, or the kernel refused the frame (shorter
            // than an Ethernet header, say): nobody will take it.
            Err(e) => {
                log::debug!("virtio-net: the backend refused a {len}-byte frame: {e}");
                stats.tx_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        let old = tx.push_used(mem, chain.head, 0)?;
        returned.get_or_insert(old);
        worked = true;
    }
    Ok((worked, returned))
}

/// Receive on a direct backend: each frame is read with one `readv` straight into a
/// receive chain (behind a header the device writes when the backend has none), no copy
/// in between. A frame longer than the chain spills into a byte of the device's own and
/// is dropped and counted, its buffer returned empty, as on the copying path; so the
/// longest frame is whatever the guest's chains hold, and a large-receive frame (a
/// header, an Ethernet header and 65,535 bytes) needs no limit of its own here. The
/// backend's GSO header goes to the guest as it is if the driver negotiated GUEST_TSO4
/// (`guest_tso4`) and the request is TCPv4 (the only kind large receive asks the kernel
/// for); a frame with any other — such as a large frame the kernel queued before large
/// receive was turned off for this driver — is dropped and counted. A chain taken when
/// the backend had nothing is kept in `held`; an empty ring sets `starved` (frames then
/// wait in the backend, and the device asks for a kick on new buffers).
fn receive_direct(
    mem: &GuestMem,
    rx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    starved: &mut bool,
    direct: Direct<'_>,
    guest_tso4: bool,
    stats: &NetStats,
) -> Result<(bool, Option<u16>), QueueError> {
    let (mut worked, mut returned) = (false, None);
    // Without a backend header the device writes its own in front of the frame.
    let skip = if direct.vnet_hdr { 0 } else { NET_HDR_LEN };
    for _ in 0..DIRECT_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match rx.pop(mem)? {
                Some(chain) => chain,
                None => {
                    *starved = true;
                    break;
                }
            },
        };
        *starved = false;
        let room: usize = chain.writable.iter().map(|b| b.len as usize).sum();
        let mut spill = [0u8; 1];
        let mut iov = IoVecs::with_capacity(chain.writable.len() + 1);
        push_chain(&mut iov, mem, &chain.writable, skip, "a receive buffer")?;
        iov.push_spill(&mut spill);
        let read = iov.read_from(direct.fd);
        drop(iov);
        let n = match read {
            Ok(n) => n + skip,
            Err(Errno::AGAIN | Errno::INTR) => {
                *held = Some(chain);
                break;
            }
            Err(_) => {
                *held = Some(chain);
                break;
            }
        };
        // Too short for a header and an Ethernet header, or cut to fit: dropped.
        let fits = (NET_HDR_LEN + 14..=room).contains(&n);
        // The backend's header as it wrote it (read back from the guest's buffer: what
        // the device decides on is its own copy), or the device's own for a bare frame;
        // either way the frame fills this one chain.
        let mut header = NetHdr::PLAIN;
        if fits && direct.vnet_hdr {
            let mut bytes = [0u8; NET_HDR_LEN];
            read_at(mem, &chain.writable, 0, &mut bytes)
                .ok_or(QueueError::Access("a receive buffer"))?;
            header = NetHdr::from_bytes(&bytes);
        }
        let gso_allowed = match header.gso_type {
            NET_HDR_GSO_NONE => true,
            NET_HDR_GSO_TCPV4 => guest_tso4,
            _ => false,
        };
        let written = if !fits || !gso_allowed {
            stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
            0
        } else {
            if header.gso_type != NET_HDR_GSO_NONE {
                stats.rx_gso.fetch_add(1, Ordering::Relaxed);
            }
            if header.flags & NET_HDR_F_NEEDS_CSUM != 0 {
                stats.rx_csum_partial.fetch_add(1, Ordering::Relaxed);
            } else if header.flags & NET_HDR_F_DATA_VALID != 0 {
                stats.rx_csum_valid.fetch_add(1, Ordering::Relaxed);
            }
            header.num_buffers = 1;
            write_at(mem, &chain.writable, 0, &header.to_bytes())
                .ok_or(QueueError::Access("a receive buffer"))?;
            stats.rx_frames.fetch_add(1, Ordering::Relaxed);
            n as u32
        };
        let old = rx.push_used(mem, chain.head, written)?;
        returned.get_or_insert(old);
        worked = true;
    }
    Ok((worked, returned))
}

/// What a validated transmit header asks the backend to do with its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TxRequest {
    /// `Partial` for `NEEDS_CSUM`.
    checksum: FrameChecksum,
    /// Cut the frame into TCPv4 segments (HOST_TSO4); `None`: send it as it is.
    gso: Option<Tcpv4Gso>,
}

/// A TCPv4 segmentation request, as the backend's header carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tcpv4Gso {
    /// Bytes of the Ethernet, IPv4 and TCP headers, repeated in front of each segment.
    hdr_len: u16,
    /// TCP payload bytes per segment (the last may have fewer).
    gso_size: u16,
}

impl TxRequest {
    /// Counts a frame sent with this request.
    fn count(self, stats: &NetStats) {
        if self.checksum != FrameChecksum::Complete {
            stats.tx_csum_partial.fetch_add(1, Ordering::Relaxed);
        }
        if self.gso.is_some() {
            stats.tx_gso.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The ECN bit of `gso_type` (`VIRTIO_NET_HDR_GSO_ECN`; HOST_ECN is not offered).
const GSO_ECN: u8 = 0x80;

/// What a transmit header asks of a frame of `len` bytes, given what the driver may ask
/// for (`offload`). A hostile or broken driver's request is refused, never acted on:
/// see [`tx_checksum`] and [`tx_gso`]. `DATA_VALID`, and `hdr_len` and `gso_size`
/// without GSO, mean nothing on transmit and are ignored.
fn tx_request(
    header: &NetHdr,
    head: u16,
    len: usize,
    offload: TxOffload,
) -> Result<TxRequest, QueueError> {
    let checksum = tx_checksum(header, head, len, offload.csum)?;
    let gso = tx_gso(header, checksum, head, len, offload.tso4)?;
    Ok(TxRequest { checksum, gso })
}

/// `Partial` for `NEEDS_CSUM`, which must have been negotiated (`csum`) and must put the
/// two-byte checksum field inside the frame of `len` bytes.
fn tx_checksum(
    header: &NetHdr,
    head: u16,
    len: usize,
    csum: bool,
) -> Result<FrameChecksum, QueueError> {
    if header.flags & NET_HDR_F_NEEDS_CSUM == 0 {
        return Ok(FrameChecksum::Complete);
    }
    let (start, offset) = (header.csum_start, header.csum_offset);
    if !csum || usize::from(start) + usize::from(offset) + 2 > len {
        return Err(QueueError::BadChecksumRequest {
            head,
            start,
            offset,
            len,
            negotiated: csum,
        });
    }
    Ok(FrameChecksum::Partial { start, offset })
}

/// The segmentation a header asks for, if any: only TCPv4 (`tso4`: HOST_TSO4 negotiated
/// on a path that hands the request on), only with a partial checksum to complete in
/// each segment, segments of at least one byte and headers inside the frame of `len`
/// bytes. Everything else — UDP, TCPv6, undefined types, the ECN bit — was not offered.
/// Linux checks the headers themselves when it segments; these are the checks it cannot
/// make for us: what was negotiated.
fn tx_gso(
    header: &NetHdr,
    checksum: FrameChecksum,
    head: u16,
    len: usize,
    tso4: bool,
) -> Result<Option<Tcpv4Gso>, QueueError> {
    let fault = match header.gso_type {
        NET_HDR_GSO_NONE => return Ok(None),
        NET_HDR_GSO_TCPV4 if !tso4 => GsoFault::Tso4NotNegotiated,
        NET_HDR_GSO_TCPV4 if checksum == FrameChecksum::Complete => GsoFault::WithoutNeedsCsum,
        NET_HDR_GSO_TCPV4 if header.gso_size == 0 => GsoFault::ZeroSegmentSize,
        NET_HDR_GSO_TCPV4 if usize::from(header.hdr_len) > len => GsoFault::HeadersPastTheFrame,
        NET_HDR_GSO_TCPV4 => {
            return Ok(Some(Tcpv4Gso {
                hdr_len: header.hdr_len,
                gso_size: header.gso_size,
            }));
        }
        t if t & GSO_ECN != 0 => GsoFault::Ecn,
        _ => GsoFault::UnknownType,
    };
    Err(QueueError::BadGsoRequest {
        head,
        gso_type: header.gso_type,
        hdr_len: header.hdr_len,
        gso_size: header.gso_size,
        len,
        fault,
    })
}

/// Writes the header and `frame` into a receive chain; the bytes written, or `None` if
/// the chain is too small (the frame is dropped).
fn scatter(
    mem: &GuestMem,
    chain: &Chain,
    frame: &[u8],
    checksum: FrameChecksum,
) -> Result<Option<u32>, QueueError> {
    let room: u64 = chain.writable.iter().map(|b| u64::from(b.len)).sum();
    let total = NET_HDR_LEN + frame.len();
    if (total as u64) > room {
        return Ok(None);
    }
    let header = guest_header(checksum).to_bytes();
    // Header, then frame, across the buffers in order: slices copied whole.
    let parts: [&[u8]; 2] = [&header, frame];
    let (mut part, mut at) = (0, 0);
    for buf in &chain.writable {
        let (mut addr, mut room) = (buf.addr, buf.len as usize);
        while room > 0 && part < parts.len() {
            let source = &parts[part][at..];
            let n = source.len().min(room);
            mem.write_bytes(addr, &source[..n])
                .ok_or(QueueError::Access("a receive buffer"))?;
            addr += n as u64;
            room -= n;
            at += n;
            if at == parts[part].len() {
                part += 1;
                at = 0;
            }
        }
        if part == parts.len() {
            break;
        }
    }
    Ok(Some(total as u32))
}

/// Handles one control command; returns the ack byte.
fn control_command(mem: &GuestMem, chain: &Chain, max_pairs: u16, active: &mut usize) -> u8 {
    let mut bytes = Vec::new();
    for buf in &chain.readable {
        match mem.read_bytes(buf.addr, u64::from(buf.len).min(64)) {
            Some(b) => bytes.extend(b),
            None => return NET_ERR,
        }
    }
    match bytes.as_slice() {
        [class, cmd, lo, hi, ..] if *class == NET_CTRL_MQ && *cmd == NET_CTRL_MQ_VQ_PAIRS_SET => {
            let n = u16::from_le_bytes([*lo, *hi]);
            if (1..=max_pairs).contains(&n) {
                *active = usize::from(n);
                NET_OK
            } else {
                NET_ERR
            }
        }
        _ => NET_ERR,
    }
}

/// The queue pair for a frame from a single-queue backend: a symmetric hash of its IPv4
/// addresses and TCP/UDP ports, so both directions of a flow agree; other frames go to
/// pair 0.
fn flow_pair(frame: &[u8], pairs: usize) -> usize {
    if pairs <= 1 || frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
        return 0;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let proto = ip[9];
    let addrs = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]])
        ^ u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    let ports = if (proto == 6 || proto == 17) && ip.len() >= ihl + 4 {
        u32::from(u16::from_be_bytes([ip[ihl], ip[ihl + 1]]))
            ^ u32::from(u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]))
    } else {
        0
    };
    let h = (addrs ^ ports).wrapping_mul(0x9e37_79b9);
    (h >> 16) as usize % pairs
}
