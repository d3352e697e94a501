//! A one-shot promise/future pair, usable across cores.

use alloc::sync::Arc;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

/// The promise was dropped without a value: its producer is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canceled;

impl fmt::Display for Canceled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the promise was dropped before it was fulfilled")
    }
}

impl core::error::Error for Canceled {}

enum State<T> {
    /// No value yet; the consumer's waker, once it has polled.
    Waiting(Option<Waker>),
    Fulfilled(T),
    /// The value was taken, or the promise was dropped unfulfilled.
    Done,
}

struct Shared<T> {
    // Two parties and a few instructions under the lock: a spin lock is the right tool,
    // and it works on every platform (no OS mutex in no_std).
    state: spin::Mutex<State<T>>,
}

/// The producing half: fulfil it once with [`set`](Self::set), from any core.
pub struct Promise<T> {
    shared: Arc<Shared<T>>,
}

/// The consuming half: resolves to the promised value, or [`Canceled`].
#[must_use = "a PromiseFuture does nothing unless awaited"]
pub struct PromiseFuture<T> {
    shared: Arc<Shared<T>>,
}

/// A new, unfulfilled promise and the future of its value.
pub fn promise<T>() -> (Promise<T>, PromiseFuture<T>) {
    let shared = Arc::new(Shared {
        state: spin::Mutex::new(State::Waiting(None)),
    });
    (
        Promise {
            shared: shared.clone(),
        },
        PromiseFuture { shared },
    )
}

impl<T> Promise<T> {
    /// Fulfils the promise, waking the consumer wherever it waits. If the consumer is gone
    /// the value is handed back.
    pub fn set(self, value: T) -> Result<(), T> {
        if Arc::strong_count(&self.shared) == 1 {
            return Err(value);
        }
        let waker = {
            let mut state = self.shared.state.lock();
            match core::mem::replace(&mut *state, State::Fulfilled(value)) {
                State::Waiting(waker) => waker,
                // Unreachable: only `set` (which consumes self) or our Drop leave `Waiting`.
                State::Fulfilled(_) | State::Done => None,
            }
        };
        // Wake outside the lock: waking may run arbitrary code (queue pushes, kicks).
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Whether the consumer has been dropped (the value would go nowhere).
    pub fn is_canceled(&self) -> bool {
        Arc::strong_count(&self.shared) == 1
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.state.lock();
            match &mut *state {
                State::Waiting(waker) => {
                    let waker = waker.take();
                    *state = State::Done;
                    waker
                }
                _ => None,
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Future for PromiseFuture<T> {
    type Output = Result<T, Canceled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.state.lock();
        match core::mem::replace(&mut *state, State::Done) {
            State::Fulfilled(value) => Poll::Ready(Ok(value)),
            State::Done => Poll::Ready(Err(Canceled)),
            State::Waiting(old) => {
                let waker = match old {
                    Some(w) if w.will_wake(cx.waker()) => w,
                    _ => cx.waker().clone(),
                };
                *state = State::Waiting(Some(waker));
                Poll::Pending
            }
        }
    }
}

impl<T> fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Promise")
            .field("canceled", &self.is_canceled())
            .finish()
    }
}

impl<T> fmt::Debug for PromiseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PromiseFuture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::string::String;

    #[test]
    fn value_set_before_poll_is_ready() {
        let (p, f) = promise();
        p.set(7).unwrap();
        assert_eq!(f.now_or_never(), Some(Ok(7)));
    }

    #[test]
    fn dropped_promise_cancels_and_wakes() {
        let (p, mut f) = promise::<u32>();
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        drop(p);
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready(Err(Canceled)));
    }

    #[test]
    fn set_after_consumer_dropped_returns_the_value() {
        let (p, f) = promise();
        drop(f);
        assert!(p.is_canceled());
        assert_eq!(p.set(5), Err(5));
    }

    #[test]
    fn fulfils_across_threads() {
        let (p, f) = promise();
        let t = std::thread::spawn(move || p.set(String::from("hi")).unwrap());
        let v = futures_executor_lite(f);
        t.join().unwrap();
        assert_eq!(v, Ok(String::from("hi")));
    }

    /// Busy-polls a future with a no-op waker (enough for a cross-thread hand-off test).
    fn futures_executor_lite<F: Future + Unpin>(mut f: F) -> F::Output {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(v) = Pin::new(&mut f).poll(&mut cx) {
                return v;
            }
            std::thread::yield_now();
        }
    }
}
