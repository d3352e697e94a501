//! [`BenchLink`]: the one in-memory Ethernet link both stacks run over, so a frame costs
//! the two of them the same outside the stacks themselves.
//!
//! Each direction is a bounded FIFO of frames (1024; a frame sent to a full FIFO is
//! dropped and counted). Every frame lands in a receive buffer taken from the receiving
//! end's [`RxBufferPool`], as a NIC DMAs into a driver's receive ring:
//!
//! * smoltcp writes the frame straight into that buffer (its `TxToken` hands out the
//!   buffer's bytes): no copy by the link, the stack's own writes of header and payload;
//! * ebb-net hands over a chain (header buffer + payload slices) and the link gathers it
//!   into that buffer: one copy of the whole frame by the link, as a NIC's gather DMA.
//!
//! The receiving stack reads the frame from that buffer (smoltcp: a `&[u8]` borrowed for
//! the duration of `RxToken::consume`; ebb-net: the `IOBuf` itself, which it may keep
//! and hand to the application without a copy). A buffer is reused once its only holder
//! is the pool again; in the steady state neither side allocates per frame (the
//! benchmark's allocation counter shows it).
//!
//! The link counts every frame and byte it carries, so frames per round trip and per MB
//! are counted the same way for both stacks, at the link.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ebb_core::iobuf::{IOBuf, IOBufChain};

/// Frames each direction holds before it drops.
pub const QUEUE_FRAMES: usize = 1024;
/// The largest frame: MTU 1500 plus the 14-byte Ethernet header.
pub const MAX_FRAME: usize = 1514;

/// The link's two ends share this.
#[derive(Default)]
struct Wire {
    /// Indexed by [`Side`]: frames on their way to that end.
    to: [Direction; 2],
}

#[derive(Default)]
struct Direction {
    frames: VecDeque<IOBuf>,
    pool: RxBufferPool,
    /// What this direction has carried.
    counts: LinkCounts,
}

/// What the link (or one direction of it) has carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// Frames delivered into a receive FIFO.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Frames dropped: receive FIFO full, or longer than [`MAX_FRAME`].
    pub dropped: u64,
    /// Receive buffers allocated (the pool had none free).
    pub buffers_allocated: u64,
}

impl LinkCounts {
    fn plus(self, other: LinkCounts) -> LinkCounts {
        LinkCounts {
            frames: self.frames + other.frames,
            bytes: self.bytes + other.bytes,
            dropped: self.dropped + other.dropped,
            buffers_allocated: self.buffers_allocated + other.buffers_allocated,
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: LinkCounts) -> LinkCounts {
        LinkCounts {
            frames: self.frames - earlier.frames,
            bytes: self.bytes - earlier.bytes,
            dropped: self.dropped - earlier.dropped,
            buffers_allocated: self.buffers_allocated - earlier.buffers_allocated,
        }
    }
}

/// An in-memory point-to-point link; [`BenchLink::new`] returns it with its two ends.
#[derive(Clone)]
pub struct BenchLink {
    wire: Rc<RefCell<Wire>>,
}

/// One end of a [`BenchLink`].
pub struct LinkEnd {
    link: BenchLink,
    /// Where this end's frames go.
    peer: usize,
    /// Where frames for this end arrive.
    me: usize,
}

impl BenchLink {
    /// A link and its two ends.
    pub fn new() -> (BenchLink, LinkEnd, LinkEnd) {
        let link = BenchLink {
            wire: Rc::default(),
        };
        let a = LinkEnd {
            link: link.clone(),
            peer: 1,
            me: 0,
        };
        let b = LinkEnd {
            link: link.clone(),
            peer: 0,
            me: 1,
        };
        (link, a, b)
    }

    /// Everything carried so far, both directions.
    pub fn counts(&self) -> LinkCounts {
        let wire = self.wire.borrow();
        wire.to[0].counts.plus(wire.to[1].counts)
    }
}

impl LinkEnd {
    /// Sends a `len`-byte frame that `write` fills in place (the smoltcp way): `write`
    /// gets the receive buffer's bytes, as they were left by the frame before (no
    /// zeroing: a NIC's ring is not zeroed either, and the stack writes every byte).
    pub fn send_in_place<R>(&mut self, len: usize, write: impl FnOnce(&mut [u8]) -> R) -> R {
        let Some(mut buf) = self.take_buffer(len) else {
            // Dropped, but the stack still writes its frame somewhere: a scratch buffer.
            return write(&mut vec![0; len]);
        };
        let result = match buf.spare_capacity_mut() {
            Ok(bytes) => write(&mut bytes[..len]),
            Err(e) => panic!("a pool buffer is unique and empty: {e}"),
        };
        buf.commit(len).expect("len fits the buffer");
        self.deliver(buf);
        result
    }

    /// Sends a frame given as a chain (the ebb-net way): the link gathers it into a
    /// receive buffer, one copy of every byte.
    pub fn send_gather(&mut self, frame: &IOBufChain) {
        let Some(mut buf) = self.take_buffer(frame.len()) else {
            return;
        };
        for segment in frame.segments() {
            buf.extend_from_slice(segment)
                .expect("a pool buffer is unique and holds MAX_FRAME bytes");
        }
        self.deliver(buf);
    }

