//! The per-core event loop, its tasks, and the node-wide state the loops share.
//!
//! A task is polled only on its owner core, so its future need not be `Send`. Its waker,
//! which Rust requires to be `Send + Sync`, may be called from anywhere: on the owner core
//! it pushes the task onto the local ready queue (no atomics beyond the `queued` flag);
//! elsewhere it pushes onto the owner's remote queue and kicks the owner if it sleeps.
//! Tasks, the queues they wait in and the loop that runs them refer to each other, so
//! they are defined together here.

use super::error::SpawnError;
use super::idle::IdleHandlers;
use super::join::LocalFuture;
use super::timer::TimerQueue;
use crate::platform::{Instant, Platform};
use crate::rcu::RcuDomain;
use crate::{CoreId, percore};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell, UnsafeCell};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use core::task::Context;
use core::time::Duration;
use crossbeam_queue::SegQueue;
use futures_util::task::{ArcWake, waker_ref};

/// While a core has ready work, it still polls its devices (without waiting) every this
/// many iterations, so a stream of synthetic events cannot starve the network.
const DEVICE_POLL_INTERVAL: u32 = 32;
/// The least idle-poll budget kept before polling stops altogether, and where a budget
/// grows from: 1/16 of the window, and never under [`MIN_IDLE_POLL_FLOOR`] (or the
/// window, if that is shorter).
/// A floor below a peer's round trip locks polling out: each poll from the floor runs
/// out and halves what the sleep before it doubled, so the core sleeps before every
/// event — measured with the shared-memory Messenger, whose 1.6–2.6 µs round trip a
/// 1/64 floor (0.8 µs) never caught: 17 µs round trips, a wake every other message.
/// (Growing to twice the time a sleep lasted instead made the core poll through the
/// 40 µs round trips of a node behind its user-mode network, and on two CPUs took the
/// time its device thread needed: 6–13× Linux TCP's round trip against 2–3×.)
const MIN_IDLE_POLL_FRACTION: u32 = 16;
/// The floor's least length: 3 µs, above the shared-memory Messenger's round trip, so a
/// short window (the hosted default is about a wake's cost) keeps a floor that catches it.
const MIN_IDLE_POLL_FLOOR: Duration = Duration::from_micros(3);

type RemoteEvent = Box<dyn FnOnce() + Send>;

/// What other cores may touch of a core: its inboxes and its sleep flag. Cache-line
/// aligned so one core's traffic does not slow its neighbour.
#[repr(align(128))]
struct CoreInbox {
    /// `spawn_on` closures, each run as one synthetic event.
    events: SegQueue<RemoteEvent>,
    /// Local tasks woken from another core.
    wakes: SegQueue<Arc<Task>>,
    /// True from just before the core checks its inboxes for the last time until it is
    /// awake again. Whoever swaps it to false owes the core a platform wake.
    may_sleep: AtomicBool,
    /// Platform wakes sent to this core (for tests and benchmarks).
    kicks: AtomicU64,
}

/// The node-wide part of a runtime: every core's inbox, the platform and the RCU domain.
pub(crate) struct RuntimeShared {
    platform: Arc<dyn Platform>,
    inboxes: Box<[CoreInbox]>,
    rcu: Arc<RcuDomain>,
    shutting_down: AtomicBool,
    /// How long an idle core keeps polling its devices before it really sleeps.
    idle_poll: core::time::Duration,
}

impl RuntimeShared {
    fn inbox(&self, core: CoreId) -> Option<&CoreInbox> {
        self.inboxes.get(core.index())
    }

    pub(crate) fn num_cores(&self) -> usize {
        self.inboxes.len()
    }

