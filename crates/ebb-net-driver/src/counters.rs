//! [`DeviceCounters`]: what a device has done, for the application to read.

/// Why a device dropped a frame it had taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The receive ring (or queue) was full, as a NIC drops when the host falls behind.
    QueueFull,
    /// The frame was longer than the device's
    /// [`max_frame_len`](super::DeviceCapabilities::max_frame_len).
    Oversized,
    /// A [`FaultInjector`](super::FaultInjector) was told to drop it.
    Injected,
}

/// Frames dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DropCounters {
    /// See [`DropReason::QueueFull`].
    pub queue_full: u64,
    /// See [`DropReason::Oversized`].
    pub oversized: u64,
    /// See [`DropReason::Injected`].
    pub injected: u64,
}

impl DropCounters {
    /// Drops for every reason.
    pub const fn total(&self) -> u64 {
        self.queue_full
            .saturating_add(self.oversized)
            .saturating_add(self.injected)
    }

    /// Drops for `reason`.
    pub const fn get(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::QueueFull => self.queue_full,
            DropReason::Oversized => self.oversized,
            DropReason::Injected => self.injected,
        }
    }

    /// Counts one drop for `reason`.
    pub fn record(&mut self, reason: DropReason) {
        let c = match reason {
            DropReason::QueueFull => &mut self.queue_full,
            DropReason::Oversized => &mut self.oversized,
            DropReason::Injected => &mut self.injected,
        };
        *c = c.saturating_add(1);
    }
}

/// What a device has done since it was created. Counters only grow (and saturate).
///
/// `rx_frames` counts frames handed to the caller of `receive`; `tx_frames` counts frames
/// that left the device (onto the wire, into the link). A dropped frame counts in
/// `rx_dropped` or `tx_dropped` and in neither of those.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceCounters {
    /// Frames delivered to the stack.
    pub rx_frames: u64,
    /// Bytes of the frames delivered to the stack.
    pub rx_bytes: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes of the frames sent.
    pub tx_bytes: u64,
    /// Frames that arrived and were dropped before reaching the stack.
    pub rx_dropped: DropCounters,
    /// Frames the stack handed over that were dropped before being sent.
    pub tx_dropped: DropCounters,
}

impl DeviceCounters {
    /// Counts a frame of `len` bytes delivered to the stack.
    pub fn record_rx(&mut self, len: usize) {
        self.rx_frames = self.rx_frames.saturating_add(1);
        self.rx_bytes = self.rx_bytes.saturating_add(len as u64);
    }

    /// Counts a frame of `len` bytes sent.
    pub fn record_tx(&mut self, len: usize) {
        self.tx_frames = self.tx_frames.saturating_add(1);
        self.tx_bytes = self.tx_bytes.saturating_add(len as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_by_reason() {
        let mut d = DropCounters::default();
        d.record(DropReason::QueueFull);
        d.record(DropReason::QueueFull);
        d.record(DropReason::Injected);
        assert_eq!(d.get(DropReason::QueueFull), 2);
        assert_eq!(d.get(DropReason::Oversized), 0);
        assert_eq!(d.get(DropReason::Injected), 1);
        assert_eq!(d.total(), 3);
    }

    #[test]
    fn frames_and_bytes_add_up() {
        let mut c = DeviceCounters::default();
        c.record_rx(60);
        c.record_rx(1514);
        c.record_tx(100);
        assert_eq!((c.rx_frames, c.rx_bytes), (2, 1574));
        assert_eq!((c.tx_frames, c.tx_bytes), (1, 100));
    }
}
