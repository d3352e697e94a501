//! Ring index arithmetic and the checks on what the kernel hands back: safe code, pure
//! where it can be (the fuzz target and the unit tests call these functions directly).
//!
//! Indices are free-running `u32`s (the kernel's too): the entry of index `i` is at
//! `i & (size - 1)`, and the distance between two indices is their wrapping difference,
//! correct across the wrap at 2³² as long as it never exceeds the ring size.

use crate::sys::{Desc, RingMap};

/// Entries a producer may still write: `size` minus those written and not yet consumed.
/// A consumer index the kernel moved past the producer (it never should) leaves none.
pub fn producer_free(size: u32, producer: u32, consumer: u32) -> u32 {
    let used = producer.wrapping_sub(consumer);
    size.saturating_sub(used)
}

/// Entries a consumer may read: those produced and not yet consumed, at most `size` (an
/// index the kernel moved too far is not trusted beyond the ring).
pub fn consumer_available(size: u32, producer: u32, consumer: u32) -> u32 {
    producer.wrapping_sub(consumer).min(size)
}

/// How the UMEM is cut: `chunk_size`-byte chunks, the first `rx_chunks` for receiving,
/// the next `tx_chunks` for sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    /// Bytes per chunk (a power of two, 2048 or 4096).
    pub chunk_size: u32,
    /// Receive chunks: indices `0..rx_chunks`.
    pub rx_chunks: u32,
    /// Transmit chunks: indices `rx_chunks..rx_chunks + tx_chunks`.
    pub tx_chunks: u32,
}

/// The kernel's headroom in front of a received frame in copy mode
/// (`XDP_PACKET_HEADROOM`): a frame starts at least this far into its chunk.
pub const KERNEL_HEADROOM: u32 = 256;

/// Why an RX descriptor was not trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadDesc {
    /// The address is not in a receive chunk.
    NotReceiveChunk,
    /// The chunk is not one we had put on the fill ring.
    NotLent,
    /// The frame runs past its chunk's end (or is longer than a chunk less headroom).
    Overruns,
    /// Multi-buffer continuation or other option bits we did not ask for.
    Options,
}

impl ChunkLayout {
    /// Bytes of the UMEM.
    pub fn umem_len(&self) -> usize {
        (self.rx_chunks as usize + self.tx_chunks as usize) * self.chunk_size as usize
    }

    /// The UMEM offset of chunk `index`.
    pub fn chunk_addr(&self, index: u32) -> u64 {
        u64::from(index) * u64::from(self.chunk_size)
    }

    /// Longest frame a chunk takes on receive (after the kernel's headroom).
    pub fn max_rx_frame(&self) -> u32 {
        self.chunk_size - KERNEL_HEADROOM
    }

    /// Checks an RX descriptor: its bytes lie in one receive chunk that the kernel held
    /// (`lent[chunk]`), within `chunk_size − KERNEL_HEADROOM` bytes. Returns the chunk.
    pub fn check_rx(&self, desc: (u64, u32, u32), lent: &[bool]) -> Result<u32, BadDesc> {
        let (addr, len, options) = desc;
        if options != 0 {
            return Err(BadDesc::Options);
        }
        let chunk = addr / u64::from(self.chunk_size);
        if chunk >= u64::from(self.rx_chunks) {
            return Err(BadDesc::NotReceiveChunk);
        }
        let chunk = chunk as u32;
        if !lent.get(chunk as usize).copied().unwrap_or(false) {
            return Err(BadDesc::NotLent);
        }
        let offset = addr % u64::from(self.chunk_size);
        if len > self.max_rx_frame() || offset + u64::from(len) > u64::from(self.chunk_size) {
            return Err(BadDesc::Overruns);
        }
        Ok(chunk)
    }

    /// Checks a completion: the address of a transmit chunk we sent (`sent[i]` for
    /// transmit chunk `i`, counted from the first one). Returns the transmit chunk's
    /// index among them.
    pub fn check_completion(&self, addr: u64, sent: &[bool]) -> Option<u32> {
        if !addr.is_multiple_of(u64::from(self.chunk_size)) {
            return None;
        }
        let chunk = addr / u64::from(self.chunk_size);
        let first = u64::from(self.rx_chunks);
        if chunk < first || chunk >= first + u64::from(self.tx_chunks) {
            return None;
        }
        let i = (chunk - first) as u32;
        sent.get(i as usize).copied().unwrap_or(false).then_some(i)
    }
}

/// Our end of a ring we produce into (fill, TX): cached indices so that most calls need
/// no access to the shared words.
#[derive(Debug)]
pub(crate) struct Producer {
    pub map: RingMap,
    /// The next index we write (published or not).
    next: u32,
    /// The kernel's consumer index, as last read.
    consumer: u32,
    /// The index last published to the kernel.
    published: u32,
}

impl Producer {
    pub fn new(map: RingMap) -> Self {
        Self {
            map,
            next: 0,
            consumer: 0,
            published: 0,
        }
    }

