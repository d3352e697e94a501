//! [`EndpointPort`]: the endpoint stack's device — two bounded frame queues, one from
//! the guest (filled by the demux), one toward it (emptied into the virtio device).
//!
//! Both queues are bounded. Toward the guest, a full queue refuses frames, and the
//! stack's TCP stops on its transmit back-pressure until the guest took some: nothing is
//! lost. From the guest, a full queue drops (and counts) what does not fit, as a NIC
//! drops when its host falls behind; the guest's TCP sends it again.
//!
//! The port offers the endpoint's stack what the virtio device offers the guest: partial
//! TCP and UDP checksums on transmit, and TCP frames up to a whole IPv4 packet (TSO),
//! both handed to the guest as they are — two stacks in one address space have no wire
//! to protect with a checksum, and no reason to cut a stream into MTU-sized pieces only
//! to reassemble it. A frame's checksum state travels with it both ways; one marked
//! `Partial` or `Verified` by the guest is trusted, as Linux trusts a local sender's.
//! `UserNet` completes and cuts frames in software for a guest that did not take the
//! offloads (see the crate docs, "Offloads").

use std::collections::VecDeque;

use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net_driver::{
    ChecksumOffload, DeviceCapabilities, DeviceCounters, DropReason, NetDevice, RxFrame, TxFrame,
};

/// Frames from the guest the endpoint has not processed yet, at most.
pub(crate) const FROM_GUEST_LIMIT: usize = 1024;
/// Bytes of those frames, at most (with TSO a frame may be 64 KiB).
const FROM_GUEST_BYTES: usize = 4 << 20;
/// Frames for the guest not yet taken by the virtio device, at most.
const TO_GUEST_LIMIT: usize = 512;
/// Bytes of those frames, at most: sixteen whole TSO frames, about what 512 MTU-sized
/// ones hold.
const TO_GUEST_BYTES: usize = 1 << 20;
/// Frames per `receive`/`transmit` call.
const BURST: usize = 64;
/// The largest IPv4 packet the endpoint sends in one frame (its 16-bit total length).
pub(crate) const TSO_MAX_LEN: usize = 65_535;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct EndpointPort {
    pub(crate) from_guest: VecDeque<RxFrame>,
    to_guest: VecDeque<TxFrame>,
    /// Bytes in `to_guest`.
    to_guest_bytes: usize,
    /// Bytes in `from_guest`.
    from_guest_bytes: usize,
    counters: DeviceCounters,
}

impl EndpointPort {
    /// Whether the queue toward the guest takes no more frames (its TCP waits).
    pub(crate) fn to_guest_full(&self) -> bool {
        self.to_guest.len() >= TO_GUEST_LIMIT || self.to_guest_bytes >= TO_GUEST_BYTES
    }

    /// Frames queued for the guest.
    pub(crate) fn to_guest_len(&self) -> usize {
        self.to_guest.len()
    }

    /// The next frame for the guest.
    pub(crate) fn pop_to_guest(&mut self) -> Option<TxFrame> {
        let frame = self.to_guest.pop_front()?;
        self.to_guest_bytes -= frame.chain.len();
        Some(frame)
    }

    /// Counts a frame from the guest dropped for want of memory to copy it (as a full
    /// queue's: a NIC with no buffer for it).
    pub(crate) fn drop_from_guest(&mut self) {
        self.counters.rx_dropped.record(DropReason::QueueFull);
    }

    /// Queues a frame the guest sent to the endpoint; `false`: the queue was full and the
    /// frame is dropped (counted).
    pub(crate) fn push_from_guest(&mut self, frame: RxFrame) -> bool {
        if self.from_guest.len() >= FROM_GUEST_LIMIT
            || self.from_guest_bytes + frame.buf.len() > FROM_GUEST_BYTES
        {
            self.counters.rx_dropped.record(DropReason::QueueFull);
            return false;
        }
        self.from_guest_bytes += frame.buf.len();
        self.from_guest.push_back(frame);
        true
    }
}

impl NetDevice for EndpointPort {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::ETHERNET;
        caps.max_burst = BURST;
        // See the module docs: partial transport checksums, whole IPv4 packets; a
        // frame's own state says what to verify on receive.
        let partial = ChecksumOffload {
            tx_partial: true,
            ..ChecksumOffload::NONE
        };
        caps.checksum.tcp = partial;
        caps.checksum.udp = partial;
        caps.tso_max_len = TSO_MAX_LEN;
        caps
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let n = max.min(self.from_guest.len());
        for frame in self.from_guest.drain(..n) {
            self.counters.record_rx(frame.buf.len());
            self.from_guest_bytes -= frame.buf.len();
            out.push(frame);
        }
        n
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mut taken = 0;
        while !self.to_guest_full() {
            let Some(frame) = frames.pop_front() else {
                break;
            };
            // As the stack built it (headers, payload pieces) and with its checksum
            // state: the virtio device copies the pieces into the guest's buffers.
            self.counters.record_tx(frame.chain.len());
            self.to_guest_bytes += frame.chain.len();
            self.to_guest.push_back(frame);
            taken += 1;
        }
        taken
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

/// A frame's bytes as one buffer (what the virtio device scatters from, and what the
/// endpoint's stack parses): its one segment, or the segments copied into a buffer
/// reserved fallibly; `Err` gives the chain back when there is no memory for the copy.
pub(crate) fn contiguous(mut chain: IOBufChain) -> Result<IOBuf, IOBufChain> {
    if chain.segment_count() <= 1 {
        return Ok(chain.pop_front().unwrap_or_default());
    }
    match chain.try_to_vec() {
        Some(bytes) => Ok(IOBuf::from_vec(bytes)),
        None => Err(chain),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_becomes_one_buffer_of_its_bytes() {
        let mut chain = IOBufChain::from(IOBuf::copy_from_slice(b"head"));
        chain.push_back(IOBuf::copy_from_slice(b"er and payload"));
        let one = contiguous(chain).expect("memory for 18 bytes");
        assert_eq!(one.as_slice(), b"header and payload");
        let single = IOBuf::copy_from_slice(b"whole");
        let same = contiguous(IOBufChain::from(single.clone())).expect("no copy");
        assert!(
            same.shares_storage_with(&single),
            "one segment is passed on, not copied"
        );
    }
}