    pub(crate) fn spawn_on(&self, core: CoreId, event: RemoteEvent) -> Result<(), SpawnError> {
        let inbox = self.inbox(core).ok_or(SpawnError::NoSuchCore(core))?;
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(SpawnError::ShuttingDown);
        }
        inbox.events.push(event);
        self.notify(core, inbox);
        Ok(())
    }

    pub(crate) fn push_remote_wake(&self, core: CoreId, task: Arc<Task>) {
        if let Some(inbox) = self.inbox(core) {
            inbox.wakes.push(task);
            self.notify(core, inbox);
        }
    }

    /// Kicks `core` if, and only if, it may be asleep.
    fn notify(&self, core: CoreId, inbox: &CoreInbox) {
        // Pairs with the fence in `CoreContext::sleep`: either the sleeper sees our push,
        // or we see its `may_sleep` (Dekker's pattern; both sides need a full fence).
        fence(Ordering::SeqCst);
        if inbox.may_sleep.load(Ordering::Relaxed) && inbox.may_sleep.swap(false, Ordering::AcqRel)
        {
            inbox.kicks.fetch_add(1, Ordering::Relaxed);
            self.platform.wake(core);
        }
    }

    pub(crate) fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        for (i, inbox) in self.inboxes.iter().enumerate() {
            self.notify(CoreId(i as u32), inbox);
        }
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    pub(crate) fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    pub(crate) fn rcu(&self) -> &Arc<RcuDomain> {
        &self.rcu
    }

    pub(crate) fn kicks(&self, core: CoreId) -> u64 {
        self.inbox(core)
            .map_or(0, |i| i.kicks.load(Ordering::Relaxed))
    }
}

/// One core's event-loop state. Lives on the core's own stack while the loop runs; reached
/// through [`percore::context_ptr`]. Never shared with another core.
pub(crate) struct CoreContext {
    id: CoreId,
    shared: Arc<RuntimeShared>,
    ready: RefCell<VecDeque<Arc<Task>>>,
    /// Every live task of this core, so stopping can drop their futures here, on their core.
    tasks: RefCell<TaskList>,
    pub(crate) timers: RefCell<TimerQueue>,
    pub(crate) idle: IdleHandlers,
    stop_requested: Cell<bool>,
    /// How long this core polls before it sleeps: the runtime's idle-poll window while
    /// polling finds work, less as it does not (see `poll_before_sleep`).
    idle_poll_budget: Cell<Duration>,
    /// Run first when the core stops, still on the core (platforms release their sources).
    pub(crate) exit_hooks: RefCell<Vec<Box<dyn FnOnce()>>>,
}

#[derive(Default)]
struct TaskList {
    slots: Vec<Option<Arc<Task>>>,
    free: Vec<usize>,
}

