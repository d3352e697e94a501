//! [`Link`] and [`LinkEnd`]: an in-memory point-to-point Ethernet link joining two stacks
//! in one process, for tests and simulations.
//!
//! Each direction is a bounded FIFO: the receive ring of the end it leads to. A frame
//! sent when that ring is full is dropped and counted by the receiving end
//! (`rx_dropped.queue_full`), as a NIC drops when its host falls behind; a frame longer
//! than the link's MTU allows is refused and counted by the sending end
//! (`tx_dropped.oversized`). Time plays no part: a frame is receivable as soon as it is
//! sent (wrap an end in a [`FaultInjector`](super::FaultInjector) for latency and loss).
//!
//! A frame of several segments (header and payload, as the stack builds them) reaches the
//! far end as one contiguous buffer, as a NIC's gather DMA writes it into a receive
//! buffer. Like a driver's receive ring, each end recycles those buffers (`RxBufferPool`):
//! a buffer is written again only once the stack holding the received frame has dropped
//! every view of it, so nothing a stack still holds ever changes. A one-segment frame is
//! passed through without a copy.
//!
//! The two ends share their state through `Rc<RefCell<..>>`: a link lives on one thread,
//! which is what a deterministic simulation wants. No borrow outlives a method call, so
//! the `RefCell` is never found borrowed.

use alloc::collections::VecDeque;
use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::RefCell;

use ebb_core::{IOBuf, IOBufChain, Instant};

use super::{
    ChecksumCapabilities, DeviceCapabilities, DeviceCounters, DropReason, NetDevice, RxFrame,
    TxFrame, coalesce,
};

/// The configuration of an in-memory link; [`connect`](Self::connect) makes its two ends.
///
/// ```
/// use ebb_net_driver::Link;
/// let (a, b) = Link::new().with_capacity(64).with_mtu(1500).connect();
/// # let _ = (a, b);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Link {
    /// Frames each direction holds before it drops (the receive ring's size).
    pub capacity: usize,
    /// The largest IP packet a frame may carry; see
    /// [`DeviceCapabilities::mtu`](super::DeviceCapabilities::mtu).
    pub mtu: usize,
    /// The most frames one `receive` or `transmit` call moves (at least 1 is used).
    pub max_burst: usize,
    /// The checksum offload both ends report. The link computes no checksums, so
    /// anything but [`ChecksumCapabilities::NONE`] is consistent only as
    /// [`ChecksumCapabilities::ALL`]: a trusted wire on which neither stack fills or
    /// checks checksums.
    pub checksum: ChecksumCapabilities,
}

impl Link {
    /// 256 frames per direction, MTU 1500, bursts of 32, no checksum offload.
    pub const fn new() -> Self {
        Self {
            capacity: 256,
            mtu: DeviceCapabilities::ETHERNET.mtu,
            max_burst: DeviceCapabilities::ETHERNET.max_burst,
            checksum: ChecksumCapabilities::NONE,
        }
    }

    /// The same link holding `capacity` frames per direction.
    pub const fn with_capacity(self, capacity: usize) -> Self {
        Self { capacity, ..self }
    }

    /// The same link with MTU `mtu`.
    pub const fn with_mtu(self, mtu: usize) -> Self {
        Self { mtu, ..self }
    }

    /// The same link moving at most `max_burst` frames per call.
    pub const fn with_max_burst(self, max_burst: usize) -> Self {
        Self { max_burst, ..self }
    }

    /// The same link reporting `checksum` offload at both ends.
    pub const fn with_checksum(self, checksum: ChecksumCapabilities) -> Self {
        Self { checksum, ..self }
    }

    /// The capabilities each end reports.
    pub const fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities {
            mtu: self.mtu,
            max_burst: if self.max_burst == 0 {
                1
            } else {
                self.max_burst
            },
            checksum: self.checksum,
            queues: 1,
            tso_max_len: 0,
        }
    }

    /// Makes the link and returns its two ends.
    pub fn connect(self) -> (LinkEnd, LinkEnd) {
        let wire = Rc::new(RefCell::new(Wire {
            link: self,
            ends: [EndState::default(), EndState::default()],
        }));
        (
            LinkEnd {
                wire: wire.clone(),
                side: Side::A,
            },
            LinkEnd {
                wire,
                side: Side::B,
            },
        )
    }
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

