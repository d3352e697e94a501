//! The hosted platform: epoll per core, eventfd wakes, a monotonic clock.

use crate::reactor;
use ebb_core::{CoreId, Instant, Platform};
use rustix::event::{EventfdFlags, epoll, eventfd};
use rustix::fd::OwnedFd;
use rustix::io::Errno;
use rustix::time::{ClockId, Timespec};
use std::cell::Cell;
use std::io;
use std::time::Duration;

/// The epoll token reserved for a core's wake eventfd.
pub(crate) const WAKE_TOKEN: u64 = u64::MAX;

struct CoreFds {
    epoll: OwnedFd,
    wake: OwnedFd,
}

/// The [`Platform`] of a hosted node: one epoll instance and one eventfd per core.
pub struct HostedPlatform {
    cores: Box<[CoreFds]>,
    /// `CLOCK_MONOTONIC` when the platform was made, in nanoseconds: the clock's epoch.
    epoch: u64,
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock `std::time::Instant` reads), straight from
/// rustix (the vDSO, or the system call where there is none): the event loop reads it once
/// an iteration while a timer is armed, and `std`'s `Instant::elapsed` — a `Timespec`
/// subtraction with its normalisation and overflow checks, then a `Duration` — cost
/// several times the read itself.
fn monotonic_nanos() -> u64 {
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    // The monotonic clock counts from boot: never negative, and u64 nanoseconds last
    // 584 years.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

impl HostedPlatform {
    /// Creates the per-core epoll instances and wake eventfds.
    pub fn new(cores: usize) -> io::Result<HostedPlatform> {
        let cores = (0..cores)
            .map(|_| -> io::Result<CoreFds> {
                let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
                let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
                epoll::add(
                    &epoll,
                    &wake,
                    epoll::EventData::new_u64(WAKE_TOKEN),
                    epoll::EventFlags::IN,
                )?;
                Ok(CoreFds { epoll, wake })
            })
            .collect::<io::Result<_>>()?;
        Ok(HostedPlatform {
            cores,
            epoch: monotonic_nanos(),
        })
    }

    pub(crate) fn epoll(&self, core: CoreId) -> &OwnedFd {
        &self.cores[core.index()].epoll
    }
}

impl Platform for HostedPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(monotonic_nanos().saturating_sub(self.epoch))
    }

    fn poll_events(&self, core: CoreId, deadline: Instant) -> usize {
        self.poll(core, deadline, None)
    }

    fn poll_events_from(&self, core: CoreId, deadline: Instant, now: Instant) -> usize {
        self.poll(core, deadline, Some(now))
    }

    fn wake(&self, core: CoreId) {
        if let Some(fds) = self.cores.get(core.index()) {
            // A full counter (EAGAIN) already guarantees a wake-up.
            let _ = rustix::io::write(&fds.wake, &1u64.to_ne_bytes());
        }
    }
}

impl HostedPlatform {
    /// `poll_events`, with the caller's clock reading if it has one (`poll_events_from`).
    fn poll(&self, core: CoreId, deadline: Instant, now: Option<Instant>) -> usize {
        if deadline == Instant::ZERO && reactor::polls_memory() {
            // A poll on a core with memory-polled devices (a core spinning before it
            // sleeps asks many times a microsecond): look at them, and ask epoll — a
            // system call — for the sockets and the wake eventfd only every
            // `EPOLL_INTERVAL`.
            let found = reactor::poll_memory();
            let now = self.now();
            let last = LAST_EPOLL.with(Cell::get);
            let gap = EPOLL_GAP.with(Cell::get);
            if now < last + gap {
                return found;
            }
            LAST_EPOLL.with(|l| l.set(now));
            let events = self.epoll_step(core, deadline, None);
            // Epoll that finds nothing is asked half as often, up to `EPOLL_INTERVAL_MAX`;
            // an event brings the interval back.
            let next = if events > 0 {
                EPOLL_INTERVAL
            } else {
                (gap * 2).min(EPOLL_INTERVAL_MAX)
            };
            EPOLL_GAP.with(|g| g.set(next));
            return found + events;
        }
        if deadline != Instant::ZERO && reactor::polls_memory() && reactor::arm_memory() {
            // A device found work while being armed for the sleep: do not sleep.
            return reactor::poll_memory() + self.epoll_step(core, Instant::ZERO, None);
        }
        self.epoll_step(core, deadline, now)
    }
}

/// How often a core with memory-polled devices asks epoll while it polls without
/// waiting: the longest a socket's readiness (or a wake-up from another core, which
/// `has_pending_work` sees without epoll anyway) waits behind a spinning core. A spin
/// step without the system call takes well under a microsecond, so polling epoll at
/// every step made it most of the spin's cost (6 `epoll_pwait` per request on an AF_XDP
/// server at 32k requests/s).
pub(crate) const EPOLL_INTERVAL: Duration = Duration::from_micros(5);

