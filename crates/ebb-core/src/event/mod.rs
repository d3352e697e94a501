//! The per-core event loop, its executor, timers and idle handlers.
//!
//! Each core runs one non-preemptive loop (see [`Runtime::run_core`]). Events run to
//! completion; a task that awaits gives the core back — that is EbbRT's "cooperative thread
//! with blocking semantics", spelled `async`/`.await`.
//!
//! * [`spawn_local`] starts a task on the calling core. Its future never leaves the core,
//!   so it need not be `Send`.
//! * [`spawn_on`] sends a `Send` closure to another core, where it runs as one synthetic
//!   event; [`run_on`] does the same and returns a future of the closure's result.
//! * [`sleep`], [`sleep_until`] and [`timeout`] use the core's timer heap; the loop passes
//!   in the platform's time.
//! * [`add_idle_handler`] installs recurring work for when the core has nothing else to do.
//!
//! Errors are values: sending to a core that does not exist, or to a runtime that is shutting
//! down, returns a [`SpawnError`]. Functions documented as "on a core" panic when called from
//! a thread that runs no event loop, since that is a programming error, not an input.

mod error;
mod idle;
mod join;
#[allow(unsafe_code)] // listed in the crate root
mod runtime;
mod sleep;
#[cfg(feature = "std")]
mod threads;
mod timer;

pub use error::SpawnError;
pub use idle::{IdleId, IdleStatus};
pub use join::JoinHandle;
pub use runtime::Runtime;
pub use sleep::{Elapsed, Sleep, Timeout, sleep, sleep_until, timeout};
#[cfg(feature = "std")]
pub use threads::{RunError, run_on_threads};

use crate::CoreId;
use crate::future::{PromiseFuture, promise};
use crate::platform::{Instant, Platform};
use crate::rcu::RcuDomain;
use alloc::boxed::Box;
use alloc::sync::Arc;
use core::fmt;
use core::future::Future;
use runtime::{CoreContext, RuntimeShared};

fn context() -> &'static CoreContext {
    match CoreContext::current() {
        Some(ctx) => ctx,
        None => panic!("called outside an Ebbflow core (no event loop runs on this thread)"),
    }
}

/// Starts `future` as a task on the calling core. On a core.
pub fn spawn_local<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
{
    let (task, handle) = join::with_join_handle(future);
    context().spawn(task);
    handle
}

/// Runs `f` on `core` as one synthetic event. Callable on a core; elsewhere use a [`Handle`].
pub fn spawn_on(core: CoreId, f: impl FnOnce() + Send + 'static) -> Result<(), SpawnError> {
    let ctx = CoreContext::current().ok_or(SpawnError::NotOnCore)?;
    ctx.shared().spawn_on(core, Box::new(f))
}

/// Runs `f` on `core` and resolves to its result.
pub fn run_on<R: Send + 'static>(
    core: CoreId,
    f: impl FnOnce() -> R + Send + 'static,
) -> impl Future<Output = Result<R, SpawnError>> {
    let (promise, result) = promise();
    let sent = spawn_on(core, move || {
        // The requester may have gone away; then nobody wants the result.
        let _ = promise.set(f());
    });
    async move {
        sent?;
        result.await.map_err(|_| SpawnError::Dropped)
    }
}

/// Starts the task `make()` builds on `core` (the future itself need not be `Send`, only
/// the closure that builds it) and resolves to the task's output.
pub fn spawn_local_on<Fut, R>(
    core: CoreId,
    make: impl FnOnce() -> Fut + Send + 'static,
) -> impl Future<Output = Result<R, SpawnError>>
where
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    let (promise, result): (_, PromiseFuture<R>) = promise();
    let sent = spawn_on(core, move || {
        let fut = make();
        let _detached = spawn_local(async move {
            let _ = promise.set(fut.await);
        });
    });
    async move {
        sent?;
        result.await.map_err(|_| SpawnError::Dropped)
    }
}

/// The calling core. On a core.
pub fn core_id() -> CoreId {
    context().id()
}

/// How many cores the calling core's runtime has. On a core.
pub fn num_cores() -> usize {
    context().shared().num_cores()
}

/// The platform clock's current time. On a core.
pub fn now() -> Instant {
    context().shared().platform().now()
}

/// Installs `handler` to run on every iteration of the calling core's loop in which there
/// is no other work, until removed. On a core.
pub fn add_idle_handler(handler: impl FnMut() -> IdleStatus + 'static) -> IdleId {
    context().idle.add(Box::new(handler))
}

/// Removes an idle handler of the calling core (no effect if already removed). On a core.
pub fn remove_idle_handler(id: IdleId) {
    context().idle.remove(id)
}

/// Stops every core's loop; `Runtime::run_core` then returns on each. On a core; elsewhere
/// use [`Handle::shutdown`].
pub fn shutdown() {
    context().shared().shutdown()
}

/// Registers `hook` to run when the calling core stops, on the core, before its remaining
/// tasks are dropped (hooks run in reverse order of registration). On a core.
pub fn at_core_exit(hook: impl FnOnce() + 'static) {
    context().exit_hooks.borrow_mut().push(Box::new(hook));
}

/// Stops only the calling core's loop (the others go on). On a core.
pub fn stop_this_core() {
    context().request_stop()
}

/// Gives the core to other ready work once, then continues.
pub async fn yield_now() {
    let mut yielded = false;
    core::future::poll_fn(|cx| {
        if yielded {
            core::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            core::task::Poll::Pending
        }
    })
    .await
}

/// A handle to a runtime, usable from any thread (cores or not).
#[derive(Clone)]
pub struct Handle {
    shared: Arc<RuntimeShared>,
}

impl Handle {
    pub(crate) fn from_shared(shared: Arc<RuntimeShared>) -> Handle {
        Handle { shared }
    }

    /// The runtime of the calling core, if the thread runs one.
    pub fn current() -> Option<Handle> {
        CoreContext::current().map(|ctx| Handle::from_shared(ctx.shared().clone()))
    }

    /// Runs `f` on `core` as one synthetic event.
    pub fn spawn_on(
        &self,
        core: CoreId,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), SpawnError> {
        self.shared.spawn_on(core, Box::new(f))
    }

    /// Stops every core's loop.
    pub fn shutdown(&self) {
        self.shared.shutdown()
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.is_shutting_down()
    }

    /// Number of cores.
    pub fn num_cores(&self) -> usize {
        self.shared.num_cores()
    }

    /// The runtime's RCU domain, for building RCU-protected structures.
    pub fn rcu(&self) -> &Arc<RcuDomain> {
        self.shared.rcu()
    }

    /// The runtime's platform.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        self.shared.platform()
    }

    /// Platform wakes sent to `core` so far.
    pub fn kicks(&self, core: CoreId) -> u64 {
        self.shared.kicks(core)
    }
}

impl Runtime {
    /// A handle for reaching this runtime from any thread.
    pub fn handle(&self) -> Handle {
        Handle::from_shared(self.shared().clone())
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("cores", &self.num_cores())
            .finish()
    }
}
