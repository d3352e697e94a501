//! [`Segments`]: the double-ended queue of buffers inside an
//! [`IOBufChain`](super::IOBufChain), and the chain's iterator types.
//!
//! Most chains are short — a packet's header buffer plus a payload piece or three (a
//! memcached `get` hit is its `VALUE` line, the stored value and the `END` trailer) — so
//! up to [`INLINE`] buffers live in place, in a small ring, and such a chain never
//! allocates. A chain that outgrows that (a TCP send queue, a reassembled stream) moves
//! its buffers to a `VecDeque` once and stays there, keeping the allocation for reuse.
//!
//! Invariants: `Inline` holds its `len` buffers at ring positions `start`, `start + 1`,
//! … (mod [`INLINE`]), and every other slot holds an empty static [`IOBuf`] (no storage,
//! nothing to drop). No `unsafe`.

use alloc::collections::VecDeque;
use core::fmt;
use core::iter::FusedIterator;
use core::ops::{Index, IndexMut};
use core::slice;

use super::IOBuf;

/// Buffers kept in place before a chain spills to the heap: four, so that a frame of
/// a header and three payload pieces does not allocate, while a chain (four 24-byte
/// buffers and its counters) stays small enough to move without a `memcpy` call.
pub(super) const INLINE: usize = 4;

/// The buffers of a chain, in order (see the module docs).
#[derive(Clone)]
pub(super) enum Segments {
    /// Up to [`INLINE`] buffers in a ring, `len` of them from `start` on.
    Inline {
        bufs: [IOBuf; INLINE],
        /// Bytes, not `usize`s: they keep the ring (and the chain around it) small.
        start: u8,
        len: u8,
    },
    /// More than ever fitted in place.
    Heap(VecDeque<IOBuf>),
}

impl Default for Segments {
    fn default() -> Self {
        Self::new()
    }
}

impl Segments {
    /// No buffers, no allocation.
    pub(super) const fn new() -> Self {
        Self::Inline {
            bufs: [const { IOBuf::new() }; INLINE],
            start: 0,
            len: 0,
        }
    }

