//! [`IOBufChain`]: an ordered sequence of buffers read as one byte stream.
//!
//! The buffers sit in a [`Segments`] queue: up to three in place (a header and a payload
//! piece or two never allocate), more on the heap.

use alloc::vec::Vec;
use core::fmt;
use core::ops::{Deref, DerefMut};

use super::segments::{IntoIter, Iter, Segments};
use super::{Cursor, IOBuf, Result, check_range};

/// An ordered sequence of [`IOBuf`] segments with a cached total length: a packet
/// whose header and payload live in different buffers, or a stream's unread bytes.
///
/// The chain never holds an empty segment (pushing one is a no-op), and splitting
/// or trimming in the middle of a segment splits that segment's view, sharing its
/// storage. [`Clone`] shares every segment's storage.
#[derive(Clone, Default)]
pub struct IOBufChain {
    bufs: Segments,
    /// Sum of the segments' lengths, so `len()` is O(1) on every packet.
    len: usize,
}

// Chains move by value through every layer; at up to 112 bytes a move is inline stores,
// beyond (128 bytes, with `usize` ring indices) it was a `memcpy` call each time.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<IOBufChain>() <= 112);

impl IOBufChain {
    /// An empty chain. Does not allocate (nor do the first four segments pushed).
    pub const fn new() -> Self {
        Self {
            bufs: Segments::new(),
            len: 0,
        }
    }

    /// The total length of all segments.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chain holds no bytes (and so no segments).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of segments, none of them empty.
    #[inline]
    pub fn segment_count(&self) -> usize {
        self.bufs.len()
    }

