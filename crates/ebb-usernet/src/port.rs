//! [`EndpointPort`]: the endpoint stack's device — two bounded frame queues, one from
//! the guest (filled by the demux), one toward it (emptied into the virtio device).
//!
//! Both queues are bounded. Toward the guest, a full queue refuses frames, and the
//! stack's TCP stops on its transmit back-pressure until the guest took some: nothing is
//! lost. From the guest, a full queue drops (and counts) what does not fit, as a NIC
//! drops when its host falls behind; the guest's TCP sends it again.

use std::collections::VecDeque;

use ebb_core::{IOBuf, Instant};
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
            let mut chain = frame.into_complete();
            let buf = if chain.segment_count() <= 1 {
                chain.pop_front().unwrap_or_default()
            } else {
                IOBuf::from_vec(chain.to_vec())
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
