//! A task's [`JoinHandle`]: how the spawner of a local task awaits its output. The task
//! itself (its future, its waker, its queues) is the event loop's, in `runtime`.

use alloc::boxed::Box;
use alloc::rc::Rc;
use core::cell::RefCell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

/// A task's future: polled only on its owner core, so it need not be `Send`.
pub(crate) type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

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