    /// The number of buffers.
    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Self::Inline { len, .. } => usize::from(*len),
            Self::Heap(v) => v.len(),
        }
    }

    /// The ring slot of buffer `i`, for `start < INLINE` and `i <= INLINE`.
    #[inline]
    fn slot(start: u8, i: usize) -> usize {
        let start = usize::from(start);
        debug_assert!(start < INLINE && i <= INLINE);
        // `(start + i) % INLINE` without a division, whatever INLINE is.
        let slot = start + i;
        if slot >= INLINE { slot - INLINE } else { slot }
    }

    /// Moves the buffers to the heap, with room for as many again.
    fn spill(&mut self) -> &mut VecDeque<IOBuf> {
        if let Self::Inline { bufs, start, len } = self {
            let mut heap = VecDeque::with_capacity(2 * INLINE);
            for i in 0..usize::from(*len) {
                heap.push_back(core::mem::take(&mut bufs[Self::slot(*start, i)]));
            }
            *self = Self::Heap(heap);
        }
        match self {
            Self::Heap(heap) => heap,
            // Just replaced above.
            Self::Inline { .. } => unreachable!("spilled to the heap just above"),
        }
    }

    /// Appends `buf`.
    #[inline]
    pub(super) fn push_back(&mut self, buf: IOBuf) {
        match self {
            Self::Inline { bufs, start, len } if usize::from(*len) < INLINE => {
                bufs[Self::slot(*start, usize::from(*len))] = buf;
                *len += 1;
            }
            Self::Heap(heap) => heap.push_back(buf),
            Self::Inline { .. } => self.spill().push_back(buf),
        }
    }

    /// Prepends `buf`.
    #[inline]
    pub(super) fn push_front(&mut self, buf: IOBuf) {
        match self {
            Self::Inline { bufs, start, len } if usize::from(*len) < INLINE => {
                let slot = Self::slot(*start, INLINE - 1);
                bufs[slot] = buf;
                *start = slot as u8; // < INLINE
                *len += 1;
            }
            Self::Heap(heap) => heap.push_front(buf),
            Self::Inline { .. } => self.spill().push_front(buf),
        }
    }

    /// Removes the first buffer.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<IOBuf> {
        match self {
            Self::Inline { len: 0, .. } => None,
            Self::Inline { bufs, start, len } => {
                let buf = core::mem::take(&mut bufs[usize::from(*start)]);
                *start = Self::slot(*start, 1) as u8; // < INLINE
                *len -= 1;
                Some(buf)
            }
            Self::Heap(heap) => heap.pop_front(),
        }
    }

    /// Removes the last buffer.
    #[inline]
    pub(super) fn pop_back(&mut self) -> Option<IOBuf> {
        match self {
            Self::Inline { len: 0, .. } => None,
            Self::Inline { bufs, start, len } => {
                *len -= 1;
                Some(core::mem::take(
                    &mut bufs[Self::slot(*start, usize::from(*len))],
                ))
            }
            Self::Heap(heap) => heap.pop_back(),
        }
    }

    /// Buffer `i`, if there are more than `i`.
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&IOBuf> {
        match self {
            Self::Inline { bufs, start, len } => {
                (i < usize::from(*len)).then(|| &bufs[Self::slot(*start, i)])
            }
            Self::Heap(heap) => heap.get(i),
        }
    }

    /// Buffer `i`, mutably, if there are more than `i`.
    #[inline]
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut IOBuf> {
        match self {
            Self::Inline { bufs, start, len } => {
                (i < usize::from(*len)).then(|| &mut bufs[Self::slot(*start, i)])
            }
            Self::Heap(heap) => heap.get_mut(i),
        }
    }

    /// The first buffer.
    #[inline]
    pub(super) fn front(&self) -> Option<&IOBuf> {
        self.get(0)
    }

    /// The last buffer.
    #[inline]
    pub(super) fn back(&self) -> Option<&IOBuf> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The first buffer, mutably.
    #[inline]
    pub(super) fn front_mut(&mut self) -> Option<&mut IOBuf> {
        self.get_mut(0)
    }

    /// The last buffer, mutably.
    #[inline]
    pub(super) fn back_mut(&mut self) -> Option<&mut IOBuf> {
        let last = self.len().checked_sub(1)?;
        self.get_mut(last)
    }

    /// The buffers as two slices, in order (the second empty unless the ring wraps).
    #[inline]
    pub(super) fn as_slices(&self) -> (&[IOBuf], &[IOBuf]) {
        match self {
            Self::Inline { bufs, start, len } => {
                let (start, len) = (usize::from(*start), usize::from(*len));
                let first_end = (start + len).min(INLINE);
                let wrapped = len - (first_end - start);
                (&bufs[start..first_end], &bufs[..wrapped])
            }
            Self::Heap(heap) => heap.as_slices(),
        }
    }

    /// The buffers as one slice, in order, rotating the ring (or the heap's deque) so
    /// that they are contiguous first.
    pub(super) fn make_contiguous(&mut self) -> &[IOBuf] {
        match self {
            Self::Inline { bufs, start, len } => {
                // The empty slots are empty statics, so rotating the whole ring keeps
                // the invariant with the buffers from slot 0 on.
                bufs.rotate_left(usize::from(*start));
                *start = 0;
                &bufs[..usize::from(*len)]
            }
            Self::Heap(heap) => heap.make_contiguous(),
        }
    }

    /// Removes buffers `at..` and returns them, in order. `at <= len()`.
    pub(super) fn split_off(&mut self, at: usize) -> Segments {
        match self {
            Self::Heap(heap) => Self::Heap(heap.split_off(at.min(heap.len()))),
            Self::Inline { .. } => {
                let mut tail = Segments::new();
                while self.len() > at {
                    match self.pop_back() {
                        Some(buf) => tail.push_front(buf),
                        None => break,
                    }
                }
                tail
            }
        }
    }

    /// Moves all of `other`'s buffers to the end, leaving `other` empty.
    pub(super) fn append(&mut self, other: &mut Segments) {
        if other.len() == 0 {
            return;
        }
        if self.len() == 0 && matches!(other, Self::Heap(_)) {
            // Into an empty chain, a ring on the heap goes whole (its allocation with it).
            core::mem::swap(self, other);
            return;
        }
        match (&mut *self, &mut *other) {
            (Self::Heap(mine), Self::Heap(theirs)) => mine.append(theirs),
            // A few inline buffers move one by one, even into an empty chain: swapping
            // two whole chains moves three times their size (the usual case, a reply
            // appended to an idle send queue, cost ~25 instructions more that way).
            _ => {
                while let Some(buf) = other.pop_front() {
                    self.push_back(buf);
                }
            }
        }
    }

    /// The buffers in order.
    #[inline]
    pub(super) fn iter(&self) -> Iter<'_> {
        let (head, tail) = self.as_slices();
        Iter {
            head: head.iter(),
            tail: tail.iter(),
        }
    }
}

