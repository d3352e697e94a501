//! Placement that follows the traffic, for a node whose threads outnumber its CPUs.
//!
//! On two CPUs a native node on the user-mode network has three busy threads beside it:
//! the front end's core (pinned to one CPU), this device thread and the vCPU, which
//! polls. Under nested PVM a vCPU that is preempted pays for an exit, so the node's vCPU
//! keeps off the front end's CPU (`VmConfig::vcpu_avoid_cpu`) and the device thread
//! ends up beside the front end: a 64-byte message round trip then costs 20 µs, against
//! 52 µs with the vCPU beside the front end. A bulk stream wants the opposite: the
//! work is the front end's `send` and the device thread's two copies (the host socket's
//! `recv`, the scatter into guest memory), the guest's share is small, and with the
//! device thread beside the front end both copied on one CPU: 0.51–0.57× Linux loopback
//! TCP's rate for 1 MiB messages, against 0.91–0.97× with the device thread alone on
//! the other CPU and the vCPU beside the front end (`bench/scripts/dist-placement.sh`;
//! docs/benchmarks.md, "Distributed Ebbs", seventh run).
//!
//! So the device thread counts the bytes it moves between the guest and its backend
//! ([`BulkDetector`]): a window of [`WINDOW`] with at least [`BULK_ENTER`] bytes swaps
//! the two — the vCPUs onto the front end's CPU, the device thread onto the others —
//! and [`QUIET_WINDOWS`] windows in a row under [`BULK_LEAVE`] swap them back
//! ([`TrafficPlacement`]). Request/response traffic stays far below the threshold (a
//! 64-byte ping-pong moves about 1/100 of it, memcached with 1 KiB values at 100k
//! requests a second a quarter), so it never leaves the round-trip placement.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use ebb_core::Instant as NetInstant;
use rustix::thread::{CpuSet, Pid};

/// The measuring window.
pub(crate) const WINDOW: Duration = Duration::from_millis(10);
/// Bytes in a window that make traffic a bulk stream: 4 MiB in 10 ms, 400 MB/s.
pub(crate) const BULK_ENTER: u64 = 4 << 20;
/// Bytes in a window under which bulk traffic has stopped: 1 MiB in 10 ms.
pub(crate) const BULK_LEAVE: u64 = 1 << 20;
/// Quiet windows in a row that end a bulk stream (one is a pause between messages).
pub(crate) const QUIET_WINDOWS: u64 = 2;

/// Whether the bytes moved recently make a bulk stream, with hysteresis.
#[derive(Debug, Default)]
pub(crate) struct BulkDetector {
    /// Where the current window began (`None`: before the first observation).
    window_start: Option<NetInstant>,
    /// Bytes moved in it so far.
    bytes: u64,
    /// Quiet windows in a row while bulk.
    quiet: u64,
    bulk: bool,
}

impl BulkDetector {
    /// Counts `bytes` moved by `now`; returns the new mode (`true`: bulk) when it changes.
    /// A window ends at the first observation past its length; a gap without any (the
    /// thread slept) counts as as many windows, spread evenly, so a stream that stopped
    /// ends at the next observation.
    pub(crate) fn observe(&mut self, now: NetInstant, bytes: u64) -> Option<bool> {
        let start = *self.window_start.get_or_insert(now);
        self.bytes = self.bytes.saturating_add(bytes);
        let elapsed = now.as_nanos().saturating_sub(start.as_nanos());
        let window = WINDOW.as_nanos() as u64;
        if elapsed < window {
            return None;
        }
        let windows = elapsed / window;
        // The rate over the time that passed, scaled to a window (not the bytes over
        // whole windows: 4 MiB in 19 ms is not a bulk window).
        let per_window = (u128::from(self.bytes) * u128::from(window) / u128::from(elapsed)) as u64;
        self.window_start = Some(now);
        self.bytes = 0;
        if !self.bulk {
            if per_window >= BULK_ENTER {
                self.bulk = true;
                self.quiet = 0;
                return Some(true);
            }
        } else if per_window < BULK_LEAVE {
            self.quiet = self.quiet.saturating_add(windows);
            if self.quiet >= QUIET_WINDOWS {
                self.bulk = false;
                return Some(false);
            }
        } else {
            self.quiet = 0;
        }
        None
    }

