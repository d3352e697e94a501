//! The virtio-net device: its MMIO transport (registers served on the vCPU threads'
//! MMIO exits) and its I/O thread (rings ⇄ backend).
//!
//! * **Transport.** Modern virtio-MMIO at [`MMIO_BASE`](ebb_abi::virtio::MMIO_BASE) (slot 0; other slots read as
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
//!   On CPUs shared with the vCPUs, host input does not wake it while the guest has
//!   frames it has not taken, nor during the guest's turn to answer frames it was
//!   handed ([`turn`]): it then sleeps on the guest's side only.
//! * **Moving frames.** A TAP backend is *direct* ([`HostLink::direct`](super::HostLink::direct)): each frame goes
//!   between the TAP descriptor and the guest's descriptor chain with one `readv` or
//!   `writev` over guest memory, no copy in the monitor (the header sent is the device's
//!   own, built from the validated request). passt (a byte stream that needs framing)
//!   and the fault injector (which must see every frame) take the copying path: each
//!   frame copied out of or into guest memory once, through an IOBuf. An AF_XDP
//!   backend is *copying* ([`HostLink::copying`](super::HostLink::copying), [`copying`]):
//!   each frame copied once between guest memory and one of the backend's own UMEM
//!   chunks, no IOBuf between, and one `flush` (at most one system call) per round for
//!   everything transmitted in it. (With more pairs than backends, or a fault injector
//!   around it, it takes the IOBuf path like passt.)
//! * **Checksum offload.** Offered only with a backend that takes and gives per-frame
//!   checksum state ([`FrameChecksum`](ebb_net_driver::FrameChecksum)): the TAP backend opened with `IFF_VNET_HDR` and
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
//!   it has not said it completes. An external link may say it takes and gives
//!   checksum states on the IOBuf path (`HostLinkFactory::offload`: ebb-usernet's
//!   in-monitor forwards, whose endpoint is a stack in this process): it is then
//!   offered too, without `--net-faults`.
//! * **Segmentation offload (TSO) on transmit.** With HOST_TSO4 the driver may send one
//!   TCPv4 frame of up to 64 KiB (an Ethernet header and an IPv4 packet of up to 65,535
//!   bytes) instead of MTU-sized segments; the header says how to cut it (`gso_type` TCPV4,
//!   `hdr_len` bytes of Ethernet, IPv4 and TCP headers to repeat, `gso_size` payload bytes
//!   per segment) and, as the spec requires, has `NEEDS_CSUM` on the TCP checksum, to be
//!   completed in every segment. The device does not cut: it hands the request on in the
//!   TAP's header with the usual single `writev`, and Linux segments where it has to. So it
//!   is offered only where the request reaches a TAP's header unchanged — checksum offload
//!   on and the direct path, not with `--net-faults` (`VmNetwork::segmentation_offload`) —
//!   and the copying path refuses any GSO request as not negotiated. Validated before
//!   anything is written ([`QueueError::BadGsoRequest`], the device broken as for a bad
//!   chain): TCPV4 only with HOST_TSO4 negotiated and `NEEDS_CSUM` (itself validated as
//!   above), `gso_size` at least 1, `hdr_len` inside the frame; the ECN bit and every other
//!   type (UDP, TCPv6, undefined) are refused. A chain may then hold 12 + 14 + 65,535 bytes
//!   instead of 64 KiB. The backend's header is the device's own (`backend_header`), built
//!   from those validated fields only. Linux checks the frame's own headers against the
//!   request when it segments; what it cannot know is what was negotiated here. An
//!   external link that takes large frames (`HostLinkFactory::offload`) gets HOST_TSO4
//!   too, on the IOBuf path: the validated request becomes a frame longer than the MTU,
//!   whose cut follows from its headers (`ebb_net_driver::Segmentation::of`), and the
//!   link cuts it or takes it whole.
//! * **Segmentation offload on receive (large receive).** With GUEST_TSO4 (offered where
//!   HOST_TSO4 is, [`Offload::guest_tso4`]; refused without GUEST_CSUM) the driver takes
//!   TCPv4 frames of up to 64 KiB behind a `GSO_TCPV4` header. The device coalesces
//!   nothing: Linux hands the TAP's reader such frames once `TUN_F_TSO4` is on
//!   ([`HostLink::set_large_receive`](super::HostLink::set_large_receive)), and the direct path passes its header through.
//!   That is a setting of the whole TAP, so the I/O thread switches it when it learns the
//!   negotiated features (`Engine::rebuild`, at DRIVER_OK): on for a driver that took
//!   GUEST_TSO4, off for one that did not, off at every reset and breakage. Turning it on
//!   may fail (logged; frames stay MTU-sized, which GUEST_TSO4 allows); turning it off for
//!   a driver without GUEST_TSO4 must not (the device breaks, logged as a backend
//!   failure). On receive a frame longer than the guest's chain is dropped and counted
//!   as ever, so no length limit is needed; a GSO header reaches the guest only if it is
//!   TCPV4 and GUEST_TSO4 was negotiated — a large frame the kernel queued before large
//!   receive went off is dropped and counted. Counted in `rx_gso`. On the IOBuf path
//!   (an external link with large receive) the device writes the GSO header itself for
//!   a frame longer than the MTU, from the frame's headers, and drops such a frame for a
//!   guest without GUEST_TSO4.
//!
//! Files, by concern: [`transport`] (the MMIO register file, feature negotiation, reset
//! and breakage), [`engine`] (the I/O thread, its rounds and its sleep), [`chain`]
//! (frames in descriptor chains), [`direct`] (the direct path), [`copying`] (the copying
//! path), [`offload`] (what is
//! offered, and the validation of what a header asks), [`control`] (the control queue).

