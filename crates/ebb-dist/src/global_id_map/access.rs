//! Reaching the map: on the front end directly ([`EmbeddedIdMap`]), on a node through
//! remote calls ([`RemoteIdMap`]), and resolving a global Ebb on first use ([`resolve`]).

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicU64, Ordering};

use ebb::{CoreId, EbbError, EbbId, EbbRef, Handle, IOBufChain, SharedEbb};

use super::{
    GlobalIdMap, IdMapError, IdMapReply, IdMapRequest, IdMapTable, MapFuture, Versioned, WatchId,
    Watcher, global_id,
};
use crate::messenger::Messenger;
use crate::node::NodeId;
use crate::remote::{Caller, Served, decode, encode};

/// The static Ebb id the GlobalIdMap's server answers on, on the front end.
pub const GLOBAL_ID_MAP_EBB: EbbId = EbbId::new_static(1);
/// The message kind of its requests.
pub const ID_MAP_KIND: u16 = 1;
/// The kind of the one-way messages the front end sends a node that watches an entry
/// (an [`IdMapReply::Changed`]), to [`GLOBAL_ID_MAP_EBB`] on the node.
pub const ID_MAP_CHANGED_KIND: u16 = 2;

/// The embedded backend, used on the front end itself: the table, in this process,
/// shared by its cores behind a spin lock held for one operation (watchers run under it,
/// so they must not call the map).
#[derive(Clone, Debug, Default)]
pub struct EmbeddedIdMap {
    table: Arc<spin::Mutex<IdMapTable>>,
    /// The watches nodes asked for, one per (node, id).
    remote_watches: Arc<spin::Mutex<BTreeMap<(NodeId, EbbId), WatchId>>>,
}

impl EmbeddedIdMap {
    /// An empty map.
    pub fn new() -> EmbeddedIdMap {
        EmbeddedIdMap::default()
    }

    /// Answers one node's request (register this for [`ID_MAP_KIND`] on
    /// [`GLOBAL_ID_MAP_EBB`]). Watches from nodes need a way to send them the changes:
    /// `notify(node, id, entry)` is called for each.
    pub fn serve(
        &self,
        from: NodeId,
        request: &IOBufChain,
        notify: impl Fn(NodeId, EbbId, &Versioned) + Clone + Send + 'static,
    ) -> Served {
        let request: IdMapRequest = decode(request).map_err(|e| e.to_string())?;
        let reply = match request {
            IdMapRequest::Get(n) => IdMapReply::Entry(
                global_id(n)
                    .ok()
                    .and_then(|id| self.table.lock().get(id).cloned()),
            ),
            IdMapRequest::Set(n, value) => {
                let set = global_id(n).and_then(|id| self.table.lock().set(id, value));
                match set {
                    Ok(v) => IdMapReply::Version(v),
                    Err(e) => IdMapReply::Refused(e.to_string()),
                }
            }
            IdMapRequest::Watch(n) => match global_id(n) {
                Ok(id) => {
                    let mut remote = self.remote_watches.lock();
                    if let alloc::collections::btree_map::Entry::Vacant(slot) =
                        remote.entry((from, id))
                    {
                        let notify = notify.clone();
                        let watch = self
                            .table
                            .lock()
                            .watch(id, Box::new(move |id, e| notify(from, id, e)));
                        slot.insert(watch);
                    }
                    IdMapReply::Done
                }
                Err(e) => IdMapReply::Refused(e.to_string()),
            },
            IdMapRequest::Unwatch(n) => {
                let watch = global_id(n)
                    .ok()
                    .and_then(|id| self.remote_watches.lock().remove(&(from, id)));
                if let Some(watch) = watch {
                    self.table.lock().unwatch(watch);
                }
                IdMapReply::Done
            }
        };
        encode(&reply).map_err(|e| e.to_string())
    }

    /// Drops every watch `node` asked for (call it when the node is lost).
    pub fn forget_node(&self, node: NodeId) {
        let gone: Vec<WatchId> = {
            let mut remote = self.remote_watches.lock();
            let keys: Vec<(NodeId, EbbId)> =
                remote.keys().filter(|(n, _)| *n == node).copied().collect();
            keys.iter().filter_map(|k| remote.remove(k)).collect()
        };
        let mut table = self.table.lock();
        for watch in gone {
            table.unwatch(watch);
        }
    }

    /// The table (for inspection and tests).
    pub fn table(&self) -> spin::MutexGuard<'_, IdMapTable> {
        self.table.lock()
    }
}

impl GlobalIdMap for EmbeddedIdMap {
    fn get(&self, id: EbbId) -> MapFuture<Option<Versioned>> {
        let entry = self.table.lock().get(id).cloned();
        Box::pin(async move { Ok(entry) })
    }

