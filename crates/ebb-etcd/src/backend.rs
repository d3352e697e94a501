//! The etcd backend: the bridge thread, and the GlobalIdMap over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ebb::future::{Promise, promise};
use ebb::{CoreId, EbbId, Handle};
use ebb_dist::global_id_map::{
    GlobalIdMap, IdMapError, MAX_VALUE_LEN, MapFuture, Versioned, WatchId, Watcher,
};
use ebb_dist::node::NodeId;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, Txn,
    TxnOp, TxnOpResponse,
};
use tokio::sync::mpsc;

use crate::{id_key, node_key, node_of_key, nodes_prefix};

/// Where the store is and how this front end holds its lease.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://127.0.0.1:2379`, ...); the client fails
    /// over between them.
    pub endpoints: Vec<String>,
    /// The application's key prefix (`/ebbflow/APP`): applications sharing a store stay
    /// apart.
    pub prefix: String,
    /// How long etcd keeps this front end's names and nodes after it stops renewing its
    /// lease (it renews every third of this).
    pub lease_ttl: Duration,
    /// Requests that may wait for the bridge thread before new ones are refused.
    pub queue: usize,
    /// How long connecting may take.
    pub connect_timeout: Duration,
}

impl EtcdConfig {
    /// `endpoints` and `prefix`, a 5 s lease, a 1,024-request queue, a 5 s connect timeout.
    pub fn new(endpoints: Vec<String>, prefix: impl Into<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            prefix: prefix.into(),
            lease_ttl: Duration::from_secs(5),
            queue: 1024,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Why the backend could not start.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No member answered, or the lease was refused.
    #[error("cannot reach etcd at {endpoints:?}: {reason}")]
    Connect {
        /// The members tried.
        endpoints: Vec<String>,
        /// etcd-client's error.
        reason: String,
    },
    /// The bridge thread could not be started.
    #[error("cannot start the etcd bridge thread: {0}")]
    Thread(#[from] std::io::Error),
}

type Reply<T> = Promise<Result<T, IdMapError>>;

/// Delivers one change to the core that asked for the watch.
type Deliver = Box<dyn Fn(EbbId, Versioned) + Send + Sync>;

enum Command {
    Get(String, Reply<Option<Versioned>>),
    Put(String, Vec<u8>, Reply<u64>),
    Watch(String, EbbId, WatchId, Deliver, Reply<()>),
    Unwatch(WatchId),
    Members(Reply<Vec<NodeId>>),
    /// Stop; revoke the lease first when true (a clean leave).
    Stop(bool),
}

/// The GlobalIdMap on etcd, with this front end's lease. Dropping it revokes the lease
/// (a clean leave); a front end that dies without dropping it loses its keys when the
/// lease expires.
pub struct EtcdIdMap {
    commands: mpsc::Sender<Command>,
    prefix: String,
    lease: i64,
    next_watch: AtomicU64,
    bridge: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EtcdIdMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdIdMap")
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .finish()
    }
}

fn backend(e: impl std::fmt::Display) -> IdMapError {
    IdMapError::Backend(format!("etcd: {e}"))
}

fn versioned(kv: &KeyValue) -> Versioned {
    Versioned {
        version: u64::try_from(kv.version()).unwrap_or(0),
        value: kv.value().to_vec(),
    }
}

impl EtcdIdMap {
    /// Connects, takes a lease and starts renewing it. Blocks until etcd answered (at
    /// most the connect timeout, per member tried).
    pub fn connect(config: EtcdConfig) -> Result<EtcdIdMap, EtcdError> {
        let (commands, queue) = mpsc::channel(config.queue.max(1));
        let (started_tx, started) = std::sync::mpsc::channel();
        let cfg = config.clone();
        let bridge = std::thread::Builder::new()
            .name("ebb-etcd".into())
            .spawn(move || bridge(cfg, queue, started_tx))?;
        let connect_error = |reason: String| EtcdError::Connect {
            endpoints: config.endpoints.clone(),
            reason,
        };
        let lease = match started.recv() {
            Ok(Ok(lease)) => lease,
            Ok(Err(reason)) => {
                let _ = bridge.join();
                return Err(connect_error(reason));
            }
            Err(_) => {
                let _ = bridge.join();
                return Err(connect_error("the bridge thread ended".into()));
            }
        };
        Ok(EtcdIdMap {
            commands,
            prefix: config.prefix,
            lease,
            next_watch: AtomicU64::new(0),
            bridge: Some(bridge),
        })
    }

    /// This front end's lease.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// Registers `node` as a member under this front end's lease, with `info` (its
    /// address, say): it disappears when the lease does.
    pub fn register_node(&self, node: NodeId, info: Vec<u8>) -> MapFuture<()> {
        let key = node_key(&self.prefix, node);
        let put = self.request(|reply| Command::Put(key, info, reply));
        Box::pin(async move { put.await.map(|_| ()) })
    }