mod chain;
mod control;
mod copying;
mod direct;
mod engine;
mod offload;
mod placement;
mod transport;
mod turn;

#[cfg(test)]
pub(crate) use engine::io_real_time;
#[cfg(test)]
pub(crate) use engine::{Engine, sleep_bound};
pub use engine::{IO_POLL_ENV, IO_REAL_TIME_ENV, IO_REAL_TIME_PRIORITY, IoThread};
pub(crate) use engine::{io_poll_window, shares_cpus_with_vcpus};
pub use offload::Offload;
pub use placement::{TrafficPlacement, VcpuTid};
pub use transport::VirtioNetDevice;
pub use turn::GUEST_TURN_ENV;
#[cfg(test)]
pub(crate) use turn::{GUEST_TURN, GuestTurn};

use crate::virtio::queue::QueueError;
use ebb_net_driver::{FaultCounts, FaultStats};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

/// How long the I/O thread keeps polling after its last work before it sleeps.
pub const IDLE_POLL: Duration = Duration::from_micros(50);
/// Entries per queue the device accepts at most.
pub const QUEUE_MAX: u16 = 256;
/// Frames received from the backend that may wait for guest buffers, per pair.
const RX_BACKLOG: usize = 256;
/// The MTU the device reports (its config space's `mtu`): the largest IPv4 packet of a
/// frame without segmentation offload.
const DEVICE_MTU: usize = 1500;
/// Longest sleep of the I/O thread (it checks for the VM's end this often).
pub(crate) const SLEEP_MAX: Duration = Duration::from_millis(20);
/// The sleep while frames wait for a full backend to take them ([`sleep_bound`](engine::sleep_bound)).
pub(crate) const PENDING_OUTPUT_RETRY: Duration = Duration::from_micros(100);

/// Counters of the device.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Guest kicks (ioeventfd signals) — each one a VM exit.
    pub kicks: AtomicU64,
    /// Times the device woke a vCPU (wrote its kick eventfd).
    pub wakes: AtomicU64,
    /// Turns the I/O thread gave the guest: sleeps during which host input waited for
    /// the guest's answer to frames it was handed (`turn`).
    pub guest_turns: AtomicU64,
    /// Turns that ended for want of an answer within [`turn::GUEST_TURN`].
    pub guest_turns_expired: AtomicU64,
    /// Whether the I/O thread runs at [`IO_REAL_TIME_PRIORITY`](engine::IO_REAL_TIME_PRIORITY).
    pub io_real_time: AtomicBool,
    /// Times the node's threads were moved for a bulk stream or back
    /// ([`TrafficPlacement`]).
    pub placement_swaps: AtomicU64,
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
