//! [`FaultInjector`]: a [`NetDevice`] wrapper that drops, duplicates, corrupts, delays
//! and reorders frames, deterministically from a seed — our `netem`.
//!
//! Each direction (receive, transmit) has its own [`FaultConfig`] and its own random
//! stream. A frame passing through is handled in this order:
//!
//! 1. **drop** — gone, counted as [`DropReason::Injected`](super::DropReason::Injected);
//! 2. **duplicate** — it goes on as two copies (sharing storage), each then handled on
//!    its own by the next steps;
//! 3. **corrupt** — one bit is flipped in one byte at or after
//!    [`corrupt_offset`](FaultConfig::corrupt_offset) (by default past the Ethernet
//!    header, which no checksum covers). The frame is copied first unless nobody else
//!    can see its storage, so the sender's retransmission copy is never damaged. A
//!    single flipped bit changes the internet checksum of the bytes it covers, so the
//!    stack always catches it (unless the checksum is disabled, as UDP's may be);
//! 4. **delay** — held until `now + d`, `d` uniform in `[delay_min, delay_max]`; frames
//!    due at the same instant keep their order;
//! 5. **reorder** — held back until the next frame passes (so the two swap), or until
//!    `now + reorder_timeout` if none does. One frame is held at a time.
//!
//! Held frames are released by the next `receive` or `transmit` at or after their time;
//! [`NetDevice::poll_at`] reports the earliest.
//!
//! **Determinism.** Each direction draws one 64-bit number from its stream per frame
//! and makes all of that frame's decisions from a generator seeded with it. So the same
//! seed and the same calls give the same faults, and the fate of frame *n* does not
//! depend on what was decided for earlier frames — raising the corruption rate does not
//! change which frames are dropped.

#[cfg(test)]
mod tests;

use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec::Vec;
use core::cmp::{Ordering, Reverse};
use core::time::Duration;

use ebb_core::{IOBuf, IOBufChain, Instant};

use super::rng::SplitMix64;
use super::{
    DeviceCapabilities, DeviceCounters, ETHERNET_HEADER_LEN, NetDevice, RxFrame, TxFrame, coalesce,
};

/// A probability, in parts per million.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Probability(u32);

impl Probability {
    const MILLION: u32 = 1_000_000;
    /// Never happens.
    pub const NEVER: Probability = Probability(0);
    /// Always happens.
    pub const ALWAYS: Probability = Probability(Self::MILLION);

    /// `ppm` in a million (at most a million).
    pub const fn from_ppm(ppm: u32) -> Self {
        Self(if ppm > Self::MILLION {
            Self::MILLION
        } else {
            ppm
        })
    }

    /// `percent` in a hundred (at most a hundred).
    pub const fn from_percent(percent: u32) -> Self {
        Self::from_ppm(percent.saturating_mul(Self::MILLION / 100))
    }

    /// The probability in parts per million.
    pub const fn ppm(self) -> u32 {
        self.0
    }

    /// Whether it can happen at all.
    pub const fn is_possible(self) -> bool {
        self.0 > 0
    }

    /// One trial.
    fn happens(self, rng: &mut SplitMix64) -> bool {
        rng.below(u64::from(Self::MILLION)) < u64::from(self.0)
    }
}

