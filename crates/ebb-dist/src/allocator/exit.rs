//! A node's exit notification: one outcome, published once, seen by blocking waiters
//! (with a bound) and by futures (woken from the publishing thread).

use std::string::String;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use std::vec::Vec;

/// How a node ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeOutcome {
    /// The guest exited with this code.
    Exited(u32),
    /// The guest panicked: the monitor's report (message and symbolized backtrace).
    Panicked(String),
    /// The guest faulted or broke the hypercall ABI, or the monitor failed: its report.
    Crashed(String),
    /// The spec's timeout ended it.
    TimedOut,
    /// [`NodeHandle::free`](super::NodeHandle::free) stopped it.
    Freed,
    /// It ended in a way the backend could not attribute (a child process killed by a
    /// signal, say): what is known.
    Lost(String),
}

impl NodeOutcome {
    /// Whether the guest ended on its own with code 0.
    pub fn is_clean_exit(&self) -> bool {
        *self == NodeOutcome::Exited(0)
    }
}

#[derive(Default)]
struct State {
    outcome: Option<NodeOutcome>,
    /// When it was published.
    at: Option<Instant>,
    wakers: Vec<Waker>,
}

/// A node's exit notification. Cheap to clone; every clone sees the one outcome.
#[derive(Clone, Default)]
pub struct NodeExit {
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl std::fmt::Debug for NodeExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("NodeExit").field(&self.outcome()).finish()
    }
}

impl NodeExit {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes `outcome`, unless one was published before; wakes every waiter.
    pub(crate) fn publish(&self, outcome: NodeOutcome) {
        let wakers = {
            let mut state = self.lock();
            if state.outcome.is_some() {
                return;
            }
            state.outcome = Some(outcome);
            state.at = Some(Instant::now());
            std::mem::take(&mut state.wakers)
        };
        self.shared.1.notify_all();
        for w in wakers {
            w.wake();
        }
    }

    /// The outcome, if the node has ended.
    pub fn outcome(&self) -> Option<NodeOutcome> {
        self.lock().outcome.clone()
    }

    /// When the outcome was published (for measuring detection latency).
    pub fn ended_at(&self) -> Option<Instant> {
        self.lock().at
    }

    /// Waits up to `timeout` for the outcome.
    pub fn wait(&self, timeout: Duration) -> Option<NodeOutcome> {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if let Some(o) = &state.outcome {
                return Some(o.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            state = self
                .shared
                .1
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A future of the outcome (for a front end's event loop): woken by the thread that
    /// publishes it.
    pub fn ended(&self) -> NodeExitFuture {
        NodeExitFuture { exit: self.clone() }
    }
}

/// The future of [`NodeExit::ended`].
#[derive(Debug)]
pub struct NodeExitFuture {
    exit: NodeExit,
}

impl core::future::Future for NodeExitFuture {
    type Output = NodeOutcome;

    fn poll(self: core::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<NodeOutcome> {
        let mut state = self.exit.lock();
        if let Some(o) = &state.outcome {
            return Poll::Ready(o.clone());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