impl CoreContext {
    /// The calling core's context, if the thread is running an event loop.
    #[inline]
    pub(crate) fn current() -> Option<&'static CoreContext> {
        let ptr = percore::context_ptr().cast::<CoreContext>();
        // Soundness: the pointer is set by `Runtime::run_core` to a `CoreContext` on that
        // thread's stack and cleared before the context is dropped, and only the owning
        // thread can read its thread-local, so while non-null it points to a live context.
        // The `'static` lifetime is a white lie bounded by `run_core`, which outlives every
        // caller on this thread (all of them run inside its loop).
        // SAFETY: by the argument just above.
        unsafe { ptr.as_ref() }
    }

    pub(crate) fn id(&self) -> CoreId {
        self.id
    }

    pub(crate) fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    pub(crate) fn belongs_to(&self, runtime: &Arc<RuntimeShared>) -> bool {
        Arc::ptr_eq(&self.shared, runtime)
    }

    pub(crate) fn push_ready(&self, task: Arc<Task>) {
        self.ready.borrow_mut().push_back(task);
    }

    pub(crate) fn spawn(&self, future: core::pin::Pin<Box<dyn core::future::Future<Output = ()>>>) {
        let task = Task::new(self.id, self.shared.clone(), future);
        let mut tasks = self.tasks.borrow_mut();
        let slot = match tasks.free.pop() {
            Some(slot) => {
                tasks.slots[slot] = Some(task.clone());
                slot
            }
            None => {
                tasks.slots.push(Some(task.clone()));
                tasks.slots.len() - 1
            }
        };
        drop(tasks);
        task.set_slot(self, slot);
        self.push_ready(task);
    }

    pub(crate) fn forget_task(&self, slot: usize) {
        let mut tasks = self.tasks.borrow_mut();
        if let Some(entry) = tasks.slots.get_mut(slot)
            && entry.take().is_some()
        {
            tasks.free.push(slot);
        }
    }

    pub(crate) fn request_stop(&self) {
        self.stop_requested.set(true);
    }

    fn inbox(&self) -> &CoreInbox {
        &self.shared.inboxes[self.id.index()]
    }

    fn has_pending_work(&self) -> bool {
        self.has_pending_work_in(self.inbox())
    }

    /// [`has_pending_work`](Self::has_pending_work) with this core's inbox at hand.
    #[inline]
    fn has_pending_work_in(&self, inbox: &CoreInbox) -> bool {
        !self.ready.borrow().is_empty() || !inbox.events.is_empty() || !inbox.wakes.is_empty()
    }

    /// Runs the loop until the runtime shuts down or this core is asked to stop.
    ///
    /// One iteration, in EbbRT's order: dispatch device events; run one synthetic event
    /// (a `spawn_on` closure) and one ready task; fire due timers; run the idle handlers;
    /// declare a quiescent state. When none of that found work, sleep in the platform until
    /// the next timer deadline, a device event or a wake from another core.
    ///
    /// An iteration is the whole per-request overhead of a core that serves one request at
    /// a time, so it touches nothing it does not need: the clock only while a timer is
    /// armed, the idle handlers through one length check when there are none, and RCU
    /// through three relaxed loads when no grace period waits for this core.
    fn run_loop(&self) {
        let shared = &*self.shared;
        let platform = &*shared.platform;
        let rcu = &*shared.rcu;
        let inbox = self.inbox();
        let mut iterations_since_device_poll = 0u32;
        let mut idle_busy = false;
        // The clock as this iteration's timer step read it, for the sleep that may follow
        // at once (see `sleep`); `Instant::ZERO` when not read, or when idle handlers ran
        // since (a sentinel, not an `Option`: this is the loop's hottest path).
        let mut clock = Instant::ZERO;
        loop {
            if self.stop_requested.get() || shared.is_shutting_down() {
                break;
            }
            if idle_busy || self.has_pending_work_in(inbox) {
                iterations_since_device_poll += 1;
                if iterations_since_device_poll >= DEVICE_POLL_INTERVAL {
                    iterations_since_device_poll = 0;
                    platform.poll_events(self.id, Instant::ZERO);
                }
            } else {
                iterations_since_device_poll = 0;
                self.sleep(platform, rcu, inbox, clock);
            }

            // `is_empty` first: it is two loads, while `pop` on an empty queue also fences.
            if !inbox.wakes.is_empty() {
                while let Some(task) = inbox.wakes.pop() {
                    self.push_ready(task);
                }
            }
            if !inbox.events.is_empty()
                && let Some(event) = inbox.events.pop()
            {
                event();
            }
            let task = self.ready.borrow_mut().pop_front();
            if let Some(task) = task {
                task.run(self);
            }
            clock = if self.timers.borrow().is_empty() {
                Instant::ZERO
            } else {
                let now = platform.now();
                self.timers.borrow_mut().expire(now);
                now
            };
            idle_busy = false;
            if !self.idle.is_empty() {
                // Handlers take their own time: a sleep after them reads the clock anew.
                clock = Instant::ZERO;
                idle_busy = self.idle.run();
            }
            rcu.loop_quiescent_state(self.id);
        }
    }

    /// Adaptive polling (EbbRT): before blocking, keep polling devices without waiting for
    /// up to the core's idle-poll budget. Under steady traffic the next event arrives
    /// within it and the core never pays to fall asleep and be woken.
    /// Returns true if that found work.
    ///
    /// Polling that finds nothing is CPU spent for no request, so the budget adapts: a
    /// poll that finds work restores the runtime's whole window, one that runs out halves
    /// it (down to none below the floor, `idle_poll_floor`), and a sleep a
    /// device event ended within the window — which polling would have caught — doubles
    /// it again (see `sleep`). At a low request rate the core soon sleeps at once; as the
    /// gaps shrink below the window it polls again.
    fn poll_before_sleep(&self, platform: &dyn Platform, rcu: &RcuDomain) -> bool {
        let budget = self.idle_poll_budget.get();
        if budget.is_zero() {
            return false;
        }
        let until = platform.now() + budget;
        let deadline = self
            .timers
            .borrow_mut()
            .next_deadline()
            .unwrap_or(Instant::FAR_FUTURE);
        let mut polled_in_vain = false;
        loop {
            if platform.poll_events(self.id, Instant::ZERO) > 0 || self.has_pending_work() {
                // Work the first poll found was there already: only work that came while
                // polling shows that polling paid.
                if polled_in_vain {
                    self.idle_poll_budget.set(self.shared.idle_poll);
                }
                return true;
            }
            polled_in_vain = true;
            let now = platform.now();
            if now >= until || now >= deadline || self.shared.is_shutting_down() {
                if now >= until && now < deadline {
                    self.shrink_idle_poll();
                }
                return now >= deadline;
            }
            // Spinning holds no RCU references: let grace periods go on.
            rcu.loop_quiescent_state(self.id);
            core::hint::spin_loop();
        }
    }

    /// Sleeps in the platform until the next timer deadline, a device event or a wake.
    /// `clock` is the loop's reading of the clock at the end of the iteration before, if
    /// nothing but the loop's own bookkeeping ran since (else `Instant::ZERO`): the
    /// platform turns the deadline into a timeout from it instead of reading the clock
    /// once more (a core serving one request at a time sleeps once per request, and a
    /// timer — memcached's sweep — is nearly always armed).
    fn sleep(
        &self,
        platform: &dyn Platform,
        rcu: &RcuDomain,
        inbox: &CoreInbox,
        mut clock: Instant,
    ) {
        if !self.idle_poll_budget.get().is_zero() {
            if self.poll_before_sleep(platform, rcu) {
                return;
            }
            // It spun: the reading is old.
            clock = Instant::ZERO;
        }
        inbox.may_sleep.store(true, Ordering::SeqCst);
        // Pairs with the fence in `RuntimeShared::notify`.
        fence(Ordering::SeqCst);
        if self.has_pending_work_in(inbox)
            || self.shared.is_shutting_down()
            || self.stop_requested.get()
        {
            inbox.may_sleep.store(false, Ordering::Relaxed);
            return;
        }
        let deadline = self
            .timers
            .borrow_mut()
            .next_deadline()
            .unwrap_or(Instant::FAR_FUTURE);
        rcu.loop_enter_idle(self.id);
        let window = self.shared.idle_poll;
        if !window.is_zero() && self.idle_poll_budget.get() < window {
            // Polling was cut short: find out whether it would have caught this device
            // event (a wake-up with none, or a timer, says nothing about that).
            let asleep_since = platform.now();
            let dispatched = platform.poll_events(self.id, deadline);
            let asleep = platform.now() - asleep_since;
            // No time at all: a platform that hands over events found at once in the
            // next poll, not this one (the test platform does) — no evidence either way.
            if dispatched > 0 && !asleep.is_zero() && asleep < window {
                self.grow_idle_poll();
            }
        } else if clock != Instant::ZERO && deadline != Instant::FAR_FUTURE {
            platform.poll_events_from(self.id, deadline, clock);
        } else {
            platform.poll_events(self.id, deadline);
        }
        rcu.exit_idle(self.id);
        inbox.may_sleep.store(false, Ordering::Relaxed);
    }

    /// The least budget kept before polling stops, and where a budget grows from.
    fn idle_poll_floor(&self) -> Duration {
        let window = self.shared.idle_poll;
        (window / MIN_IDLE_POLL_FRACTION).max(MIN_IDLE_POLL_FLOOR.min(window))
    }

    /// Halves the idle-poll budget after a poll that found nothing; below the floor, none.
    fn shrink_idle_poll(&self) {
        let half = self.idle_poll_budget.get() / 2;
        let floor = self.idle_poll_floor();
        self.idle_poll_budget
            .set(if half < floor { Duration::ZERO } else { half });
    }

    /// Doubles the idle-poll budget (from the floor when it was none), up to the window.
    fn grow_idle_poll(&self) {
        let window = self.shared.idle_poll;
        let floor = self.idle_poll_floor();
        let grown = (self.idle_poll_budget.get() * 2).max(floor);
        self.idle_poll_budget.set(grown.min(window));
    }

    /// Drops everything this core still owns, on this core.
    fn tear_down(&self) {
        loop {
            let hooks = core::mem::take(&mut *self.exit_hooks.borrow_mut());
            if hooks.is_empty() {
                break;
            }
            hooks.into_iter().rev().for_each(|hook| hook());
        }
        // Dropping futures can wake or spawn other tasks; repeat until nothing is left.
        loop {
            let tasks: Vec<Arc<Task>> = {
                let mut list = self.tasks.borrow_mut();
                list.free.clear();
                list.slots.drain(..).flatten().collect()
            };
            if tasks.is_empty() {
                break;
            }
            for task in &tasks {
                task.cancel(self);
            }
        }
        self.ready.borrow_mut().clear();
        let inbox = self.inbox();
        while inbox.wakes.pop().is_some() {}
        while inbox.events.pop().is_some() {}
        drop(self.idle.clear());
        *self.timers.borrow_mut() = TimerQueue::default();
    }
}

