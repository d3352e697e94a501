//! [`ReceiveBuffers`]: receive buffers of one size that a driver gets back once the stack
//! and the application have let go of every view of them.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use ebb_core::IOBuf;

/// Receive buffers of `len` bytes for a driver that hands received frames over in the
/// buffer they were written into (no copy) and posts fresh buffers in their place.
///
/// A fresh buffer costs an allocation and, the first time its tailroom is handed out
/// (`IOBuf::spare_capacity_mut`), zeroing all of it: for a 64 KiB large-receive buffer,
/// more than the frame it then holds. So the pool keeps a view of every buffer it lent
/// ([`lend`](Self::lend)); once that view is the only one left (`IOBuf::is_unique`: the
/// stack and the application dropped theirs), [`take`](Self::take) gives the buffer out
/// again, recycled (`IOBuf::recycle`: emptied, its bytes still initialized, nothing
/// zeroed). Buffers come back oldest first; when the oldest is still held and `max_lent`
/// are lent, the pool forgets it (its holder frees it when done) — so a holder that keeps
/// what it received costs fresh buffers, never memory the pool pins.
///
/// Nobody else ever sees a recycled buffer's old bytes: it is unique when recycled, and
/// whatever is written into it next replaces them before it is committed.
#[derive(Debug)]
pub struct ReceiveBuffers {
    len: usize,
    max_lent: usize,
    /// Buffers not handed out (a frame was copied out of them), ready to post again.
    free: Vec<IOBuf>,
    /// Views of buffers handed out with frames, oldest first.
    lent: VecDeque<IOBuf>,
    counts: ReceiveBufferCounts,
}

/// Where [`ReceiveBuffers::take`]'s buffers came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveBufferCounts {
    /// Newly allocated.
    pub allocated: u64,
    /// Recycled after every view of them was dropped, or never handed out.
    pub recycled: u64,
    /// Lent and forgotten while still held (the pool was full).
    pub forgotten: u64,
}

impl ReceiveBuffers {
    /// A pool of `len`-byte buffers keeping at most `max_lent` lent ones.
    pub fn new(len: usize, max_lent: usize) -> Self {
        Self {
            len,
            max_lent,
            free: Vec::new(),
            lent: VecDeque::new(),
            counts: ReceiveBufferCounts::default(),
        }
    }

    /// Bytes of each buffer.
    pub fn buffer_len(&self) -> usize {
        self.len
    }

    /// An empty buffer of [`buffer_len`](Self::buffer_len) bytes of capacity: one given
    /// back, the oldest lent one if nobody else holds it any more, or a new one.
    pub fn take(&mut self) -> IOBuf {
        if let Some(buf) = self.free.pop() {
            self.counts.recycled += 1;
            return buf;
        }
        if let Some(oldest) = self.lent.front_mut()
            && oldest.recycle()
            && let Some(buf) = self.lent.pop_front()
        {
            self.counts.recycled += 1;
            return buf;
        }
        self.counts.allocated += 1;
        IOBuf::with_capacity(self.len)
    }

    /// A buffer from [`take`](Self::take) holding a copy of `bytes` — for a driver that
    /// copies a small frame out of a large buffer. Bytes longer than the pool's buffers
    /// (a caller's mistake) get a fresh buffer of their own size instead.
    pub fn take_copy(&mut self, bytes: &[u8]) -> IOBuf {
        if bytes.len() > self.len {
            return IOBuf::copy_from_slice(bytes);
        }
        let mut buf = self.take();
        match buf.extend_from_slice(bytes) {
            Ok(()) => buf,
            // A taken buffer is unique, empty and `len` bytes long: it always fits.
            Err(_) => IOBuf::copy_from_slice(bytes),
        }
    }

    /// Records that `buf`, a buffer from [`take`](Self::take) (or a view of one), was
    /// handed over with a frame: it comes back once every other view of it is dropped.
    ///
    /// Call it last, after any change to the frame in place (completing a checksum):
    /// the pool's view makes the buffer shared, and a shared buffer refuses
    /// `IOBuf::as_mut_slice`.
    pub fn lend(&mut self, buf: &IOBuf) {
        if self.lent.len() >= self.max_lent {
            self.lent.pop_front();
            self.counts.forgotten += 1;
        }
        self.lent.push_back(buf.clone());
    }

    /// Gives back a buffer that was not handed over (its frame was copied out, or it was
    /// never posted): emptied, it is the next [`take`](Self::take)s. A buffer someone
    /// else still sees is dropped instead.
    pub fn give_back(&mut self, mut buf: IOBuf) {
        if buf.recycle() {
            self.free.push(buf);
        }
    }

    /// Where the buffers came from so far.
    pub fn counts(&self) -> ReceiveBufferCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_goes_into_a_pool_buffer_and_comes_back() {
        let mut pool = ReceiveBuffers::new(64, 4);
        let copy = pool.take_copy(b"small frame");
        assert_eq!(copy.as_slice(), b"small frame");
        pool.lend(&copy);
        drop(copy);
        let again = pool.take_copy(b"next");
        assert_eq!(again.as_slice(), b"next");
        assert_eq!((pool.counts().allocated, pool.counts().recycled), (1, 1));
        // Longer than the pool's buffers: a buffer of its own, the pool untouched.
        let long = pool.take_copy(&[7; 100]);
        assert_eq!(long.len(), 100);
        assert_eq!(pool.counts().allocated, 1);
    }

    #[test]
    fn a_lent_buffer_comes_back_once_nobody_holds_it() {
        let mut pool = ReceiveBuffers::new(4096, 4);
        let mut buf = pool.take();
        buf.extend_from_slice(b"frame").unwrap();
        let frame = buf.clone();
        pool.lend(&buf);
        drop(buf);
        // The stack still holds the frame: a new buffer.
        let other = pool.take();
        assert!(!other.shares_storage_with(&frame));
        assert_eq!(pool.counts().allocated, 2);
        drop(frame);
        let again = pool.take();
        assert!(again.is_empty());
        assert_eq!(pool.counts().recycled, 1);
        assert_eq!(pool.counts().allocated, 2);
    }

    #[test]
    fn a_full_pool_forgets_the_oldest_held_buffer() {
        let mut pool = ReceiveBuffers::new(64, 2);
        let held: Vec<IOBuf> = (0..3)
            .map(|_| {
                let buf = pool.take();
                pool.lend(&buf);
                buf
            })
            .collect();
        assert_eq!(pool.counts().forgotten, 1);
        drop(held);
        assert!(pool.take().is_empty());
        assert!(pool.take().is_empty());
        assert_eq!(pool.counts().recycled, 2);
        assert_eq!(pool.counts().allocated, 3);
    }

    #[test]
    fn a_buffer_given_back_is_taken_first_unless_someone_sees_it() {
        let mut pool = ReceiveBuffers::new(64, 2);
        let mut buf = pool.take();
        buf.extend_from_slice(b"copied out").unwrap();
        pool.give_back(buf);
        assert!(pool.take().is_empty());
        assert_eq!(pool.counts().recycled, 1);
        let buf = pool.take();
        let view = buf.clone();
        pool.give_back(buf);
        assert_eq!(view.len(), 0);
        let _ = pool.take();
        assert_eq!(pool.counts().allocated, 3);
    }
}