impl Index<usize> for Segments {
    type Output = IOBuf;

    /// Buffer `i`; panics if there are not more than `i` (like a slice).
    fn index(&self, i: usize) -> &IOBuf {
        match self.get(i) {
            Some(buf) => buf,
            None => panic!("segment index {i} out of range"),
        }
    }
}

impl IndexMut<usize> for Segments {
    fn index_mut(&mut self, i: usize) -> &mut IOBuf {
        match self.get_mut(i) {
            Some(buf) => buf,
            None => panic!("segment index {i} out of range"),
        }
    }
}

impl fmt::Debug for Segments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The segments of an [`IOBufChain`](super::IOBufChain), in order, by reference.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    head: slice::Iter<'a, IOBuf>,
    tail: slice::Iter<'a, IOBuf>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a IOBuf;

    #[inline]
    fn next(&mut self) -> Option<&'a IOBuf> {
        self.head.next().or_else(|| self.tail.next())
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.head.len() + self.tail.len();
        (n, Some(n))
    }

    fn nth(&mut self, n: usize) -> Option<&'a IOBuf> {
        let in_head = self.head.len();
        if n < in_head {
            return self.head.nth(n);
        }
        // Skip the head whole, then the rest in the tail: no walk.
        self.head = [].iter();
        self.tail.nth(n - in_head)
    }
}

impl DoubleEndedIterator for Iter<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        self.tail.next_back().or_else(|| self.head.next_back())
    }
}

impl ExactSizeIterator for Iter<'_> {}
impl FusedIterator for Iter<'_> {}

/// The segments of an [`IOBufChain`](super::IOBufChain), in order, by value.
#[derive(Clone, Debug)]
pub struct IntoIter(pub(super) Segments);

impl Iterator for IntoIter {
    type Item = IOBuf;

    #[inline]
    fn next(&mut self) -> Option<IOBuf> {
        self.0.pop_front()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.len();
        (n, Some(n))
    }
}

impl DoubleEndedIterator for IntoIter {
    #[inline]
    fn next_back(&mut self) -> Option<IOBuf> {
        self.0.pop_back()
    }
}

impl ExactSizeIterator for IntoIter {}
impl FusedIterator for IntoIter {}

#[cfg(test)]
mod tests {
    //! `Segments` against a `VecDeque` model: every operation, across the inline ring's
    //! wrap-around and the spill to the heap.

    use alloc::collections::VecDeque;
    use alloc::vec;
    use alloc::vec::Vec;

    use proptest::prelude::*;

    use super::{INLINE, Segments};
    use crate::iobuf::IOBuf;

    #[derive(Debug, Clone)]
    enum Op {
        PushBack(u8),
        PushFront(u8),
        PopFront,
        PopBack,
        SplitOff(usize),
        Append(Vec<u8>),
        Nth(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u8>().prop_map(Op::PushBack),
            any::<u8>().prop_map(Op::PushFront),
            Just(Op::PopFront),
            Just(Op::PopBack),
            (0usize..6).prop_map(Op::SplitOff),
            proptest::collection::vec(any::<u8>(), 0..5).prop_map(Op::Append),
            (0usize..6).prop_map(Op::Nth),
        ]
    }

    fn buf(tag: u8) -> IOBuf {
        IOBuf::from_vec(vec![tag])
    }

