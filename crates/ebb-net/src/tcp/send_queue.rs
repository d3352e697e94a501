//! Slicing the send queue without copying: [`slice_chain`] cuts a byte range out of an
//! [`IOBufChain`] as trimmed clones of its buffers, and [`QueueCursor`] remembers where
//! the last slice ended so that segmenting a long queue does not walk it from the front
//! for every segment. The TCB keeps the cursor beside its queue (`Tcb::queue_cursor`).

use ebb_core::iobuf::IOBufChain;

/// Where slicing the send queue resumes: the index of a queue segment and the queue
/// offset of its first byte. Sending walks forward through the queue one segment at a
/// time; the cursor lets each slice start where the last one ended instead of walking
/// from the front (which costs a step per buffer queued — hundreds in a bulk transfer).
///
/// Invariant: when valid, segment `index` of the queue starts at byte `start`. Whatever
/// removes segments from the queue's front must [`advance`](Self::advance) it (ACKs) or
/// reset it (the queue replaced); a cursor past the offset asked for is ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueCursor {
    index: usize,
    start: usize,
}

impl QueueCursor {
    /// The queue lost its first `bytes` bytes, `segments` whole segments among them.
    pub(crate) fn advance(&mut self, segments: usize, bytes: usize) {
        *self = match (
            self.index.checked_sub(segments),
            self.start.checked_sub(bytes),
        ) {
            (Some(index), Some(start)) => QueueCursor { index, start },
            // The cursor's segment was trimmed (or removed): it is now the front.
            _ => QueueCursor::default(),
        };
    }
}

/// Cuts `[offset, offset + len)` out of `chain` without copying: clones (reference
/// bumps) of the buffers that overlap it, trimmed.
pub(crate) fn slice_chain(chain: &IOBufChain, offset: usize, len: usize) -> IOBufChain {
    slice_chain_from(chain, &mut QueueCursor::default(), offset, len)
}

/// [`slice_chain`] starting from `cursor` (when it is not past `offset`), leaving it at
/// the last segment the slice touched, where the next slice will start.
pub(crate) fn slice_chain_from(
    chain: &IOBufChain,
    cursor: &mut QueueCursor,
    offset: usize,
    len: usize,
) -> IOBufChain {
    if cursor.start > offset || cursor.index >= chain.segment_count() {
        *cursor = QueueCursor::default();
    }
    // The common case, a slice of the queue's first buffer: what the loop below would
    // produce (one trimmed clone, the cursor left on that buffer), without the walk.
    if *cursor == QueueCursor::default()
        && len > 0
        && let Some(front) = chain.front()
        && offset + len <= front.len()
    {
        *cursor = QueueCursor::default();
        let mut piece = front.clone();
        let mut out = IOBufChain::new();
        if piece.trim_back(front.len() - (offset + len)).is_ok() && piece.trim_front(offset).is_ok()
        {
            out.push_back(piece);
        }
        return out;
    }
    let mut out = IOBufChain::new();
    let mut at = cursor.start;
    let end = offset + len;
    for (index, buf) in chain.iter().enumerate().skip(cursor.index) {
        let buf_end = at + buf.len();
        if buf_end <= offset {
            at = buf_end;
            continue;
        }
        if at >= end {
            break;
        }
        *cursor = QueueCursor { index, start: at };
        let mut piece = buf.clone();
        let front = offset.saturating_sub(at);
        let back = buf_end.saturating_sub(end);
        if piece.trim_back(back).is_ok() && piece.trim_front(front).is_ok() {
            out.push_back(piece);
        }
        at = buf_end;
    }
    out
}
