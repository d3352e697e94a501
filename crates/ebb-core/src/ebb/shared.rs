//! A shared Ebb: one representative serves every core.

use super::{Ebb, EbbError, EbbId, EbbRef, id::NODE_IDS, local_id_map};
use core::marker::PhantomData;

/// An Ebb whose single representative, a `T`, is shared by all cores.
///
/// Fits read-mostly objects and objects that synchronize internally. Each core still
/// caches the pointer in its own table, so calls take the same fast path as per-core Ebbs.
pub struct SharedEbb<T>(PhantomData<fn() -> T>);

/// The root bound in the LocalIdMap. Private, so no other Ebb kind can bind the same root
/// type and make `lookup` accept an id whose table slots hold some other rep type.
struct SharedRoot<T>(T);

impl<T: Send + Sync + 'static> Ebb for SharedEbb<T> {
    type Rep = T;
    fn miss(id: EbbId) -> Result<&'static T, EbbError> {
        Ok(&local_id_map().get::<SharedRoot<T>>(id)?.0)
    }
}

impl<T: Send + Sync + 'static> SharedEbb<T> {
    /// Creates a shared Ebb under a fresh dynamic id.
    pub fn create(value: T) -> Result<EbbRef<Self>, EbbError> {
        let id = NODE_IDS.allocate()?;
        local_id_map().bind(id, SharedRoot(value))?;
        // SAFETY: `id` is fresh, so this is the first and only type it is bound to.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }

    /// Creates a shared Ebb under a static id (one of the system's own Ebbs).
    pub fn create_static(id: EbbId, value: T) -> Result<EbbRef<Self>, EbbError> {
        if !id.is_static() {
            return Err(EbbError::NotStatic(id));
        }
        local_id_map().bind(id, SharedRoot(value))?;
        // SAFETY: `bind` succeeded, so `id` was unbound and is now bound to a `T`.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }

    /// Binds this node's representative of a distributed Ebb under its global id (one a
    /// GlobalIdMap handed out; see `ebb-dist`). Fails if `id` is not global or already
    /// bound here.
    pub fn create_global(id: EbbId, value: T) -> Result<EbbRef<Self>, EbbError> {
        if !id.is_global() {
            return Err(EbbError::NotGlobal(id));
        }
        local_id_map().bind(id, SharedRoot(value))?;
        // SAFETY: `bind` succeeded, so `id` was unbound and is now bound to a `T`.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }

    /// A handle for an existing shared Ebb, checked to hold a `T`.
    pub fn lookup(id: EbbId) -> Result<EbbRef<Self>, EbbError> {
        local_id_map().get::<SharedRoot<T>>(id)?;
        // SAFETY: the id is bound to a `T`, the only type `SharedEbb<T>` reps have; the
        // binding never changes.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }
}