/// The longest the interval grows to while epoll keeps finding nothing: a core busy with
/// memory-polled devices alone (a shared-memory Messenger doing 2.6 µs round trips) asked
/// epoll about every other round trip at 5 µs — most of its system calls — and a socket
/// event waits at most this long behind such a core.
pub(crate) const EPOLL_INTERVAL_MAX: Duration = Duration::from_micros(100);

thread_local! {
    /// When the calling core last asked epoll.
    static LAST_EPOLL: Cell<Instant> = const { Cell::new(Instant::ZERO) };
    /// How long after that it asks again.
    static EPOLL_GAP: Cell<Duration> = const { Cell::new(EPOLL_INTERVAL) };
}

impl HostedPlatform {
    /// One `epoll_pwait` on `core`'s instance, waiting until `deadline`, with every event
    /// dispatched; returns how many (the wake eventfd's not counted). The timeout to a
    /// deadline is counted from `now` if the caller read the clock just before, else
    /// from a fresh reading.
    fn epoll_step(&self, core: CoreId, deadline: Instant, now: Option<Instant>) -> usize {
        #[cfg(test)]
        tests::EPOLL_STEPS.with(|n| n.set(n.get() + 1));
        let fds = &self.cores[core.index()];
        const NO_WAIT: Timespec = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // A poll (`ZERO`) or a wait without a deadline needs no clock reading.
        let timeout = if deadline == Instant::ZERO {
            Some(NO_WAIT)
        } else if deadline == Instant::FAR_FUTURE {
            None
        } else {
            let now = now.unwrap_or_else(|| self.now());
            if deadline <= now {
                Some(NO_WAIT)
            } else {
                let wait = deadline - now;
                Some(Timespec {
                    tv_sec: wait.as_secs() as i64,
                    tv_nsec: i64::from(wait.subsec_nanos()),
                })
            }
        };
        reactor::with_event_buffer(|events| {
            events.clear();
            match epoll::wait(
                &fds.epoll,
                rustix::buffer::spare_capacity(events),
                timeout.as_ref(),
            ) {
                Ok(_) => {}
                Err(Errno::INTR) => return 0,
                Err(e) => panic!("epoll_wait failed on {core}: {e}"),
            }
            let mut dispatched = 0;
            for event in events.iter() {
                // `Event` is packed: copy the fields out before use.
                let (flags, token) = (event.flags, event.data.u64());
                if token == WAKE_TOKEN {
                    let mut count = [0u8; 8];
                    // Drain the counter; an empty read (EAGAIN) just means a racing drain.
                    let _ = rustix::io::read(&fds.wake, &mut count);
                } else {
                    reactor::dispatch(token, flags);
                    dispatched += 1;
                }
            }
            dispatched
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reactor::PolledSource;
    use std::rc::Rc;

    thread_local! {
        /// `epoll_step`s made on this thread.
        pub(super) static EPOLL_STEPS: Cell<u64> = const { Cell::new(0) };
    }

    /// A device that always has work, counting its dispatches.
    struct Busy(Cell<u64>);

    impl PolledSource for Busy {
        fn has_work(&self) -> bool {
            true
        }
        fn dispatch(self: Rc<Self>) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn a_core_polling_memory_asks_epoll_only_every_interval() {
        let platform = HostedPlatform::new(1).unwrap();
        let core = CoreId(0);
        reactor::enter(platform.epoll(core)).unwrap();
        let steps = || EPOLL_STEPS.with(Cell::get);

        // Without a memory-polled device every poll is an epoll_pwait.
        let before = steps();
        for _ in 0..100 {
            platform.poll_events(core, Instant::ZERO);
        }
        assert_eq!(steps() - before, 100);

        let busy = Rc::new(Busy(Cell::new(0)));
        let token = reactor::register_polled(busy.clone()).unwrap();
        let (before, start) = (steps(), platform.now());
        const POLLS: u64 = 20_000;
        for _ in 0..POLLS {
            assert!(platform.poll_events(core, Instant::ZERO) >= 1);
        }
        let elapsed = platform.now() - start;
        let epolls = steps() - before;
        assert_eq!(busy.0.get(), POLLS, "the device is looked at on every poll");
        let allowed = (elapsed.as_nanos() / EPOLL_INTERVAL.as_nanos()) as u64 + 1;
        assert!(
            epolls <= allowed,
            "{epolls} epoll_pwait in {elapsed:?}: more than one per {EPOLL_INTERVAL:?}"
        );
        assert!(epolls >= 1, "sockets and wakes are still looked at");

        // A wait with a deadline always goes to epoll; gone, the device is not polled.
        let before = steps();
        platform.poll_events(core, platform.now());
        assert_eq!(steps() - before, 1);
        reactor::deregister_polled(token);
        let before = steps();
        platform.poll_events(core, Instant::ZERO);
        assert_eq!(steps() - before, 1);
        assert_eq!(busy.0.get(), POLLS);
        reactor::leave();
    }
}
