//! The memory values live in: what an item really costs, how a value is kept, and the
//! one fallible door through which a request allocates value memory.
//!
//! Three rules keep a client from running a node out of memory (issue 21: a native
//! node's heap does not grow, and a failed infallible allocation panics it):
//!
//! * **Items are accounted by what they take**, not by what was asked: every buffer a
//!   value keeps is charged at its allocator's real size ([`buffer_cost`]: size class or
//!   buddy block), so `-m` bounds the memory items occupy, not their byte count.
//! * **No value needs a large contiguous block.** A value that is copied is copied into
//!   pieces of at most [`VALUE_PIECE`] bytes, each a whole 16 KiB buddy block or less
//!   ([`Packing`]), so a 1 MiB value needs sixty-odd 16 KiB blocks, which evicting items
//!   frees, rather than one 1 MiB block that no amount of evicting small items may yield.
//! * **Value memory is fallible and kept off a reserve**: pieces come from
//!   [`ItemMemory::buffer`], which returns `None` instead of failing the node, and the
//!   store asks [`ItemMemory::room_for`] before copying, which natively keeps free pages
//!   for everything a node cannot refuse to allocate (connection state, the network's
//!   buffers, small metadata). The store turns either refusal into `SERVER_ERROR out of
//!   memory storing object` and evicts, so that the memory is there for the next try.

use alloc::vec::Vec;
use core::alloc::Layout;
use core::sync::atomic::{AtomicU64, Ordering};
use ebb::iobuf::REGION_OVERHEAD;
use ebb::{IOBuf, IOBufChain};

/// The most bytes one copied piece of a value holds: a 16 KiB buddy block less the
/// buffer's header.
pub const VALUE_PIECE: usize = (16 << 10) - REGION_OVERHEAD;

/// Pieces up to this size are one slab object (ebb-mem's largest small class, 2 KiB).
const SMALL_PIECE: usize = 2048 - REGION_OVERHEAD;

/// The bytes the allocator really takes for a request of `size` (8-aligned). ebb-mem's
/// rounding in both runtimes: natively it is the allocator; hosted it is the default
/// global allocator too (the server's `ebb-allocator` feature), and a fair estimate of
/// glibc's otherwise.
pub fn allocation_size(size: usize) -> usize {
    match Layout::from_size_align(size, 8) {
        Ok(layout) => ebb::mem::allocation_size(layout),
        Err(_) => size,
    }
}

/// What a buffer's region occupies: its header and all its bytes (headroom, view and
/// tailroom), at the allocator's rounding. A region shared by several buffers is counted
/// by each: an upper bound.
pub fn buffer_cost(buf: &IOBuf) -> usize {
    let capacity = buf
        .headroom()
        .saturating_add(buf.len())
        .saturating_add(buf.tailroom());
    allocation_size(capacity.saturating_add(REGION_OVERHEAD))
}

/// What keeping `chain`'s buffers as they are occupies.
pub fn chain_cost(chain: &IOBufChain) -> usize {
    chain.iter().map(buffer_cost).fold(0, usize::saturating_add)
}

/// The pieces a value of `len` bytes is copied into: whole [`VALUE_PIECE`]s, then for
/// the rest the largest 8 or 4 KiB block it fills, repeatedly, and what remains in one
/// buffer — a slab object up to [`SMALL_PIECE`], else a 4 KiB block. So no piece wastes
/// more than 2 KiB, and a value has at most three pieces besides its whole 16 KiB ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packing {
    len: usize,
}

impl Packing {
    /// The packing of a value of `len` bytes.
    pub const fn new(len: usize) -> Packing {
        Packing { len }
    }

    /// The pieces' capacities, in order.
    pub fn pieces(self) -> impl Iterator<Item = usize> {
        let mut left = self.len;
        core::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let piece = if left >= VALUE_PIECE {
                VALUE_PIECE
            } else if left > SMALL_PIECE {
                // The largest power-of-two block whose payload the rest fills: a value of
                // 9 KiB is an 8 KiB block and a 1 KiB object, not a 16 KiB block.
                // (Below VALUE_PIECE, so at most an 8 KiB block; under 4 KiB of payload
                // the rest goes whole into a 4 KiB block.)
                let mut block = 4096;
                while block * 2 - REGION_OVERHEAD <= left {
                    block *= 2;
                }
                if block - REGION_OVERHEAD <= left {
                    block - REGION_OVERHEAD
                } else {
                    left
                }
            } else {
                left
            };
            left -= piece;
            Some(piece)
        })
    }

    /// How many pieces.
    pub fn count(self) -> usize {
        self.pieces().count()
    }

    /// What the pieces occupy, with the slice that holds them when there are several.
    pub fn cost(self) -> usize {
        let pieces: usize = self
            .pieces()
            .map(|p| allocation_size(p + REGION_OVERHEAD))
            .sum();
        let n = self.count();
        let slice = if n > 1 {
            allocation_size(n * core::mem::size_of::<IOBuf>())
        } else {
            0
        };
        pieces + slice
    }

    /// Copies `chain` into its pieces, each from `memory`; `None` if one could not be had
    /// (what was allocated is freed again).
    pub fn copy(self, chain: &IOBufChain, memory: &dyn ItemMemory) -> Option<Vec<IOBuf>> {
        debug_assert_eq!(chain.len(), self.len);
        let mut pieces = Vec::new();
        pieces.try_reserve_exact(self.count()).ok()?;
        let mut from = chain.segments().flat_map(|s| s.chunks(VALUE_PIECE));
        let mut pending: &[u8] = from.next().unwrap_or(&[]);
        for cap in self.pieces() {
            let mut piece = memory.buffer(cap)?;
            while piece.len() < cap {
                while pending.is_empty() {
                    // The pieces add up to the chain's length, so it has the bytes.
                    let Some(next) = from.next() else {
                        debug_assert!(false, "a chain shorter than its packing");
                        return None;
                    };
                    pending = next;
                }
                let take = pending.len().min(cap - piece.len());
                // Cannot fail: the piece is unique and has room for `cap` bytes.
                let copied = piece.extend_from_slice(&pending[..take]);
                debug_assert!(copied.is_ok());
                pending = &pending[take..];
            }
            pieces.push(piece);
        }
        Some(pieces)
    }
}