    /// Room for `n` more entries (reading the kernel's consumer index only if the
    /// cached one says there is not).
    pub fn has_room(&mut self, n: u32) -> bool {
        let size = self.map.size();
        if producer_free(size, self.next, self.consumer) >= n {
            return true;
        }
        self.consumer = self.map.load_consumer();
        producer_free(size, self.next, self.consumer) >= n
    }

    /// Writes an address entry (fill ring); the caller checked `has_room`.
    pub fn push_addr(&mut self, addr: u64) {
        self.map.write_addr(self.next, addr);
        self.next = self.next.wrapping_add(1);
    }

    /// Writes a descriptor (TX ring); the caller checked `has_room`.
    pub fn push_desc(&mut self, desc: Desc) {
        self.map.write_desc(self.next, desc);
        self.next = self.next.wrapping_add(1);
    }

    /// Entries written and not yet published.
    pub fn unpublished(&self) -> u32 {
        self.next.wrapping_sub(self.published)
    }

    /// Publishes every entry written (one Release store).
    pub fn publish(&mut self) {
        if self.unpublished() > 0 {
            self.map.store_producer(self.next);
            self.published = self.next;
        }
    }
}

/// Our end of a ring we consume from (RX, completion).
#[derive(Debug)]
pub(crate) struct Consumer {
    pub map: RingMap,
    /// The next index we read.
    next: u32,
    /// The kernel's producer index, as last read.
    producer: u32,
}

impl Consumer {
    pub fn new(map: RingMap) -> Self {
        Self {
            map,
            next: 0,
            producer: 0,
        }
    }

    /// Entries ready to read, at most `max` (reading the kernel's producer index when
    /// the cached one shows fewer).
    pub fn available(&mut self, max: u32) -> u32 {
        let size = self.map.size();
        let cached = consumer_available(size, self.producer, self.next);
        if cached >= max {
            return max;
        }
        self.producer = self.map.load_producer();
        consumer_available(size, self.producer, self.next).min(max)
    }

    /// Whether the kernel has produced entries we have not read (one Acquire load).
    pub fn has_entries(&self) -> bool {
        self.map.load_producer() != self.next
    }

    /// The next entry's index; advances. The caller checked `available`.
    pub fn take(&mut self) -> u32 {
        let index = self.next;
        self.next = self.next.wrapping_add(1);
        index
    }

    /// Gives the entries read back to the kernel (one Release store).
    pub fn release(&mut self) {
        self.map.store_consumer(self.next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_wrap_around_u32() {
        assert_eq!(producer_free(8, 3, 0), 5);
        assert_eq!(producer_free(8, 2, u32::MAX - 1), 4); // 4 written across the wrap
        assert_eq!(producer_free(8, 8, 0), 0);
        assert_eq!(consumer_available(8, 2, u32::MAX - 1), 4);
        assert_eq!(consumer_available(8, 5, 5), 0);
    }

    #[test]
    fn a_kernel_index_out_of_range_is_not_trusted() {
        // Consumer ahead of producer: nothing free, nothing more than the ring.
        assert_eq!(producer_free(8, 0, 1), 0);
        assert_eq!(consumer_available(8, 100, 0), 8);
        assert_eq!(consumer_available(8, 0, 1), 8);
    }

    const LAYOUT: ChunkLayout = ChunkLayout {
        chunk_size: 2048,
        rx_chunks: 4,
        tx_chunks: 4,
    };

    #[test]
    fn rx_descriptors_are_checked() {
        let lent = [true, true, false, true];
        let at = |chunk: u64, offset: u64| chunk * 2048 + offset;
        assert_eq!(LAYOUT.check_rx((at(1, 256), 1514, 0), &lent), Ok(1));
        assert_eq!(LAYOUT.check_rx((at(3, 256), 1792, 0), &lent), Ok(3));
        assert_eq!(
            LAYOUT.check_rx((at(3, 257), 1792, 0), &lent),
            Err(BadDesc::Overruns)
        );
        assert_eq!(
            LAYOUT.check_rx((at(0, 0), 1793, 0), &lent),
            Err(BadDesc::Overruns)
        );
        assert_eq!(
            LAYOUT.check_rx((at(2, 256), 60, 0), &lent),
            Err(BadDesc::NotLent)
        );
        assert_eq!(
            LAYOUT.check_rx((at(4, 256), 60, 0), &lent),
            Err(BadDesc::NotReceiveChunk)
        );
        assert_eq!(
            LAYOUT.check_rx((u64::MAX, u32::MAX, 0), &lent),
            Err(BadDesc::NotReceiveChunk)
        );
        assert_eq!(
            LAYOUT.check_rx((at(0, 256), 60, 1), &lent),
            Err(BadDesc::Options)
        );
    }

    #[test]
    fn completions_are_checked() {
        let sent = [false, true, true, false];
        assert_eq!(LAYOUT.check_completion(5 * 2048, &sent), Some(1));
        assert_eq!(LAYOUT.check_completion(4 * 2048, &sent), None); // not sent
        assert_eq!(LAYOUT.check_completion(5 * 2048 + 1, &sent), None);
        assert_eq!(LAYOUT.check_completion(2048, &sent), None); // a receive chunk
        assert_eq!(LAYOUT.check_completion(8 * 2048, &sent), None);
    }
}
