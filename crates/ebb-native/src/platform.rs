//! [`NativePlatform`]: ebb-core's [`Platform`] for a ring-3 guest.
//!
//! * **Clock**: the TSC scaled by the boot-info frequency, anchored once to the monitor's
//!   monotonic clock (the CLOCK hypercall), so guest [`Instant`]s are nanoseconds since the
//!   monitor started the VM on every core. Reading it is an `rdtsc`, a multiply and a shift.
//! * **Idle**: with no devices yet there is nothing to poll; when the event loop asks to
//!   wait until a deadline, the vCPU makes the WAIT hypercall and sleeps in the monitor
//!   until the deadline or a kick. Waits shorter than [`WAIT_MIN`] are not worth the
//!   hypercall (it costs tens to a hundred microseconds here): the loop polls instead.
//!   Waking from a timed WAIT overshoots the deadline by the hypercall's return plus the
//!   host's timer slack (≈ 0.2–0.3 ms measured here); [`NativePlatform::with_wait_early`]
//!   trades that for spinning: the WAIT ends that much before the deadline and the loop
//!   polls the rest. Under a standard hypervisor (PVH boot, one vCPU) the same WAIT spins
//!   on the TSC until the deadline or until a polled device has work (`crate::pvh::wait`).
//! * **Wake**: the kick, an `out` to the kick port that the host kernel turns into an
//!   eventfd signal (ioeventfd). ebb-core calls it only for a core that announced it may
//!   sleep, so a running core is never kicked; a kick that lands before the target's wait
//!   makes that wait return at once (the eventfd counts).

use crate::abi::BootInfo;
use crate::{arch, hypercall};
use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use ebb_core::{CoreId, Instant, Platform};

/// Shortest wait worth a WAIT hypercall; shorter waits return at once and the loop polls.
pub const WAIT_MIN: Duration = Duration::from_micros(50);

/// The TSC as a clock: `ns = ns0 + ((tsc - tsc0) * mult) >> 32`.
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    tsc0: u64,
    ns0: u64,
    /// Nanoseconds per TSC tick, as a 32.32 fixed-point number.
    mult: u64,
    khz: u64,
}

impl TscClock {
    /// Anchors the TSC to the monitor's monotonic clock. `tsc_khz` 0 (the monitor could not
    /// tell) calibrates against that clock over 10 ms instead.
    pub fn new(tsc_khz: u64) -> TscClock {
        let (tsc0, ns0) = Self::anchor();
        let khz = if tsc_khz != 0 {
            tsc_khz
        } else {
            hypercall::wait(10_000_000);
            let (tsc1, ns1) = Self::anchor();
            ((tsc1 - tsc0) as u128 * 1_000_000 / u128::from((ns1 - ns0).max(1))).max(1) as u64
        };
        TscClock {
            tsc0,
            ns0,
            mult: ((1_000_000u128 << 32) / u128::from(khz)) as u64,
            khz,
        }
    }

    /// A `(tsc, monotonic ns)` pair taken at (nearly) the same moment: the TSC halfway
    /// through the CLOCK hypercall.
    fn anchor() -> (u64, u64) {
        let before = arch::rdtsc();
        let (_, mono) = hypercall::clock();
        let after = arch::rdtsc();
        (before + (after - before) / 2, mono)
    }

    /// Nanoseconds on the monitor's monotonic clock.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.ticks_to_ns(arch::rdtsc().saturating_sub(self.tsc0)) + self.ns0
    }

    /// Converts a TSC difference into nanoseconds.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.mult)) >> 32) as u64
    }

    /// TSC frequency in kHz (the boot info's, or the calibrated one).
    pub fn tsc_khz(&self) -> u64 {
        self.khz
    }
}

/// Per-core counters of the idle path (written only by their core, except `kicks_sent`).
#[derive(Debug, Default)]
#[repr(align(128))]
struct CoreCounters {
    /// True while the core is inside the WAIT hypercall (for tests and benchmarks).
    in_wait: AtomicBool,
    waits: AtomicU64,
    woken_by_kick: AtomicU64,
    timed_out: AtomicU64,
    kicks_received: AtomicU64,
}

/// A snapshot of one core's idle-path counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// WAIT hypercalls made.
    pub waits: u64,
    /// Of those, how many a kick ended.
    pub woken_by_kick: u64,
    /// Of those, how many ran to their deadline.
    pub timed_out: u64,
    /// Kicks other cores sent this core.
    pub kicks_received: u64,
}