    fn tags<'a>(it: impl Iterator<Item = &'a IOBuf>) -> Vec<u8> {
        it.map(|b| b[0]).collect()
    }

    #[test]
    fn a_wrapped_ring_keeps_order_and_spills_in_order() {
        let mut s = Segments::new();
        s.push_back(buf(0));
        s.push_back(buf(1));
        s.push_front(buf(2));
        s.push_front(buf(3));
        // Four inline, the front two wrapped round to the ring's end.
        let Segments::Inline { start, len, .. } = &s else {
            panic!("four buffers stay inline");
        };
        assert_eq!((*start, *len), (INLINE as u8 - 2, 4));
        let (head, tail) = s.as_slices();
        assert_eq!((head.len(), tail.len()), (2, 2));
        assert_eq!(tags(s.iter()), [3, 2, 0, 1]);
        // Popping from the ring's last slot wraps the start to slot 0.
        assert_eq!(s.pop_front().map(|b| b[0]), Some(3));
        assert_eq!(s.pop_front().map(|b| b[0]), Some(2));
        assert!(matches!(
            s,
            Segments::Inline {
                start: 0,
                len: 2,
                ..
            }
        ));
        s.push_front(buf(2));
        s.push_front(buf(3));
        s.push_back(buf(4));
        assert!(matches!(s, Segments::Heap(_)));
        assert_eq!(tags(s.iter()), [3, 2, 0, 1, 4]);
    }

    #[test]
    fn stays_inline_up_to_the_limit_then_spills() {
        let mut s = Segments::new();
        for i in 0..INLINE as u8 {
            s.push_back(buf(i));
        }
        assert!(matches!(s, Segments::Inline { .. }));
        s.push_front(buf(9));
        assert!(matches!(s, Segments::Heap(_)));
        let expected: Vec<u8> = core::iter::once(9).chain(0..INLINE as u8).collect();
        assert_eq!(tags(s.iter()), expected);
    }

    #[test]
    fn ring_wraps_and_reports_two_slices() {
        let mut s = Segments::new();
        s.push_back(buf(1));
        s.push_front(buf(0)); // Wraps to the last slot.
        let (head, tail) = s.as_slices();
        assert_eq!((head.len(), tail.len()), (1, 1));
        assert_eq!(tags(s.iter()), [0, 1]);
        assert_eq!(tags(s.iter().rev()), [1, 0]);
        assert_eq!(s.iter().nth(1).map(|b| b[0]), Some(1));
    }

    proptest! {
        #[test]
        fn agrees_with_vecdeque(ops in proptest::collection::vec(op(), 0..40)) {
            let mut s = Segments::new();
            let mut model: VecDeque<u8> = VecDeque::new();
            for op in ops {
                match op {
                    Op::PushBack(t) => { s.push_back(buf(t)); model.push_back(t); }
                    Op::PushFront(t) => { s.push_front(buf(t)); model.push_front(t); }
                    Op::PopFront => {
                        prop_assert_eq!(s.pop_front().map(|b| b[0]), model.pop_front());
                    }
                    Op::PopBack => {
                        prop_assert_eq!(s.pop_back().map(|b| b[0]), model.pop_back());
                    }
                    Op::SplitOff(at) => {
                        let at = at.min(model.len());
                        let tail = s.split_off(at);
                        let model_tail = model.split_off(at);
                        prop_assert_eq!(tags(tail.iter()), Vec::from(model_tail));
                    }
                    Op::Append(more) => {
                        let mut other = Segments::new();
                        for &t in &more {
                            other.push_back(buf(t));
                        }
                        s.append(&mut other);
                        prop_assert_eq!(other.len(), 0);
                        model.extend(more);
                    }
                    Op::Nth(n) => {
                        prop_assert_eq!(s.iter().nth(n).map(|b| b[0]), model.get(n).copied());
                    }
                }
                prop_assert_eq!(s.len(), model.len());
                prop_assert_eq!(tags(s.iter()), model.iter().copied().collect::<Vec<_>>());
                let (head, tail) = s.as_slices();
                prop_assert_eq!(tags(head.iter().chain(tail)), tags(s.iter()));
                prop_assert_eq!(s.front().map(|b| b[0]), model.front().copied());
                prop_assert_eq!(s.back().map(|b| b[0]), model.back().copied());
                prop_assert_eq!(s.iter().len(), model.len());
            }
        }
    }
}
