//! A replicated counter: every node adds, one home node holds the total.
//!
//! [`Consistency::Synchronous`]: each [`add`](CounterClient::add) is a call to the home
//! and returns the new total — every node always sees every update before it goes on.
//! [`Consistency::Merged`]: adds are summed locally and sent by
//! [`flush`](CounterClient::flush) (the application calls it, or runs
//! [`merge_every`](CounterClient::merge_every)); [`local_view`](CounterClient::local_view)
//! is the last total heard plus what this node has not sent yet. Either way the home's
//! total after every node has flushed is exact: each delta is sent once, and a failed
//! send keeps it pending.

use core::cell::Cell;
use core::sync::atomic::{AtomicI64, Ordering};
use core::time::Duration;

use alloc::rc::Rc;
use ebb::EbbId;
use serde::{Deserialize, Serialize};

use crate::node::NodeId;
use crate::remote::{Caller, RemoteError, Served, decode, encode};

/// The message kind a counter's home registers.
pub const COUNTER_KIND: u16 = 1;

/// When updates reach the home.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// Each add is a call to the home.
    Synchronous,
    /// Adds accumulate locally until [`CounterClient::flush`].
    Merged,
}

/// A call to the counter's home.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterRequest {
    /// Add this much; answered with the new total.
    Add(i64),
    /// Answered with the total.
    Read,
}

/// The home's side: the total. Shared by the cores that serve calls (a Messenger runs a
/// handler on the core that owns the caller's connection), so atomic.
#[derive(Debug, Default)]
pub struct CounterHome {
    total: AtomicI64,
}

impl CounterHome {
    /// A counter at zero.
    pub fn new() -> CounterHome {
        CounterHome::default()
    }

    /// The total.
    pub fn total(&self) -> i64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Adds locally (the home's own updates need no call); the new total.
    pub fn add(&self, n: i64) -> i64 {
        self.total.fetch_add(n, Ordering::Relaxed).wrapping_add(n)
    }

    /// Answers one call (register this for [`COUNTER_KIND`]).
    pub fn serve(&self, request: &ebb::IOBufChain) -> Served {
        let total = match decode::<CounterRequest>(request).map_err(|e| e.to_string())? {
            CounterRequest::Add(n) => self.add(n),
            CounterRequest::Read => self.total(),
        };
        encode(&total).map_err(|e| e.to_string())
    }
}

use alloc::string::ToString;

/// A node's side of a replicated counter.
pub struct CounterClient {
    caller: Rc<dyn Caller>,
    ebb: EbbId,
    home: NodeId,
    mode: Consistency,
    pending: Cell<i64>,
    last_total: Cell<i64>,
}

impl core::fmt::Debug for CounterClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CounterClient")
            .field("ebb", &self.ebb)
            .field("home", &self.home)
            .field("mode", &self.mode)
            .field("pending", &self.pending.get())
            .finish()
    }
}

impl CounterClient {
    /// The counter `ebb` whose home is `home`, updated with `mode`.
    pub fn new(caller: Rc<dyn Caller>, ebb: EbbId, home: NodeId, mode: Consistency) -> Self {
        CounterClient {
            caller,
            ebb,
            home,
            mode,
            pending: Cell::new(0),
            last_total: Cell::new(0),
        }
    }

    /// Adds `n`: synchronously, the new total; merged, this node's local view.
    pub async fn add(&self, n: i64) -> Result<i64, RemoteError> {
        match self.mode {
            Consistency::Synchronous => self.send(CounterRequest::Add(n)).await,
            Consistency::Merged => {
                self.pending.set(self.pending.get().wrapping_add(n));
                Ok(self.local_view())
            }
        }
    }

    /// Sends what this node added since the last flush; the home's total after it. A
    /// failed flush keeps the delta pending, so nothing is lost or counted twice by it.
    pub async fn flush(&self) -> Result<i64, RemoteError> {
        let delta = self.pending.replace(0);
        match self.send(CounterRequest::Add(delta)).await {
            Ok(total) => Ok(total),
            Err(e) => {
                self.pending.set(self.pending.get().wrapping_add(delta));
                Err(e)
            }
        }
    }

    /// The home's total (a call), after flushing in merged mode.
    pub async fn read(&self) -> Result<i64, RemoteError> {
        match self.mode {
            Consistency::Synchronous => self.send(CounterRequest::Read).await,
            Consistency::Merged => self.flush().await,
        }
    }

    /// The last total heard from the home plus this node's unsent adds (no call).
    pub fn local_view(&self) -> i64 {
        self.last_total.get().wrapping_add(self.pending.get())
    }

    /// Flushes every `period` until a flush fails; returns that error.
    pub async fn merge_every(&self, period: Duration) -> RemoteError {
        loop {
            ebb::sleep(period).await;
            if let Err(e) = self.flush().await {
                return e;
            }
        }
    }

    async fn send(&self, request: CounterRequest) -> Result<i64, RemoteError> {
        let reply = self
            .caller
            .call(self.home, self.ebb, COUNTER_KIND, encode(&request)?)
            .await?;
        let total: i64 = decode(&reply)?;
        self.last_total.set(total);
        Ok(total)
    }
}