/// Where the store gets value memory: the fallible door of the module docs.
pub trait ItemMemory: Send + Sync {
    /// An empty buffer with room for `cap` bytes, or `None` when there is no memory for
    /// it (never a panic).
    fn buffer(&self, cap: usize) -> Option<IOBuf>;

    /// Whether `bytes` more of value memory may be allocated now without taking memory
    /// the node keeps for what it cannot refuse to allocate.
    fn room_for(&self, bytes: usize) -> bool;
}

/// The node's heap: buffers from the global allocator, refused (not panicking) when it
/// is exhausted; natively, value memory may not bring the free pages below `reserve`.
/// Hosted the heap grows, so only a real allocation failure refuses.
#[derive(Debug, Default)]
pub struct HeapMemory {
    /// Bytes of free pages value memory leaves alone (natively).
    pub reserve: usize,
}

impl ItemMemory for HeapMemory {
    fn buffer(&self, cap: usize) -> Option<IOBuf> {
        IOBuf::try_with_capacity(cap).ok()
    }

    fn room_for(&self, bytes: usize) -> bool {
        ebb::memory_free().is_none_or(|free| free >= bytes.saturating_add(self.reserve))
    }
}

/// Fault injection for tests and soak runs: `inner`, except that each request fails with
/// probability `per_million / 10^6` (a seeded xorshift, the same sequence each run).
/// Counts what it refused.
#[derive(Debug)]
pub struct FailingMemory<M> {
    inner: M,
    per_million: u64,
    state: AtomicU64,
    refused: AtomicU64,
}

impl<M: ItemMemory> FailingMemory<M> {
    /// `inner`, failing one request in `10^6 / per_million` on average.
    pub fn new(inner: M, per_million: u32, seed: u64) -> Self {
        FailingMemory {
            inner,
            per_million: u64::from(per_million.min(1_000_000)),
            state: AtomicU64::new(seed | 1),
            refused: AtomicU64::new(0),
        }
    }

    /// How many requests it refused.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn fails(&self) -> bool {
        // xorshift64 over an atomic: racing cores may draw the same number, which only
        // makes the sequence less random, never wrong.
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::Relaxed);
        let fail = x % 1_000_000 < self.per_million;
        if fail {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        fail
    }
}

impl<M: ItemMemory> ItemMemory for FailingMemory<M> {
    fn buffer(&self, cap: usize) -> Option<IOBuf> {
        if self.fails() {
            return None;
        }
        self.inner.buffer(cap)
    }

    fn room_for(&self, bytes: usize) -> bool {
        !self.fails() && self.inner.room_for(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_value_in_blocks_of_at_most_16_kib() {
        for len in [
            0,
            1,
            100,
            2016,
            2017,
            4064,
            4065,
            9000,
            16352,
            16353,
            100_000,
            1 << 20,
        ] {
            let p = Packing::new(len);
            let pieces: Vec<usize> = p.pieces().collect();
            assert_eq!(pieces.iter().sum::<usize>(), len, "{len}: {pieces:?}");
            for &piece in &pieces {
                assert!(piece > 0 && piece <= VALUE_PIECE, "{len}: {pieces:?}");
                assert!(allocation_size(piece + REGION_OVERHEAD) <= 16 << 10);
            }
            // Little waste: the pieces' blocks at most the value plus 2 KiB per tail
            // piece and the headers.
            let blocks: usize = pieces
                .iter()
                .map(|&p| allocation_size(p + REGION_OVERHEAD))
                .sum();
            assert!(
                blocks <= len + len / 128 + 4096,
                "{len}: {blocks} bytes of blocks for {pieces:?}"
            );
        }
        assert_eq!(Packing::new(9000).pieces().collect::<Vec<_>>(), [8160, 840]);
        assert_eq!(Packing::new(1 << 20).count(), 65);
    }

    #[test]
    fn copy_keeps_the_bytes_and_fails_cleanly() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut chain = IOBufChain::new();
        for part in data.chunks(1460) {
            chain.push_back(IOBuf::copy_from_slice(part));
        }
        let packing = Packing::new(data.len());
        let pieces = packing.copy(&chain, &HeapMemory::default()).unwrap();
        assert_eq!(pieces.len(), packing.count());
        let joined: Vec<u8> = pieces.iter().flat_map(|p| p.as_slice().to_vec()).collect();
        assert_eq!(joined, data);
        // Every request refused: nothing comes back, nothing panics.
        let never = FailingMemory::new(HeapMemory::default(), 1_000_000, 7);
        assert!(packing.copy(&chain, &never).is_none());
        assert_eq!(never.refused(), 1);
    }
}
