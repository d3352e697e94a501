//! The receive side's out-of-order store and the SACK blocks it reports (RFC 2018).
//!
//! In-order data never lands here: it goes straight to the application as slices of the
//! received frames. A segment that arrives ahead of `RCV.NXT` is kept, as the same zero-copy
//! slice, until the hole before it fills.
//!
//! Invariants: blocks are sorted by sequence number, never overlap and are never empty;
//! `bytes` is the sum of their lengths and never exceeds the bound passed to
//! [`Reassembly::insert`], `occupied` the sum of the buffers they keep alive, and there
//! are at most [`MAX_PIECES`] blocks (what does not fit is dropped and reported).

use alloc::vec::Vec;

use ebb_core::iobuf::IOBuf;

use crate::wire::tcp::{MAX_SACK_BLOCKS, SackBlocks, SeqNumber};

/// Most out-of-order pieces kept per connection, whatever their bytes. Each piece keeps
/// its whole received buffer alive, so a byte bound alone would let a peer that sends
/// one-byte segments out of order pin a frame buffer per byte — a million of them under a
/// 1 MiB bound — and make every insertion walk them all. 1,024 pieces hold a 1 MiB window
/// of full-sized segments with every other one lost (724 pieces).
pub(crate) const MAX_PIECES: usize = 1024;

/// Out-of-order segments of one connection.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    blocks: Vec<(SeqNumber, IOBuf)>,
    bytes: usize,
    /// The memory the blocks keep alive: each one's whole received buffer (a piece cut
    /// from a 2 KiB frame buffer keeps all of it; pieces of one segment are each counted).
    occupied: usize,
    /// Start of the most recently stored piece: its block is reported first (RFC 2018 §4).
    latest: Option<SeqNumber>,
}