    /// The segments in order.
    pub fn iter(&self) -> Iter<'_> {
        self.bufs.iter()
    }

    /// The segments' bytes in order: what a `writev` needs.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.bufs.iter().map(IOBuf::as_slice)
    }

    /// The segments as one slice of buffers, in order (the chain's storage is rotated
    /// to make them contiguous if it has to be; no buffer is copied or cloned).
    pub fn make_contiguous(&mut self) -> &[IOBuf] {
        self.bufs.make_contiguous()
    }

    /// The first segment.
    #[inline]
    pub fn front(&self) -> Option<&IOBuf> {
        self.bufs.front()
    }

    /// The last segment.
    #[inline]
    pub fn back(&self) -> Option<&IOBuf> {
        self.bufs.back()
    }

    /// The first segment, mutably (for example to prepend a header into its
    /// headroom). The chain's length is brought up to date, and the segment removed
    /// if it became empty, when the returned guard is dropped.
    pub fn front_mut(&mut self) -> Option<SegmentMut<'_>> {
        let buf = self.pop_front()?;
        Some(SegmentMut {
            chain: self,
            buf,
            front: true,
        })
    }

    /// The last segment, mutably (for example to append into its tailroom); see
    /// [`front_mut`](Self::front_mut).
    pub fn back_mut(&mut self) -> Option<SegmentMut<'_>> {
        let buf = self.pop_back()?;
        Some(SegmentMut {
            chain: self,
            buf,
            front: false,
        })
    }

    /// Appends `buf` as the last segment; an empty `buf` is dropped.
    pub fn push_back(&mut self, buf: IOBuf) {
        if !buf.is_empty() {
            self.len += buf.len();
            self.bufs.push_back(buf);
        }
    }

    /// Appends a copy of `parts`, one after another: into the last segment's tailroom
    /// when that segment's storage is unique (not shared, not static) and has room for
    /// all of them, else into the buffer `fresh(total)` returns — a unique, empty buffer
    /// with room for at least `total` bytes (a new one, or one the caller recycles),
    /// with more room if what is copied next should follow in place. Should it return
    /// one without that room, a buffer of exactly `total` bytes is made instead.
    ///
    /// For a reply built from small pieces (a header line, a short value, a trailer):
    /// copying a few hundred bytes costs less than a segment each — a reference count
    /// taken and dropped, a slot in the chain, an iovec in the write — and the reply goes
    /// out as one contiguous buffer.
    ///
    /// # Panics
    ///
    /// If the parts add up to more than [`MAX_REGION`](super::MAX_REGION) bytes.
    pub fn extend_from_slices(&mut self, parts: &[&[u8]], fresh: impl FnOnce(usize) -> IOBuf) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return;
        }
        if let Some(back) = self.bufs.back_mut()
            && back.tailroom() >= total
            && back.extend_from_slices(parts).is_ok()
        {
            self.len += total;
            return;
        }
        let mut buf = fresh(total);
        if buf.extend_from_slices(parts).is_err() {
            buf = IOBuf::copy_from_slices(parts);
        }
        self.len += total;
        self.bufs.push_back(buf);
    }

    /// Copies `data` into the last segment's tailroom when that segment's storage is
    /// unique and has room for it, and returns true; otherwise changes nothing and
    /// returns false.
    pub fn try_extend_back(&mut self, data: &[u8]) -> bool {
        if let Some(back) = self.bufs.back_mut()
            && back.tailroom() >= data.len()
            && let Ok(bytes) = back.append_for_overwrite(data.len())
        {
            bytes.copy_from_slice(data);
            self.len += data.len();
            return true;
        }
        false
    }

    /// Appends `n` bytes that `fill` writes, in place: into the last segment's tailroom
    /// when that segment's storage is unique and has room for them, else into the
    /// buffer `fresh(n)` returns (as for [`extend_from_slices`](Self::extend_from_slices):
    /// one without the room is replaced by a new buffer of `n` bytes). `fill` gets
    /// exactly `n` bytes and must write every one of them (they may hold old bytes of a
    /// recycled buffer, see [`IOBuf::append_for_overwrite`]).
    ///
    /// For a reply formatted straight into its buffer: no staging copy, one uniqueness
    /// and bounds check for all its pieces.
    ///
    /// # Panics
    ///
    /// If `n` is more than [`MAX_REGION`](super::MAX_REGION) bytes.
    pub fn append_with(
        &mut self,
        n: usize,
        fresh: impl FnOnce(usize) -> IOBuf,
        fill: impl FnOnce(&mut [u8]),
    ) {
        if n == 0 {
            return;
        }
        if let Some(back) = self.bufs.back_mut()
            && back.tailroom() >= n
            && let Ok(bytes) = back.append_for_overwrite(n)
        {
            fill(bytes);
            self.len += n;
            return;
        }
        let mut buf = fresh(n);
        if buf.tailroom() < n || !buf.is_unique() {
            buf = IOBuf::with_capacity(n);
        }
        match buf.append_for_overwrite(n) {
            Ok(bytes) => fill(bytes),
            // A fresh buffer of `n` bytes is unique and has the room.
            Err(_) => unreachable!("a new buffer of {n} bytes has room for them"),
        }
        self.len += n;
        self.bufs.push_back(buf);
    }

    /// Inserts `buf` as the first segment; an empty `buf` is dropped.
    pub fn push_front(&mut self, buf: IOBuf) {
        if !buf.is_empty() {
            self.len += buf.len();
            self.bufs.push_front(buf);
        }
    }

    /// Removes and returns the first segment.
    pub fn pop_front(&mut self) -> Option<IOBuf> {
        let buf = self.bufs.pop_front()?;
        self.len -= buf.len();
        Some(buf)
    }

    /// Removes and returns the last segment.
    pub fn pop_back(&mut self) -> Option<IOBuf> {
        let buf = self.bufs.pop_back()?;
        self.len -= buf.len();
        Some(buf)
    }

    /// Moves all of `other`'s segments to the end of `self`, leaving `other` empty.
    pub fn append(&mut self, other: &mut IOBufChain) {
        self.len += other.len;
        other.len = 0;
        self.bufs.append(&mut other.bufs);
    }

    /// Splits the chain at byte `at`: `self` keeps `[0, at)` and the returned chain
    /// holds `[at, len)`. A segment straddling `at` is split, sharing its storage.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if `at > len()`.
    pub fn split_off(&mut self, at: usize) -> Result<IOBufChain> {
        check_range(at, self.len)?;
        // `at < len` below, so some segment contains byte `at`.
        let mut seg_start = 0;
        for i in 0..self.bufs.len() {
            let seg_len = self.bufs[i].len();
            if at < seg_start + seg_len {
                let tail = if at == seg_start {
                    self.bufs.split_off(i)
                } else {
                    let rest = self.bufs[i].split_off(at - seg_start)?;
                    let mut tail = self.bufs.split_off(i + 1);
                    tail.push_front(rest);
                    tail
                };
                let tail_len = self.len - at;
                self.len = at;
                return Ok(IOBufChain {
                    bufs: tail,
                    len: tail_len,
                });
            }
            seg_start += seg_len;
        }
        // Only `at == len` reaches here.
        Ok(IOBufChain::new())
    }

    /// Splits the chain at byte `at`: the returned chain holds `[0, at)` and `self`
    /// keeps `[at, len)`. A segment straddling `at` is split, sharing its storage.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if `at > len()`.
    pub fn split_to(&mut self, at: usize) -> Result<IOBufChain> {
        check_range(at, self.len)?;
        let mut head = IOBufChain::new();
        while head.len < at {
            let need = at - head.len;
            let Some(front) = self.bufs.front_mut() else {
                break; // Unreachable while the cached length is right.
            };
            if front.len() <= need {
                if let Some(buf) = self.pop_front() {
                    head.push_back(buf);
                }
            } else {
                let part = front.split_to(need)?;
                self.len -= part.len();
                head.push_back(part);
            }
        }
        Ok(head)
    }

    /// Drops the first `n` bytes, and with them any segment they empty.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if `n > len()`.
    pub fn trim_front(&mut self, n: usize) -> Result<()> {
        // The common case, a request consumed from the front of a longer first segment:
        // one view moved, no segment dropped.
        if let Some(front) = self.bufs.front_mut()
            && n < front.len()
        {
            front.trim_front(n)?;
            self.len -= n;
            return Ok(());
        }
        // The other common case: everything consumed (a request that was the whole
        // input, a send queue fully acknowledged).
        if n == self.len {
            while self.bufs.pop_front().is_some() {}
            self.len = 0;
            return Ok(());
        }
        check_range(n, self.len)?;
        let mut left = n;
        while left > 0 {
            let Some(front) = self.bufs.front_mut() else {
                break; // Unreachable while the cached length is right.
            };
            if front.len() <= left {
                left -= front.len();
                self.pop_front();
            } else {
                front.trim_front(left)?;
                self.len -= left;
                left = 0;
            }
        }
        Ok(())
    }

    /// Drops the last `n` bytes, and with them any segment they empty.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if `n > len()`.
    pub fn trim_back(&mut self, n: usize) -> Result<()> {
        check_range(n, self.len)?;
        let mut left = n;
        while left > 0 {
            let Some(back) = self.bufs.back_mut() else {
                break; // Unreachable while the cached length is right.
            };
            if back.len() <= left {
                left -= back.len();
                self.pop_back();
            } else {
                back.trim_back(left)?;
                self.len -= left;
                left = 0;
            }
        }
        Ok(())
    }

    /// [`to_vec`](Self::to_vec) with its one allocation reserved fallibly: `None` when
    /// there is no memory for it (what a path that input drives copies with).
    pub fn try_to_vec(&self) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        v.try_reserve_exact(self.len).ok()?;
        for seg in self.segments() {
            v.extend_from_slice(seg);
        }
        Some(v)
    }

    /// Copies all bytes into a new `Vec` (for tests and slow paths).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for seg in self.segments() {
            v.extend_from_slice(seg);
        }
        v
    }

    /// Copies the first `dst.len()` bytes of the chain into `dst`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if
    /// `dst.len() > len()`; `dst` is then left unchanged.
    pub fn copy_to_slice(&self, dst: &mut [u8]) -> Result<()> {
        self.cursor().read_into(dst)
    }

    /// A cursor reading the chain from the start.
    pub fn cursor(&self) -> Cursor<'_> {
        let (head, tail) = self.bufs.as_slices();
        Cursor::new(head, tail)
    }
}

