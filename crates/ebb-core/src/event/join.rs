//! Tasks: futures that live and run on one core.
//!
//! A task is polled only on its owner core, so its future need not be `Send`. Its waker,
//! which Rust requires to be `Send + Sync`, may be called from anywhere: on the owner core
//! it pushes the task onto the local ready queue (no atomics beyond the `queued` flag);
//! elsewhere it pushes onto the owner's remote queue and kicks the owner if it sleeps.

use super::runtime::{CoreContext, RuntimeShared};
use crate::CoreId;
use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::sync::Arc;
use core::cell::{Cell, RefCell, UnsafeCell};
use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, Ordering};
use core::task::{Context, Poll, Waker};
use futures_util::task::{ArcWake, waker_ref};

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

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

/// Shared between a spawned task and its [`JoinHandle`]; both live on one core.
struct JoinState<T> {
    output: Option<T>,
    waiter: Option<Waker>,
    finished: bool,
}

/// Awaits the output of a task started with [`spawn_local`](super::spawn_local).
///
/// Dropping the handle detaches the task; it keeps running.
#[must_use = "dropping a JoinHandle detaches the task"]
pub struct JoinHandle<T> {
    state: Rc<RefCell<JoinState<T>>>,
}

impl<T> JoinHandle<T> {
    /// Whether the task has completed.
    pub fn is_finished(&self) -> bool {
        self.state.borrow().finished
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut state = self.state.borrow_mut();
        match state.output.take() {
            Some(output) => Poll::Ready(output),
            None => {
                assert!(
                    !state.finished,
                    "JoinHandle polled after it returned the output"
                );
                state.waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Wraps `future` so its output lands in a [`JoinHandle`].
pub(crate) fn with_join_handle<F>(future: F) -> (LocalFuture, JoinHandle<F::Output>)
where
    F: Future + 'static,
{
    let state = Rc::new(RefCell::new(JoinState {
        output: None,
        waiter: None,
        finished: false,
    }));
    let task_state = state.clone();
    let wrapped = Box::pin(async move {
        let output = future.await;
        let waiter = {
            let mut s = task_state.borrow_mut();
            s.output = Some(output);
            s.finished = true;
            s.waiter.take()
        };
        if let Some(w) = waiter {
            w.wake();
        }
    });
    (wrapped, JoinHandle { state })
}