/// What faults to make in one direction. Start from [`FaultConfig::NONE`] and add.
///
/// ```
/// use core::time::Duration;
/// use ebb_net_driver::{FaultConfig, Probability};
/// let lossy = FaultConfig::NONE
///     .with_drop(Probability::from_percent(1))
///     .with_delay(Probability::ALWAYS, Duration::from_micros(50), Duration::from_micros(80));
/// # let _ = lossy;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct FaultConfig {
    /// Chance a frame is dropped.
    pub drop: Probability,
    /// Chance a frame is sent on twice.
    pub duplicate: Probability,
    /// Chance one bit of a frame is flipped.
    pub corrupt: Probability,
    /// Bytes at the front of a frame that corruption leaves alone; a frame no longer
    /// than this is never corrupted. Defaults to [`ETHERNET_HEADER_LEN`].
    pub corrupt_offset: usize,
    /// Chance a frame is held back for a random time in `[delay_min, delay_max]`.
    pub delay: Probability,
    /// Shortest delay.
    pub delay_min: Duration,
    /// Longest delay (taken as `delay_min` if shorter).
    pub delay_max: Duration,
    /// Chance a frame is held back and released after the next one.
    pub reorder: Probability,
    /// Longest a reordered frame waits for a next one.
    pub reorder_timeout: Duration,
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig = FaultConfig {
        drop: Probability::NEVER,
        duplicate: Probability::NEVER,
        corrupt: Probability::NEVER,
        corrupt_offset: ETHERNET_HEADER_LEN,
        delay: Probability::NEVER,
        delay_min: Duration::ZERO,
        delay_max: Duration::ZERO,
        reorder: Probability::NEVER,
        reorder_timeout: Duration::from_millis(1),
    };

    /// The same faults, and drops with probability `p`.
    pub const fn with_drop(self, p: Probability) -> Self {
        Self { drop: p, ..self }
    }

    /// The same faults, and duplicates with probability `p`.
    pub const fn with_duplicate(self, p: Probability) -> Self {
        Self {
            duplicate: p,
            ..self
        }
    }

    /// The same faults, and one-bit corruption with probability `p`.
    pub const fn with_corrupt(self, p: Probability) -> Self {
        Self { corrupt: p, ..self }
    }

    /// The same faults, with corruption leaving the first `offset` bytes alone.
    pub const fn with_corrupt_offset(self, offset: usize) -> Self {
        Self {
            corrupt_offset: offset,
            ..self
        }
    }

    /// The same faults, and delays in `[min, max]` with probability `p`.
    pub const fn with_delay(self, p: Probability, min: Duration, max: Duration) -> Self {
        Self {
            delay: p,
            delay_min: min,
            delay_max: max,
            ..self
        }
    }

    /// The same faults, and reordering with probability `p`, a held frame waiting at
    /// most `timeout` for the next one.
    pub const fn with_reorder(self, p: Probability, timeout: Duration) -> Self {
        Self {
            reorder: p,
            reorder_timeout: timeout,
            ..self
        }
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self::NONE
    }
}

/// What the injector did in one direction.
///
/// Frames passed on = `seen - dropped + duplicated -` frames still held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultCounts {
    /// Frames that came through.
    pub seen: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Frames sent on twice (each counts once here).
    pub duplicated: u64,
    /// Copies with a bit flipped.
    pub corrupted: u64,
    /// Copies delayed.
    pub delayed: u64,
    /// Copies held back to be released after the next frame.
    pub reordered: u64,
}

/// What the injector did, per direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultStats {
    /// On frames received from the inner device.
    pub rx: FaultCounts,
    /// On frames transmitted through the inner device.
    pub tx: FaultCounts,
}

/// Wraps a [`NetDevice`] and makes seeded, deterministic faults on its frames.
///
/// Received frames pass through the receive [`FaultConfig`] between the inner device and
/// the stack; transmitted frames through the transmit one between the stack and the inner
/// device. On transmit the injector passes the inner device's back-pressure on: frames
/// the inner device refuses wait in the injector, which takes no new frames until they
/// are gone.
///
/// Its [`counters`](NetDevice::counters) are the inner device's, with the injector's
/// drops added as `injected` and `rx_frames`/`rx_bytes` counting what it delivered. Its
/// [`capabilities`](NetDevice::capabilities) are the inner device's, except that a
/// direction with corruption claims no checksum offload, so the stack computes and
/// checks checksums and sees the damage.
pub struct FaultInjector<D> {
    inner: D,
    rx: FaultPipe<IOBuf>,
    tx: FaultPipe<TxFrame>,
    /// Frames delivered to the stack.
    rx_delivered: DeviceCounters,
    /// Receive batch from the inner device, kept to reuse its allocation.
    scratch: Vec<RxFrame>,
}