/// One end of a [`Link`]: a [`NetDevice`] whose frames arrive at the other end.
///
/// If the other end is dropped, frames sent to it fill its ring and are then dropped and
/// counted as usual.
pub struct LinkEnd {
    wire: Rc<RefCell<Wire>>,
    side: Side,
}

impl LinkEnd {
    /// The link's configuration.
    pub fn link(&self) -> Link {
        self.wire.borrow().link
    }

    /// Frames waiting to be received at this end.
    pub fn pending(&self) -> usize {
        self.wire.borrow().ends[self.side.index()].rx.len()
    }

    /// Frames sent from this end and waiting to be received at the other.
    pub fn in_flight(&self) -> usize {
        self.wire.borrow().ends[self.side.other().index()].rx.len()
    }
}

impl NetDevice for LinkEnd {
    fn capabilities(&self) -> DeviceCapabilities {
        self.link().capabilities()
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let mut wire = self.wire.borrow_mut();
        let burst = wire.link.capabilities().max_burst;
        let me = &mut wire.ends[self.side.index()];
        let n = me.rx.len().min(max).min(burst);
        // Popped one by one rather than drained: the same frames, less code per call.
        for _ in 0..n {
            let Some(frame) = me.rx.pop_front() else {
                break;
            };
            me.counters.record_rx(frame.len());
            out.push(RxFrame::new(frame));
        }
        n
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mut wire = self.wire.borrow_mut();
        let Wire { link, ends } = &mut *wire;
        let caps = link.capabilities();
        let [a, b] = ends;
        let (me, peer) = match self.side {
            Side::A => (a, b),
            Side::B => (b, a),
        };
        let n = frames.len().min(caps.max_burst);
        for _ in 0..n {
            let Some(frame) = frames.pop_front() else {
                break;
            };
            // No offload on a wire: a partial checksum is completed here, as the
            // sender's NIC would.
            let frame = frame.into_complete();
            if frame.len() > caps.max_frame_len() {
                me.counters.tx_dropped.record(DropReason::Oversized);
                continue;
            }
            me.counters.record_tx(frame.len());
            if peer.rx.len() >= link.capacity {
                peer.counters.rx_dropped.record(DropReason::QueueFull);
                continue;
            }
            // The far end's receive buffer: one contiguous frame, as a NIC's DMA gathers
            // it. A one-segment chain is passed through without a copy.
            let buf = peer.rx_buffers.gather(frame, caps.max_frame_len());
            peer.rx.push_back(buf);
        }
        n
    }

    /// Frames waiting at this end are work to do now; otherwise the link has no timers.
    fn poll_at(&self) -> Option<Instant> {
        (self.pending() > 0).then_some(Instant::ZERO)
    }

    fn counters(&self) -> DeviceCounters {
        self.wire.borrow().ends[self.side.index()].counters
    }
}

impl core::fmt::Debug for LinkEnd {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkEnd")
            .field("side", &self.side)
            .field("pending", &self.pending())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// Which end of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    A,
    B,
}

impl Side {
    const fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    const fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// What the two ends share.
struct Wire {
    link: Link,
    /// Indexed by [`Side::index`].
    ends: [EndState; 2],
}

/// One end's receive ring and counters.
#[derive(Default)]
struct EndState {
    rx: VecDeque<IOBuf>,
    /// Buffers that multi-segment frames sent to this end are gathered into.
    rx_buffers: RxBufferPool,
    counters: DeviceCounters,
}

/// Receive buffers of one end, reused oldest first once the receiving stack has let go of
/// them (as a driver refills its receive ring), so a gathered frame costs a copy and no
/// allocation in the steady state.
///
/// The pool keeps one view of each buffer it handed out; a buffer whose only view is the
/// pool's (`IOBuf::is_unique`) is not visible to anyone else and may be rewritten. At
/// most [`RxBufferPool::MAX`] buffers are kept: when the oldest is still held and the
/// pool is full, the pool forgets it (its holder frees it) and allocates a new one.
#[derive(Default)]
struct RxBufferPool {
    /// Oldest first.
    bufs: VecDeque<IOBuf>,
}

impl RxBufferPool {
    /// Buffers kept per end: enough that in a request/response exchange the oldest has
    /// long been released when it comes round again.
    const MAX: usize = 64;

