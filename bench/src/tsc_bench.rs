//! TSC-timed micro-benchmark kernels shared, source for source, by the native bench guests
//! (`tests/guests/src/bin/bench_*.rs`) and their Linux peers (`bench/src/bin/getpid-cycles.rs`,
//! `tsc-noise.rs`, `wake-latency.rs`), so both sides of each comparison run the same loop
//! and print the same line. Each includes this file with `#[path = ...] mod tsc_bench;`.
//!
//! Invariants: no `std`, no `alloc` (the guest has no `std`; callers own every buffer), no
//! clock but the `read_tsc` function the caller passes, so the only difference between the
//! two sides is what is being measured. Output lines are `key=value` words, parsed by
//! `bench/scripts/native-micro.sh`.

#![allow(dead_code)] // each includer uses its own subset

use core::fmt;

/// Forces the compiler to assume all memory changed: a `pure, readonly` read (ebb-core's
/// GS-relative loads) before it cannot be reused after it, so a timed loop really makes
/// every call. Emits no instruction.
#[inline(always)]
pub fn clobber_memory() {
    // SAFETY: an empty asm block; it executes nothing, it only acts as a compiler barrier.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
}

/// Times `per_batch` calls of `call` once per element of `batches`, storing each batch's
/// TSC cycles there (so the caller chooses how many batches and owns the buffer).
#[inline(always)]
pub fn time_batches(
    read_tsc: &impl Fn() -> u64,
    per_batch: u32,
    batches: &mut [u64],
    mut call: impl FnMut(),
) {
    for slot in batches.iter_mut() {
        let start = read_tsc();
        for _ in 0..per_batch {
            call();
            clobber_memory();
        }
        *slot = read_tsc().wrapping_sub(start);
    }
}

/// Per-call cost from batch totals: min and median over the batches, divided by the batch
/// size (so the loop's own cost, a few cycles, is included; the `empty` row shows it).
#[derive(Clone, Copy, Debug)]
pub struct PerCall {
    /// Cycles per call in the fastest batch.
    pub min: f64,
    /// Cycles per call in the median batch.
    pub median: f64,
}

impl PerCall {
    /// Sorts `batches` and divides by `per_batch`. `None` for no batches.
    pub fn from_batches(batches: &mut [u64], per_batch: u32) -> Option<PerCall> {
        let (min, median, _, _) = order_stats(batches)?;
        let n = f64::from(per_batch.max(1));
        Some(PerCall {
            min: min as f64 / n,
            median: median as f64 / n,
        })
    }
}

/// `(min, median, p99, max)` of `values`, sorting them in place. `None` when empty.
pub fn order_stats(values: &mut [u64]) -> Option<(u64, u64, u64, u64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let n = values.len();
    Some((
        values[0],
        values[n / 2],
        values[(n * 99 / 100).min(n - 1)],
        values[n - 1],
    ))
}

/// Converts TSC cycles to nanoseconds at `tsc_khz`.
pub fn cycles_to_ns(cycles: u64, tsc_khz: u64) -> u64 {
    (u128::from(cycles) * 1_000_000 / u128::from(tsc_khz.max(1))) as u64
}

/// Converts nanoseconds to TSC cycles at `tsc_khz`.
pub fn ns_to_cycles(ns: u64, tsc_khz: u64) -> u64 {
    (u128::from(ns) * u128::from(tsc_khz) / 1_000_000) as u64
}

/// Sub-buckets per power of two in [`GapHistogram`]: values are kept to within 1/32
/// (3 %) of their true size, exact below 64 cycles.
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Gap thresholds counted exactly by [`GapHistogram`]: 1 µs, 10 µs, 100 µs.
pub const THRESHOLDS_NS: [u64; 3] = [1_000, 10_000, 100_000];

/// A histogram of TSC gaps: log-linear buckets (32 per power of two, so percentiles are
/// within 3 % and log2 buckets are sums of them), the exact maximum, and exact counts of
/// gaps above [`THRESHOLDS_NS`].
pub struct GapHistogram {
    counts: [u64; BUCKETS],
    max: u64,
    total: u64,
    /// Thresholds in cycles (from [`THRESHOLDS_NS`] at the TSC frequency).
    thresholds: [u64; 3],
    over: [u64; 3],
}

