//! The test pattern: a 1 MiB block of SplitMix64 output (seed [`SEED`]) repeated without
//! end. Byte `i` of the stream is byte `i % BLOCK_LEN` of the block.
//!
//! The block is made once per process (or image) and leaked, so every payload is an
//! `IOBuf::from_static` slice of it: sending N bytes allocates only the chain, never the
//! bytes (zero copy), and the slices cost no reference counting.

use alloc::boxed::Box;
use alloc::vec::Vec;

use ebb_core::{IOBuf, IOBufChain};
use sha2::{Digest, Sha256};

/// Length of the repeated block.
pub const BLOCK_LEN: usize = 1 << 20;
/// Seed of the SplitMix64 stream that fills the block.
pub const SEED: u64 = 0x6562_6266_6c6f_7721;

/// A handle on the process's pattern block. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Pattern {
    block: &'static [u8],
}

impl Default for Pattern {
    fn default() -> Self {
        Self::get()
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Pattern {
    /// The pattern (made on first use).
    pub fn get() -> Self {
        static BLOCK: spin::Once<&'static [u8]> = spin::Once::new();
        let block = BLOCK.call_once(|| {
            let mut state = SEED;
            let mut block = Vec::with_capacity(BLOCK_LEN);
            while block.len() < BLOCK_LEN {
                block.extend_from_slice(&splitmix64(&mut state).to_le_bytes());
            }
            Box::leak(block.into_boxed_slice())
        });
        Self { block }
    }

    /// Bytes `[offset, offset + len)` of the stream, as slices of the block (one segment
    /// per block crossed).
    pub fn slice(&self, offset: u64, len: usize) -> IOBufChain {
        let mut chain = IOBufChain::new();
        let mut at = (offset % BLOCK_LEN as u64) as usize;
        let mut left = len;
        while left > 0 {
            let n = left.min(BLOCK_LEN - at);
            chain.push_back(IOBuf::from_static(&self.block[at..at + n]));
            left -= n;
            at = 0;
        }
        chain
    }

    /// SHA-256 of the first `len` bytes of the stream.
    pub fn sha256(&self, len: u64) -> [u8; 32] {
        let mut hasher = Sha256::new();
        let mut left = len;
        while left > 0 {
            let n = left.min(BLOCK_LEN as u64) as usize;
            hasher.update(&self.block[..n]);
            left -= n as u64;
        }
        hasher.finalize().into()
    }

    /// Whether `data` equals the stream's bytes at `offset`.
    pub fn matches(&self, offset: u64, data: &[u8]) -> bool {
        let mut at = (offset % BLOCK_LEN as u64) as usize;
        let mut rest = data;
        while !rest.is_empty() {
            let n = rest.len().min(BLOCK_LEN - at);
            if rest[..n] != self.block[at..at + n] {
                return false;
            }
            rest = &rest[n..];
            at = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_follow_the_stream_across_blocks() {
        let p = Pattern::get();
        let chain = p.slice(BLOCK_LEN as u64 - 10, 30);
        assert_eq!(chain.len(), 30);
        assert_eq!(chain.segment_count(), 2);
        assert!(p.matches(BLOCK_LEN as u64 - 10, &chain.to_vec()));
        assert!(!p.matches(BLOCK_LEN as u64 - 9, &chain.to_vec()));
        let mut h = Sha256::new();
        h.update(p.block);
        h.update(&p.block[..5]);
        assert_eq!(
            p.sha256(BLOCK_LEN as u64 + 5),
            <[u8; 32]>::from(h.finalize())
        );
    }
}