    fn set(&self, id: EbbId, value: Vec<u8>) -> MapFuture<u64> {
        let result = self.table.lock().set(id, value);
        Box::pin(async move { result })
    }

    fn watch(&self, id: EbbId, on_change: Watcher) -> MapFuture<WatchId> {
        let w = self.table.lock().watch(id, on_change);
        Box::pin(async move { Ok(w) })
    }

    fn unwatch(&self, watch: WatchId) {
        self.table.lock().unwatch(watch);
    }
}

/// A node's view of the front end's map: every read and write a remote call. Reads are
/// not cached here — [`resolve`] caches what it builds from them, as a bound Ebb.
pub struct RemoteIdMap {
    caller: Rc<dyn Caller>,
    reads: Cell<u64>,
    watches: Option<Arc<NodeWatches>>,
}

impl core::fmt::Debug for RemoteIdMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RemoteIdMap")
            .field("reads", &self.reads.get())
            .finish()
    }
}

impl RemoteIdMap {
    /// The map on the front end, through `caller`.
    pub fn new(caller: Rc<dyn Caller>) -> RemoteIdMap {
        RemoteIdMap {
            caller,
            reads: Cell::new(0),
            watches: None,
        }
    }

    /// The map on the front end, through `caller`, able to watch entries: `watches` (from
    /// [`NodeWatches::install`] on this node's Messenger) receives the front end's change
    /// messages.
    pub fn with_watches(caller: Rc<dyn Caller>, watches: Arc<NodeWatches>) -> RemoteIdMap {
        RemoteIdMap {
            watches: Some(watches),
            ..RemoteIdMap::new(caller)
        }
    }

    /// How many reads went to the front end.
    pub fn remote_reads(&self) -> u64 {
        self.reads.get()
    }

    fn request(&self, request: IdMapRequest) -> MapFuture<IdMapReply> {
        let sent = encode(&request).map(|payload| {
            self.caller
                .call(NodeId::FRONT_END, GLOBAL_ID_MAP_EBB, ID_MAP_KIND, payload)
        });
        Box::pin(async move {
            let backend = |e: crate::remote::RemoteError| IdMapError::Backend(e.to_string());
            let reply = sent
                .map_err(backend)?
                .await
                .map_err(|e| backend(e.into()))?;
            match decode::<IdMapReply>(&reply).map_err(backend)? {
                IdMapReply::Refused(why) => Err(IdMapError::Backend(why)),
                reply => Ok(reply),
            }
        })
    }
}

fn unexpected<T>(reply: IdMapReply) -> Result<T, IdMapError> {
    Err(IdMapError::Backend(alloc::format!(
        "unexpected answer {reply:?}"
    )))
}

impl GlobalIdMap for RemoteIdMap {
    fn get(&self, id: EbbId) -> MapFuture<Option<Versioned>> {
        self.reads.set(self.reads.get() + 1);
        let reply = self.request(IdMapRequest::Get(id.as_u32()));
        Box::pin(async move {
            match reply.await? {
                IdMapReply::Entry(e) => Ok(e),
                other => unexpected(other),
            }
        })
    }

    fn set(&self, id: EbbId, value: Vec<u8>) -> MapFuture<u64> {
        let reply = self.request(IdMapRequest::Set(id.as_u32(), value));
        Box::pin(async move {
            match reply.await? {
                IdMapReply::Version(v) => Ok(v),
                other => unexpected(other),
            }
        })
    }

    /// Registers `on_change` here (run on the calling core) and asks the front end to
    /// send this node the entry's changes. Needs [`with_watches`](Self::with_watches):
    /// without a way to receive the changes, refused rather than never firing.
    fn watch(&self, id: EbbId, on_change: Watcher) -> MapFuture<WatchId> {
        let Some(watches) = self.watches.clone() else {
            return Box::pin(async move {
                Err(IdMapError::Backend(alloc::format!(
                    "watching {id} from a node needs RemoteIdMap::with_watches"
                )))
            });
        };
        let Some(handle) = Handle::current() else {
            return Box::pin(async { Err(IdMapError::Backend("watch off a core".into())) });
        };
        let watch = watches.add(id, handle, ebb::core_id(), on_change);
        let asked = self.request(IdMapRequest::Watch(id.as_u32()));
        Box::pin(async move {
            match asked.await {
                Ok(IdMapReply::Done) => Ok(watch),
                Ok(other) => {
                    watches.remove(watch);
                    unexpected(other)
                }
                Err(e) => {
                    watches.remove(watch);
                    Err(e)
                }
            }
        })
    }

    /// Stops the watch here; the front end is told once no watch of its id is left.
    fn unwatch(&self, watch: WatchId) {
        let Some(watches) = &self.watches else { return };
        if let Some(id) = watches.remove(watch) {
            let told = self.request(IdMapRequest::Unwatch(id.as_u32()));
            let _detached = ebb::spawn_local(async move {
                let _ = told.await;
            });
        }
    }
}