impl<D: NetDevice> FaultInjector<D> {
    /// Wraps `inner`, making no faults yet; `seed` fixes every later random choice.
    pub fn new(inner: D, seed: u64) -> Self {
        let mut streams = SplitMix64::new(seed);
        Self {
            inner,
            rx: FaultPipe::new(SplitMix64::new(streams.next_u64())),
            tx: FaultPipe::new(SplitMix64::new(streams.next_u64())),
            rx_delivered: DeviceCounters::default(),
            scratch: Vec::new(),
        }
    }

    /// The same injector making `config`'s faults on received frames.
    pub fn with_rx_faults(mut self, config: FaultConfig) -> Self {
        self.set_rx_faults(config);
        self
    }

    /// The same injector making `config`'s faults on transmitted frames.
    pub fn with_tx_faults(mut self, config: FaultConfig) -> Self {
        self.set_tx_faults(config);
        self
    }

    /// Changes the faults on received frames from now on (frames already held stay
    /// held).
    pub fn set_rx_faults(&mut self, config: FaultConfig) {
        self.rx.config = config;
    }

    /// Changes the faults on transmitted frames from now on.
    pub fn set_tx_faults(&mut self, config: FaultConfig) {
        self.tx.config = config;
    }

    /// The faults on received frames.
    pub fn rx_faults(&self) -> &FaultConfig {
        &self.rx.config
    }

    /// The faults on transmitted frames.
    pub fn tx_faults(&self) -> &FaultConfig {
        &self.tx.config
    }

    /// What the injector has done so far.
    pub fn stats(&self) -> FaultStats {
        FaultStats {
            rx: self.rx.counts,
            tx: self.tx.counts,
        }
    }

    /// Received frames the injector holds: delayed, reordered, or waiting for a
    /// `receive` with room for them.
    pub fn held_rx(&self) -> usize {
        self.rx.held()
    }

    /// Frames to transmit that the injector holds: delayed, reordered, or refused by the
    /// inner device so far.
    pub fn held_tx(&self) -> usize {
        self.tx.held()
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Unwraps the device; held frames are dropped without being counted.
    pub fn into_inner(self) -> D {
        self.inner
    }

    /// Offers held transmit frames that are ready to the inner device.
    fn flush_tx(&mut self, now: Instant) {
        if !self.tx.ready.is_empty() {
            self.inner.transmit(now, &mut self.tx.ready);
        }
    }
}

impl<D: NetDevice> NetDevice for FaultInjector<D> {
    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = self.inner.capabilities();
        // Frames are faulted one by one as they are on the wire: none longer than the MTU.
        caps.tso_max_len = 0;
        if self.rx.config.corrupt.is_possible() {
            caps.checksum = caps.checksum.without_rx();
        }
        if self.tx.config.corrupt.is_possible() {
            caps.checksum = caps.checksum.without_tx();
        }
        caps
    }

    fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.rx.release_due(now);
        // Read until `max` frames are ready or the inner device is empty: frames this
        // drops or delays must not leave others behind in the inner device with fewer
        // than `max` returned (see `NetDevice::receive`).
        let mut want = max.saturating_sub(self.rx.ready.len());
        while want > 0 {
            self.scratch.clear();
            let got = self.inner.receive(now, &mut self.scratch, want);
            for mut frame in self.scratch.drain(..) {
                // Frames leave with complete checksums that the stack verifies, so a
                // corruption stays detectable (see the crate docs).
                frame.complete();
                self.rx.push(now, frame.buf);
            }
            if got < want {
                break;
            }
            want = max.saturating_sub(self.rx.ready.len());
        }
        let n = self.rx.ready.len().min(max);
        for frame in self.rx.ready.drain(..n) {
            self.rx_delivered.record_rx(frame.len());
            out.push(RxFrame::new(frame));
        }
        n
    }

    fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.tx.release_due(now);
        self.flush_tx(now);
        if !self.tx.ready.is_empty() {
            // The inner device is still refusing: push back on the stack.
            return 0;
        }
        let burst = self.inner.capabilities().max_burst.max(1);
        let n = frames.len().min(burst);
        for mut frame in frames.drain(..n) {
            // Completed before any fault, so a corrupted frame's checksum is wrong.
            frame.complete();
            self.tx.push(now, frame);
        }
        self.flush_tx(now);
        n
    }

    fn poll_at(&self) -> Option<Instant> {
        [self.inner.poll_at(), self.rx.poll_at(), self.tx.poll_at()]
            .into_iter()
            .flatten()
            .min()
    }

    fn counters(&self) -> DeviceCounters {
        let mut c = self.inner.counters();
        c.rx_frames = self.rx_delivered.rx_frames;
        c.rx_bytes = self.rx_delivered.rx_bytes;
        c.rx_dropped.injected = c.rx_dropped.injected.saturating_add(self.rx.counts.dropped);
        c.tx_dropped.injected = c.tx_dropped.injected.saturating_add(self.tx.counts.dropped);
        c
    }
}

