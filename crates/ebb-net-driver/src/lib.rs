//! # ebb-net-driver — what a network device is to Ebbflow
//!
//! The seam between network devices and everything above them, after embassy's
//! `embassy-net-driver`: the [`NetDevice`] trait a driver implements (one queue pair,
//! sans-IO), its readiness signal ([`PlatformDevice`], [`DeviceReady`]), the offload a
//! device offers ([`DeviceCapabilities`]), and two devices every platform can use: an
//! in-memory [`Link`] joining two stacks in one process, and a seeded [`FaultInjector`]
//! that wraps any device. Frames are `ebb-core` [`IOBuf`]s; the internet checksum a
//! device completes or a segmenter fixes up is [`checksum`]'s, the one copy of it.
//!
//! Each device is its own crate that depends on this one and `ebb-core` only (`ebb-tap`
//! for a Linux TAP, the guest's virtio-net driver in `ebb-native`); the stack (`ebb-net`)
//! and its runtime (`ebb-netstack`) depend on it from above; the monitor (`ebb-vmm`) uses
//! it without depending on either. The crate is `no_std` + `alloc`.
//!
//! # Design
//!
//! * **Sans-IO and batched.** A device never reads a clock, blocks or calls back into the
//!   stack. The stack passes the time in and moves frames in batches:
//!   [`NetDevice::receive`] appends up to `max` received frames to a caller-owned `Vec`
//!   (reused from poll to poll, so the steady state allocates nothing), and
//!   [`NetDevice::transmit`] takes frames off the front of a caller-owned `VecDeque`.
//!   The trait is these two and three small queries, so a wrapper forwards five methods.
//!   Owned batches rather than callbacks or smoltcp-style tokens: the stack holds no
//!   borrow of the device while it processes what it received, so it may transmit
//!   replies on the same device at once, and frames are owned `IOBuf`s it can hand to the
//!   application without a copy.
//! * **Received frames are [`IOBuf`]s** ([`RxFrame`]). A NIC writes each frame into one
//!   receive buffer, and the `wire` views parse contiguous bytes.
//! * **Transmitted frames are [`IOBufChain`]s** ([`TxFrame`]). The stack prepends its
//!   headers into the headroom of one buffer when it can (a one-segment chain), but the
//!   payload of a TCP segment is the application's own data, often several IOBufs it may
//!   still hold for retransmission: a chain sends header + payload without copying, as a
//!   gather list for virtio-net descriptors or a `writev` on a TAP device. A device that
//!   needs one contiguous frame copies only multi-segment chains.
//! * **Back-pressure, never silent drops.** `transmit` takes only what the device can
//!   accept now and leaves the rest in the queue for the next call. A frame the device
//!   does take and then cannot deliver (an oversized frame, a full receive ring at the far
//!   end of a link, a fault the injector was told to cause) is counted in
//!   [`DeviceCounters`] under its [`DropReason`].
//! * **Device timers through `poll_at`.** A device that holds frames until a later time
//!   (the fault injector's delays) reports its earliest deadline from
//!   [`NetDevice::poll_at`]; the stack then calls `receive` and `transmit` (with an empty
//!   queue if it has nothing to send) at or after that instant.
//! * **A frame carries its checksum state.** Offload is decided frame by frame
//!   (virtio-net: `DATA_VALID` says this frame's TCP/UDP checksum was verified,
//!   `NEEDS_CSUM` asks for a partial checksum to be completed), so every [`RxFrame`] and
//!   [`TxFrame`] carries a [`FrameChecksum`] beside its bytes, as Linux keeps the same
//!   state in `skb->ip_summed`; wherever a frame goes (another core, a wrapper, a queue
//!   held for later) its state goes with it. A device that does not offload reports
//!   every received frame [`FrameChecksum::Complete`] and completes a partial checksum
//!   it is handed with one call ([`TxFrame::into_complete`]): a device or wrapper that
//!   knows nothing of offload (a [`Link`], the [`FaultInjector`], a TAP without a
//!   virtio-net header) never passes a partial checksum on, and the injector corrupts
//!   only frames whose checksums are complete, so its corruption stays detectable.
//! * **One `NetDevice` is one queue pair.** A multi-queue NIC gives each core its own
//!   `NetDevice` for its queue; [`DeviceCapabilities::queues`] says how many there are.
//!
//! # Invariants
//!
//! * Nothing here panics on any frame content or length, and nothing uses `unsafe`.
//! * Every frame a device takes from `transmit`'s queue is either sent (counted in
//!   `tx_frames`), held for later (the injector's delays and reorders), or dropped and
//!   counted; every frame that arrives is delivered (`rx_frames`), held, or dropped and
//!   counted. For a [`Link`]: frames sent by one end = frames received by the other +
//!   its `rx_dropped.queue_full` + frames still in its queue.
//! * Devices never write storage another `IOBuf` can see: the injector copies a frame
//!   before corrupting it, so a sender's retransmission copy stays intact.
//! * Given the same seed and the same calls (frames and instants), a [`FaultInjector`]
//!   makes the same faults.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod checksum;
mod counters;
mod fault;
mod link;
mod readiness;
mod rng;
mod rx_buffers;
mod segment;

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;