    /// One contiguous buffer with `frame`'s bytes: its only segment without a copy, or a
    /// copy of a multi-segment chain into a recycled (or, failing that, new) buffer of at
    /// least `max_frame_len` bytes.
    fn gather(&mut self, frame: IOBufChain, max_frame_len: usize) -> IOBuf {
        if frame.segment_count() <= 1 {
            return coalesce(frame);
        }
        let recycled = match self.bufs.front() {
            Some(oldest) if oldest.is_unique() => self.bufs.pop_front(),
            _ => {
                if self.bufs.len() >= Self::MAX {
                    self.bufs.pop_front();
                }
                None
            }
        };
        let mut buf =
            recycled.unwrap_or_else(|| IOBuf::with_capacity(max_frame_len.max(frame.len())));
        if Self::fill(&mut buf, &frame).is_err() {
            // Not reachable with the capacities above (the buffer is unique and large
            // enough), but a copy into fresh storage is always correct.
            return coalesce(frame);
        }
        self.bufs.push_back(buf.clone());
        buf
    }

    /// Replaces `buf`'s bytes with `frame`'s.
    fn fill(buf: &mut IOBuf, frame: &IOBufChain) -> Result<(), ebb_core::iobuf::IOBufError> {
        buf.trim_back(buf.len())?;
        for segment in frame.segments() {
            buf.extend_from_slice(segment)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const T0: Instant = Instant::ZERO;

    fn frame(tag: u8, len: usize) -> IOBufChain {
        IOBufChain::from(IOBuf::from_vec(vec![tag; len]))
    }

    fn send(end: &mut LinkEnd, frames: impl IntoIterator<Item = IOBufChain>) -> usize {
        let mut q: VecDeque<TxFrame> = frames.into_iter().map(TxFrame::from).collect();
        let mut taken = 0;
        while !q.is_empty() {
            taken += end.transmit(T0, &mut q);
        }
        taken
    }

    fn recv_all(end: &mut LinkEnd) -> Vec<IOBuf> {
        let mut out = Vec::new();
        while end.receive(T0, &mut out, usize::MAX) > 0 {}
        out.into_iter().map(|frame| frame.buf).collect()
    }

    #[test]
    fn delivers_in_order_both_ways() {
        let (mut a, mut b) = Link::new().connect();
        send(&mut a, (0..10).map(|i| frame(i, 60)));
        send(&mut b, (100..105).map(|i| frame(i, 64)));
        assert_eq!((a.in_flight(), b.pending()), (10, 10));
        assert_eq!(b.poll_at(), Some(Instant::ZERO));

        let at_b = recv_all(&mut b);
        let at_a = recv_all(&mut a);
        let tags = |v: &[IOBuf]| v.iter().map(|f| f[0]).collect::<Vec<_>>();
        assert_eq!(tags(&at_b), (0..10).collect::<Vec<u8>>());
        assert_eq!(tags(&at_a), (100..105).collect::<Vec<u8>>());
        assert_eq!(b.poll_at(), None);

        let (ca, cb) = (a.counters(), b.counters());
        assert_eq!((ca.tx_frames, ca.tx_bytes), (10, 600));
        assert_eq!((cb.rx_frames, cb.rx_bytes), (10, 600));
        assert_eq!((cb.tx_frames, ca.rx_frames), (5, 5));
    }

    #[test]
    fn a_full_ring_drops_and_counts_at_the_receiver() {
        let (mut a, mut b) = Link::new().with_capacity(4).connect();
        assert_eq!(send(&mut a, (0..10).map(|i| frame(i, 60))), 10);
        let got = recv_all(&mut b);
        // The first four fit; the rest found the ring full.
        assert_eq!(got.iter().map(|f| f[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
        let (ca, cb) = (a.counters(), b.counters());
        assert_eq!(ca.tx_frames, 10);
        assert_eq!(cb.rx_frames, 4);
        assert_eq!(cb.rx_dropped.queue_full, 6);
        assert_eq!(ca.tx_frames, cb.rx_frames + cb.rx_dropped.total());

        // Room again once drained.
        send(&mut a, [frame(42, 60)]);
        assert_eq!(recv_all(&mut b)[0][0], 42);
    }

    #[test]
    fn mtu_is_enforced_on_transmit() {
        let (mut a, mut b) = Link::new().with_mtu(100).connect();
        assert_eq!(a.capabilities().max_frame_len(), 114);
        send(
            &mut a,
            [frame(1, 114), frame(2, 115), frame(3, 60), frame(4, 9000)],
        );
        let got = recv_all(&mut b);
        assert_eq!(got.iter().map(|f| f[0]).collect::<Vec<_>>(), [1, 3]);
        let ca = a.counters();
        assert_eq!(ca.tx_frames, 2);
        assert_eq!(ca.tx_dropped.oversized, 2);
        assert_eq!(ca.tx_bytes, 114 + 60);
    }

    #[test]
    fn transmit_pushes_back_beyond_a_burst() {
        let (mut a, mut b) = Link::new().with_max_burst(3).connect();
        let mut q: VecDeque<TxFrame> = (0..7).map(|i| frame(i, 60).into()).collect();
        assert_eq!(a.transmit(T0, &mut q,), 3);
        assert_eq!(q.len(), 4);
        assert_eq!(
            q.front().map(|c| c.chain.to_vec()[0]),
            Some(3),
            "the rest stays, in order"
        );
        assert_eq!(a.transmit(T0, &mut q), 3);
        assert_eq!(a.transmit(T0, &mut q), 1);
        assert_eq!(a.transmit(T0, &mut q), 0);

        let mut out = Vec::new();
        assert_eq!(b.receive(T0, &mut out, 100), 3);
        assert_eq!(b.receive(T0, &mut out, 2), 2);
        assert_eq!(b.receive(T0, &mut out, 0), 0);
        assert_eq!(b.receive(T0, &mut out, 100), 2);
        assert_eq!(
            out.iter().map(|f| f.buf[0]).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn one_segment_frames_cross_without_a_copy_and_chains_are_gathered() {
        let (mut a, mut b) = Link::new().connect();
        let payload = IOBuf::from_vec(vec![7; 100]);
        let mut chain = IOBufChain::from(IOBuf::copy_from_slice(&[1; 14]));
        chain.push_back(payload.clone());
        send(&mut a, [IOBufChain::from(payload.clone()), chain]);
        let got = recv_all(&mut b);
        assert!(got[0].shares_storage_with(&payload));
        assert_eq!(got[1].len(), 114);
        assert_eq!(&got[1][..14], &[1; 14]);
        assert_eq!(&got[1][14..], &[7; 100]);
    }

    #[test]
    fn counters_add_up_under_load() {
        let (mut a, mut b) = Link::new().with_capacity(8).with_mtu(200).connect();
        let mut offered = 0u64;
        for round in 0..50u64 {
            let n = (round % 13) as usize;
            let frames = (0..n).map(|i| frame(i as u8, 60 + (round as usize * 7 + i) % 200));
            offered += send(&mut a, frames) as u64;
            if round % 3 == 0 {
                recv_all(&mut b);
            }
        }
        let (ca, cb) = (a.counters(), b.counters());
        assert_eq!(offered, ca.tx_frames + ca.tx_dropped.total());
        assert_eq!(
            ca.tx_frames,
            cb.rx_frames + cb.rx_dropped.total() + b.pending() as u64
        );
        assert!(ca.tx_dropped.oversized > 0 && cb.rx_dropped.queue_full > 0);
    }

    #[test]
    fn a_dropped_peer_just_fills_its_ring() {
        let (mut a, b) = Link::new().with_capacity(2).connect();
        drop(b);
        send(&mut a, (0..5).map(|i| frame(i, 60)));
        assert_eq!(a.counters().tx_frames, 5);
        assert_eq!(a.in_flight(), 2);
    }

    /// Gathered frames land in recycled buffers, but never in one the receiver still
    /// holds: a frame kept across many later ones keeps its bytes.
    #[test]
    fn recycled_receive_buffers_never_overwrite_a_held_frame() {
        let (mut a, mut b) = Link::new().connect();
        let gathered = |tag: u8| {
            let mut chain = IOBufChain::from(IOBuf::copy_from_slice(&[tag; 14]));
            chain.push_back(IOBuf::from_vec(vec![tag; 50]));
            chain
        };
        send(&mut a, [gathered(1)]);
        let held = recv_all(&mut b).remove(0);
        for round in 0..4 * RxBufferPool::MAX {
            let tag = 2 + (round % 200) as u8;
            send(&mut a, [gathered(tag)]);
            let got = recv_all(&mut b);
            assert_eq!(got.len(), 1);
            assert!(got[0].iter().all(|&byte| byte == tag), "round {round}");
            assert!(!got[0].shares_storage_with(&held));
        }
        assert_eq!(held.len(), 64);
        assert!(held.iter().all(|&byte| byte == 1));
    }
}
