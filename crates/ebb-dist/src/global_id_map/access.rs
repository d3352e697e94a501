//! Reaching the map: on the front end directly ([`EmbeddedIdMap`]), on a node through
//! remote calls ([`RemoteIdMap`]), and resolving a global Ebb on first use ([`resolve`]).

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::Cell;

use ebb::{EbbError, EbbId, EbbRef, IOBufChain, SharedEbb};

use super::{
    GlobalIdMap, IdMapError, IdMapReply, IdMapRequest, IdMapTable, MapFuture, Versioned, WatchId,
    Watcher, global_id,
};
use crate::node::NodeId;
use crate::remote::{Caller, Served, decode, encode};

/// The static Ebb id the GlobalIdMap's server answers on, on the front end.
pub const GLOBAL_ID_MAP_EBB: EbbId = EbbId::new_static(1);
/// The message kind of its requests.
pub const ID_MAP_KIND: u16 = 1;

/// The embedded backend, used on the front end itself: the table, in this process,
/// shared by its cores behind a spin lock held for one operation (watchers run under it,
/// so they must not call the map).
#[derive(Clone, Debug, Default)]
pub struct EmbeddedIdMap {
    table: Arc<spin::Mutex<IdMapTable>>,
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
                    let notify = notify.clone();
                    self.table
                        .lock()
                        .watch(id, Box::new(move |id, e| notify(from, id, e)));
                    IdMapReply::Done
                }
                Err(e) => IdMapReply::Refused(e.to_string()),
            },
            IdMapRequest::Unwatch(_) => IdMapReply::Done,
        };
        encode(&reply).map_err(|e| e.to_string())
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

    /// Remote watches need the front end's change messages delivered to this node: the
    /// Messenger registers them. Without that, refused rather than silently never firing.
    fn watch(&self, id: EbbId, _on_change: Watcher) -> MapFuture<WatchId> {
        Box::pin(async move {
            Err(IdMapError::Backend(alloc::format!(
                "watching {id} from a node needs the Messenger's change messages"
            )))
        })
    }

    fn unwatch(&self, _watch: WatchId) {}
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