use ebb_core::{IOBuf, IOBufChain, Instant};

pub use counters::{DeviceCounters, DropCounters, DropReason};
pub use fault::{
    FaultConfig, FaultCounts, FaultInjector, FaultStats, Probability, parse_fault_spec,
};
pub use link::{Link, LinkEnd};
pub use readiness::{DeviceError, DeviceReady, PlatformDevice, Readiness};
pub use rx_buffers::{ReceiveBufferCounts, ReceiveBuffers};
pub use segment::segment_tcp_frame;

/// A received frame: its bytes and what the device knows of its TCP/UDP checksum.
///
/// Small (a buffer handle and a few bytes of state) and moved, never copied, on the
/// receive path.
#[derive(Clone, Debug, Default)]
pub struct RxFrame {
    /// The whole Ethernet frame, without the frame check sequence.
    pub buf: IOBuf,
    /// What the device knows of the frame's TCP/UDP checksum.
    pub checksum: FrameChecksum,
}

impl RxFrame {
    /// A frame whose checksums are for the stack to verify ([`FrameChecksum::Complete`]):
    /// what a device without receive offload reports.
    #[inline]
    pub fn new(buf: IOBuf) -> Self {
        Self {
            buf,
            checksum: FrameChecksum::Complete,
        }
    }

    /// Makes the frame's checksum state [`FrameChecksum::Complete`]: a partial checksum
    /// is completed in software (in place, copying the buffer first only if another
    /// `IOBuf` shares it), a verified mark forgotten so the stack verifies the checksum
    /// itself. What a wrapper that may change the bytes (the [`FaultInjector`]) does.
    #[inline]
    pub fn complete(&mut self) {
        if let FrameChecksum::Partial { start, offset } = self.checksum {
            self.buf.make_unique();
            if let Ok(bytes) = self.buf.as_mut_slice() {
                complete_checksum(bytes, start, offset);
            }
        }
        self.checksum = FrameChecksum::Complete;
    }
}

impl From<IOBuf> for RxFrame {
    #[inline]
    fn from(buf: IOBuf) -> Self {
        Self::new(buf)
    }
}

/// A frame to transmit: its bytes (a gather list) and the state of its TCP/UDP checksum
/// ([`FrameChecksum::Complete`] or [`FrameChecksum::Partial`], for the device to
/// complete).
#[derive(Clone, Debug, Default)]
pub struct TxFrame {
    /// The whole Ethernet frame: headers in the first segment, payload after.
    pub chain: IOBufChain,
    /// [`FrameChecksum::Partial`]: the device completes the checksum.
    pub checksum: FrameChecksum,
}

impl TxFrame {
    /// A frame whose checksums are complete.
    #[inline]
    pub fn new(chain: IOBufChain) -> Self {
        Self {
            chain,
            checksum: FrameChecksum::Complete,
        }
    }

    /// The frame's bytes with a partial checksum completed in software: what a device
    /// that does not complete checksums itself sends (see [`completed`]).
    #[inline]
    pub fn into_complete(self) -> IOBufChain {
        completed(self.chain, self.checksum)
    }

    /// Completes a partial checksum in software, in place, and marks the frame complete.
    #[inline]
    pub fn complete(&mut self) {
        if matches!(self.checksum, FrameChecksum::Partial { .. }) {
            self.chain = completed(core::mem::take(&mut self.chain), self.checksum);
            self.checksum = FrameChecksum::Complete;
        }
    }

