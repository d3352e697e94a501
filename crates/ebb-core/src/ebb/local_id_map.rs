//! The LocalIdMap: per-node data that miss handlers consult.

use super::{EbbError, EbbId};
use alloc::collections::BTreeMap;
use core::any::Any;

type Root = &'static (dyn Any + Send + Sync);

/// Maps an [`EbbId`] to its Ebb's root object on this node.
///
/// Only miss handlers and Ebb creation touch it — once per core and Ebb — so a reader-writer
/// spin lock is enough; the hot path never comes here. Roots live as long as the node.
pub struct LocalIdMap {
    roots: spin::RwLock<BTreeMap<EbbId, Root>>,
}

static LOCAL_ID_MAP: LocalIdMap = LocalIdMap {
    roots: spin::RwLock::new(BTreeMap::new()),
};

/// This node's LocalIdMap.
pub fn local_id_map() -> &'static LocalIdMap {
    &LOCAL_ID_MAP
}

impl LocalIdMap {
    /// Binds `id` to `root`, which is leaked: roots live as long as the node.
    pub fn bind<R: Any + Send + Sync>(&self, id: EbbId, root: R) -> Result<&'static R, EbbError> {
        let mut roots = self.roots.write();
        if roots.contains_key(&id) {
            return Err(EbbError::AlreadyBound(id));
        }
        let root: &'static R = alloc::boxed::Box::leak(alloc::boxed::Box::new(root));
        roots.insert(id, root);
        Ok(root)
    }

    /// The root bound to `id`, if it is an `R`.
    pub fn get<R: Any + Send + Sync>(&self, id: EbbId) -> Result<&'static R, EbbError> {
        let root: Root = *self.roots.read().get(&id).ok_or(EbbError::Unbound(id))?;
        root.downcast_ref::<R>().ok_or(EbbError::WrongType(id))
    }

    /// Whether `id` is bound.
    pub fn contains(&self, id: EbbId) -> bool {
        self.roots.read().contains_key(&id)
    }
}
