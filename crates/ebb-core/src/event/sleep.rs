//! Sleeping and deadlines on the calling core's timer heap.

use super::runtime::CoreContext;
use super::timer::TimerKey;
use crate::platform::Instant;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

/// A future that completes once its deadline has passed. See [`sleep`].
#[must_use = "a Sleep does nothing unless awaited"]
pub struct Sleep {
    deadline: Option<Instant>,
    after: Duration,
    key: Option<TimerKey>,
}

/// Completes `duration` after its first poll. On a core.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        deadline: None,
        after: duration,
        key: None,
    }
}

/// Completes once the platform clock reaches `deadline`. On a core.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline: Some(deadline),
        after: Duration::ZERO,
        key: None,
    }
}

impl Sleep {
    /// The deadline, once known (after the first poll for [`sleep`]).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let ctx = super::context();
        let mut timers = ctx.timers.borrow_mut();
        if let Some(key) = self.key {
            if timers.has_fired(key) {
                timers.remove(key);
                self.key = None;
                return Poll::Ready(());
            }
            timers.set_waker(key, cx.waker());
            return Poll::Pending;
        }
        let now = ctx.shared().platform().now();
        let after = self.after;
        let deadline = *self.deadline.get_or_insert(now + after);
        if deadline <= now {
            return Poll::Ready(());
        }
        self.key = Some(timers.insert(deadline, cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // The core may be tearing down (context gone): then the heap goes too.
            if let Some(ctx) = CoreContext::current()
                && let Ok(mut timers) = ctx.timers.try_borrow_mut()
            {
                timers.remove(key);
            }
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The deadline of a [`timeout`] passed before its future completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl core::error::Error for Elapsed {}

pin_project_lite::pin_project! {
    /// A future with a deadline. See [`timeout`].
    #[must_use = "a Timeout does nothing unless awaited"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

/// Runs `future` for at most `duration`; resolves to its output or [`Elapsed`]. On a core.
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep(duration),
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}
