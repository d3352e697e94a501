//! The hosted platform: epoll per core, eventfd wakes, a monotonic clock.

use crate::reactor;
use ebb_core::{CoreId, Instant, Platform};
use rustix::event::{EventfdFlags, epoll, eventfd};
use rustix::fd::OwnedFd;
use rustix::io::Errno;
use rustix::time::Timespec;
use std::io;

/// The epoll token reserved for a core's wake eventfd.
pub(crate) const WAKE_TOKEN: u64 = u64::MAX;

struct CoreFds {
    epoll: OwnedFd,
    wake: OwnedFd,
}

/// The [`Platform`] of a hosted node: one epoll instance and one eventfd per core.
pub struct HostedPlatform {
    cores: Box<[CoreFds]>,
    epoch: std::time::Instant,
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
            epoch: std::time::Instant::now(),
        })
    }

    pub(crate) fn epoll(&self, core: CoreId) -> &OwnedFd {
        &self.cores[core.index()].epoll
    }
}

impl Platform for HostedPlatform {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn poll_events(&self, core: CoreId, deadline: Instant) -> usize {
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
            let now = self.now();
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

    fn wake(&self, core: CoreId) {
        if let Some(fds) = self.cores.get(core.index()) {
            // A full counter (EAGAIN) already guarantees a wake-up.
            let _ = rustix::io::write(&fds.wake, &1u64.to_ne_bytes());
        }
    }
}