    /// The oldest frame waiting at this end.
    pub fn receive(&mut self) -> Option<IOBuf> {
        self.link.wire.borrow_mut().to[self.me].frames.pop_front()
    }

    /// Frames waiting at this end.
    pub fn pending(&self) -> usize {
        self.link.wire.borrow().to[self.me].frames.len()
    }

    /// What the link carried to this end (`received`) and from it (`sent`).
    pub fn counts(&self) -> (LinkCounts, LinkCounts) {
        let wire = self.link.wire.borrow();
        (wire.to[self.me].counts, wire.to[self.peer].counts)
    }

    /// An empty receive buffer of the peer's pool for a `len`-byte frame, or `None` if
    /// the frame is dropped (too long, or the peer's FIFO is full), counted.
    fn take_buffer(&mut self, len: usize) -> Option<IOBuf> {
        let mut wire = self.link.wire.borrow_mut();
        let to = &mut wire.to[self.peer];
        if len > MAX_FRAME || to.frames.len() >= QUEUE_FRAMES {
            to.counts.dropped += 1;
            return None;
        }
        let (buf, allocated) = to.pool.take();
        to.counts.buffers_allocated += u64::from(allocated);
        Some(buf)
    }

    fn deliver(&mut self, buf: IOBuf) {
        let mut wire = self.link.wire.borrow_mut();
        let to = &mut wire.to[self.peer];
        to.counts.frames += 1;
        to.counts.bytes += buf.len() as u64;
        to.pool.lend(buf.clone());
        to.frames.push_back(buf);
    }
}

/// Receive buffers of one end, reused oldest first once nobody but the pool holds them
/// (as a driver refills its receive ring). The same policy as ebb-net's own
/// `ebb_net_driver::Link`: at most [`RxBufferPool::MAX`] are kept; when the oldest is still held
/// by a full pool, the pool forgets it (its holder frees it) and allocates a new one.
#[derive(Default)]
struct RxBufferPool {
    /// Lent out, oldest first.
    lent: VecDeque<IOBuf>,
}

impl RxBufferPool {
    const MAX: usize = 64;

    /// An empty, unique buffer of [`MAX_FRAME`] bytes' capacity, and whether it was
    /// newly allocated.
    fn take(&mut self) -> (IOBuf, bool) {
        match self.lent.front() {
            Some(oldest) if oldest.is_unique() => {
                let mut buf = self.lent.pop_front().expect("front exists");
                buf.trim_back(buf.len()).expect("trimming to empty");
                (buf, false)
            }
            _ => {
                if self.lent.len() >= Self::MAX {
                    self.lent.pop_front();
                }
                (IOBuf::with_capacity(MAX_FRAME), true)
            }
        }
    }

    /// Keeps a view of `buf` so it comes back once the receiver lets go.
    fn lend(&mut self, buf: IOBuf) {
        self.lent.push_back(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_ways_of_sending_deliver_the_same_bytes_and_are_counted() {
        let (link, mut a, mut b) = BenchLink::new();
        a.send_in_place(60, |bytes| bytes.fill(7));
        let mut chain = IOBufChain::from(IOBuf::copy_from_slice(&[7; 14]));
        chain.push_back(IOBuf::copy_from_slice(&[7; 46]));
        a.send_gather(&chain);
        assert_eq!(a.pending(), 0);
        assert_eq!(b.pending(), 2);
        let first = b.receive().expect("first frame");
        let second = b.receive().expect("second frame");
        assert_eq!(first, second);
        assert_eq!(first.as_slice(), &[7; 60][..]);
        let counts = link.counts();
        assert_eq!((counts.frames, counts.bytes, counts.dropped), (2, 120, 0));
    }

    #[test]
    fn buffers_are_reused_once_released_and_never_while_held() {
        let (link, mut a, mut b) = BenchLink::new();
        a.send_in_place(60, |bytes| bytes.fill(1));
        let held = b.receive().expect("frame");
        a.send_in_place(60, |bytes| bytes.fill(2));
        // The first buffer is still held: a second one was allocated, the first intact.
        assert_eq!(link.counts().buffers_allocated, 2);
        assert_eq!(held.as_slice(), &[1; 60][..]);
        drop(held);
        drop(b.receive());
        for i in 0..100u8 {
            a.send_in_place(60, |bytes| bytes.fill(i));
            let frame = b.receive().expect("frame");
            assert_eq!(frame.as_slice(), &[i; 60][..]);
        }
        assert_eq!(link.counts().buffers_allocated, 2);
    }

    #[test]
    fn a_full_fifo_and_an_oversized_frame_drop_and_count() {
        let (link, mut a, b) = BenchLink::new();
        for _ in 0..QUEUE_FRAMES + 3 {
            a.send_in_place(60, |_| ());
        }
        a.send_gather(&IOBufChain::from(IOBuf::from_vec(vec![0; MAX_FRAME + 1])));
        assert_eq!(b.pending(), QUEUE_FRAMES);
        assert_eq!(link.counts().dropped, 4);
    }
}
