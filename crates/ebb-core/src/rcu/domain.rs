//! [`RcuDomain`]: grace-period detection and deferred callbacks.
//!
//! See the module documentation of [`crate::rcu`] for the algorithm and the
//! memory-ordering argument; the comments here point back to its numbered steps.

use crate::CoreId;
use crate::percore::current_core;
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::mem;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use spin::Mutex;

/// A deferred callback, run once a grace period has elapsed.
pub type RcuCallback = Box<dyn FnOnce() + Send>;

/// Keeps a value on its own cache line (128 bytes covers adjacent-line prefetching on
/// x86 and the line size of recent Arm cores), so that one core's writes never
/// invalidate the line another core polls.
#[repr(align(128))]
struct CachePadded<T>(T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> core::ops::DerefMut for CachePadded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// An open read-side critical section on the current core; see
/// [`RcuDomain::read_guard`]. Not `Send`: it belongs to the core that opened it.
pub struct RcuReadGuard<'a> {
    depth: &'a AtomicUsize,
    _not_send: PhantomData<*const ()>,
}

impl Drop for RcuReadGuard<'_> {
    fn drop(&mut self) {
        // Same thread as the increment (the guard is not `Send`): no lost update.
        let depth = self.depth.load(Ordering::Relaxed);
        self.depth.store(depth - 1, Ordering::Relaxed);
    }
}

/// Callbacks that wait for the same grace-period number.
struct Batch {
    /// Value `gp_seq` must reach (see [`snap`]) before these may run.
    target: u64,
    callbacks: Vec<RcuCallback>,
}

/// One core's queued callbacks.
#[derive(Default)]
struct CoreCallbacks {
    /// Queued since this core's last quiescent state; no grace period chosen yet.
    next: Vec<RcuCallback>,
    /// Batches with a target, oldest (smallest target) first. Targets never decrease
    /// because `gp_seq` never does.
    waiting: VecDeque<Batch>,
}

/// Per-core state, one cache line each. Only the owning core writes `idle`; `need_qs`
/// is set by the grace-period starter and cleared by whoever reports for the core.
struct CoreState {
    /// Set when a grace period that needs this core's quiescent state starts (step 2);
    /// swapped to `false` by exactly one reporter (the core itself, or the starter if
    /// it finds the core idle).
    need_qs: AtomicBool,
    /// True between `enter_idle` and `exit_idle`: an extended quiescent state.
    idle: AtomicBool,
    /// Smallest `gp_seq` at which the slow path has work: the oldest waiting batch's
    /// target, 0 if `next` is non-empty, `u64::MAX` if there is nothing at all.
    /// Written only under `callbacks`' lock, read without it by the fast path.
    wake_at: AtomicU64,
    /// Open read guards on this core. Accessed only by the thread running as the
    /// core (an atomic because the line is shared; plain loads and stores suffice).
    read_depth: AtomicUsize,
    /// Callbacks queued on this core and not yet taken to run (diagnostics only).
    pending: AtomicUsize,
    /// Locked by the owning core at a quiescent state that has work, and by threads
    /// that queue callbacks for this core: uncontended in the common case.
    callbacks: Mutex<CoreCallbacks>,
}

impl CoreState {
    fn new() -> Self {
        CoreState {
            need_qs: AtomicBool::new(false),
            // A core is active from the start: treating a core that has not called
            // `enter_idle` as idle would let it read unprotected.
            idle: AtomicBool::new(false),
            wake_at: AtomicU64::new(u64::MAX),
            read_depth: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            callbacks: Mutex::new(CoreCallbacks::default()),
        }
    }
}

/// Read by every core at every quiescent state, written rarely: kept apart from the
/// write-heavy grace-period bookkeeping.
struct ReadMostly {
    /// Grace-period sequence: `2 * completed + (1 if one is in progress)`.
    gp_seq: AtomicU64,
    /// Number of callbacks in `RcuDomain::shared` (updated under its lock).
    shared_pending: AtomicUsize,
}