    /// Whether traffic is a bulk stream now.
    #[cfg(test)]
    fn bulk(&self) -> bool {
        self.bulk
    }
}

/// A vCPU thread's id, published by the thread when it starts (0 until then).
pub type VcpuTid = Arc<AtomicI32>;

/// The device thread's side of [`TrafficPlacement`]: what to move where.
pub struct TrafficPlacement {
    /// The front end's CPU, which the vCPUs avoid outside bulk streams.
    front_cpu: usize,
    vcpus: Vec<VcpuTid>,
    detector: BulkDetector,
    /// The device thread's affinity before its first move, restored after a stream.
    own: Option<CpuSet>,
}

impl TrafficPlacement {
    /// Placement for a VM whose vCPUs (`vcpus`) avoid `front_cpu`.
    pub fn new(front_cpu: usize, vcpus: Vec<VcpuTid>) -> TrafficPlacement {
        TrafficPlacement {
            front_cpu,
            vcpus,
            detector: BulkDetector::default(),
            own: None,
        }
    }

    /// Counts `bytes` moved by `now` and moves the threads when the mode changes (from
    /// the device thread: it moves itself). `swaps` counts the changes made.
    pub(crate) fn observe(&mut self, now: NetInstant, bytes: u64, swaps: &AtomicU64) {
        if let Some(bulk) = self.detector.observe(now, bytes) {
            match self.apply(bulk) {
                Ok(()) => {
                    swaps.fetch_add(1, Ordering::Relaxed);
                    log::debug!(
                        "virtio-net: {} stream: the vCPUs {} CPU {}",
                        if bulk { "a bulk" } else { "no bulk" },
                        if bulk { "onto" } else { "off" },
                        self.front_cpu
                    );
                }
                Err(e) => log::debug!("virtio-net: cannot move the node's threads: {e}"),
            }
        }
    }