impl From<IOBuf> for IOBufChain {
    fn from(buf: IOBuf) -> Self {
        let mut chain = IOBufChain::new();
        chain.push_back(buf);
        chain
    }
}

impl Extend<IOBuf> for IOBufChain {
    fn extend<I: IntoIterator<Item = IOBuf>>(&mut self, iter: I) {
        for buf in iter {
            self.push_back(buf);
        }
    }
}

impl FromIterator<IOBuf> for IOBufChain {
    fn from_iter<I: IntoIterator<Item = IOBuf>>(iter: I) -> Self {
        let mut chain = IOBufChain::new();
        chain.extend(iter);
        chain
    }
}

impl IntoIterator for IOBufChain {
    type Item = IOBuf;
    type IntoIter = IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        IntoIter(self.bufs)
    }
}

impl<'a> IntoIterator for &'a IOBufChain {
    type Item = &'a IOBuf;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.bufs.iter()
    }
}

/// Compares the bytes only, however they are segmented.
impl PartialEq for IOBufChain {
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len {
            return false;
        }
        let mut a = self.segments();
        let mut b = other.segments();
        let (mut x, mut y): (&[u8], &[u8]) = (&[], &[]);
        loop {
            if x.is_empty() {
                match a.next() {
                    Some(s) => x = s,
                    // Equal lengths: `b` is exhausted too.
                    None => return true,
                }
            }
            if y.is_empty() {
                match b.next() {
                    Some(s) => y = s,
                    None => return true,
                }
            }
            let n = x.len().min(y.len());
            if x[..n] != y[..n] {
                return false;
            }
            x = &x[n..];
            y = &y[n..];
        }
    }
}

impl Eq for IOBufChain {}

impl fmt::Debug for IOBufChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IOBufChain")
            .field("len", &self.len)
            .field("segments", &self.bufs)
            .finish()
    }
}

/// Mutable access to a chain's first or last segment, from
/// [`IOBufChain::front_mut`] or [`IOBufChain::back_mut`].
///
/// The segment is held outside the chain while the guard lives and put back (unless
/// empty) with the chain's length updated when the guard drops, so the cached length
/// is always right. Leaking the guard loses the segment but leaves the chain
/// consistent.
pub struct SegmentMut<'a> {
    chain: &'a mut IOBufChain,
    buf: IOBuf,
    front: bool,
}

impl Deref for SegmentMut<'_> {
    type Target = IOBuf;

    fn deref(&self) -> &IOBuf {
        &self.buf
    }
}

impl DerefMut for SegmentMut<'_> {
    fn deref_mut(&mut self) -> &mut IOBuf {
        &mut self.buf
    }
}

impl Drop for SegmentMut<'_> {
    fn drop(&mut self) {
        let buf = core::mem::take(&mut self.buf);
        if self.front {
            self.chain.push_front(buf);
        } else {
            self.chain.push_back(buf);
        }
    }
}

impl fmt::Debug for SegmentMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SegmentMut").field(&self.buf).finish()
    }
}