    /// Bytes in the frame.
    #[inline]
    pub fn len(&self) -> usize {
        self.chain.len()
    }

    /// Whether the frame has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.chain.is_empty()
    }
}

impl From<IOBufChain> for TxFrame {
    #[inline]
    fn from(chain: IOBufChain) -> Self {
        Self::new(chain)
    }
}

impl From<IOBuf> for TxFrame {
    #[inline]
    fn from(buf: IOBuf) -> Self {
        Self::new(IOBufChain::from(buf))
    }
}

/// Length of an Ethernet II header (destination, source, EtherType), which frames carry
/// on top of the [MTU](DeviceCapabilities::mtu). Frames carry no frame check sequence.
pub const ETHERNET_HEADER_LEN: usize = 14;

/// A network device queue pair, as the stack sees it: what a driver implements.
///
/// Frames are whole Ethernet frames without the frame check sequence. All methods take
/// the current time from the caller; none blocks.
pub trait NetDevice {
    /// What the device can do; constant for the device's lifetime.
    fn capabilities(&self) -> DeviceCapabilities;

    /// Appends up to `max` received frames to `out`, oldest first, and returns how many.
    /// Each says what the device knows of its TCP/UDP checksum; a device without
    /// receive offload reports [`FrameChecksum::Complete`].
    ///
    /// Fewer than `max` means the device has nothing more to hand over now: a caller that
    /// sleeps on an edge-triggered descriptor (the monitor's I/O thread) must not be left
    /// with frames that no new arrival will announce.
    ///
    /// `out` is not cleared: the caller owns it and reuses its allocation.
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize;

    /// Takes frames from the front of `frames`, as many as the device can accept now, and
    /// returns how many it took. Frames it could not take stay in `frames`, in order, for
    /// a later call (back-pressure).
    ///
    /// A frame taken is sent, held (to be sent later, see [`poll_at`](Self::poll_at)), or
    /// dropped and counted in [`counters`](Self::counters) — never dropped silently. A
    /// frame marked [`FrameChecksum::Partial`] is the device's to complete: in hardware,
    /// or in software ([`TxFrame::into_complete`]) if it offers no such offload.
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize;

    /// The earliest instant at which the device has work of its own to do (a held frame
    /// to release), or `None` if it has none. An instant in the past means "now".
    ///
    /// The stack calls [`receive`](Self::receive) and [`transmit`](Self::transmit) (with
    /// an empty queue if it has nothing to send) at or after that instant.
    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// What the device has done so far: frames and bytes each way, drops by reason.
    fn counters(&self) -> DeviceCounters;
}

/// What a device knows of one frame's TCP or UDP checksum (see the module docs). Other
/// checksums (IPv4 header, ICMP) are always complete and always verified in software.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FrameChecksum {
    /// Complete: received, the stack verifies it; transmitted, the stack filled it.
    #[default]
    Complete,
    /// Received only: the device verified the TCP/UDP checksum (virtio `DATA_VALID`,
    /// Linux `CHECKSUM_UNNECESSARY`); the stack does not verify it again.
    Verified,
    /// The checksum field at `start + offset` holds only the pseudo-header sum; the
    /// one's-complement sum of the bytes from `start` to the frame's end, complemented,
    /// completes it (virtio `NEEDS_CSUM`, Linux `CHECKSUM_PARTIAL`). Transmitted: for the
    /// device to complete. Received: the frame came from a local sender that left its
    /// checksum to hardware it trusts; the stack accepts it as verified, as Linux does.
    Partial {
        /// Offset from the frame's start where checksumming starts (the L4 header).
        start: u16,
        /// Offset of the checksum field from `start` (16 for TCP, 6 for UDP).
        offset: u16,
    },
}

impl FrameChecksum {
    /// Whether the stack may skip verifying the frame's TCP/UDP checksum.
    #[inline]
    pub const fn l4_trusted(self) -> bool {
        matches!(
            self,
            FrameChecksum::Verified | FrameChecksum::Partial { .. }
        )
    }

