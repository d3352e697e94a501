use super::*;
use crate::MAX_BLOCK;
use crate::testing::{Arena, Live, Model, check, fill};
use ebb_core::{CoreId, percore};
use proptest::prelude::*;
use std::boxed::Box;
use std::sync::mpsc;
use std::vec::Vec;

fn pages(len: usize) -> (Box<PageAllocator>, Arena) {
    let arena = Arena::new(len);
    let pages = Box::new(PageAllocator::new());
    // SAFETY: every test keeps the arena alive longer than the allocator and the slabs.
    unsafe { pages.add_region(arena.ptr(), arena.len()).unwrap() };
    (pages, arena)
}

/// Runs `f` as core `core` (restoring "no core" afterwards).
fn as_core<R>(core: Option<u32>, f: impl FnOnce() -> R) -> R {
    percore::set_current_core(core.map(CoreId));
    let r = f();
    percore::set_current_core(None);
    r
}

#[test]
fn class_shapes_hold_enough_objects_and_align_them() {
    for size in [8, 16, 24, 48, 64, 96, 1024, 2048, 4096, 100_000] {
        let p = ClassParams::new(size, 0);
        assert!(p.capacity >= 8, "{p:?}");
        assert_eq!(p.first % p.align, 0);
        assert_eq!(size % p.align, 0);
        assert!(p.first + p.capacity * p.size <= p.slab_bytes());
    }
    assert_eq!(ClassParams::new(8, 0).slab_order, 0);
    assert_eq!(ClassParams::new(48, 0).align, 16);
    assert_eq!(ClassParams::new(256, 0).align, 64);
}

#[test]
fn objects_are_reused_after_free_on_the_same_core() {
    let (pages, _arena) = pages(MAX_TEST_ARENA);
    let slab = SlabAllocator::new(&pages, Layout::new::<u64>()).unwrap();
    as_core(Some(0), || {
        let a = slab.alloc().unwrap();
        // SAFETY: `a` is live and ours.
        unsafe { slab.free(a) };
        let b = slab.alloc().unwrap();
        assert_eq!(a, b, "LIFO reuse of the freed object");
        // SAFETY: as above.
        unsafe { slab.free(b) };
        slab.trim();
    });
    assert_eq!(slab.live_slabs(), 0);
    assert_eq!(pages.stats().free_pages, pages.stats().total_pages);
}

#[test]
fn remote_frees_go_to_the_owner_and_are_drained_on_its_next_allocation() {
    let (pages, _arena) = pages(MAX_TEST_ARENA);
    let slab = SlabAllocator::new(&pages, Layout::new::<[u64; 4]>()).unwrap();
    let per_slab = slab.objects_per_slab();
    // Core 0 fills exactly one slab.
    let objs: Vec<_> = as_core(Some(0), || {
        (0..per_slab).map(|_| slab.alloc().unwrap()).collect()
    });
    assert_eq!(slab.live_slabs(), 1);
    // Core 1 frees them all: they go onto core 0's remote list, core 1 takes no slab.
    as_core(Some(1), || {
        for &obj in &objs {
            // SAFETY: each object is live and given up once.
            unsafe { slab.free(obj) };
        }
    });
    assert_eq!(slab.live_slabs(), 1);
    // Core 0's next allocations drain the list and reuse those objects: no new slab.
    as_core(Some(0), || {
        let again: Vec<_> = (0..per_slab).map(|_| slab.alloc().unwrap()).collect();
        assert_eq!(slab.live_slabs(), 1);
        let mut a: Vec<_> = objs.iter().map(|p| p.addr()).collect();
        let mut b: Vec<_> = again.iter().map(|p| p.addr()).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        for obj in again {
            // SAFETY: live, ours.
            unsafe { slab.free(obj) };
        }
        slab.trim();
    });
    assert_eq!(slab.live_slabs(), 0);
}

#[test]
fn off_core_threads_share_a_locked_cache_and_free_remotely() {
    let (pages, _arena) = pages(MAX_TEST_ARENA);
    let slab = SlabAllocator::new(&pages, Layout::new::<u64>()).unwrap();
    let from_core = as_core(Some(3), || slab.alloc().unwrap());
    let off = as_core(None, || slab.alloc().unwrap());
    // Off core frees the core's object (remote), the core frees the off-core one (remote).
    // SAFETY: both objects are live and each is freed once.
    unsafe {
        as_core(None, || slab.free(from_core));
        as_core(Some(3), || slab.free(off));
    }
    as_core(Some(3), || slab.trim());
    as_core(None, || slab.trim());
    assert_eq!(slab.live_slabs(), 0);
}

/// An object handed to another thread to free.
struct SendPtr(NonNull<u8>);
// SAFETY: the sender gives the object up; only the receiver uses it.
unsafe impl Send for SendPtr {}

