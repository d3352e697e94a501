//! The object model: ids, refs, miss handlers, shared and multicore Ebbs.

use ebb_core::ebb::{EbbError, EbbId, MulticoreEbb, SharedEbb};
use ebb_core::event::{Runtime, run_on, run_on_threads};
use ebb_core::testing::TestPlatform;
use ebb_core::{CoreId, Ebb, EbbRef};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

fn run<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    cores: usize,
    main: impl FnOnce() -> F + Send,
) -> T {
    let runtime = Runtime::new(TestPlatform::new(cores), cores).unwrap();
    run_on_threads(runtime, |_| {}, main).unwrap()
}

/// A per-core counter with plain `Cell`s: only its own core touches a rep.
struct Counter {
    core: CoreId,
    hits: Cell<u64>,
}

#[test]
fn multicore_ebb_builds_one_rep_per_core_on_first_call_only() {
    static MADE: AtomicUsize = AtomicUsize::new(0);
    let (sums, made) = run(2, || async {
        let counter = MulticoreEbb::create(|core| {
            MADE.fetch_add(1, Ordering::SeqCst);
            Counter {
                core,
                hits: Cell::new(0),
            }
        })
        .unwrap();
        for _ in 0..10 {
            counter.hits.set(counter.hits.get() + 1);
        }
        assert_eq!(counter.core, CoreId(0));
        let other = run_on(CoreId(1), move || {
            for _ in 0..5 {
                counter.rep().hits.set(counter.hits.get() + 1);
            }
            (counter.core, counter.is_resolved_here())
        })
        .await
        .unwrap();
        assert_eq!(other, (CoreId(1), true));
        let sums = MulticoreEbb::gather(counter, |rep| (rep.core, rep.hits.get()))
            .await
            .unwrap();
        (sums, MADE.load(Ordering::SeqCst))
    });
    assert_eq!(sums, [(CoreId(0), 10), (CoreId(1), 5)]);
    assert_eq!(made, 2, "the miss handler built exactly one rep per core");
}

#[test]
fn shared_ebb_gives_every_core_the_same_rep() {
    let (a, b) = run(2, || async {
        let shared = SharedEbb::create(AtomicUsize::new(0)).unwrap();
        shared.fetch_add(1, Ordering::SeqCst);
        let there = run_on(CoreId(1), move || {
            shared.fetch_add(1, Ordering::SeqCst);
            shared.rep() as *const AtomicUsize as usize
        })
        .await
        .unwrap();
        assert_eq!(shared.load(Ordering::SeqCst), 2);
        (shared.rep() as *const AtomicUsize as usize, there)
    });
    assert_eq!(a, b);
}

#[test]
fn lookups_check_the_bound_type() {
    let shared = SharedEbb::create(5u32).unwrap();
    assert_eq!(
        SharedEbb::<u32>::lookup(shared.id()).map(|r| r.id()),
        Ok(shared.id())
    );
    assert_eq!(
        SharedEbb::<u64>::lookup(shared.id()).err(),
        Some(EbbError::WrongType(shared.id()))
    );
    assert_eq!(
        MulticoreEbb::<u32>::lookup(shared.id()).err(),
        Some(EbbError::WrongType(shared.id())),
        "a shared Ebb's id cannot be reinterpreted as a multicore Ebb"
    );
    // Off-core, a shared Ebb still resolves (not cached); a multicore one cannot.
    assert_eq!(*shared.rep(), 5);
    assert!(!shared.is_resolved_here());
    let per_core = MulticoreEbb::create(|_| 1u8).unwrap();
    assert_eq!(per_core.try_rep().err(), Some(EbbError::NotOnCore));
}

#[test]
fn static_ids_bind_once() {
    const ID: EbbId = EbbId::new_static(42);
    let first = SharedEbb::create_static(ID, "root").unwrap();
    assert_eq!(first.id(), ID);
    assert_eq!(
        SharedEbb::create_static(ID, "again").err(),
        Some(EbbError::AlreadyBound(ID))
    );
    let dynamic = SharedEbb::create(1u8).unwrap().id();
    assert!(!dynamic.is_static());
    assert_eq!(
        SharedEbb::create_static(dynamic, 2u8).err(),
        Some(EbbError::NotStatic(dynamic))
    );
}

#[test]
fn global_ids_bind_once_and_only_global_ones() {
    let id = EbbId::from_u32(ebb_core::ebb::FIRST_GLOBAL_ID + 5).unwrap();
    let shared = SharedEbb::create_global(id, 9u16).unwrap();
    assert_eq!((shared.id(), *shared.rep()), (id, 9));
    assert_eq!(
        SharedEbb::create_global(id, 1u16).err(),
        Some(EbbError::AlreadyBound(id))
    );
    assert_eq!(
        MulticoreEbb::create_global(id, |_| 0u8).err(),
        Some(EbbError::AlreadyBound(id))
    );
    let other = EbbId::from_u32(ebb_core::ebb::FIRST_GLOBAL_ID + 6).unwrap();
    let per_core = MulticoreEbb::create_global(other, |core| core.0).unwrap();
    let got = run(2, move || async move { *per_core.rep() });
    assert_eq!(got, 0);
    // A node's own ids never reach the global range, and are refused there.
    let dynamic = SharedEbb::create(1u8).unwrap().id();
    assert!(!dynamic.is_global());
    assert_eq!(
        SharedEbb::create_global(dynamic, 2u8).err(),
        Some(EbbError::NotGlobal(dynamic))
    );
}

/// A hand-written Ebb kind: the miss handler decides what each core gets.
struct CoreNumber;
impl Ebb for CoreNumber {
    type Rep = u32;
    fn miss(_id: EbbId) -> Result<&'static u32, EbbError> {
        let core = ebb_core::percore::current_core().ok_or(EbbError::NotOnCore)?;
        Ok(Box::leak(Box::new(core.0 * 100)))
    }
}

#[test]
fn custom_miss_handlers_run_per_core() {
    // SAFETY: id 7 is used for `CoreNumber` only, in this test binary.
    let ebb: EbbRef<CoreNumber> = unsafe { EbbRef::from_id_unchecked(EbbId::new_static(7)) };
    let got = run(2, move || async move {
        let here = *ebb.rep();
        let there = run_on(CoreId(1), move || *ebb.rep()).await.unwrap();
        (here, there)
    });
    assert_eq!(got, (0, 100));
}

#[test]
#[should_panic(expected = "is not bound to any object")]
fn calling_an_unbound_ebb_panics_with_the_reason() {
    let ebb = MulticoreEbb::<u8>::create(|_| 0).unwrap();
    // SAFETY: a fresh static id never bound to anything, used only here.
    let unbound: EbbRef<SharedEbb<u8>> =
        unsafe { EbbRef::from_id_unchecked(EbbId::new_static(200)) };
    let _ = ebb;
    let _ = *unbound.rep();
}

#[test]
fn ebb_refs_are_small_and_copy() {
    assert_eq!(std::mem::size_of::<EbbRef<SharedEbb<Arc<u8>>>>(), 4);
}