    /// Where the TCP or UDP checksum of an Ethernet + IPv4 frame lies, as a
    /// [`FrameChecksum::Partial`]: `None` for other frames (not IPv4, not TCP or UDP, a
    /// fragment, or too short). What the stack sends under
    /// [`ChecksumOffload::tx_partial`] for every TCP/UDP frame.
    #[inline]
    pub fn partial_of(frame: &[u8]) -> Option<FrameChecksum> {
        let ip = frame.get(ETHERNET_HEADER_LEN..)?;
        if frame.get(12..14)? != [0x08, 0x00] || ip.first()? >> 4 != 4 {
            return None;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ihl < 20 || ip.len() < ihl || ip[6] & 0x3f != 0 || ip[7] != 0 {
            return None;
        }
        let offset = match ip[9] {
            6 => 16,
            17 => 6,
            _ => return None,
        };
        let start = ETHERNET_HEADER_LEN + ihl;
        (frame.len() >= start + offset + 2).then_some(FrameChecksum::Partial {
            start: start as u16,
            offset: offset as u16,
        })
    }
}

/// How a device cuts a TCP frame longer than its MTU (TCP segmentation offload, under
/// [`DeviceCapabilities::tso_max_len`]): into segments that each carry the frame's
/// Ethernet, IPv4 and TCP headers (options included) and `segment_payload` bytes of its
/// TCP payload (the last one the rest), every segment's IPv4 total length, identification
/// and checksum, TCP sequence number and checksum fixed up, FIN and PSH on the last
/// segment only — what Linux does with a virtio-net `GSO_TCPV4` frame.
///
/// The stack sends such frames only on connections whose MSS is the MTU's (MTU - 40), so
/// the segment payload follows from the frame: the MTU less its IPv4 and TCP headers. A
/// device learns it here instead of beside every frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segmentation {
    /// Bytes of Ethernet, IPv4 and TCP headers (virtio-net `hdr_len`).
    pub header_len: u16,
    /// TCP payload bytes per segment but the last (virtio-net `gso_size`).
    pub segment_payload: u16,
}

impl Segmentation {
    /// The segmentation an Ethernet + IPv4 + TCP `frame` (its headers at least: a
    /// transmitted chain's first segment) asks of a device with `mtu`: `None` for a frame
    /// whose IPv4 packet fits the MTU, or that is not TCP over IPv4.
    pub fn of(frame: &[u8], mtu: usize) -> Option<Segmentation> {
        let ip = frame.get(ETHERNET_HEADER_LEN..)?;
        if frame.get(12..14)? != [0x08, 0x00] || ip.first()? >> 4 != 4 || *ip.get(9)? != 6 {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let tcp_len = usize::from(ip.get(ihl + 12)? >> 4) * 4;
        let headers = ihl + tcp_len;
        if total <= mtu || ihl < 20 || tcp_len < 20 || mtu <= headers {
            return None;
        }
        Some(Segmentation {
            header_len: u16::try_from(ETHERNET_HEADER_LEN + headers).ok()?,
            segment_payload: u16::try_from(mtu - headers).ok()?,
        })
    }
}

/// Completes a partial checksum in place: the one's-complement sum of `frame[start..]`
/// (the field at `start + offset` holding the pseudo-header sum), complemented, into the
/// field; a result of zero is written as `0xffff` (its other form, which UDP needs, as
/// Linux does). Returns false, changing nothing, if the field lies outside the frame.
pub fn complete_checksum(frame: &mut [u8], start: u16, offset: u16) -> bool {
    let (start, at) = (usize::from(start), usize::from(start) + usize::from(offset));
    if at + 2 > frame.len() {
        return false;
    }
    let sum = !checksum::data(&frame[start..]);
    let value = if sum == 0 { 0xffff } else { sum };
    frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
    true
}

/// `frame` with its checksum completed in software if `checksum` is partial (copied into
/// one fresh buffer: the original may be a retransmission copy or shared); `frame` itself
/// otherwise. A partial checksum outside the frame leaves the frame as it is.
#[inline]
pub fn completed(frame: IOBufChain, checksum: FrameChecksum) -> IOBufChain {
    let FrameChecksum::Partial { start, offset } = checksum else {
        return frame;
    };
    let mut bytes = frame.to_vec();
    if !complete_checksum(&mut bytes, start, offset) {
        return frame;
    }
    IOBufChain::from(IOBuf::from_vec(bytes))
}

impl<D: NetDevice + ?Sized> NetDevice for &mut D {
    fn capabilities(&self) -> DeviceCapabilities {
        (**self).capabilities()
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        (**self).receive(now, out, max)
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        (**self).transmit(now, frames)
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        (**self).counters()
    }
}

impl<D: NetDevice + ?Sized> NetDevice for Box<D> {
    fn capabilities(&self) -> DeviceCapabilities {
        (**self).capabilities()
    }
    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        (**self).receive(now, out, max)
    }
    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        (**self).transmit(now, frames)
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        (**self).counters()
    }
}

