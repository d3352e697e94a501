//! A multicore Ebb: one representative per core, built on that core's first call.

use super::{Ebb, EbbError, EbbId, EbbRef, id::NODE_IDS, local_id_map};
use crate::event::{self, SpawnError};
use crate::{CoreId, MAX_CORES, percore};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::marker::PhantomData;

/// An Ebb with one representative, an `R`, per core.
///
/// Each core's rep is made by the constructor given to [`create`](Self::create), on that
/// core, the first time the core calls the Ebb. A rep is used only by its own core, so `R`
/// needs neither `Send` nor `Sync` and can use `Cell`s freely. To combine the reps (sum
/// per-core counters, flush per-core caches) use [`gather`](Self::gather), which runs a
/// closure on every core against its own rep, or [`for_each_rep`](Self::for_each_rep) when
/// `R: Sync`.
pub struct MulticoreEbb<R>(PhantomData<fn() -> R>);

type MakeRep<R> = Box<dyn Fn(CoreId) -> R + Send + Sync>;

/// Private root type, so no other Ebb kind can bind it (see `SharedEbb`'s root).
struct MulticoreRoot<R> {
    make: MakeRep<R>,
    reps: Box<[spin::Once<RepPtr<R>>]>,
}

/// A pointer to a leaked rep, kept in the root so the reps can be visited.
struct RepPtr<R>(*const R);

// SAFETY: the root holds these pointers only so `for_each_rep` can reach the reps, which it
// does only when `R: Sync`; reps are never moved or dropped (they are leaked for the life of
// the node), so holding the pointer on another thread transfers nothing.
unsafe impl<R> Send for RepPtr<R> {}
// SAFETY: see `Send` above: shared access to the pointer itself is just a copy of an address.
unsafe impl<R> Sync for RepPtr<R> {}

impl<R: 'static> Ebb for MulticoreEbb<R> {
    type Rep = R;
    fn miss(id: EbbId) -> Result<&'static R, EbbError> {
        let root = local_id_map().get::<MulticoreRoot<R>>(id)?;
        let core = percore::current_core().ok_or(EbbError::NotOnCore)?;
        let slot = root
            .reps
            .get(core.index())
            .ok_or(EbbError::CoreOutOfRange)?;
        let rep = slot.call_once(|| RepPtr(Box::leak(Box::new((root.make)(core)))));
        // SAFETY: the pointer came from `Box::leak` of an `R` made for this core and is never
        // freed; this core is its only user (or `R: Sync` visitors, which only share it).
        Ok(unsafe { &*rep.0 })
    }
}

impl<R: 'static> MulticoreEbb<R> {
    /// Creates a multicore Ebb under a fresh id; `make(core)` builds each core's rep.
    pub fn create(
        make: impl Fn(CoreId) -> R + Send + Sync + 'static,
    ) -> Result<EbbRef<Self>, EbbError> {
        let id = NODE_IDS.allocate()?;
        Self::bind(id, make)
    }

    /// Binds this node's part of a distributed Ebb under its global id (see `ebb-dist`):
    /// `make(core)` builds each core's rep here. Fails if `id` is not global or already
    /// bound here.
    pub fn create_global(
        id: EbbId,
        make: impl Fn(CoreId) -> R + Send + Sync + 'static,
    ) -> Result<EbbRef<Self>, EbbError> {
        if !id.is_global() {
            return Err(EbbError::NotGlobal(id));
        }
        Self::bind(id, make)
    }

    fn bind(
        id: EbbId,
        make: impl Fn(CoreId) -> R + Send + Sync + 'static,
    ) -> Result<EbbRef<Self>, EbbError> {
        let reps = (0..MAX_CORES).map(|_| spin::Once::new()).collect();
        local_id_map().bind(
            id,
            MulticoreRoot {
                make: Box::new(make),
                reps,
            },
        )?;
        // SAFETY: `bind` succeeded, so `id` was unbound (fresh, or a global id not bound
        // here before) and is now bound to this type only.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }

    /// A handle for an existing multicore Ebb, checked to have reps of type `R`.
    pub fn lookup(id: EbbId) -> Result<EbbRef<Self>, EbbError> {
        local_id_map().get::<MulticoreRoot<R>>(id)?;
        // SAFETY: the id is bound to a `MulticoreRoot<R>`, which only this kind binds.
        Ok(unsafe { EbbRef::from_id_unchecked(id) })
    }

    /// Visits, from the calling core, every rep created so far, in core order.
    pub fn for_each_rep(ebb: EbbRef<Self>, mut visit: impl FnMut(CoreId, &R))
    where
        R: Sync,
    {
        let Ok(root) = local_id_map().get::<MulticoreRoot<R>>(ebb.id()) else {
            return;
        };
        for (core, slot) in root.reps.iter().enumerate() {
            if let Some(rep) = slot.get() {
                // SAFETY: leaked, never freed; `R: Sync` makes shared access from here fine.
                visit(CoreId(core as u32), unsafe { &*rep.0 });
            }
        }
    }

    /// Runs `f` on every core of the runtime against that core's own rep (creating it if
    /// needed) and gathers the results in core order. The EbbRT way to combine per-core
    /// state: no rep is ever touched by a core other than its own.
    pub async fn gather<U: Send + 'static>(
        ebb: EbbRef<Self>,
        f: impl Fn(&R) -> U + Send + Sync + Clone + 'static,
    ) -> Result<Vec<U>, SpawnError> {
        let cores = event::Handle::current()
            .ok_or(SpawnError::NotOnCore)?
            .num_cores();
        let calls = (0..cores).map(|core| {
            let f = f.clone();
            event::run_on(CoreId(core as u32), move || f(ebb.rep()))
        });
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .collect()
    }
}
