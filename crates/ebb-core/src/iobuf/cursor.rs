//! [`Cursor`]: reads integers and byte ranges across a chain's segments.

use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::fmt;

use super::{IOBuf, Result, check_range};

/// A read position in an [`IOBufChain`](super::IOBufChain) or [`IOBuf`], for parsing
/// headers that may straddle segments.
///
/// Every read checks its length against [`remaining`](Self::remaining) first: a read
/// past the end returns [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) and
/// leaves the cursor where it was. Cloning a cursor is cheap, which makes it easy to
/// try a parse and back out.
#[derive(Clone)]
pub struct Cursor<'a> {
    // The chain's `VecDeque` as its two slices, so no allocation is needed.
    head: &'a [IOBuf],
    tail: &'a [IOBuf],
    /// Index of the current segment in `head` followed by `tail`.
    seg: usize,
    /// Offset in the current segment; may equal its length until the next read.
    off: usize,
    pos: usize,
    remaining: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of the segments `head` followed by `tail`.
    pub(super) fn new(head: &'a [IOBuf], tail: &'a [IOBuf]) -> Self {
        let remaining = head.iter().chain(tail).map(IOBuf::len).sum();
        Self {
            head,
            tail,
            seg: 0,
            off: 0,
            pos: 0,
            remaining,
        }
    }

    /// The number of bytes left to read.
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// The number of bytes read (or skipped) so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Advances `n` bytes without reading them.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if
    /// `n > remaining()`.
    pub fn skip(&mut self, n: usize) -> Result<()> {
        check_range(n, self.remaining)?;
        let mut left = n;
        while left > 0 {
            let chunk = self.current();
            if chunk.is_empty() {
                break; // Unreachable: `remaining` counts the bytes ahead.
            }
            let k = chunk.len().min(left);
            self.advance(k);
            left -= k;
        }
        Ok(())
    }

    /// Reads `n` bytes, borrowing them when they lie within one segment and copying
    /// them only when they straddle segments.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if
    /// `n > remaining()`.
    pub fn read_bytes(&mut self, n: usize) -> Result<Cow<'a, [u8]>> {
        check_range(n, self.remaining)?;
        let chunk = self.current();
        if let Some(bytes) = chunk.get(..n) {
            self.advance(n);
            return Ok(Cow::Borrowed(bytes));
        }
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let chunk = self.current();
            if chunk.is_empty() {
                break; // Unreachable: `remaining` counts the bytes ahead.
            }
            let k = chunk.len().min(n - v.len());
            v.extend_from_slice(&chunk[..k]);
            self.advance(k);
        }
        Ok(Cow::Owned(v))
    }

    /// Fills `dst` with the next `dst.len()` bytes.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if
    /// `dst.len() > remaining()`; `dst` is then left unchanged.
    pub fn read_into(&mut self, dst: &mut [u8]) -> Result<()> {
        check_range(dst.len(), self.remaining)?;
        let mut done = 0;
        while done < dst.len() {
            let chunk = self.current();
            if chunk.is_empty() {
                break; // Unreachable: `remaining` counts the bytes ahead.
            }
            let k = chunk.len().min(dst.len() - done);
            dst[done..done + k].copy_from_slice(&chunk[..k]);
            self.advance(k);
            done += k;
        }
        Ok(())
    }

    /// Reads the next `N` bytes as an array.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if
    /// `N > remaining()`.
    pub fn read_array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0; N];
        // Fast path for the common case of a field inside one segment.
        if let Some(bytes) = self.current().get(..N) {
            out.copy_from_slice(bytes);
            self.advance(N);
        } else {
            self.read_into(&mut out)?;
        }
        Ok(out)
    }

    /// The next byte, without advancing.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) at the end.
    pub fn peek_u8(&self) -> Result<u8> {
        check_range(1, self.remaining)?;
        let mut probe = self.clone();
        probe.read_u8()
    }

    /// Reads one byte.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) at the end.
    pub fn read_u8(&mut self) -> Result<u8> {
        Ok(self.read_array::<1>()?[0])
    }

    /// Reads a big-endian (network order) `u16`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 2 bytes
    /// remain.
    pub fn read_u16_be(&mut self) -> Result<u16> {
        self.read_array().map(u16::from_be_bytes)
    }

    /// Reads a little-endian `u16`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 2 bytes
    /// remain.
    pub fn read_u16_le(&mut self) -> Result<u16> {
        self.read_array().map(u16::from_le_bytes)
    }

    /// Reads a big-endian (network order) `u32`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 4 bytes
    /// remain.
    pub fn read_u32_be(&mut self) -> Result<u32> {
        self.read_array().map(u32::from_be_bytes)
    }

    /// Reads a little-endian `u32`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 4 bytes
    /// remain.
    pub fn read_u32_le(&mut self) -> Result<u32> {
        self.read_array().map(u32::from_le_bytes)
    }

    /// Reads a big-endian (network order) `u64`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 8 bytes
    /// remain.
    pub fn read_u64_be(&mut self) -> Result<u64> {
        self.read_array().map(u64::from_be_bytes)
    }

    /// Reads a little-endian `u64`.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`](super::IOBufError::OutOfRange) if fewer than 8 bytes
    /// remain.
    pub fn read_u64_le(&mut self) -> Result<u64> {
        self.read_array().map(u64::from_le_bytes)
    }

    /// The unread bytes of the current segment, moving to the next non-empty segment
    /// first if this one is used up. Empty only at the end.
    fn current(&mut self) -> &'a [u8] {
        loop {
            let Some(buf) = self.segment(self.seg) else {
                return &[];
            };
            let bytes = buf.as_slice();
            if self.off < bytes.len() {
                return &bytes[self.off..];
            }
            self.seg += 1;
            self.off = 0;
        }
    }

    /// Moves `k` bytes forward within the current segment (`k` no more than what
    /// [`current`](Self::current) just returned).
    fn advance(&mut self, k: usize) {
        self.off += k;
        self.pos += k;
        self.remaining -= k;
    }

    fn segment(&self, i: usize) -> Option<&'a IOBuf> {
        match i.checked_sub(self.head.len()) {
            None => self.head.get(i),
            Some(j) => self.tail.get(j),
        }
    }
}

impl IOBuf {
    /// A cursor reading this buffer's view from the start.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor::new(core::slice::from_ref(self), &[])
    }
}

impl fmt::Debug for Cursor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cursor")
            .field("position", &self.pos)
            .field("remaining", &self.remaining)
            .finish()
    }
}
