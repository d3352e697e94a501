//! [`EndpointPort`]: the endpoint stack's device — two bounded frame queues, one from
//! the guest (filled by the demux), one toward it (emptied into the virtio device).
//!
//! Both queues are bounded. Toward the guest, a full queue refuses frames, and the
//! stack's TCP stops on its transmit back-pressure until the guest took some: nothing is
//! lost. From the guest, a full queue drops (and counts) what does not fit, as a NIC
//! drops when its host falls behind; the guest's TCP sends it again.

use std::collections::VecDeque;

use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net_driver::{DeviceCapabilities, DeviceCounters, DropReason, NetDevice, RxFrame, TxFrame};

/// Frames from the guest the endpoint has not processed yet, at most.
pub(crate) const FROM_GUEST_LIMIT: usize = 1024;
/// Frames for the guest not yet taken by the virtio device, at most.
pub(crate) const TO_GUEST_LIMIT: usize = 512;
/// Frames per `receive`/`transmit` call.
const BURST: usize = 64;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct EndpointPort {
    pub(crate) from_guest: VecDeque<RxFrame>,
    pub(crate) to_guest: VecDeque<IOBuf>,
    counters: DeviceCounters,
}

impl EndpointPort {
    /// Counts a frame from the guest dropped for want of memory to copy it (as a full
    /// queue's: a NIC with no buffer for it).
    pub(crate) fn drop_from_guest(&mut self) {
        self.counters.rx_dropped.record(DropReason::QueueFull);
    }

    /// Queues a frame the guest sent to the endpoint; `false`: the queue was full and the
    /// frame is dropped (counted).
    pub(crate) fn push_from_guest(&mut self, frame: IOBuf) -> bool {
        if self.from_guest.len() >= FROM_GUEST_LIMIT {
            self.counters.rx_dropped.record(DropReason::QueueFull);
            return false;
        }
        self.from_guest.push_back(RxFrame::new(frame));
        true
    }
}

impl NetDevice for EndpointPort {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::ETHERNET;
        caps.max_burst = BURST;
        caps
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let n = max.min(self.from_guest.len());
        for frame in self.from_guest.drain(..n) {
            self.counters.record_rx(frame.buf.len());
            out.push(frame);
        }
        n
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let mut taken = 0;
        while self.to_guest.len() < TO_GUEST_LIMIT {
            let Some(frame) = frames.pop_front() else {
                break;
            };
            // No offload is offered: checksums are complete already; one contiguous
            // buffer for the virtio device's scatter.
            let buf = match contiguous(frame.into_complete()) {
                Ok(buf) => buf,
                Err(chain) => {
                    // No memory for the copy now: the frame waits in the stack's queue
                    // (back-pressure, as a full queue toward the guest), nothing lost.
                    frames.push_front(TxFrame::new(chain));
                    break;
                }
            };
            self.counters.record_tx(buf.len());
            self.to_guest.push_back(buf);
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
