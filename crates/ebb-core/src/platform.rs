//! The platform seam: the few things an event loop needs from the machine under it.
//!
//! A runtime implements [`Platform`] once per node: the hosted runtime with epoll and
//! eventfds, the native runtime with hypercalls and shared-memory kicks, and the test
//! platform in [`crate::testing`] with a manual clock that records every wait and wake.

use crate::CoreId;
use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time on the node's monotonic clock, in nanoseconds since an arbitrary epoch.
///
/// Only the platform creates `Instant`s from the real clock; everything else receives them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch of the clock.
    pub const ZERO: Instant = Instant(0);
    /// A time later than any deadline (used for "never").
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// The instant `nanos` nanoseconds after the clock's epoch.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// Nanoseconds since the clock's epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at [`Instant::FAR_FUTURE`] rather than overflowing.
    fn add(self, d: Duration) -> Instant {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(nanos))
    }
}

impl Sub for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Instant::FAR_FUTURE {
            f.write_str("Instant(never)")
        } else {
            write!(
                f,
                "Instant({}.{:09}s)",
                self.0 / 1_000_000_000,
                self.0 % 1_000_000_000
            )
        }
    }
}

/// What an event loop needs from the machine. One value serves every core of a node, so
/// methods that act on "this core" are called only from that core's own thread of control.
pub trait Platform: Send + Sync + 'static {
    /// The node's monotonic clock.
    fn now(&self) -> Instant;

    /// Dispatches this core's pending device and readiness events, waiting for at most
    /// until `deadline` if there are none. `deadline <= now()` means "do not wait".
    ///
    /// Returns early, without a device event, when another core calls [`wake`](Self::wake)
    /// on this core. Returns the number of device events dispatched.
    fn poll_events(&self, core: CoreId, deadline: Instant) -> usize;

    /// [`poll_events`](Self::poll_events) for a caller that has just read the clock:
    /// `now` is that reading. A platform that must turn `deadline` into a relative
    /// timeout may use it instead of reading the clock again; the wait then ends late by
    /// however long ago `now` was read (the event loop passes a reading taken a few
    /// hundred instructions before, far below a kernel's timer slack). The default
    /// ignores `now`.
    fn poll_events_from(&self, core: CoreId, deadline: Instant, now: Instant) -> usize {
        let _ = now;
        self.poll_events(core, deadline)
    }

    /// Makes `core` return from [`poll_events`](Self::poll_events) if it is waiting there,
    /// or from its next wait if it is about to. Called only when the target has announced
    /// that it may sleep, so a busy core is never interrupted.
    fn wake(&self, core: CoreId);
}