/// A node's watches on the front end's map, fed by the front end's change messages
/// ([`ID_MAP_CHANGED_KIND`]): each change is delivered as an event on the core that asked
/// for the watch.
#[derive(Default)]
pub struct NodeWatches {
    watchers: spin::Mutex<BTreeMap<EbbId, Vec<NodeWatch>>>,
    next: AtomicU64,
}

struct NodeWatch {
    watch: WatchId,
    handle: Handle,
    core: CoreId,
    on_change: Arc<spin::Mutex<Watcher>>,
}

impl core::fmt::Debug for NodeWatches {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NodeWatches")
            .field("watched_ids", &self.watchers.lock().len())
            .finish()
    }
}

impl NodeWatches {
    /// Registers the handler for the front end's change messages on `messenger` (a
    /// node's); the registry [`RemoteIdMap::with_watches`] adds to.
    pub fn install(messenger: &Messenger) -> Arc<NodeWatches> {
        let watches = Arc::new(NodeWatches::default());
        let w = watches.clone();
        messenger.on_message(
            GLOBAL_ID_MAP_EBB,
            ID_MAP_CHANGED_KIND,
            move |from, payload| {
                // Only the front end holds the map; a change from anyone else is ignored.
                if from != NodeId::FRONT_END {
                    return;
                }
                if let Ok(IdMapReply::Changed(n, entry)) = decode::<IdMapReply>(&payload)
                    && let Some(id) = EbbId::from_u32(n)
                {
                    w.deliver(id, entry);
                }
            },
        );
        watches
    }

    fn add(&self, id: EbbId, handle: Handle, core: CoreId, on_change: Watcher) -> WatchId {
        let watch = WatchId(self.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.watchers.lock().entry(id).or_default().push(NodeWatch {
            watch,
            handle,
            core,
            on_change: Arc::new(spin::Mutex::new(on_change)),
        });
        watch
    }

    /// Removes `watch`; its id if it was the id's last watch here.
    fn remove(&self, watch: WatchId) -> Option<EbbId> {
        let mut watchers = self.watchers.lock();
        let id = *watchers
            .iter()
            .find(|(_, ws)| ws.iter().any(|w| w.watch == watch))?
            .0;
        let ws = watchers.get_mut(&id)?;
        ws.retain(|w| w.watch != watch);
        if ws.is_empty() {
            watchers.remove(&id);
            Some(id)
        } else {
            None
        }
    }

    fn deliver(&self, id: EbbId, entry: Versioned) {
        let watchers = self.watchers.lock();
        for w in watchers.get(&id).into_iter().flatten() {
            let (on_change, entry) = (w.on_change.clone(), entry.clone());
            let _ = w
                .handle
                .spawn_on(w.core, move || (on_change.lock())(id, &entry));
        }
    }
}

/// A distributed Ebb whose local representative is built from its GlobalIdMap entry.
pub trait GlobalEbb: Sized + Send + Sync + 'static {
    /// Builds this node's representative of `id` from the bytes its owner published.
    fn from_entry(id: EbbId, entry: &Versioned) -> Result<Self, String>;
}

/// Why a global Ebb could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Nothing is published under the id.
    #[error("nothing is published under {0}")]
    NotPublished(EbbId),
    /// The map could not be read.
    #[error(transparent)]
    Map(#[from] IdMapError),
    /// The entry did not make a representative.
    #[error("{id}'s entry does not build a representative: {reason}")]
    BadEntry {
        /// The Ebb.
        id: EbbId,
        /// Why.
        reason: String,
    },
    /// The id is bound here to something else.
    #[error(transparent)]
    Ebb(#[from] EbbError),
}

/// This node's handle on the global Ebb `id`: on the first call here, a miss — its entry
/// is read from `map` (a remote call on a node) and the representative built and bound
/// under `id`; after that, the bound Ebb, with no call.
pub async fn resolve<T: GlobalEbb>(
    map: &dyn GlobalIdMap,
    id: EbbId,
) -> Result<EbbRef<SharedEbb<T>>, ResolveError> {
    if let Ok(bound) = SharedEbb::<T>::lookup(id) {
        return Ok(bound);
    }
    let entry = map.get(id).await?.ok_or(ResolveError::NotPublished(id))?;
    let rep = T::from_entry(id, &entry).map_err(|reason| ResolveError::BadEntry { id, reason })?;
    match SharedEbb::create_global(id, rep) {
        Ok(bound) => Ok(bound),
        // Another task on this node resolved it while this one waited.
        Err(EbbError::AlreadyBound(_)) => Ok(SharedEbb::<T>::lookup(id)?),
        Err(e) => Err(e.into()),
    }
}