/// A runtime: `num_cores` event loops over one [`Platform`].
///
/// The platform's runtime crate (hosted, native, or the test platform) creates it and calls
/// [`run_core`](Self::run_core) once on each core's thread of control.
pub struct Runtime {
    shared: Arc<RuntimeShared>,
}

impl Runtime {
    /// A runtime of `num_cores` cores (at least one, at most
    /// [`MAX_CORES`](crate::MAX_CORES)).
    pub fn new(platform: Arc<dyn Platform>, num_cores: usize) -> Result<Runtime, SpawnError> {
        Self::with_idle_poll(platform, num_cores, core::time::Duration::ZERO)
    }

    /// Like [`new`](Self::new), but an idle core polls its devices for up to `idle_poll`
    /// before it sleeps (adaptive polling: lower latency under load, at the price of
    /// spinning that long after the last event).
    pub fn with_idle_poll(
        platform: Arc<dyn Platform>,
        num_cores: usize,
        idle_poll: core::time::Duration,
    ) -> Result<Runtime, SpawnError> {
        if num_cores == 0 || num_cores > crate::MAX_CORES {
            return Err(SpawnError::BadCoreCount(num_cores));
        }
        let inboxes = (0..num_cores)
            .map(|_| CoreInbox {
                events: SegQueue::new(),
                wakes: SegQueue::new(),
                may_sleep: AtomicBool::new(false),
                kicks: AtomicU64::new(0),
            })
            .collect();
        let rcu = Arc::new(RcuDomain::new(num_cores));
        let shared = Arc::new(RuntimeShared {
            platform,
            inboxes,
            rcu,
            shutting_down: AtomicBool::new(false),
            idle_poll,
        });
        Ok(Runtime { shared })
    }