impl GapHistogram {
    /// An empty histogram whose exact threshold counts use the TSC frequency `tsc_khz`.
    pub const fn new(tsc_khz: u64) -> GapHistogram {
        GapHistogram {
            counts: [0; BUCKETS],
            max: 0,
            total: 0,
            thresholds: [
                (THRESHOLDS_NS[0] as u128 * tsc_khz as u128 / 1_000_000) as u64,
                (THRESHOLDS_NS[1] as u128 * tsc_khz as u128 / 1_000_000) as u64,
                (THRESHOLDS_NS[2] as u128 * tsc_khz as u128 / 1_000_000) as u64,
            ],
            over: [0; 3],
        }
    }

    #[inline(always)]
    fn bucket(value: u64) -> usize {
        if value < (2 * SUB) as u64 {
            return value as usize;
        }
        // Highest set bit h >= SUB_BITS + 1; keep the SUB_BITS bits below it.
        let h = 63 - value.leading_zeros();
        let shift = h - SUB_BITS;
        let sub = ((value >> shift) as usize) & (SUB - 1);
        (shift as usize + 1) * SUB + sub
    }

    /// The smallest value that falls in bucket `index`.
    fn bucket_low(index: usize) -> u64 {
        if index < 2 * SUB {
            return index as u64;
        }
        let shift = (index / SUB - 1) as u32;
        let sub = (index % SUB) as u64;
        (SUB as u64 + sub) << shift
    }

    /// Records one gap.
    #[inline(always)]
    pub fn record(&mut self, gap: u64) {
        self.counts[Self::bucket(gap)] += 1;
        self.total += 1;
        if gap > self.max {
            self.max = gap;
        }
        // Rare: one predictable branch in the common case.
        if gap > self.thresholds[0] {
            for (over, &limit) in self.over.iter_mut().zip(&self.thresholds) {
                if gap > limit {
                    *over += 1;
                }
            }
        }
    }

    /// Gaps recorded.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The largest gap (exact).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Gaps longer than 1 µs, 10 µs and 100 µs (exact).
    pub fn over_thresholds(&self) -> [u64; 3] {
        self.over
    }

    /// The gap at quantile `q` (0..=1): the lower edge of the bucket holding it, which is
    /// within 3 % of the true value (exact below 64 cycles), capped by the exact maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((self.total as f64 * q) as u64).min(self.total - 1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return Self::bucket_low(i).min(self.max);
            }
        }
        self.max
    }

    /// Gaps per power-of-two range: element `k` counts gaps in `[2^k, 2^(k+1))` (element 0
    /// also counts gaps of 0).
    pub fn log2_counts(&self) -> [u64; 64] {
        let mut out = [0u64; 64];
        for (i, &c) in self.counts.iter().enumerate() {
            if c != 0 {
                let low = Self::bucket_low(i);
                let k = if low == 0 {
                    0
                } else {
                    63 - low.leading_zeros()
                };
                out[k as usize] += c;
            }
        }
        out
    }
}

/// Reads the TSC back to back until `cycles` have passed, recording every gap between
/// consecutive reads in `hist`. Returns the number of reads.
#[inline(never)]
pub fn noise_loop(read_tsc: &impl Fn() -> u64, cycles: u64, hist: &mut GapHistogram) -> u64 {
    let start = read_tsc();
    let end = start.saturating_add(cycles);
    let mut last = start;
    let mut reads = 1u64;
    loop {
        let now = read_tsc();
        reads += 1;
        hist.record(now.wrapping_sub(last));
        if now >= end {
            return reads;
        }
        last = now;
    }
}

/// The one-line noise report both sides print:
/// `noise: side=S seconds=T tsc_khz=K gaps=N max=.. p9999=.. p999=.. median=.. (cycles)
/// max_ns=.. p9999_ns=.. over_1us=.. over_10us=.. over_100us=..`, then a `noise-log2:` line.
pub struct NoiseReport<'a> {
    /// `native` or `linux`.
    pub side: &'a str,
    /// The measured duration.
    pub seconds: u64,
    /// TSC frequency used for the conversions.
    pub tsc_khz: u64,
    /// The histogram.
    pub hist: &'a GapHistogram,
}

