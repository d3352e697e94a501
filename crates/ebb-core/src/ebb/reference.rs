//! `EbbRef`: the 4-byte handle through which code calls an Ebb.

use super::{EbbError, EbbId};
use crate::percore;
use core::fmt;
use core::marker::PhantomData;
use core::ops::Deref;

/// A kind of Ebb: what its representatives are and how a core gets its own.
pub trait Ebb: 'static {
    /// The per-core representative type that calls resolve to.
    type Rep: 'static;

    /// Builds or fetches the calling core's representative of `id`.
    ///
    /// Called at most once per core and id (the result is cached in the core's table), on
    /// the core's first call through an [`EbbRef`]. The handler typically finds the Ebb's
    /// root object in the [`LocalIdMap`](super::LocalIdMap) and asks it for a rep.
    fn miss(id: EbbId) -> Result<&'static Self::Rep, EbbError>;
}

/// A handle to an Ebb of kind `T`: `Copy`, 4 bytes, and valid on every core.
///
/// Calls go through [`rep`](Self::rep) (or `Deref`), which returns *this* core's
/// representative: sending an `EbbRef` to another core and calling it there reaches that
/// core's rep, which is the point of the model.
pub struct EbbRef<T: Ebb> {
    id: EbbId,
    // `fn() -> T`: the handle neither owns a T nor restricts Send/Sync.
    kind: PhantomData<fn() -> T>,
}

impl<T: Ebb> EbbRef<T> {
    /// A handle for `id` without checking what the id is bound to.
    ///
    /// # Safety
    ///
    /// Every `EbbRef` ever made for `id` must have the same `T`: the per-core tables store
    /// untyped pointers that this handle reinterprets as `&T::Rep`.
    pub const unsafe fn from_id_unchecked(id: EbbId) -> Self {
        EbbRef {
            id,
            kind: PhantomData,
        }
    }

    /// The Ebb's id.
    pub const fn id(self) -> EbbId {
        self.id
    }

    /// This core's representative. On a miss, runs [`Ebb::miss`] and installs the result.
    ///
    /// # Panics
    ///
    /// If the miss handler fails (the id is unbound or called off-core, a programming
    /// error); use [`try_rep`](Self::try_rep) to get the error as a value instead.
    #[inline(always)]
    pub fn rep(self) -> &'static T::Rep {
        let rep = percore::rep_slot(self.id.index());
        if rep.is_null() {
            return self.miss_or_panic();
        }
        // SAFETY: a non-null slot for this id was installed by `install` below from a
        // `&'static T::Rep`, and every handle for this id has the same `T` (the invariant of
        // `from_id_unchecked`, upheld by all safe constructors).
        unsafe { &*rep.cast::<T::Rep>() }
    }

    /// This core's representative, or why it could not be had.
    #[inline]
    pub fn try_rep(self) -> Result<&'static T::Rep, EbbError> {
        let rep = percore::rep_slot(self.id.index());
        if rep.is_null() {
            return self.miss();
        }
        // SAFETY: as in `rep`.
        Ok(unsafe { &*rep.cast::<T::Rep>() })
    }

    /// Whether the calling core already has its representative (no miss on next call).
    pub fn is_resolved_here(self) -> bool {
        !percore::rep_slot(self.id.index()).is_null()
    }

    #[cold]
    #[inline(never)]
    fn miss_or_panic(self) -> &'static T::Rep {
        match self.miss() {
            Ok(rep) => rep,
            Err(e) => panic!("Ebb call through {}: miss handler failed: {e}", self.id),
        }
    }

    #[cold]
    fn miss(self) -> Result<&'static T::Rep, EbbError> {
        let rep = T::miss(self.id)?;
        // A rep cached outside a core would outlive the thread's role; only cache on cores.
        if percore::current_core().is_some() {
            percore::install_rep(self.id.index(), (rep as *const T::Rep).cast());
        }
        Ok(rep)
    }
}

impl<T: Ebb> Deref for EbbRef<T> {
    type Target = T::Rep;
    #[inline(always)]
    fn deref(&self) -> &T::Rep {
        self.rep()
    }
}

impl<T: Ebb> Clone for EbbRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Ebb> Copy for EbbRef<T> {}

impl<T: Ebb> PartialEq for EbbRef<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<T: Ebb> Eq for EbbRef<T> {}

impl<T: Ebb> fmt::Debug for EbbRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EbbRef<{}>({})",
            core::any::type_name::<T>(),
            self.id.as_u32()
        )
    }
}