    /// The node-wide state, for [`Handle`](super::Handle)s.
    pub(crate) fn shared(&self) -> &Arc<RuntimeShared> {
        &self.shared
    }

    /// Runs core `core`'s event loop on the calling thread until the runtime shuts down.
    /// `init` runs first, on the core, and is where the first tasks get spawned.
    ///
    /// # Panics
    ///
    /// If `core` is out of range or the thread is already running a core.
    pub fn run_core(&self, core: CoreId, init: impl FnOnce()) {
        assert!(
            core.index() < self.shared.num_cores(),
            "{core} is not part of this runtime"
        );
        assert!(
            CoreContext::current().is_none(),
            "this thread already runs an Ebbflow core"
        );
        let ctx = CoreContext {
            id: core,
            shared: self.shared.clone(),
            ready: RefCell::new(VecDeque::new()),
            tasks: RefCell::new(TaskList::default()),
            timers: RefCell::new(TimerQueue::default()),
            idle: IdleHandlers::default(),
            stop_requested: Cell::new(false),
            idle_poll_budget: Cell::new(self.shared.idle_poll),
            exit_hooks: RefCell::new(Vec::new()),
        };
        /// Leaves the thread as it found it, even if an event panics.
        struct Exit<'a>(&'a CoreContext);
        impl Drop for Exit<'_> {
            fn drop(&mut self) {
                // A core that dies of a panic takes the node down with it rather than leave
                // its work (and whoever awaits it) stranded.
                #[cfg(feature = "std")]
                if std::thread::panicking() {
                    self.0.shared.shutdown();
                }
                self.0.tear_down();
                // An exited core holds no RCU references: let grace periods pass it by.
                self.0.shared.rcu.enter_idle(self.0.id);
                percore::set_context_ptr(core::ptr::null());
                percore::set_current_core(None);
                percore::clear_reps();
            }
        }
        percore::set_current_core(Some(core));
        percore::set_context_ptr((&ctx as *const CoreContext).cast());
        let _exit = Exit(&ctx);
        init();
        ctx.run_loop();
    }

    /// Platform wakes sent to `core` so far (a running core is never kicked).
    pub fn kicks(&self, core: CoreId) -> u64 {
        self.shared.kicks(core)
    }
}

/// A future that lives and runs on one core (see the module docs).
pub(crate) struct Task {
    owner: CoreId,
    runtime: Arc<RuntimeShared>,
    /// Set while the task sits in a ready queue, so a burst of wakes queues it once.
    queued: AtomicBool,
    /// Index in the owner's task list. Owner core only.
    slot: Cell<usize>,
    /// `None` once the task has completed or was cancelled. Owner core only.
    future: UnsafeCell<Option<LocalFuture>>,
}