/// What a device can do. Build one from [`Default`] and set the fields that differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DeviceCapabilities {
    /// The largest IP packet a frame carries (1500 on standard Ethernet): frames up to
    /// `mtu + ETHERNET_HEADER_LEN` bytes are sent and received; see
    /// [`max_frame_len`](Self::max_frame_len).
    pub mtu: usize,
    /// The most frames one `receive` or `transmit` call moves: a hint for sizing batches.
    /// At least 1.
    pub max_burst: usize,
    /// Which checksums the device verifies on receive and fills on transmit.
    pub checksum: ChecksumCapabilities,
    /// How many queue pairs the device has (one `NetDevice` each). At least 1.
    pub queues: usize,
    /// TCP segmentation offload: the largest IPv4 packet (header included) a TCP frame
    /// may carry for the device to cut into MTU-sized segments, or 0 for none. Taken
    /// only with partial TCP checksums ([`ChecksumOffload::tx_partial`]): each segment's
    /// checksum is the device's to complete. See [`Segmentation`] for what a device
    /// does with such a frame.
    pub tso_max_len: usize,
}

impl DeviceCapabilities {
    /// Standard Ethernet: MTU 1500, bursts of 32, no checksum or segmentation offload,
    /// one queue.
    pub const ETHERNET: DeviceCapabilities = DeviceCapabilities {
        mtu: 1500,
        max_burst: 32,
        checksum: ChecksumCapabilities::NONE,
        queues: 1,
        tso_max_len: 0,
    };

    /// The largest frame, header included: `mtu + ETHERNET_HEADER_LEN` (saturating).
    #[inline]
    pub const fn max_frame_len(&self) -> usize {
        self.mtu.saturating_add(ETHERNET_HEADER_LEN)
    }
}

impl Default for DeviceCapabilities {
    fn default() -> Self {
        Self::ETHERNET
    }
}

/// One contiguous buffer with `frame`'s bytes: its only segment, without a copy, or a
/// fresh copy of a multi-segment chain (what a NIC's gather DMA does).
pub(crate) fn coalesce(mut frame: IOBufChain) -> IOBuf {
    if frame.segment_count() <= 1 {
        return frame.pop_front().unwrap_or_default();
    }
    IOBuf::from_vec(frame.to_vec())
}

/// Checksum offload, per protocol: what the device does with each checksum, and so what
/// the stack does (the rest; see [`ChecksumOffload::software_verifies`] and its
/// siblings). The one capability type of the network path: the stack's `wire` parsers
/// and emitters take it too. The default is [`NONE`](Self::NONE): software does it all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChecksumCapabilities {
    /// The IPv4 header checksum.
    pub ipv4: ChecksumOffload,
    /// The TCP checksum.
    pub tcp: ChecksumOffload,
    /// The UDP checksum.
    pub udp: ChecksumOffload,
    /// The ICMPv4 checksum.
    pub icmpv4: ChecksumOffload,
}

impl ChecksumCapabilities {
    /// No offload: the stack verifies and fills every checksum.
    pub const NONE: ChecksumCapabilities = ChecksumCapabilities {
        ipv4: ChecksumOffload::NONE,
        tcp: ChecksumOffload::NONE,
        udp: ChecksumOffload::NONE,
        icmpv4: ChecksumOffload::NONE,
    };

    /// Every checksum verified and filled by the device (or by nobody, on a trusted
    /// in-memory wire, like Linux's veth).
    pub const ALL: ChecksumCapabilities = ChecksumCapabilities {
        ipv4: ChecksumOffload::BOTH,
        tcp: ChecksumOffload::BOTH,
        udp: ChecksumOffload::BOTH,
        icmpv4: ChecksumOffload::BOTH,
    };