impl fmt::Display for NoiseReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.hist;
        let (p9999, p999) = (h.quantile(0.9999), h.quantile(0.999));
        let over = h.over_thresholds();
        writeln!(
            f,
            "noise: side={} seconds={} tsc_khz={} gaps={} median={} p999={} p9999={} max={} \
             p999_ns={} p9999_ns={} max_ns={} over_1us={} over_10us={} over_100us={}",
            self.side,
            self.seconds,
            self.tsc_khz,
            h.total(),
            h.quantile(0.5),
            p999,
            p9999,
            h.max(),
            cycles_to_ns(p999, self.tsc_khz),
            cycles_to_ns(p9999, self.tsc_khz),
            cycles_to_ns(h.max(), self.tsc_khz),
            over[0],
            over[1],
            over[2],
        )?;
        write!(f, "noise-log2: side={}", self.side)?;
        for (k, c) in h.log2_counts().iter().enumerate() {
            if *c != 0 {
                write!(f, " 2^{k}={c}")?;
            }
        }
        Ok(())
    }
}

/// Order statistics of a latency sample in nanoseconds, printed as
/// `wake: side=S what=W rounds=N min_us=.. median_us=.. p99_us=.. max_us=..`.
pub struct LatencyLine<'a> {
    side: &'a str,
    what: &'a str,
    rounds: usize,
    /// min, median, p99, max in ns.
    stats: (u64, u64, u64, u64),
}

impl<'a> LatencyLine<'a> {
    /// Sorts `values_ns`; `None` when it is empty.
    pub fn new(side: &'a str, what: &'a str, values_ns: &mut [u64]) -> Option<LatencyLine<'a>> {
        Some(LatencyLine {
            side,
            what,
            rounds: values_ns.len(),
            stats: order_stats(values_ns)?,
        })
    }
}

impl fmt::Display for LatencyLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |ns: u64| ns as f64 / 1000.0;
        let (min, median, p99, max) = self.stats;
        write!(
            f,
            "wake: side={} what={} rounds={} min_us={:.2} median_us={:.2} p99_us={:.2} max_us={:.2}",
            self.side,
            self.what,
            self.rounds,
            us(min),
            us(median),
            us(p99),
            us(max)
        )
    }
}

/// Reads the TSC (the host side; the guest passes `ebb_native::arch::rdtsc`).
#[cfg(not(target_os = "none"))]
#[inline(always)]
pub fn host_rdtsc() -> u64 {
    // SAFETY: rdtsc is unprivileged on Linux (CR4.TSD clear) and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The TSC frequency in kHz on the host, measured against `CLOCK_MONOTONIC` over
/// `window` (the guest reads it from its boot info instead).
#[cfg(not(target_os = "none"))]
pub fn host_tsc_khz(window: std::time::Duration) -> u64 {
    let (t0, c0) = (std::time::Instant::now(), host_rdtsc());
    while t0.elapsed() < window {
        core::hint::spin_loop();
    }
    let (ns, cycles) = (t0.elapsed().as_nanos(), host_rdtsc().wrapping_sub(c0));
    (u128::from(cycles) * 1_000_000 / ns.max(1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX]) {
            let b = GapHistogram::bucket(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            last = b;
            let low = GapHistogram::bucket_low(b);
            assert!(
                low <= v && v - low <= v / SUB as u64,
                "{v} in bucket from {low}"
            );
        }
    }

    #[test]
    fn quantiles_thresholds_and_log2() {
        let mut h = GapHistogram::new(1_000_000); // 1 GHz: 1 cycle = 1 ns
        for _ in 0..9_999 {
            h.record(20);
        }
        h.record(150_000);
        assert_eq!(h.total(), 10_000);
        assert_eq!(h.quantile(0.5), 20);
        assert_eq!(h.quantile(0.999), 20);
        assert_eq!(h.max(), 150_000);
        assert!(h.quantile(1.0) <= 150_000 && h.quantile(1.0) > 140_000);
        assert_eq!(h.over_thresholds(), [1, 1, 1]);
        let log2 = h.log2_counts();
        assert_eq!(log2[4], 9_999);
        assert_eq!(log2[17], 1);
    }

    #[test]
    fn order_stats_and_per_call() {
        let mut v = [5u64, 1, 3, 2, 4];
        assert_eq!(order_stats(&mut v), Some((1, 3, 5, 5)));
        let mut batches = [300u64, 100, 200];
        let pc = PerCall::from_batches(&mut batches, 100).expect("three batches");
        assert_eq!((pc.min, pc.median), (1.0, 2.0));
        assert!(order_stats(&mut []).is_none());
    }
}