impl<D> core::fmt::Debug for FaultInjector<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("rx_faults", &self.rx.config)
            .field("tx_faults", &self.tx.config)
            .field("stats", &(self.rx.counts, self.tx.counts))
            .finish_non_exhaustive()
    }
}

/// A frame as the injector handles it, on either path.
trait Frame: Clone {
    /// Length in bytes.
    fn byte_len(&self) -> usize;
    /// Flips bit `bit` (0..8) of byte `index` (< `byte_len()`), copying the frame first
    /// if its storage is shared or static. Returns whether it did.
    fn flip_bit(&mut self, index: usize, bit: u32) -> bool;
}

impl Frame for IOBuf {
    fn byte_len(&self) -> usize {
        self.len()
    }

    fn flip_bit(&mut self, index: usize, bit: u32) -> bool {
        self.make_unique();
        match self.as_mut_slice().map(|b| b.get_mut(index)) {
            Ok(Some(byte)) => {
                *byte ^= 1 << (bit & 7);
                true
            }
            // Unreachable after `make_unique` with an index in range.
            _ => false,
        }
    }
}

impl Frame for TxFrame {
    fn byte_len(&self) -> usize {
        self.chain.len()
    }

    fn flip_bit(&mut self, index: usize, bit: u32) -> bool {
        let mut buf = coalesce(core::mem::take(&mut self.chain));
        let flipped = buf.flip_bit(index, bit);
        self.chain = IOBufChain::from(buf);
        flipped
    }
}

/// A frame held until `release`; ordered by `(release, seq)` so that frames due at the
/// same instant leave in the order they came.
struct Held<F> {
    release: Instant,
    seq: u64,
    frame: F,
}

impl<F> PartialEq for Held<F> {
    fn eq(&self, other: &Self) -> bool {
        (self.release, self.seq) == (other.release, other.seq)
    }
}

impl<F> Eq for Held<F> {}

impl<F> PartialOrd for Held<F> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<F> Ord for Held<F> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.release, self.seq).cmp(&(other.release, other.seq))
    }
}

/// The faults of one direction, and the frames it holds.
struct FaultPipe<F> {
    config: FaultConfig,
    /// One draw per frame; each frame's decisions come from a generator seeded with it.
    rng: SplitMix64,
    /// Arrival order of delayed copies, to break ties between equal release times.
    seq: u64,
    delayed: BinaryHeap<Reverse<Held<F>>>,
    /// The frame held back for reordering, and when it leaves if no frame follows.
    reordered: Option<(F, Instant)>,
    /// Frames through the faults, waiting to be passed on.
    ready: VecDeque<F>,
    counts: FaultCounts,
}

impl<F: Frame> FaultPipe<F> {
    fn new(rng: SplitMix64) -> Self {
        Self {
            config: FaultConfig::NONE,
            rng,
            seq: 0,
            delayed: BinaryHeap::new(),
            reordered: None,
            ready: VecDeque::new(),
            counts: FaultCounts::default(),
        }
    }

    fn held(&self) -> usize {
        self.delayed.len() + usize::from(self.reordered.is_some()) + self.ready.len()
    }