/// ebb-core's platform for a ring-3 guest under ebb-vmm.
#[derive(Debug)]
pub struct NativePlatform {
    clock: TscClock,
    cores: Box<[CoreCounters]>,
    /// Timed WAITs end this many nanoseconds before their deadline.
    wait_early_ns: u64,
    /// Deadlines closer than this are polled for, not waited for.
    spin_below_ns: u64,
}

impl NativePlatform {
    /// The platform for the VM described by `info`. Makes one CLOCK hypercall.
    pub fn new(info: &BootInfo) -> NativePlatform {
        Self::with_wait_early(info, Duration::ZERO)
    }

    /// Like [`new`](Self::new), but timed WAITs end `early` before their deadline and the
    /// event loop polls for the rest, so timers fire closer to their deadlines at the cost
    /// of up to `early` of spinning per timed sleep.
    pub fn with_wait_early(info: &BootInfo, early: Duration) -> NativePlatform {
        let early_ns = u64::try_from(early.as_nanos()).unwrap_or(u64::MAX);
        NativePlatform {
            clock: TscClock::new(info.tsc_khz),
            cores: (0..info.cpu_count)
                .map(|_| CoreCounters::default())
                .collect(),
            wait_early_ns: early_ns,
            spin_below_ns: early_ns.max(WAIT_MIN.as_nanos() as u64),
        }
    }

    /// The TSC clock behind [`Platform::now`].
    pub fn clock(&self) -> &TscClock {
        &self.clock
    }

    /// Whether core `core` is (about to be) asleep in the WAIT hypercall right now.
    pub fn is_waiting(&self, core: CoreId) -> bool {
        self.cores
            .get(core.index())
            .is_some_and(|c| c.in_wait.load(Ordering::Acquire))
    }

    /// Core `core`'s idle-path counters.
    pub fn wait_stats(&self, core: CoreId) -> WaitStats {
        self.cores
            .get(core.index())
            .map_or_else(WaitStats::default, |c| WaitStats {
                waits: c.waits.load(Ordering::Relaxed),
                woken_by_kick: c.woken_by_kick.load(Ordering::Relaxed),
                timed_out: c.timed_out.load(Ordering::Relaxed),
                kicks_received: c.kicks_received.load(Ordering::Relaxed),
            })
    }
}

impl Platform for NativePlatform {
    #[inline]
    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.now_ns())
    }

    fn poll_events(&self, core: CoreId, deadline: Instant) -> usize {
        // Devices first (shared-memory rings, no exit); the kick needs no dispatching.
        let dispatched = crate::poll::poll();
        if dispatched > 0 {
            return dispatched;
        }
        let now = self.now();
        if deadline <= now {
            return 0;
        }
        let timeout_ns = if deadline == Instant::FAR_FUTURE {
            u64::MAX
        } else {
            let left = deadline.as_nanos() - now.as_nanos();
            if left <= self.spin_below_ns {
                return 0;
            }
            left - self.wait_early_ns
        };
        // About to sleep: devices ask the monitor to wake this vCPU, and look once more.
        let dispatched = crate::poll::arm_all();
        if dispatched > 0 {
            return dispatched;
        }
        let counters = self.cores.get(core.index());
        if let Some(c) = counters {
            c.in_wait.store(true, Ordering::Relaxed);
        }
        let kicked = hypercall::wait(timeout_ns);
        if let Some(c) = counters {
            c.waits.fetch_add(1, Ordering::Relaxed);
            let counter = if kicked {
                &c.woken_by_kick
            } else {
                &c.timed_out
            };
            counter.fetch_add(1, Ordering::Relaxed);
            c.in_wait.store(false, Ordering::Release);
        }
        if kicked {
            // A kick is a device's doorbell (or another core's wake): what woke the core
            // is dispatched now and counted, so the event loop sees a sleep that a device
            // ended — its evidence that polling a little longer would have caught it.
            // Reporting none kept a budget that had shrunk to nothing there for good: a
            // node whose front end once paused then slept before every message of a
            // shared-memory round trip, and each took a vCPU wake.
            return crate::poll::poll();
        }
        0
    }

    fn wake(&self, core: CoreId) {
        if let Some(c) = self.cores.get(core.index()) {
            c.kicks_received.fetch_add(1, Ordering::Relaxed);
            hypercall::kick(core.0);
        }
    }
}
