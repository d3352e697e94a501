//! The `rx_desc` target's harness (also run on the checked-in seeds by `cargo test`).
//!
//! Input: byte 0 picks the layout (`1 + (b & 15)` receive chunks, `1 + (b >> 4)` transmit
//! chunks, 2 KiB each); the next 4 bytes are bitmaps — bytes 1–2 which of up to 16
//! receive chunks the kernel holds, bytes 3–4 which transmit chunks were sent; then
//! 16-byte records: `addr` (u64 LE), `len` (u32 LE), `options` (u32 LE). Each record is
//! checked as an RX descriptor, its `addr` as a completion, and `(len, options)` as a
//! ring's producer and consumer indices.

use ebb_xdp::ring::{
    BadDesc, ChunkLayout, KERNEL_HEADROOM, consumer_available, producer_free,
};

/// What [`check`] saw, for the seeds test (every outcome reached).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes {
    pub accepted: usize,
    pub not_receive_chunk: usize,
    pub not_lent: usize,
    pub overruns: usize,
    pub options: usize,
    pub completions: usize,
}

/// Runs the checks on `data`, asserting what they promise; what they answered.
pub fn check(data: &[u8]) -> Outcomes {
    let mut outcomes = Outcomes::default();
    let Some((header, records)) = data.split_first_chunk::<5>() else {
        return outcomes;
    };
    let layout = ChunkLayout {
        chunk_size: 2048,
        rx_chunks: 1 + u32::from(header[0] & 15),
        tx_chunks: 1 + u32::from(header[0] >> 4),
    };
    let bits = |lo: u8, hi: u8, n: u32| -> Vec<bool> {
        let word = u16::from_le_bytes([lo, hi]);
        (0..n).map(|i| word >> i & 1 == 1).collect()
    };
    let mut lent = bits(header[1], header[2], layout.rx_chunks);
    let mut sent = bits(header[3], header[4], layout.tx_chunks);
    for record in records.chunks_exact(16) {
        let addr = u64::from_le_bytes(record[0..8].try_into().unwrap());
        let len = u32::from_le_bytes(record[8..12].try_into().unwrap());
        let options = u32::from_le_bytes(record[12..16].try_into().unwrap());
        match layout.check_rx((addr, len, options), &lent) {
            Ok(chunk) => {
                assert!(chunk < layout.rx_chunks, "outside the receive chunks");
                assert!(lent[chunk as usize], "a chunk the kernel did not hold");
                let start = layout.chunk_addr(chunk);
                assert!(addr >= start);
                assert!(addr + u64::from(len) <= start + u64::from(layout.chunk_size));
                assert!(len <= layout.chunk_size - KERNEL_HEADROOM);
                assert_eq!(options, 0);
                assert!(addr + u64::from(len) <= layout.umem_len() as u64);
                // Taken back, as the device does: the same chunk again is refused.
                lent[chunk as usize] = false;
                assert_eq!(
                    layout.check_rx((addr, len, options), &lent),
                    Err(BadDesc::NotLent)
                );
                outcomes.accepted += 1;
            }
            Err(BadDesc::NotReceiveChunk) => outcomes.not_receive_chunk += 1,
            Err(BadDesc::NotLent) => outcomes.not_lent += 1,
            Err(BadDesc::Overruns) => outcomes.overruns += 1,
            Err(BadDesc::Options) => outcomes.options += 1,
        }
        if let Some(i) = layout.check_completion(addr, &sent) {
            assert!(i < layout.tx_chunks);
            assert!(sent[i as usize]);
            assert_eq!(addr, layout.chunk_addr(layout.rx_chunks + i));
            sent[i as usize] = false;
            outcomes.completions += 1;
        }
        for size in [1u32, 8, 2048, 1 << 31] {
            assert!(consumer_available(size, len, options) <= size);
            assert!(producer_free(size, len, options) <= size);
        }
    }
    outcomes
}
