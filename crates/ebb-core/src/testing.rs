//! A test platform: a manual clock, recorded waits and wakes, injectable device events.
//!
//! With it, event-loop behaviour is asserted exactly: which core waited until when, who was
//! woken, in what order events ran. Time moves only when a test moves it, or — with
//! [`TestPlatform::with_auto_advance`] — when every runnable thing is done: every core
//! sleeps, none has a wake or a device event pending, and the clock jumps straight to the
//! earliest deadline among them (virtual time). With several cores, a core that sleeps
//! while another still runs waits for it: time never moves under a core that has work.

use crate::CoreId;
use crate::platform::{Instant, Platform};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::sync::{Condvar, Mutex};

/// Something a core asked of the platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlatformEvent {
    /// `core` slept until `deadline` (FAR_FUTURE: until woken) starting at time `at`.
    Wait {
        /// The core that slept.
        core: CoreId,
        /// Its deadline.
        deadline: Instant,
        /// The time it started waiting.
        at: Instant,
    },
    /// `core` was sent a wake.
    Wake {
        /// The core woken.
        core: CoreId,
    },
    /// `core` dispatched `count` device events.
    Device {
        /// The core.
        core: CoreId,
        /// How many events ran.
        count: usize,
    },
}

type DeviceEvent = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct CoreState {
    wake_pending: bool,
    devices: VecDeque<DeviceEvent>,
}

/// See the module documentation.
pub struct TestPlatform {
    clock: AtomicU64,
    auto_advance: bool,
    cores: Box<[(Mutex<CoreState>, Condvar)]>,
    log: Mutex<Vec<PlatformEvent>>,
    /// With auto-advance: the deadline each core sleeps until (`None`: it runs). Locked
    /// before any core's state, never while holding one.
    sleeping: Mutex<Vec<Option<Instant>>>,
    /// A wait with no deadline that lasts this long (real time) fails the test.
    hang_limit: Duration,
}

impl TestPlatform {
    /// A platform for `cores` cores whose clock moves only through [`advance`](Self::advance).
    pub fn new(cores: usize) -> Arc<TestPlatform> {
        Arc::new(Self::build(cores, false))
    }

    /// Like [`new`](Self::new), but a core that sleeps until a deadline moves the clock there.
    pub fn with_auto_advance(cores: usize) -> Arc<TestPlatform> {
        Arc::new(Self::build(cores, true))
    }

    fn build(cores: usize, auto_advance: bool) -> TestPlatform {
        TestPlatform {
            clock: AtomicU64::new(0),
            auto_advance,
            cores: (0..cores)
                .map(|_| (Mutex::new(CoreState::default()), Condvar::new()))
                .collect(),
            log: Mutex::new(Vec::new()),
            sleeping: Mutex::new(alloc::vec![None; cores]),
            hang_limit: Duration::from_secs(20),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.clock.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Queues a device event for `core`; it runs in that core's next `poll_events`.
    pub fn inject_device_event(&self, core: CoreId, event: impl FnOnce() + Send + 'static) {
        let (state, cv) = &self.cores[core.index()];
        state.lock().unwrap().devices.push_back(Box::new(event));
        cv.notify_all();
    }

    /// Everything recorded so far, in order.
    pub fn log(&self) -> Vec<PlatformEvent> {
        self.log.lock().unwrap().clone()
    }

    /// The waits recorded for `core`.
    pub fn waits(&self, core: CoreId) -> Vec<(Instant, Instant)> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                PlatformEvent::Wait {
                    core: c,
                    deadline,
                    at,
                } if c == core => Some((at, deadline)),
                _ => None,
            })
            .collect()
    }

    fn record(&self, event: PlatformEvent) {
        self.log.lock().unwrap().push(event);
    }
}

impl TestPlatform {
    /// Auto-advance: sleeps until `deadline`, a wake or a device event; when this core is
    /// the last to sleep and nothing is pending anywhere, moves the clock to the earliest
    /// deadline of all sleeping cores and lets those cores go.
    fn sleep_in_virtual_time(&self, core: CoreId, deadline: Instant) -> usize {
        let started = std::time::Instant::now();
        loop {
            let mut sleeping = self.sleeping.lock().unwrap();
            let (state, cv) = &self.cores[core.index()];
            let mut guard = state.lock().unwrap();
            if guard.wake_pending || !guard.devices.is_empty() || self.now() >= deadline {
                guard.wake_pending = false;
                sleeping[core.index()] = None;
                return 0;
            }
            sleeping[core.index()] = Some(deadline);
            drop(guard);
            let all_asleep = sleeping.iter().all(Option::is_some)
                && self.cores.iter().all(|(other, _)| {
                    let other = other.lock().unwrap();
                    !other.wake_pending && other.devices.is_empty()
                });
            let earliest = sleeping.iter().flatten().min().copied();
            if all_asleep && let Some(at) = earliest.filter(|&at| at != Instant::FAR_FUTURE) {
                self.clock.fetch_max(at.as_nanos(), Ordering::SeqCst);
                for (_, cv) in self.cores.iter() {
                    cv.notify_all();
                }
                continue;
            }
            drop(sleeping);
            let guard = state.lock().unwrap();
            if guard.wake_pending || !guard.devices.is_empty() || self.now() >= deadline {
                continue;
            }
            assert!(
                started.elapsed() < self.hang_limit,
                "test platform: {core} waited {:?} (deadline {deadline:?}) with no wake: the runtime would hang",
                self.hang_limit
            );
            drop(cv.wait_timeout(guard, Duration::from_millis(5)).unwrap());
        }
    }
}

impl Platform for TestPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.load(Ordering::SeqCst))
    }

    fn poll_events(&self, core: CoreId, deadline: Instant) -> usize {
        let (state, cv) = &self.cores[core.index()];
        let mut guard = state.lock().unwrap();
        let devices: Vec<DeviceEvent> = guard.devices.drain(..).collect();
        if !devices.is_empty() {
            drop(guard);
            let count = devices.len();
            self.record(PlatformEvent::Device { core, count });
            devices.into_iter().for_each(|event| event());
            return count;
        }
        let now = self.now();
        if deadline <= now {
            return 0;
        }
        self.record(PlatformEvent::Wait {
            core,
            deadline,
            at: now,
        });
        if guard.wake_pending {
            guard.wake_pending = false;
            return 0;
        }
        if self.auto_advance {
            drop(guard);
            return self.sleep_in_virtual_time(core, deadline);
        }
        let started = std::time::Instant::now();
        loop {
            if guard.wake_pending || !guard.devices.is_empty() || self.now() >= deadline {
                guard.wake_pending = false;
                return 0;
            }
            assert!(
                started.elapsed() < self.hang_limit,
                "test platform: {core} waited {:?} (deadline {deadline:?}) with no wake: the runtime would hang",
                self.hang_limit
            );
            guard = cv.wait_timeout(guard, Duration::from_millis(5)).unwrap().0;
        }
    }

    fn wake(&self, core: CoreId) {
        self.record(PlatformEvent::Wake { core });
        let (state, cv) = &self.cores[core.index()];
        state.lock().unwrap().wake_pending = true;
        cv.notify_all();
    }
}
