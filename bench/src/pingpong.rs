//! OS-thread context-switch cost: two threads pinned to the same core hand a
//! token back and forth through a blocking (futex-based) primitive, so every
//! round is exactly two context switches (A -> B, B -> A).
//!
//! The default hand-off ([`Handoff::Condvar`]) is what a C programmer would
//! write with pthreads: a mutex-protected flag plus a condition variable
//! (`std::sync::{Mutex, Condvar}` are futex-based on Linux, like glibc's
//! `pthread_mutex_t`/`pthread_cond_t`). The notify is issued after the mutex is
//! released so the woken thread never blocks again on the mutex.
//! [`Handoff::Park`] (`std::thread::park`/`unpark`, a single futex word per
//! thread) is offered as the leanest standard alternative.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The blocking primitive used for the hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handoff {
    /// `Mutex<bool>` + `Condvar` (pthread mutex/condvar equivalent).
    #[default]
    Condvar,
    /// `std::thread::park` / `Thread::unpark` with an atomic flag.
    Park,
}

/// Result of a ping-pong run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingPong {
    /// Rounds completed (each = 2 context switches).
    pub rounds: u64,
    /// Wall time of all rounds.
    pub total: Duration,
    /// CPU both threads were pinned to (`None` if pinning failed).
    pub core: Option<usize>,
}

impl PingPong {
    /// Context switches performed (`2 * rounds`).
    pub fn switches(&self) -> u64 {
        self.rounds * 2
    }

    /// Nanoseconds per context switch.
    pub fn ns_per_switch(&self) -> f64 {
        self.total.as_nanos() as f64 / self.switches().max(1) as f64
    }
}

/// Runs `rounds` ping-pong rounds with the default [`Handoff::Condvar`] on the
/// last CPU and returns the time per context switch.
pub fn pthread_pingpong(rounds: u64) -> Duration {
    let r = pthread_pingpong_with(rounds, Handoff::Condvar, None);
    Duration::from_nanos(r.ns_per_switch().round() as u64)
}

/// Runs `rounds` rounds with the given hand-off, both threads pinned to `core`
/// (default: the last CPU). A short warm-up (not timed) precedes the rounds.
pub fn pthread_pingpong_with(rounds: u64, handoff: Handoff, core: Option<usize>) -> PingPong {
    let core = core.unwrap_or_else(|| crate::sys::cpu_count() - 1);
    let warmup = (rounds / 10).clamp(1, 10_000);
    let (total, pinned) = match handoff {
        Handoff::Condvar => run_condvar(rounds, warmup, core),
        Handoff::Park => run_park(rounds, warmup, core),
    };
    PingPong {
        rounds,
        total,
        core: pinned.then_some(core),
    }
}

fn pin(core: usize) -> bool {
    crate::sys::pin_current_thread(core).is_ok()
}

fn run_condvar(rounds: u64, warmup: u64, core: usize) -> (Duration, bool) {
    // `true` = the ball is at B.
    let shared = Arc::new((Mutex::new(false), Condvar::new()));
    let ready = Arc::new(Barrier::new(2));

    let b = {
        let shared = Arc::clone(&shared);
        let ready = Arc::clone(&ready);
        thread::spawn(move || {
            let pinned = pin(core);
            ready.wait();
            let (m, cv) = &*shared;
            for _ in 0..warmup + rounds {
                let mut at_b = m.lock().unwrap();
                while !*at_b {
                    at_b = cv.wait(at_b).unwrap();
                }
                *at_b = false;
                drop(at_b);
                cv.notify_one();
            }
            pinned
        })
    };

    let a_pinned_and_time = {
        let shared = Arc::clone(&shared);
        let ready = Arc::clone(&ready);
        thread::spawn(move || {
            let pinned = pin(core);
            ready.wait();
            let (m, cv) = &*shared;
            let round = |m: &Mutex<bool>, cv: &Condvar| {
                *m.lock().unwrap() = true;
                cv.notify_one();
                let mut at_b = m.lock().unwrap();
                while *at_b {
                    at_b = cv.wait(at_b).unwrap();
                }
            };
            for _ in 0..warmup {
                round(m, cv);
            }
            let t0 = Instant::now();
            for _ in 0..rounds {
                round(m, cv);
            }
            (pinned, t0.elapsed())
        })
    };

    let (a_pinned, elapsed) = a_pinned_and_time.join().expect("ping thread panicked");
    let b_pinned = b.join().expect("pong thread panicked");
    (elapsed, a_pinned && b_pinned)
}

fn run_park(rounds: u64, warmup: u64, core: usize) -> (Duration, bool) {
    // `true` = the ball is at B.
    let at_b = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(2));
    let a_handle: Arc<Mutex<Option<thread::Thread>>> = Arc::new(Mutex::new(None));

    let b = {
        let at_b = Arc::clone(&at_b);
        let ready = Arc::clone(&ready);
        let a_handle = Arc::clone(&a_handle);
        thread::spawn(move || {
            let pinned = pin(core);
            ready.wait();
            let a = a_handle.lock().unwrap().clone().expect("A registered");
            for _ in 0..warmup + rounds {
                while !at_b.load(Ordering::Acquire) {
                    thread::park();
                }
                at_b.store(false, Ordering::Release);
                a.unpark();
            }
            pinned
        })
    };
    let b_thread = b.thread().clone();

    let a = {
        let at_b = Arc::clone(&at_b);
        let ready = Arc::clone(&ready);
        let a_handle = Arc::clone(&a_handle);
        thread::spawn(move || {
            let pinned = pin(core);
            *a_handle.lock().unwrap() = Some(thread::current());
            ready.wait();
            let round = || {
                at_b.store(true, Ordering::Release);
                b_thread.unpark();
                while at_b.load(Ordering::Acquire) {
                    thread::park();
                }
            };
            for _ in 0..warmup {
                round();
            }
            let t0 = Instant::now();
            for _ in 0..rounds {
                round();
            }
            (pinned, t0.elapsed())
        })
    };

    let (a_pinned, elapsed) = a.join().expect("ping thread panicked");
    let b_pinned = b.join().expect("pong thread panicked");
    (elapsed, a_pinned && b_pinned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_condvar_positive_finite() {
        let per = pthread_pingpong(2_000);
        assert!(per > Duration::ZERO, "{per:?}");
        assert!(per < Duration::from_millis(10), "{per:?}");
    }

    #[test]
    fn pingpong_park_positive_finite() {
        let r = pthread_pingpong_with(2_000, Handoff::Park, None);
        let ns = r.ns_per_switch();
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
        assert_eq!(r.switches(), 4_000);
    }
}