    /// The nodes registered by every live front end.
    pub fn members(&self) -> MapFuture<Vec<NodeId>> {
        self.request(Command::Members)
    }

    /// Leaves: revokes the lease (its names and nodes go at once) and stops the bridge.
    pub fn leave(mut self) {
        self.stop(true);
    }

    /// Stops renewing the lease without revoking it, as a front end that died would:
    /// its names and nodes stay until the lease expires. (For tests of expiry.)
    pub fn abandon(mut self) {
        self.stop(false);
    }

    fn stop(&mut self, revoke: bool) {
        // A full queue still gets the stop: wait for room (the bridge is draining it).
        let _ = self.commands.blocking_send(Command::Stop(revoke));
        if let Some(bridge) = self.bridge.take() {
            let _ = bridge.join();
        }
    }

    fn request<T: 'static>(&self, make: impl FnOnce(Reply<T>) -> Command) -> MapFuture<T> {
        let (reply, answer) = promise();
        let sent = self.commands.try_send(make(reply));
        Box::pin(async move {
            match sent {
                Ok(()) => answer
                    .await
                    .map_err(|_| backend("the bridge thread stopped"))?,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    Err(backend("too many requests waiting for etcd"))
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    Err(backend("the bridge thread stopped"))
                }
            }
        })
    }
}

impl Drop for EtcdIdMap {
    fn drop(&mut self) {
        if self.bridge.is_some() {
            self.stop(true);
        }
    }
}

impl GlobalIdMap for EtcdIdMap {
    fn get(&self, id: EbbId) -> MapFuture<Option<Versioned>> {
        let key = id_key(&self.prefix, id);
        self.request(|reply| Command::Get(key, reply))
    }

    fn set(&self, id: EbbId, value: Vec<u8>) -> MapFuture<u64> {
        if !id.is_global() {
            return Box::pin(async move { Err(IdMapError::NotGlobal(id)) });
        }
        if value.len() > MAX_VALUE_LEN {
            return Box::pin(async move { Err(IdMapError::ValueTooLong(value.len())) });
        }
        let key = id_key(&self.prefix, id);
        self.request(|reply| Command::Put(key, value, reply))
    }

    /// Delivers each change as an event on the calling core (which must be one).
    fn watch(&self, id: EbbId, on_change: Watcher) -> MapFuture<WatchId> {
        let Some(handle) = Handle::current() else {
            return Box::pin(async { Err(backend("watch from a thread that is not a core")) });
        };
        // On a core (the handle says so), so this does not panic.
        let core: CoreId = ebb::core_id();
        let watch = WatchId(self.next_watch.fetch_add(1, Ordering::Relaxed) + 1);
        let watcher = Arc::new(spin::Mutex::new(on_change));
        let deliver: Deliver = Box::new(move |id, entry| {
            let watcher = watcher.clone();
            let _ = handle.spawn_on(core, move || (watcher.lock())(id, &entry));
        });
        let key = id_key(&self.prefix, id);
        let done = self.request(|reply| Command::Watch(key, id, watch, deliver, reply));
        Box::pin(async move { done.await.map(|()| watch) })
    }

    fn unwatch(&self, watch: WatchId) {
        let _ = self.commands.try_send(Command::Unwatch(watch));
    }
}