    /// Takes one frame through the faults, into `ready` or held.
    fn push(&mut self, now: Instant, frame: F) {
        self.counts.seen += 1;
        let mut fate = SplitMix64::new(self.rng.next_u64());
        let cfg = self.config;
        if cfg.drop.happens(&mut fate) {
            self.counts.dropped += 1;
            return;
        }
        if cfg.duplicate.happens(&mut fate) {
            self.counts.duplicated += 1;
            self.route(now, frame.clone(), &mut fate);
        }
        self.route(now, frame, &mut fate);
    }

    /// Corrupts, delays or holds back one copy, or makes it ready.
    fn route(&mut self, now: Instant, mut frame: F, fate: &mut SplitMix64) {
        let cfg = self.config;
        if cfg.corrupt.happens(fate) {
            let len = frame.byte_len();
            if len > cfg.corrupt_offset {
                let index =
                    cfg.corrupt_offset + fate.below((len - cfg.corrupt_offset) as u64) as usize;
                let bit = fate.below(8) as u32;
                if frame.flip_bit(index, bit) {
                    self.counts.corrupted += 1;
                }
            }
        }
        if cfg.delay.happens(fate) {
            let min = duration_nanos(cfg.delay_min);
            let spread = duration_nanos(cfg.delay_max).saturating_sub(min);
            let delay = min.saturating_add(fate.below(spread.saturating_add(1)));
            self.counts.delayed += 1;
            self.seq += 1;
            self.delayed.push(Reverse(Held {
                release: Instant::from_nanos(now.as_nanos().saturating_add(delay)),
                seq: self.seq,
                frame,
            }));
            return;
        }
        if cfg.reorder.happens(fate) && self.reordered.is_none() {
            self.counts.reordered += 1;
            self.reordered = Some((frame, now + cfg.reorder_timeout));
            return;
        }
        self.ready.push_back(frame);
        if let Some((held, _)) = self.reordered.take() {
            self.ready.push_back(held);
        }
    }

    /// Makes ready, in order of release, every held frame due at `now`.
    fn release_due(&mut self, now: Instant) {
        loop {
            let next_delayed = self.delayed.peek().map(|Reverse(h)| h.release);
            let reorder_deadline = self.reordered.as_ref().map(|&(_, at)| at);
            match (next_delayed, reorder_deadline) {
                (Some(d), r) if d <= now && r.is_none_or(|r| d <= r) => {
                    if let Some(Reverse(held)) = self.delayed.pop() {
                        self.ready.push_back(held.frame);
                    }
                }
                (_, Some(r)) if r <= now => {
                    if let Some((frame, _)) = self.reordered.take() {
                        self.ready.push_back(frame);
                    }
                }
                _ => break,
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        if !self.ready.is_empty() {
            return Some(Instant::ZERO);
        }
        let next_delayed = self.delayed.peek().map(|Reverse(h)| h.release);
        let reorder_deadline = self.reordered.as_ref().map(|&(_, at)| at);
        next_delayed.into_iter().chain(reorder_deadline).min()
    }
}

/// A duration in nanoseconds, saturating.
fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Parses a fault spec, `drop=P,reorder=P,duplicate=P,corrupt=P,delay=P,seed=N` (each
/// `P` a fraction from 0 to 1, every item optional), into a configuration and a seed
/// (default 1). The error names the item that is not understood.
pub fn parse_fault_spec(spec: &str) -> Result<(FaultConfig, u64), alloc::string::String> {
    let mut config = FaultConfig::NONE;
    let mut seed = 1;
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let bad = || alloc::string::String::from(item);
        let (kind, value) = item.split_once('=').ok_or_else(bad)?;
        if kind == "seed" {
            seed = value.parse().map_err(|_| bad())?;
            continue;
        }
        let fraction: f64 = value.parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(bad());
        }
        let p = Probability::from_ppm((fraction * 1e6 + 0.5) as u32);
        config = match kind {
            "drop" => config.with_drop(p),
            "duplicate" => config.with_duplicate(p),
            "corrupt" => config.with_corrupt(p),
            "reorder" => config.with_reorder(p, Duration::from_millis(1)),
            "delay" => config.with_delay(p, Duration::from_millis(1), Duration::from_millis(5)),
            _ => return Err(bad()),
        };
    }
    Ok((config, seed))
}