/// Two real threads acting as two cores: each allocates, writes, and hands half its
/// objects to the other to free. Everything comes back.
#[test]
fn remote_frees_between_threads() {
    const N: usize = if cfg!(miri) { 200 } else { 20_000 };
    let (pages, _arena) = pages(MAX_TEST_ARENA);
    let slab = SlabAllocator::new(&pages, Layout::new::<[u64; 2]>()).unwrap();
    let (to_1, from_0) = mpsc::channel::<Vec<SendPtr>>();
    let (to_0, from_1) = mpsc::channel::<Vec<SendPtr>>();
    let slab = &slab;
    std::thread::scope(|s| {
        for (core, tx, rx) in [(0u32, to_1, from_1), (1u32, to_0, from_0)] {
            s.spawn(move || {
                as_core(Some(core), || {
                    let mine: Vec<NonNull<u8>> = (0..N).map(|_| slab.alloc().unwrap()).collect();
                    for (i, p) in mine.iter().enumerate() {
                        // SAFETY: live, ours, 16 bytes.
                        unsafe { p.as_ptr().cast::<u64>().write(i as u64 ^ core as u64) };
                    }
                    let (keep, give) = mine.split_at(N / 2);
                    tx.send(give.iter().map(|&p| SendPtr(p)).collect()).unwrap();
                    for (i, p) in keep.iter().enumerate() {
                        // SAFETY: live, ours, written above.
                        unsafe {
                            assert_eq!(p.as_ptr().cast::<u64>().read(), i as u64 ^ core as u64);
                            slab.free(*p);
                        }
                    }
                    for SendPtr(p) in rx.recv().unwrap() {
                        // The other core's objects: freed remotely.
                        // SAFETY: the sender gave the object up to us.
                        unsafe { slab.free(p) };
                    }
                    slab.trim();
                });
            });
        }
    });
    // One more round per core drains whatever arrived after its trim.
    as_core(Some(0), || slab.trim());
    as_core(Some(1), || slab.trim());
    assert_eq!(slab.live_slabs(), 0);
    assert_eq!(pages.stats().free_pages, pages.stats().total_pages);
}

const MAX_TEST_ARENA: usize = if cfg!(miri) {
    MAX_BLOCK / 4
} else {
    4 * MAX_BLOCK
};

#[test]
fn exhaustion_is_an_error_and_memory_comes_back() {
    let (pages, _arena) = pages(MAX_BLOCK / 8);
    let slab = SlabAllocator::new(&pages, Layout::new::<[u8; 512]>()).unwrap();
    as_core(Some(0), || {
        let mut held = Vec::new();
        let err = loop {
            match slab.alloc() {
                Ok(p) => held.push(p),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, AllocError::OutOfPages { .. }));
        assert_eq!(held.len(), slab.live_slabs() * slab.objects_per_slab());
        for p in held {
            // SAFETY: live, ours.
            unsafe { slab.free(p) };
        }
        slab.trim();
        assert!(slab.alloc().is_ok_and(|p| {
            // SAFETY: live, ours.
            unsafe { slab.free(p) };
            true
        }));
        slab.trim();
    });
}

#[test]
fn unsupported_layouts_are_refused() {
    let (pages, _arena) = pages(MAX_BLOCK / 8);
    let big_align = Layout::from_size_align(64, 128).unwrap();
    assert!(SlabAllocator::new(&pages, big_align).is_err());
    let huge = Layout::from_size_align(MAX_BLOCK, 8).unwrap();
    assert!(SlabAllocator::new(&pages, huge).is_err());
    let odd = SlabAllocator::new(&pages, Layout::from_size_align(13, 4).unwrap()).unwrap();
    assert_eq!(odd.object_size(), 16);
}

#[derive(Clone, Debug)]
enum Op {
    /// Allocate on core `0`.
    Alloc(u8),
    /// Free the live object picked by `1`, on core `0` (often not the owner).
    Free(u8, usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // Cores 0..3, and 3 stands for "no core" (the off-core slot).
    let op = prop_oneof![
        3 => (0..4u8).prop_map(Op::Alloc),
        2 => (0..4u8, any::<usize>()).prop_map(|(c, i)| Op::Free(c, i)),
    ];
    proptest::collection::vec(op, 1..if cfg!(miri) { 40 } else { 600 })
}

fn core_of(c: u8) -> Option<u32> {
    (c < 3).then_some(c as u32)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 96 }))]

    /// Random allocations and frees on random "cores" (in one thread, switching the core
    /// id, so remote frees happen deterministically) against a model: objects never
    /// overlap, are aligned, keep their contents until freed; afterwards every slab goes
    /// back to the page allocator.
    #[test]
    fn slab_matches_model(size in 1usize..300, align_log in 0u32..7, ops in ops()) {
        let layout = Layout::from_size_align(size, 1 << align_log).unwrap();
        let (pages, _arena) = pages(MAX_TEST_ARENA);
        let slab = SlabAllocator::new(&pages, layout).unwrap();
        let len = slab.object_size();
        let mut model = Model::default();
        let mut objs = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Alloc(c) => {
                    let p = as_core(core_of(c), || slab.alloc()).unwrap();
                    prop_assert_eq!(p.addr().get() % layout.align(), 0);
                    let live = Live { addr: p.addr().get(), len, fill: i as u8 };
                    model.insert(live);
                    // SAFETY: live, ours, `len` bytes.
                    unsafe { fill(p.as_ptr(), len, live.fill) };
                    objs.push(p);
                }
                Op::Free(c, pick) if !objs.is_empty() => {
                    let index = pick % objs.len();
                    let p = objs.swap_remove(index);
                    let live = model.live.swap_remove(index);
                    // SAFETY: live, ours, filled; given up once.
                    unsafe {
                        check(p.as_ptr(), len, live.fill);
                        as_core(core_of(c), || slab.free(p));
                    }
                }
                Op::Free(..) => {}
            }
        }
        for (p, live) in objs.into_iter().zip(model.live) {
            // SAFETY: as above.
            unsafe {
                check(p.as_ptr(), len, live.fill);
                slab.free(p);
            }
        }
        for c in 0..4 {
            as_core(core_of(c), || slab.trim());
        }
        prop_assert_eq!(slab.live_slabs(), 0);
        prop_assert_eq!(pages.stats().free_pages, pages.stats().total_pages);
    }
}