/// The bridge thread: a tokio runtime of its own running etcd's client.
fn bridge(
    config: EtcdConfig,
    mut queue: mpsc::Receiver<Command>,
    started: std::sync::mpsc::Sender<Result<i64, String>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = started.send(Err(format!("no tokio runtime: {e}")));
            return;
        }
    };
    runtime.block_on(async move {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.connect_timeout);
        let mut client = match Client::connect(&config.endpoints, Some(options)).await {
            Ok(c) => c,
            Err(e) => {
                let _ = started.send(Err(e.to_string()));
                return;
            }
        };
        let ttl = i64::try_from(config.lease_ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let lease = match client.lease_grant(ttl, None).await {
            Ok(l) => l.id(),
            Err(e) => {
                let _ = started.send(Err(format!("lease: {e}")));
                return;
            }
        };
        let keeper = tokio::spawn(keep_alive(client.clone(), lease, config.lease_ttl / 3));
        let _ = started.send(Ok(lease));
        let mut watches: HashMap<WatchId, tokio::task::JoinHandle<()>> = HashMap::new();
        let prefix = config.prefix;
        while let Some(command) = queue.recv().await {
            let mut c = client.clone();
            match command {
                Command::Get(key, reply) => {
                    tokio::spawn(async move {
                        let got = retried(|| {
                            let (mut c, key) = (c.clone(), key.clone());
                            async move { c.get(key, None).await }
                        })
                        .await;
                        let _ = reply.set(got.map(|r| r.kvs().first().map(versioned)));
                    });
                }
                Command::Put(key, value, reply) => {
                    tokio::spawn(async move {
                        // One transaction: if the key already holds this value, only read
                        // it; otherwise write it (under the lease) and read it back. That
                        // makes the write idempotent — a retry after an ambiguous failure
                        // (a timeout while a leader is elected) cannot count a version twice
                        // — and gives the version this write made.
                        let txn = Txn::new()
                            .when([Compare::value(key.clone(), CompareOp::Equal, value.clone())])
                            .and_then([TxnOp::get(key.clone(), None)])
                            .or_else([
                                TxnOp::put(
                                    key.clone(),
                                    value,
                                    Some(PutOptions::new().with_lease(lease)),
                                ),
                                TxnOp::get(key, None),
                            ]);
                        let written = retried(|| {
                            let (mut c, txn) = (c.clone(), txn.clone());
                            async move { c.txn(txn).await }
                        })
                        .await;
                        let version = written.and_then(|r| {
                            r.op_responses()
                                .into_iter()
                                .find_map(|op| match op {
                                    TxnOpResponse::Get(g) => g.kvs().first().map(versioned),
                                    _ => None,
                                })
                                .map(|v| v.version)
                                .ok_or_else(|| backend("the write was not read back"))
                        });
                        let _ = reply.set(version);
                    });
                }
                Command::Watch(key, id, watch, deliver, reply) => {
                    let task = tokio::spawn(async move {
                        let mut stream = match c.watch(key, None).await {
                            Ok(s) => s,
                            Err(e) => {
                                let _ = reply.set(Err(backend(e)));
                                return;
                            }
                        };
                        let _ = reply.set(Ok(()));
                        while let Ok(Some(message)) = stream.message().await {
                            for event in message.events() {
                                if event.event_type() == EventType::Put
                                    && let Some(kv) = event.kv()
                                {
                                    deliver(id, versioned(kv));
                                }
                            }
                        }
                    });
                    watches.insert(watch, task);
                }
                Command::Unwatch(watch) => {
                    if let Some(task) = watches.remove(&watch) {
                        task.abort();
                    }
                }
                Command::Members(reply) => {
                    let p = prefix.clone();
                    tokio::spawn(async move {
                        let got = retried(|| {
                            let (mut c, key) = (c.clone(), nodes_prefix(&p));
                            async move { c.get(key, Some(GetOptions::new().with_prefix())).await }
                        })
                        .await
                        .map(|r| {
                            let mut nodes: Vec<NodeId> = r
                                .kvs()
                                .iter()
                                .filter_map(|kv| node_of_key(&p, kv.key()))
                                .collect();
                            nodes.sort_unstable();
                            nodes
                        });
                        let _ = reply.set(got);
                    });
                }
                Command::Stop(revoke) => {
                    keeper.abort();
                    for (_, task) in watches.drain() {
                        task.abort();
                    }
                    if revoke {
                        let _ = client.lease_revoke(lease).await;
                    }
                    return;
                }
            }
        }
    });
}

/// Tries an idempotent request up to [`ATTEMPTS`] times, [`BACKOFF`] apart, while the
/// failure is one another member may not have: a refused connection (a dead member), an
/// unavailable one, a timeout (a leader being elected). The client balances over the
/// members, so the next attempt usually goes elsewhere.
async fn retried<T, F, Fut>(mut request: F) -> Result<T, IdMapError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let mut attempt = 1;
    loop {
        match request().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let text = e.to_string();
                let again = [
                    "unavailable",
                    "connect error",
                    "Timeout expired",
                    "cancelled",
                ]
                .iter()
                .any(|transient| text.contains(transient));
                if !again || attempt >= ATTEMPTS {
                    return Err(backend(e));
                }
                attempt += 1;
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// Attempts per request before its error is returned.
const ATTEMPTS: u32 = 5;
/// The pause between attempts.
const BACKOFF: Duration = Duration::from_millis(50);

/// Renews the lease every `every` until the task is aborted; a failed renewal is retried
/// on the next round (the client fails over to another member meanwhile).
async fn keep_alive(mut client: Client, lease: i64, every: Duration) {
    loop {
        if let Ok((mut keeper, mut responses)) = client.lease_keep_alive(lease).await {
            loop {
                if keeper.keep_alive().await.is_err() {
                    break;
                }
                match responses.message().await {
                    Ok(Some(_)) => {}
                    _ => break,
                }
                tokio::time::sleep(every).await;
            }
        }
        tokio::time::sleep(every.min(Duration::from_millis(200))).await;
    }
}