    /// Bulk: the vCPUs onto the front end's CPU, this thread onto the others. Not bulk:
    /// the vCPUs onto every CPU but the front end's (as they started), this thread back
    /// to its own affinity.
    fn apply(&mut self, bulk: bool) -> rustix::io::Result<()> {
        let own = match self.own {
            Some(own) => own,
            None => *self.own.insert(rustix::thread::sched_getaffinity(None)?),
        };
        let mut front = CpuSet::new();
        front.set(self.front_cpu);
        let mut others = own;
        others.unset(self.front_cpu);
        if others.count() == 0 {
            return Err(rustix::io::Errno::INVAL);
        }
        let mut off_front = CpuSet::new();
        for cpu in (0..CpuSet::MAX_CPU).filter(|&c| c != self.front_cpu) {
            off_front.set(cpu);
        }
        let (vcpus, this) = if bulk {
            (&front, &others)
        } else {
            (&off_front, &own)
        };
        // Every thread is moved even if one cannot be (a vCPU thread that has ended:
        // ESRCH), so that one failure does not leave the rest where they were.
        let mut result = Ok(());
        for tid in &self.vcpus {
            if let Some(pid) = Pid::from_raw(tid.load(Ordering::Acquire)) {
                match rustix::thread::sched_setaffinity(Some(pid), vcpus) {
                    Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                    Err(e) => result = Err(e),
                }
            }
        }
        rustix::thread::sched_setaffinity(None, this).and(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: u64) -> NetInstant {
        NetInstant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_busy_window_starts_a_stream_and_two_quiet_ones_end_it() {
        let mut d = BulkDetector::default();
        assert_eq!(d.observe(at_ms(0), 0), None);
        // Request/response traffic: well under the threshold, window after window.
        for ms in 1..=50 {
            assert_eq!(d.observe(at_ms(ms), 64 << 10), None, "at {ms} ms");
        }
        assert!(!d.bulk());
        // A stream: 1 MiB a millisecond.
        let mut started = None;
        for ms in 51..=70 {
            if let Some(mode) = d.observe(at_ms(ms), 1 << 20) {
                started = Some((ms, mode));
            }
        }
        assert_eq!(
            started,
            Some((60, true)),
            "bulk at the end of the first busy window"
        );
        // One quiet window (a pause between messages) does not end it...
        assert_eq!(d.observe(at_ms(80), 0), None);
        assert_eq!(d.observe(at_ms(81), 8 << 20), None);
        assert_eq!(
            d.observe(at_ms(91), 0),
            None,
            "a busy window resets the count"
        );
        assert!(d.bulk());
        // ...two in a row do.
        assert_eq!(d.observe(at_ms(101), 0), None);
        assert_eq!(d.observe(at_ms(111), 0), Some(false));
        assert!(!d.bulk());
    }

    #[test]
    fn a_long_silence_ends_a_stream_at_the_next_observation() {
        let mut d = BulkDetector::default();
        d.observe(at_ms(0), 0);
        assert_eq!(d.observe(at_ms(10), 5 << 20), Some(true));
        // The thread slept for a second: a hundred quiet windows at once.
        assert_eq!(d.observe(at_ms(1010), 0), Some(false));
    }

    #[test]
    fn bytes_over_a_long_window_count_per_window() {
        let mut d = BulkDetector::default();
        d.observe(at_ms(0), 0);
        // 5 MiB over 30 ms is 1.7 MiB a window: not a stream.
        assert_eq!(d.observe(at_ms(30), 5 << 20), None);
        // Nor is 4 MiB over 19 ms (2.1 MiB a window), though it is one whole window.
        assert_eq!(d.observe(at_ms(49), 4 << 20), None);
        assert!(!d.bulk());
        assert_eq!(d.observe(at_ms(59), 5 << 20), Some(true));
    }

    /// The moves themselves, on real threads: a stand-in vCPU thread goes onto the
    /// front end's CPU and this thread off it, then both back.
    #[test]
    fn a_stream_moves_the_vcpus_onto_the_front_ends_cpu_and_back() {
        let own = rustix::thread::sched_getaffinity(None).unwrap();
        let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| own.is_set(c)).collect();
        if cpus.len() < 2 {
            println!(
                "SKIPPED: needs two CPUs, this thread may use {}",
                cpus.len()
            );
            return;
        }
        let front = cpus[0];
        let tid: VcpuTid = Arc::new(AtomicI32::new(0));
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let vcpu = {
            let tid = tid.clone();
            std::thread::spawn(move || {
                tid.store(
                    rustix::thread::gettid().as_raw_nonzero().get(),
                    Ordering::Release,
                );
                let _ = stop_rx.recv();
            })
        };
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let vcpu_pid = Pid::from_raw(tid.load(Ordering::Acquire)).unwrap();
        let swaps = AtomicU64::new(0);
        // On its own thread, as the device thread does it.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut p = TrafficPlacement::new(front, vec![tid.clone()]);
                p.observe(at_ms(0), 0, &swaps);
                p.observe(at_ms(10), BULK_ENTER, &swaps);
                assert_eq!(swaps.load(Ordering::Relaxed), 1);
                let v = rustix::thread::sched_getaffinity(Some(vcpu_pid)).unwrap();
                assert!(
                    v.is_set(front) && v.count() == 1,
                    "the vCPU on CPU {front} only"
                );
                let me = rustix::thread::sched_getaffinity(None).unwrap();
                assert!(
                    !me.is_set(front) && me.count() >= 1,
                    "this thread off CPU {front}"
                );
                p.observe(at_ms(40), 0, &swaps);
                assert_eq!(swaps.load(Ordering::Relaxed), 2);
                let v = rustix::thread::sched_getaffinity(Some(vcpu_pid)).unwrap();
                assert!(
                    !v.is_set(front) && v.count() >= 1,
                    "the vCPU off CPU {front}"
                );
                let me = rustix::thread::sched_getaffinity(None).unwrap();
                assert_eq!(me, own, "this thread back where it was");
            });
        });
        drop(stop_tx);
        vcpu.join().unwrap();
    }
}
