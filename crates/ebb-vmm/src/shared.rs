//! The state a running VM's threads share: guest memory, the console rings, the clock's
//! zero, the exit counter, and how the VM ends — the stop flag, the first outcome
//! reported, each vCPU's registers when its thread stopped.
//!
//! [`vm`](crate::vm) builds it over the guest memory it has written and hands it to every
//! thread: each vCPU thread and the hypercalls it serves, the virtio-net I/O thread (guest
//! memory and the stop flag), and the main thread, which waits here for the outcome and
//! then for the vCPU threads to stop. It names no device, vCPU or KVM handle, so all of
//! them can use it: it sits above only guest memory, the console and the outcome types.

use crate::console::Console;
use crate::guest::GuestMem;
use crate::report::{Outcome, VcpuState};
use crate::sys;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// VM-wide state shared by the vCPU threads, the I/O thread and the main thread.
pub struct Shared {
    /// Guest memory.
    pub mem: GuestMem,
    /// The console rings.
    pub console: Console,
    /// When the VM was started (the monotonic clock's zero).
    pub started: Instant,
    stop: AtomicBool,
    outcome: Mutex<Option<Outcome>>,
    changed: Condvar,
    states: Mutex<Vec<Option<VcpuState>>>,
    stopped: AtomicU32,
    /// Exits to this process (every `KVM_RUN` return but errors), all vCPUs.
    pub exits: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// The state of a VM with `cpus` vCPUs over `mem`, its clock starting now. Needs no
    /// KVM: the hypercall and console tests build one over plain host memory.
    pub(crate) fn new(mem: GuestMem, console: Console, cpus: u32) -> Shared {
        Shared {
            mem,
            console,
            started: Instant::now(),
            stop: AtomicBool::new(false),
            outcome: Mutex::new(None),
            changed: Condvar::new(),
            states: Mutex::new(vec![None; cpus as usize]),
            stopped: AtomicU32::new(0),
            exits: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Ends the VM with `outcome`, unless another outcome came first.
    pub fn finish(&self, outcome: Outcome) {
        let mut slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(outcome);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Whether the VM is ending.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Records that core `core`'s thread stopped, with its registers.
    pub fn vcpu_stopped(&self, core: u32, state: Option<VcpuState>) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get_mut(core as usize) {
            *s = state;
        }
        drop(states);
        // Under the outcome lock, so the main thread cannot miss the notification between
        // its check of `stopped` and its wait.
        let _slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        self.stopped.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Sleeps until `kick` is signalled (true) or `timeout` passes (false); returns early,
    /// as a timeout, when the VM is ending.
    pub fn wait(&self, kick: &EventFd, timeout: Option<Duration>) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.stopping() {
                return false;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ts = left.map(|l| Timespec {
                tv_sec: l.as_secs() as i64,
                tv_nsec: i64::from(l.subsec_nanos()),
            });
            let fd = sys::borrow_eventfd(kick);
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, ts.as_ref()) {
                Ok(0) => return false,
                Ok(_) => {
                    // Consume every pending kick: one wake-up serves them all.
                    let _ = kick.read();
                    return true;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }

    /// Sets the stop flag, outcome or not: every thread that checks [`stopping`](Self::stopping)
    /// leaves its loop.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// True at once when the VM has its outcome; otherwise waits up to `timeout` (less
    /// when the state changes) and returns false, so the caller can do its periodic work
    /// and ask again.
    pub(crate) fn wait_for_outcome(&self, timeout: Duration) -> bool {
        let slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return true;
        }
        let _ = self
            .changed
            .wait_timeout(slot, timeout)
            .unwrap_or_else(|e| e.into_inner());
        false
    }

    /// Waits until `vcpus` vCPU threads have reported [`vcpu_stopped`](Self::vcpu_stopped)
    /// or `give_up` has passed, calling `nudge` (which signals the threads still running)
    /// first and then again every `interval` while waiting. Returns as soon as the last
    /// thread reports: the check and the wait are under the lock `vcpu_stopped` notifies
    /// under, so no report is missed between them.
    pub(crate) fn wait_for_vcpus(
        &self,
        vcpus: usize,
        give_up: Instant,
        interval: Duration,
        mut nudge: impl FnMut(),
    ) {
        loop {
            let slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
            if self.stopped.load(Ordering::SeqCst) as usize >= vcpus || Instant::now() >= give_up {
                break;
            }
            nudge();
            let _ = self
                .changed
                .wait_timeout(slot, interval)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The outcome the VM ended with, taken out (`None`: none was reported).
    pub(crate) fn take_outcome(&self) -> Option<Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Each core's registers as its thread reported them when it stopped (`None`: not
    /// stopped, or the registers could not be read).
    pub(crate) fn vcpu_states(&self) -> Vec<Option<VcpuState>> {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