// SAFETY: `slot` and `future` are touched only on the owner core: by `run`, which the owner's
// event loop calls for tasks popped from its own ready queue, and by `cancel`/`set_slot`,
// called by the owner when it spawns or stops. A task is dropped off the owner core only
// after its future is `None` (the owner's task list holds a reference until then). The
// other fields are immutable or atomic.
unsafe impl Send for Task {}
// SAFETY: as for `Send`: shared access from other cores reads only `owner`, `runtime` and
// the atomic `queued` flag.
unsafe impl Sync for Task {}

impl Task {
    pub(crate) fn new(
        owner: CoreId,
        runtime: Arc<RuntimeShared>,
        future: LocalFuture,
    ) -> Arc<Task> {
        Arc::new(Task {
            owner,
            runtime,
            queued: AtomicBool::new(true),
            slot: Cell::new(usize::MAX),
            future: UnsafeCell::new(Some(future)),
        })
    }

    pub(crate) fn set_slot(&self, ctx: &CoreContext, slot: usize) {
        debug_assert_eq!(ctx.id(), self.owner);
        self.slot.set(slot);
    }

    /// Polls the task once. Returns true if it completed. Owner core only (`ctx` proves it).
    pub(crate) fn run(self: &Arc<Self>, ctx: &CoreContext) -> bool {
        assert_eq!(ctx.id(), self.owner, "a task ran off its owner core");
        // Clear before polling: a wake during the poll must queue the task again.
        self.queued.store(false, Ordering::Release);
        let waker = waker_ref(self);
        let mut cx = Context::from_waker(&waker);
        // SAFETY: we are on the owner core (asserted above), the only place `future` is
        // touched, and no other borrow of it is live: a future's poll cannot re-enter the
        // event loop, so the task cannot be polled recursively.
        let future = unsafe { &mut *self.future.get() };
        let Some(fut) = future.as_mut() else {
            return false;
        };
        if fut.as_mut().poll(&mut cx).is_ready() {
            *future = None;
            ctx.forget_task(self.slot.get());
            return true;
        }
        false
    }

    /// Drops the future without completing it (the core is stopping). Owner core only.
    pub(crate) fn cancel(&self, ctx: &CoreContext) {
        assert_eq!(
            ctx.id(),
            self.owner,
            "a task was cancelled off its owner core"
        );
        // SAFETY: owner core, and not inside this task's poll (called only by the loop's
        // shutdown path), so no other borrow of `future` exists.
        let future = unsafe { (*self.future.get()).take() };
        drop(future);
    }
}

impl ArcWake for Task {
    fn wake(self: Arc<Self>) {
        Task::schedule(WakeRef::Owned(self));
    }

    fn wake_by_ref(task: &Arc<Self>) {
        Task::schedule(WakeRef::Borrowed(task));
    }
}

/// A waking reference: by value (no reference-count traffic) or borrowed (cloned if queued).
enum WakeRef<'a> {
    Owned(Arc<Task>),
    Borrowed(&'a Arc<Task>),
}

impl WakeRef<'_> {
    fn task(&self) -> &Arc<Task> {
        match self {
            WakeRef::Owned(task) => task,
            WakeRef::Borrowed(task) => task,
        }
    }

    fn into_arc(self) -> Arc<Task> {
        match self {
            WakeRef::Owned(task) => task,
            WakeRef::Borrowed(task) => task.clone(),
        }
    }
}

impl Task {
    fn schedule(waking: WakeRef<'_>) {
        let task = waking.task();
        match CoreContext::current() {
            Some(ctx) if ctx.id() == task.owner && ctx.belongs_to(&task.runtime) => {
                // On the owner core a plain load and store suffice: if another core sets
                // the flag at the same moment, the task is queued twice and polled once
                // more than needed, which futures must tolerate anyway.
                if task.queued.load(Ordering::Relaxed) {
                    return;
                }
                task.queued.store(true, Ordering::Relaxed);
                ctx.push_ready(waking.into_arc());
            }
            _ => {
                if task.queued.swap(true, Ordering::AcqRel) {
                    return;
                }
                let owner = task.owner;
                let runtime = task.runtime.clone();
                runtime.push_remote_wake(owner, waking.into_arc());
            }
        }
    }
}