impl Reassembly {
    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The memory the held pieces keep alive (their buffers, not just their bytes).
    pub(crate) fn occupied(&self) -> usize {
        self.occupied
    }

    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// [`insert_within`](Self::insert_within) with no memory budget: the bytes dropped.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, seq: SeqNumber, data: IOBuf, max_bytes: usize) -> usize {
        self.insert_within(seq, data, max_bytes, usize::MAX).0
    }

    /// Stores the parts of `data` (starting at `seq`, which is after `RCV.NXT`) not held
    /// already, as long as the total stays within `max_bytes` and the memory the stored
    /// pieces add ([`IOBuf::occupied`]) within `budget`. A piece that would keep a buffer much
    /// larger than itself alive (a few bytes in a frame buffer) is copied to one of its
    /// own size first. Returns how many bytes did not fit and were dropped, and whether
    /// the budget dropped any.
    pub(crate) fn insert_within(
        &mut self,
        seq: SeqNumber,
        data: IOBuf,
        max_bytes: usize,
        mut budget: usize,
    ) -> (usize, bool) {
        let end = seq + data.len();
        // The gaps in [seq, end) not covered by stored blocks.
        let mut gaps: Vec<(SeqNumber, SeqNumber)> = Vec::new();
        let mut cursor = seq;
        for (start, buf) in &self.blocks {
            let block_end = *start + buf.len();
            if block_end <= cursor {
                continue;
            }
            if *start >= end {
                break;
            }
            if *start > cursor {
                gaps.push((cursor, *start));
            }
            cursor = cursor.max(block_end);
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        let mut dropped = 0;
        let mut over_budget = false;
        for (gap_start, gap_end) in gaps {
            let len = (gap_end - gap_start) as usize;
            if self.bytes + len > max_bytes || self.blocks.len() >= MAX_PIECES {
                dropped += len;
                continue;
            }
            let mut piece = data.clone();
            let front = (gap_start - seq) as usize;
            let back = (end - gap_end) as usize;
            if piece.trim_front(front).is_err() || piece.trim_back(back).is_err() {
                continue; // Unreachable: the gap lies inside `data`.
            }
            if piece.wasteful() {
                piece = IOBuf::copy_from_slice(piece.as_slice());
            }
            let cost = piece.occupied();
            if cost > budget {
                dropped += len;
                over_budget = true;
                continue;
            }
            budget -= cost;
            let at = self.blocks.partition_point(|(s, _)| *s < gap_start);
            self.occupied += piece.occupied();
            self.blocks.insert(at, (gap_start, piece));
            self.bytes += len;
            self.latest = Some(gap_start);
        }
        (dropped, over_budget)
    }

    /// Takes the block that starts at or before `rcv_nxt`, trimmed to start there, if any.
    /// Blocks wholly before `rcv_nxt` are discarded.
    pub(crate) fn pop_ready(&mut self, rcv_nxt: SeqNumber) -> Option<IOBuf> {
        while let Some((start, _)) = self.blocks.first() {
            if *start > rcv_nxt {
                return None;
            }
            let (start, mut buf) = self.blocks.remove(0);
            self.bytes -= buf.len();
            self.occupied -= buf.occupied();
            let stale = (rcv_nxt - start) as usize;
            if stale >= buf.len() {
                continue;
            }
            if buf.trim_front(stale).is_ok() {
                return Some(buf);
            }
        }
        None
    }

    /// The SACK blocks to report: contiguous held ranges, the one holding the latest
    /// arrival first, then the others in sequence order.
    pub(crate) fn sack_blocks(&self) -> SackBlocks {
        let mut ranges: Vec<(SeqNumber, SeqNumber)> = Vec::new();
        for (start, buf) in &self.blocks {
            let end = *start + buf.len();
            match ranges.last_mut() {
                Some((_, last_end)) if *last_end == *start => *last_end = end,
                _ => ranges.push((*start, end)),
            }
        }
        if let Some(latest) = self.latest
            && let Some(i) = ranges.iter().position(|(s, e)| *s <= latest && latest < *e)
        {
            let first = ranges.remove(i);
            ranges.insert(0, first);
        }
        let mut blocks: SackBlocks = [None; MAX_SACK_BLOCKS];
        for (slot, range) in blocks.iter_mut().zip(ranges) {
            *slot = Some(range);
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    fn buf(seq: u32, len: usize) -> IOBuf {
        IOBuf::from_vec((0..len).map(|i| (seq as usize + i) as u8).collect())
    }

    #[test]
    fn overlapping_inserts_keep_one_copy_and_pop_in_order() {
        let mut r = Reassembly::default();
        assert_eq!(r.insert(SeqNumber(200), buf(200, 100), 10_000), 0);
        assert_eq!(r.insert(SeqNumber(150), buf(150, 200), 10_000), 0);
        assert_eq!(r.bytes(), 200, "150..350 held once");
        assert!(r.pop_ready(SeqNumber(100)).is_none(), "hole at 100..150");
        let first = r
            .pop_ready(SeqNumber(160))
            .expect("block at 150 trimmed to 160");
        assert_eq!(first.as_slice(), buf(160, 40).as_slice());
        let second = r.pop_ready(SeqNumber(200)).expect("block at 200");
        assert_eq!(second.len(), 100);
        let third = r.pop_ready(SeqNumber(300)).expect("block at 300");
        assert_eq!(third.as_slice(), buf(300, 50).as_slice());
        assert!(r.is_empty());
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn tiny_pieces_stop_at_the_piece_bound() {
        let mut r = Reassembly::default();
        let mut dropped = 0;
        // One-byte segments every other byte: no two pieces touch, none merges.
        for i in 0..(MAX_PIECES as u32 + 100) {
            dropped += r.insert(SeqNumber(1000 + 2 * i), buf(0, 1), 1 << 20);
        }
        assert_eq!(r.blocks.len(), MAX_PIECES);
        assert_eq!(dropped, 100);
        assert_eq!(r.bytes(), MAX_PIECES);
    }

    #[test]
    fn bound_drops_what_does_not_fit() {
        let mut r = Reassembly::default();
        assert_eq!(r.insert(SeqNumber(1000), buf(0, 600), 1000), 0);
        assert_eq!(r.insert(SeqNumber(2000), buf(0, 600), 1000), 600);
        assert_eq!(r.bytes(), 600);
    }

    #[test]
    fn sack_blocks_latest_first_and_merged() {
        let mut r = Reassembly::default();
        r.insert(SeqNumber(100), buf(0, 10), 10_000);
        r.insert(SeqNumber(110), buf(0, 10), 10_000);
        r.insert(SeqNumber(300), buf(0, 10), 10_000);
        r.insert(SeqNumber(200), buf(0, 10), 10_000);
        let blocks = r.sack_blocks();
        assert_eq!(
            blocks,
            [
                Some((SeqNumber(200), SeqNumber(210))),
                Some((SeqNumber(100), SeqNumber(120))),
                Some((SeqNumber(300), SeqNumber(310))),
                None
            ]
        );
        let _ = vec![0u8];
    }

    #[test]
    fn wraps_around_sequence_space() {
        let mut r = Reassembly::default();
        r.insert(SeqNumber(u32::MAX - 4), buf(0, 10), 10_000);
        let got = r.pop_ready(SeqNumber(u32::MAX - 4)).expect("ready");
        assert_eq!(got.len(), 10);
    }
}