/// Written once per core per grace period.
struct GpState {
    /// Quiescent states still missing in the current grace period, plus one held by
    /// the starter until it has finished setting the grace period up.
    outstanding: AtomicUsize,
    /// Largest target any batch asked for; a grace period is started while
    /// `gp_seq < gp_requested`.
    gp_requested: AtomicU64,
}

/// The grace-period target for a callback queued when `gp_seq` was `seq`: the end of
/// the first grace period that *starts* after that read. If none is in progress
/// (`seq` even) that is the next one (`seq + 2`); if one is (`seq` odd) it may have
/// started before the caller's update, so the one after it (`seq + 3`, rounded down).
const fn snap(seq: u64) -> u64 {
    (seq + 3) & !1
}

/// A quiescent state was reported inside a read-side critical section: out of line, so
/// the check it ends stays a load and a branch where it is inlined.
#[cold]
#[inline(never)]
fn read_guard_open() -> ! {
    panic!("quiescent state inside an RCU read-side critical section")
}

/// Quiescent-state-based RCU for the cores of one runtime.
///
/// Shared by all cores (typically through an `Arc`). Cores report quiescent states
/// with [`quiescent_state`](Self::quiescent_state) and extended quiescent states with
/// [`enter_idle`](Self::enter_idle) / [`exit_idle`](Self::exit_idle); anyone defers
/// work past a grace period with [`call_rcu`](Self::call_rcu).
pub struct RcuDomain {
    cores: Box<[CachePadded<CoreState>]>,
    read_mostly: CachePadded<ReadMostly>,
    gp: CachePadded<GpState>,
    /// Serializes starting grace periods (rare: at most once per grace period).
    gp_lock: Mutex<()>,
    /// Callbacks from callers that are not cores; moved to the first core whose
    /// quiescent state sees `shared_pending != 0`.
    shared: Mutex<Vec<RcuCallback>>,
}

impl RcuDomain {
    /// Creates a domain for cores `CoreId(0)..CoreId(num_cores)`, all of them active
    /// (not idle): a core that will not run for a while should say so with
    /// [`enter_idle`](Self::enter_idle), or grace periods wait for it.
    ///
    /// # Panics
    /// If `num_cores` is zero.
    pub fn new(num_cores: usize) -> Self {
        assert!(num_cores > 0, "an RCU domain needs at least one core");
        RcuDomain {
            cores: (0..num_cores)
                .map(|_| CachePadded(CoreState::new()))
                .collect(),
            read_mostly: CachePadded(ReadMostly {
                gp_seq: AtomicU64::new(0),
                shared_pending: AtomicUsize::new(0),
            }),
            gp: CachePadded(GpState {
                outstanding: AtomicUsize::new(0),
                gp_requested: AtomicU64::new(0),
            }),
            gp_lock: Mutex::new(()),
            shared: Mutex::new(Vec::new()),
        }
    }

    /// Number of cores this domain waits for.
    pub fn num_cores(&self) -> usize {
        self.cores.len()
    }

    /// Whether `core` is one of this domain's cores.
    pub fn has_core(&self, core: CoreId) -> bool {
        core.index() < self.cores.len()
    }

    /// Number of grace periods completed so far (diagnostics and tests).
    pub fn completed_grace_periods(&self) -> u64 {
        self.read_mostly.gp_seq.load(Ordering::Acquire) >> 1
    }

    /// Callbacks queued and not yet started, on all cores and the shared list.
    /// A snapshot: concurrent calls may change it at once.
    pub fn pending_callbacks(&self) -> usize {
        let per_core: usize = self
            .cores
            .iter()
            .map(|c| c.pending.load(Ordering::Relaxed))
            .sum();
        per_core + self.read_mostly.shared_pending.load(Ordering::Relaxed)
    }