    /// The same capabilities with every `rx_verified` flag cleared.
    pub const fn without_rx(self) -> Self {
        Self {
            ipv4: self.ipv4.without_rx(),
            tcp: self.tcp.without_rx(),
            udp: self.udp.without_rx(),
            icmpv4: self.icmpv4.without_rx(),
        }
    }

    /// The same capabilities with every `tx_filled` and `tx_partial` flag cleared.
    pub const fn without_tx(self) -> Self {
        Self {
            ipv4: self.ipv4.without_tx(),
            tcp: self.tcp.without_tx(),
            udp: self.udp.without_tx(),
            icmpv4: self.icmpv4.without_tx(),
        }
    }
}

/// Offload of one protocol's checksum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChecksumOffload {
    /// The device verifies this checksum on received frames and delivers none where it
    /// is wrong, so the stack need not verify it.
    pub rx_verified: bool,
    /// The device fills this checksum on transmitted frames, so the stack leaves it.
    pub tx_filled: bool,
    /// TCP and UDP only, when `tx_filled` is not set: the device completes a partial
    /// checksum, so the stack writes only the pseudo-header sum and hands the frame over
    /// marked [`FrameChecksum::Partial`]
    /// (virtio-net's `VIRTIO_NET_F_CSUM`).
    pub tx_partial: bool,
}

impl ChecksumOffload {
    /// The stack verifies and fills the checksum itself.
    pub const NONE: ChecksumOffload = ChecksumOffload {
        rx_verified: false,
        tx_filled: false,
        tx_partial: false,
    };
    /// The device verifies and fills the checksum.
    pub const BOTH: ChecksumOffload = ChecksumOffload {
        rx_verified: true,
        tx_filled: true,
        tx_partial: false,
    };
    /// The stack verifies the checksum (unless a frame is marked verified) and leaves
    /// a partial one for the device to complete: virtio-net with `CSUM` negotiated.
    pub const PARTIAL: ChecksumOffload = ChecksumOffload {
        rx_verified: false,
        tx_filled: false,
        tx_partial: true,
    };

    /// Whether software verifies this checksum on received frames (unless a frame is
    /// marked verified or partial, see [`FrameChecksum::l4_trusted`]): the device does
    /// not.
    #[inline]
    pub const fn software_verifies(self) -> bool {
        !self.rx_verified
    }

    /// Whether software fills this checksum on transmitted frames: the device neither
    /// fills it nor completes a partial one.
    #[inline]
    pub const fn software_fills(self) -> bool {
        !self.tx_filled && !self.tx_partial
    }

    /// Whether software writes only the pseudo-header sum into the checksum field, for
    /// the device to complete (TCP and UDP, see [`FrameChecksum::Partial`]).
    #[inline]
    pub const fn software_leaves_partial(self) -> bool {
        self.tx_partial && !self.tx_filled
    }

    const fn without_rx(self) -> Self {
        Self {
            rx_verified: false,
            tx_filled: self.tx_filled,
            tx_partial: self.tx_partial,
        }
    }

    const fn without_tx(self) -> Self {
        Self {
            rx_verified: self.rx_verified,
            tx_filled: false,
            tx_partial: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What software does with a checksum, for each offload: verify on receive, fill
    /// on transmit, or leave it partial for the device.
    #[test]
    fn software_does_what_the_device_does_not() {
        let duties = |o: ChecksumOffload| {
            (
                o.software_verifies(),
                o.software_fills(),
                o.software_leaves_partial(),
            )
        };
        assert_eq!(duties(ChecksumOffload::NONE), (true, true, false));
        assert_eq!(duties(ChecksumOffload::BOTH), (false, false, false));
        assert_eq!(duties(ChecksumOffload::PARTIAL), (true, false, true));
        let fills_only = ChecksumOffload {
            tx_filled: true,
            ..ChecksumOffload::NONE
        };
        assert_eq!(duties(fills_only), (true, false, false));
        let verifies_only = ChecksumOffload {
            rx_verified: true,
            ..ChecksumOffload::NONE
        };
        assert_eq!(duties(verifies_only), (false, true, false));
        assert_eq!(ChecksumCapabilities::default(), ChecksumCapabilities::NONE);
        assert_eq!(ChecksumCapabilities::default().tcp, ChecksumOffload::NONE);
        assert_eq!(ChecksumCapabilities::ALL.udp, ChecksumOffload::BOTH);
    }
}