    fn core_state(&self, core: CoreId) -> &CoreState {
        match self.cores.get(core.index()) {
            Some(state) => state,
            None => panic!(
                "{core:?} is not a core of this RCU domain ({} cores)",
                self.cores.len()
            ),
        }
    }

    /// Opens a read-side critical section on the calling thread's core, or returns
    /// `None` if the calling thread is not an active core of this domain (not a core
    /// per `crate::percore::current_core()`, an id outside `0..num_cores`, or a core
    /// between `enter_idle` and `exit_idle`): such a thread is not protected by grace
    /// periods and must use some other exclusion (the map takes its writer lock).
    ///
    /// While the guard lives, [`quiescent_state`](Self::quiescent_state) and
    /// [`enter_idle`](Self::enter_idle) for this core panic, so structures built on
    /// the domain tie the references they lend to the guard's lifetime. Costs a
    /// thread-local load and a few plain loads and stores on the core's own cache
    /// line (the depth counter is atomic only because the line is shared; no
    /// read-modify-write is used). Sections nest.
    pub fn read_guard(&self) -> Option<RcuReadGuard<'_>> {
        let state = self.cores.get(current_core()?.index())?;
        // Only this core's thread writes `idle` and `read_depth`, so these relaxed
        // accesses cannot race with a write we care about.
        if state.idle.load(Ordering::Relaxed) {
            return None;
        }
        let depth = state.read_depth.load(Ordering::Relaxed);
        state.read_depth.store(depth + 1, Ordering::Relaxed);
        Some(RcuReadGuard {
            depth: &state.read_depth,
            _not_send: PhantomData,
        })
    }

    /// Checks that the calling thread may report for `core`: it runs as `core` and
    /// is not inside a read-side critical section. This is what makes reporting safe.
    #[inline]
    fn reporting_state(&self, core: CoreId) -> &CoreState {
        assert_eq!(
            current_core(),
            Some(core),
            "RCU quiescent states are reported by the thread running as the core"
        );
        self.unguarded_state(core)
    }

    /// `core`'s state, checked to have no read guard open: the half of
    /// [`reporting_state`](Self::reporting_state) the event loop cannot vouch for (a
    /// task may hold a guard across an `.await`).
    #[inline]
    fn unguarded_state(&self, core: CoreId) -> &CoreState {
        let state = self.core_state(core);
        if state.read_depth.load(Ordering::Relaxed) != 0 {
            read_guard_open();
        }
        state
    }

    /// Reports that `core` is at a quiescent state, and runs those of its callbacks
    /// whose grace period has ended. Called by the event loop at the end of every
    /// iteration.
    ///
    /// The common case (no grace period waiting for this core, no callbacks due) is a
    /// thread-local load and three relaxed loads of lines that are rarely written;
    /// reporting costs one swap, one fence and one shared decrement, once per grace
    /// period.
    ///
    /// # Panics
    /// If `core` is not a core of this domain, if the calling thread is not running
    /// as `core` (`crate::percore::current_core()`), or if a read guard of this core
    /// is alive (a quiescent state inside a read would free what it reads).
    pub fn quiescent_state(&self, core: CoreId) {
        let state = self.reporting_state(core);
        debug_assert!(
            !state.idle.load(Ordering::Relaxed),
            "quiescent_state on an idle core (missing exit_idle?)"
        );
        self.quiescent(state);
    }

    /// [`quiescent_state`](Self::quiescent_state) for the event loop of `core`, which
    /// runs as `core` by construction (`Runtime::run_core` sets the thread's core before
    /// the loop starts and clears it after): the thread-local look-up that checks it is
    /// left to debug builds. The loop reports at every iteration, so its common case is
    /// inlined into the loop: three relaxed loads and a compare, no call.
    #[inline]
    pub(crate) fn loop_quiescent_state(&self, core: CoreId) {
        debug_assert_eq!(current_core(), Some(core));
        let state = self.unguarded_state(core);
        debug_assert!(!state.idle.load(Ordering::Relaxed));
        self.quiescent(state);
    }

    /// [`enter_idle`](Self::enter_idle) for the event loop of `core` (see
    /// [`loop_quiescent_state`](Self::loop_quiescent_state)).
    #[inline]
    pub(crate) fn loop_enter_idle(&self, core: CoreId) {
        debug_assert_eq!(current_core(), Some(core));
        let state = self.unguarded_state(core);
        self.enter_idle_state(state);
    }

    #[inline]
    fn quiescent(&self, state: &CoreState) {
        let wake_at = state.wake_at.load(Ordering::Relaxed);
        let due = wake_at != u64::MAX && wake_at <= self.read_mostly.gp_seq.load(Ordering::Acquire);
        if due || self.read_mostly.shared_pending.load(Ordering::Relaxed) != 0 {
            self.advance_callbacks(state);
        }
        // Reported after the callbacks ran: a callback may itself read RCU-protected
        // data, and those reads must precede the report.
        if state.need_qs.load(Ordering::Relaxed) {
            self.report_core(state);
        }
    }

    /// Enters an extended quiescent state: the core is about to sleep (or stops).
    /// Grace periods no longer wait for it until [`exit_idle`](Self::exit_idle), and
    /// read guards are refused meanwhile. Includes a
    /// [`quiescent_state`](Self::quiescent_state) (callbacks run first).
    ///
    /// # Panics
    /// As [`quiescent_state`](Self::quiescent_state).
    pub fn enter_idle(&self, core: CoreId) {
        let state = self.reporting_state(core);
        self.enter_idle_state(state);
    }

    fn enter_idle_state(&self, state: &CoreState) {
        self.quiescent(state);
        // Step 4 (idle Dekker): store `idle`, fence, then look at `need_qs`. The
        // starter stores `need_qs`, fences, then looks at `idle`. SeqCst fences make
        // at least one side see the other's store, so a grace period that started
        // concurrently is reported by us, by the starter, or by both trying (the swap
        // in `report_core` lets exactly one of them count it).
        state.idle.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if state.need_qs.load(Ordering::Relaxed) {
            self.report_core(state);
        }
    }

    /// Leaves the extended quiescent state entered by [`enter_idle`](Self::enter_idle):
    /// called by the event loop right after waking, before any RCU read. Harmless
    /// if the core is not idle; calling it for another core only delays grace periods.
    ///
    /// # Panics
    /// If `core` is not a core of this domain.
    pub fn exit_idle(&self, core: CoreId) {
        let state = self.core_state(core);
        // Step 5: if a grace-period starter saw us idle, its look at `idle` came
        // before this store, so its fence precedes ours in the SeqCst order, and every
        // unlink that preceded that grace period is visible to our reads after this
        // fence: we cannot pick up a pointer the grace period is about to free.
        state.idle.store(false, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Whether `core` is currently in an extended quiescent state.
    pub fn is_idle(&self, core: CoreId) -> bool {
        self.core_state(core).idle.load(Ordering::Relaxed)
    }

    /// Runs `f` once every core of the domain has passed a quiescent state (or been
    /// idle) after this call: at that point no RCU reader can still hold a pointer
    /// that was unlinked before the call, so `f` may free it.
    ///
    /// `f` runs on `core`, at one of its later quiescent states. Pass the calling
    /// core (`crate::percore::current_core()`); callers that are not cores of this
    /// domain (`None`, or an id outside `0..num_cores`) queue on a shared list that
    /// the next core to pass a quiescent state adopts. Queueing onto another core
    /// works but waits for that core to run; prefer `None` off-core.
    ///
    /// Callbacks may call `call_rcu` again. A callback that panics loses the other
    /// callbacks taken to run at the same quiescent state (they are dropped unrun).
    pub fn call_rcu(&self, core: Option<CoreId>, f: RcuCallback) {
        match core.and_then(|c| self.cores.get(c.index())) {
            Some(state) => {
                let mut callbacks = state.callbacks.lock();
                callbacks.next.push(f);
                state.pending.fetch_add(1, Ordering::Relaxed);
                // Under the lock, so it cannot be overwritten by a slow path that has
                // not seen this callback: the core's next quiescent state handles it.
                state.wake_at.store(0, Ordering::Relaxed);
            }
            None => {
                let mut shared = self.shared.lock();
                shared.push(f);
                self.read_mostly
                    .shared_pending
                    .store(shared.len(), Ordering::Relaxed);
            }
        }
    }

    /// Slow path of a quiescent state: adopt shared callbacks, give new callbacks a
    /// grace-period target, and run the batches whose target has been reached.
    #[cold]
    #[inline(never)]
    fn advance_callbacks(&self, state: &CoreState) {
        let mut ready = Vec::new();
        let mut request = None;
        {
            let mut callbacks = state.callbacks.lock();
            if self.read_mostly.shared_pending.load(Ordering::Relaxed) != 0 {
                let mut shared = self.shared.lock();
                state.pending.fetch_add(shared.len(), Ordering::Relaxed);
                callbacks.next.append(&mut shared);
                self.read_mostly.shared_pending.store(0, Ordering::Relaxed);
            }
            if !callbacks.next.is_empty() {
                // Step 1: every update these callbacks retire happened before this
                // point (program order, or the lock they were queued under). The
                // fence orders those updates before our read of `gp_seq` in the
                // SeqCst order: a grace period whose start we do not see starts
                // after them (see the module docs for the proof).
                fence(Ordering::SeqCst);
                let target = snap(self.read_mostly.gp_seq.load(Ordering::Relaxed));
                let batch = mem::take(&mut callbacks.next);
                match callbacks.waiting.back_mut() {
                    Some(last) if last.target == target => last.callbacks.extend(batch),
                    _ => callbacks.waiting.push_back(Batch {
                        target,
                        callbacks: batch,
                    }),
                }
                request = Some(target);
            }
            // Acquire pairs with the completer's Release increment (step 3): the
            // quiescent states of all cores happen before the callbacks run.
            let completed = self.read_mostly.gp_seq.load(Ordering::Acquire);
            while callbacks
                .waiting
                .front()
                .is_some_and(|b| b.target <= completed)
            {
                if let Some(batch) = callbacks.waiting.pop_front() {
                    state
                        .pending
                        .fetch_sub(batch.callbacks.len(), Ordering::Relaxed);
                    ready.push(batch.callbacks);
                }
            }
            let wake_at = callbacks.waiting.front().map_or(u64::MAX, |b| b.target);
            state.wake_at.store(wake_at, Ordering::Relaxed);
        }
        if let Some(target) = request {
            self.request_grace_period(target);
        }
        // Run outside the lock: callbacks may queue more callbacks.
        for callback in ready.into_iter().flatten() {
            callback();
        }
    }

    /// Reports `state`'s core as quiescent for the current grace period, unless
    /// someone already did.
    #[cold]
    #[inline(never)]
    fn report_core(&self, state: &CoreState) {
        // Exactly one swap sees `true`: the core's own or the starter's (idle case).
        if state.need_qs.swap(false, Ordering::SeqCst) {
            // Step 2b: this swap read the starter's store, which follows the starter's
            // first fence; this fence therefore follows it in the SeqCst order, so
            // this core's reads after its quiescent state see every update retired
            // into this grace period.
            fence(Ordering::SeqCst);
            if self.report(1) {
                self.finish_grace_period();
            }
        }
    }

    /// Removes `n` from the outstanding count; true if that completed the grace period
    /// (the caller must then call `finish_grace_period`, or do its work).
    fn report(&self, n: usize) -> bool {
        // AcqRel: each report releases the reporter's reads, and the decrements form
        // one chain of read-modify-writes, so the last reporter acquires them all.
        self.gp.outstanding.fetch_sub(n, Ordering::AcqRel) == n
    }

    /// Step 3: ends the grace period in progress, then starts the next if wanted.
    fn finish_grace_period(&self) {
        // Odd to even. Release publishes every core's quiescent state (acquired by
        // the final `report`) to whoever sees the new value with Acquire.
        self.read_mostly.gp_seq.fetch_add(1, Ordering::Release);
        self.start_grace_period_if_needed();
    }

    fn request_grace_period(&self, target: u64) {
        // If an earlier request already covers `target`, its requester makes sure the
        // grace period starts (or a running one's completer does): a core that queues
        // callbacks at every iteration need not take `gp_lock` at every QS.
        if self.gp.gp_requested.load(Ordering::Acquire) >= target
            || self.gp.gp_requested.fetch_max(target, Ordering::AcqRel) >= target
        {
            return;
        }
        self.start_grace_period_if_needed();
    }

    /// Starts a grace period if none is running and one has been requested.
    ///
    /// Requesters and completers both check under `gp_lock`, so a request made while
    /// a grace period runs is seen by the completer, or the requester sees it ended.
    fn start_grace_period_if_needed(&self) {
        let _guard = self.gp_lock.lock();
        loop {
            let seq = self.read_mostly.gp_seq.load(Ordering::Acquire);
            if seq & 1 == 1 || self.gp.gp_requested.load(Ordering::Acquire) <= seq {
                // In progress (its completer will look again), or nothing wanted.
                return;
            }
            if !self.start_grace_period(seq) {
                return;
            }
            // Every core was idle: it completed at once; maybe another is wanted.
            self.read_mostly.gp_seq.fetch_add(1, Ordering::Release);
        }
    }

    /// Step 2: starts grace period `seq + 1`. Returns true if it completed already
    /// (every core idle), in which case the caller must mark it complete.
    fn start_grace_period(&self, seq: u64) -> bool {
        // Our own +1 keeps the count from reaching zero while we are setting up.
        self.gp
            .outstanding
            .store(self.cores.len() + 1, Ordering::Relaxed);
        self.read_mostly.gp_seq.store(seq + 1, Ordering::SeqCst);
        // F1: orders the `gp_seq` store before the `need_qs` stores (step 2b), and
        // after every update whose retirer read `gp_seq` before this store (step 1).
        fence(Ordering::SeqCst);
        for state in self.cores.iter() {
            // Release: a reporter that reads `true` also sees `outstanding` reset.
            state.need_qs.store(true, Ordering::Release);
        }
        // F2: the starter's half of the idle Dekker (step 4).
        fence(Ordering::SeqCst);
        let mut idle_reported = 0;
        for state in self.cores.iter() {
            // Acquire: a core's reads before `enter_idle` happen before we report it.
            if state.idle.load(Ordering::Acquire) && state.need_qs.swap(false, Ordering::AcqRel) {
                idle_reported += 1;
            }
        }
        self.report(idle_reported + 1)
    }
}

impl Drop for RcuDomain {
    /// Runs every remaining callback, oldest first, so that nothing retired leaks.
    ///
    /// This is safe without a grace period: RCU-protected structures hold an `Arc` of
    /// their domain and readers borrow the structure, so once the domain is dropped no
    /// structure and no reader of one remains; only the retired objects the callbacks
    /// own are left.
    fn drop(&mut self) {
        let mut all = Vec::new();
        for state in self.cores.iter_mut() {
            let callbacks = state.callbacks.get_mut();
            for batch in callbacks.waiting.drain(..) {
                all.extend(batch.callbacks);
            }
            all.append(&mut callbacks.next);
            *state.pending.get_mut() = 0;
        }
        all.append(self.shared.get_mut());
        *self.read_mostly.shared_pending.get_mut() = 0;
        for callback in all {
            callback();
        }
    }
}
