use super::*;
use crate::testing::{Arena, Live, Model, check, fill};
use proptest::prelude::*;
use std::vec::Vec;

/// An allocator over a fresh arena of `len` bytes (aligned to the largest block).
fn allocator(len: usize) -> (PageAllocator, Arena) {
    let arena = Arena::new(len);
    let pages = PageAllocator::new();
    // SAFETY: the arena outlives the allocator in every test (returned together, the
    // allocator first so it drops first) and nothing else uses it.
    unsafe { pages.add_region(arena.ptr(), arena.len()).unwrap() };
    (pages, arena)
}

#[test]
fn order_for_rounds_up_to_a_power_of_two_of_pages() {
    assert_eq!(order_for(0), Some(0));
    assert_eq!(order_for(1), Some(0));
    assert_eq!(order_for(PAGE_SIZE), Some(0));
    assert_eq!(order_for(PAGE_SIZE + 1), Some(1));
    assert_eq!(order_for(3 * PAGE_SIZE), Some(2));
    assert_eq!(order_for(MAX_BLOCK), Some(MAX_ORDER));
    assert_eq!(order_for(MAX_BLOCK + 1), None);
}

#[test]
fn region_is_cut_into_maximal_aligned_blocks_after_the_metadata() {
    // 2 max blocks: the first loses one page to metadata, so it is cut into 512+256+...+1.
    let (pages, _arena) = allocator(2 * MAX_BLOCK);
    let stats = pages.stats();
    assert_eq!(stats.total_pages, 2 * 1024 - 1);
    assert_eq!(stats.free_pages, stats.total_pages);
    assert_eq!(stats.free_blocks[MAX_ORDER], 1);
    assert!(stats.free_blocks[..MAX_ORDER].iter().all(|&n| n == 1));
}

#[test]
#[cfg_attr(miri, ignore = "scans 12 MiB byte by byte")]
fn adding_a_region_leaves_its_largest_blocks_untouched_until_they_are_needed() {
    // Why: a guest's whole memory is one region, and a host that backs it lazily (with
    // 2 MiB pages, say) must not be made to supply all of it at boot.
    let arena = Arena::new(3 * MAX_BLOCK);
    // SAFETY: the arena is ours, `len` bytes long.
    unsafe { core::ptr::write_bytes(arena.ptr(), 0xAA, arena.len()) };
    let pages = PageAllocator::new();
    // SAFETY: the arena outlives the allocator (declared after it, so dropped first) and
    // nothing else uses it.
    unsafe { pages.add_region(arena.ptr(), arena.len()).unwrap() };
    // Whether any byte from `from` on is no longer the fill pattern. A fresh slice each
    // time: the allocator writes the arena through its own pointers in between.
    let touched_from = |from: usize| {
        // SAFETY: reading the arena we own; nothing writes it while the slice lives.
        let bytes = unsafe { core::slice::from_raw_parts(arena.ptr(), arena.len()) };
        bytes[from..].iter().any(|&b| b != 0xAA)
    };
    // The metadata page and the small blocks after it, up to the first 4 MiB boundary, are
    // written; the two largest blocks above it are not.
    assert!(
        !touched_from(MAX_BLOCK),
        "largest blocks written by add_region"
    );

    // A small request is served from the small blocks.
    let small = pages.alloc_pages(0).unwrap();
    assert!(small.as_ptr().addr() < arena.ptr().addr() + MAX_BLOCK);
    assert!(
        !touched_from(MAX_BLOCK),
        "a largest block taken for a one-page request"
    );
    // A largest one takes the first largest block, and leaves the second alone.
    let big = pages.alloc_pages(MAX_ORDER).unwrap();
    assert_eq!(big.as_ptr().addr(), arena.ptr().addr() + MAX_BLOCK);
    assert!(
        !touched_from(2 * MAX_BLOCK),
        "the second largest block written"
    );
    assert_eq!(pages.stats().free_blocks[MAX_ORDER], 1);
    pages.free_pages(big).unwrap();
    pages.free_pages(small).unwrap();
    assert_eq!(pages.stats().free_blocks[MAX_ORDER], 2);
}

/// An allocator over `len` bytes starting `offset` bytes into a fresh arena of
/// `arena_len` bytes (aligned to the largest block).
fn allocator_at(arena_len: usize, offset: usize, len: usize) -> (PageAllocator, Arena) {
    let arena = Arena::new(arena_len);
    let pages = PageAllocator::new();
    assert!(offset + len <= arena.len());
    // SAFETY: as in `allocator`, for the part of the arena given.
    unsafe { pages.add_region(arena.ptr().add(offset), len).unwrap() };
    (pages, arena)
}

#[test]
fn a_small_request_takes_a_small_edge_block_before_splitting_a_largest_one() {
    // Usable: one page (below the 4 MiB boundary, after the metadata page) and one
    // largest block. The page request must not split the largest block.
    let (pages, _arena) = allocator_at(
        2 * MAX_BLOCK,
        MAX_BLOCK - 2 * PAGE_SIZE,
        MAX_BLOCK + 2 * PAGE_SIZE,
    );
    assert_eq!(pages.stats().total_pages, 1024 + 1);
    let page = pages.alloc_pages(0).unwrap();
    let big = pages
        .alloc_pages(MAX_ORDER)
        .expect("the largest block is still whole");
    pages.free_pages(page).unwrap();
    pages.free_pages(big).unwrap();
}

#[test]
fn half_blocks_at_both_edges_are_used_before_the_largest_one() {
    // Usable: 2 MiB below a 4 MiB boundary, a largest block, 2 MiB above it.
    let (pages, _arena) = allocator_at(
        3 * MAX_BLOCK,
        MAX_BLOCK / 2 - PAGE_SIZE,
        2 * MAX_BLOCK + PAGE_SIZE,
    );
    let a = pages.alloc_pages(MAX_ORDER - 1).unwrap();
    let b = pages.alloc_pages(MAX_ORDER - 1).unwrap();
    let stats = pages.stats();
    assert_eq!(stats.free_blocks[MAX_ORDER], 1, "{stats:?}");
    assert_eq!(stats.free_blocks[MAX_ORDER - 1], 0, "{stats:?}");
    pages.free_pages(a).unwrap();
    pages.free_pages(b).unwrap();
}

#[test]
fn blocks_are_aligned_to_their_size_and_split_from_larger_ones() {
    let (pages, _arena) = allocator(2 * MAX_BLOCK);
    for order in 0..=MAX_ORDER {
        let block = pages.alloc_pages(order).unwrap();
        assert_eq!(block.as_ptr().addr() % (PAGE_SIZE << order), 0);
        assert_eq!(block.len(), PAGE_SIZE << order);
        pages.free_pages(block).unwrap();
    }
    assert_eq!(pages.stats().free_pages, pages.stats().total_pages);
}

#[test]
fn fragmentation_blocks_large_orders_until_everything_coalesces_back() {
    let (pages, _arena) = allocator(2 * MAX_BLOCK);
    let initial = pages.stats();
    // Take every page as an order-0 block.
    let mut blocks = Vec::new();
    while let Ok(block) = pages.alloc_pages(0) {
        blocks.push(block);
    }
    assert_eq!(blocks.len(), initial.total_pages);
    assert_eq!(
        pages.alloc_pages(0).unwrap_err(),
        AllocError::OutOfPages { order: 0 }
    );
    // Free every other page (by address): half the memory is free, but no two free pages
    // are buddies, so nothing above order 0 is available.
    blocks.sort_by_key(|b| b.as_ptr().addr());
    let (odd, even): (Vec<_>, Vec<_>) = blocks
        .into_iter()
        .partition(|b| (b.as_ptr().addr() / PAGE_SIZE) % 2 == 1);
    let odd_count = odd.len();
    for block in odd {
        pages.free_pages(block).unwrap();
    }
    let fragmented = pages.stats();
    assert_eq!(fragmented.free_pages, odd_count);
    assert_eq!(fragmented.largest_free_order(), Some(0));
    for order in 1..=MAX_ORDER {
        assert_eq!(
            pages.alloc_pages(order).unwrap_err(),
            AllocError::OutOfPages { order: order as u8 }
        );
    }
    // Free the rest: every block merges back to the maximal blocks of the start.
    for block in even {
        pages.free_pages(block).unwrap();
    }
    assert_eq!(pages.stats(), initial);
    let big = pages.alloc_pages(MAX_ORDER).unwrap();
    pages.free_pages(big).unwrap();
}

#[test]
fn exhaustion_is_an_error_for_every_order() {
    let (pages, _arena) = allocator(MAX_BLOCK);
    let mut held = Vec::new();
    while let Ok(block) = pages.alloc_pages(3) {
        held.push(block);
    }
    for order in 3..=MAX_ORDER {
        assert!(matches!(
            pages.alloc_pages(order),
            Err(AllocError::OutOfPages { .. })
        ));
    }
    assert!(matches!(
        pages.alloc_pages(MAX_ORDER + 1),
        Err(AllocError::TooLarge { .. })
    ));
    for block in held {
        pages.free_pages(block).unwrap();
    }
}

#[test]
fn bad_frees_are_refused() {
    let (pages, _arena) = allocator(MAX_BLOCK);
    let (other, _other_arena) = allocator(MAX_BLOCK);
    let block = other.alloc_pages(0).unwrap();
    let addr = block.as_ptr().addr();
    assert_eq!(pages.free_pages(block), Err(FreeError::Foreign { addr }));

    let block = pages.alloc_pages(1).unwrap();
    let raw = block.into_raw();
    // SAFETY: (test) a wrong order and an interior pointer are refused before any access.
    unsafe {
        assert!(pages.free_raw(raw, 0).is_err());
        let interior = NonNull::new(raw.as_ptr().add(PAGE_SIZE)).unwrap();
        assert!(pages.free_raw(interior, 0).is_err());
        pages.free_pages(PageBlock::from_raw(raw, 1)).unwrap();
        // A double free is refused too.
        assert!(pages.free_raw(raw, 1).is_err());
    }
}

#[test]
fn regions_cannot_overlap_and_may_be_small_or_unaligned() {
    let arena = Arena::new(MAX_BLOCK);
    let pages = PageAllocator::new();
    // SAFETY: (test) the arena outlives the allocator; halves are disjoint.
    unsafe {
        let half = MAX_BLOCK / 2;
        // Unaligned start: cut to whole pages.
        let added = pages.add_region(arena.ptr().add(100), half - 100).unwrap();
        assert_eq!(added, half / PAGE_SIZE - 2);
        assert_eq!(
            pages.add_region(arena.ptr().add(half - PAGE_SIZE), half),
            Err(RegionError::Overlap)
        );
        assert_eq!(
            pages.add_region(arena.ptr().add(half), 100),
            Err(RegionError::TooSmall)
        );
        pages.add_region(arena.ptr().add(half), half).unwrap();
    }
    assert_eq!(pages.stats().regions, 2);
    // Blocks never merge across regions: the largest possible is half the arena.
    assert!(pages.alloc_pages(MAX_ORDER).is_err());
    let block = pages.alloc_pages(MAX_ORDER - 2).unwrap();
    pages.free_pages(block).unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    Free(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..=6usize).prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
    ];
    proptest::collection::vec(op, 1..if cfg!(miri) { 24 } else { 300 })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 128 }))]

    /// Random allocations and frees against a model: blocks never overlap, are aligned to
    /// their size, keep their contents until freed, and once everything is freed the
    /// allocator is exactly as it started (freed memory is reused, nothing leaks).
    #[test]
    fn buddy_matches_model(ops in ops()) {
        let (pages, _arena) = allocator(2 * MAX_BLOCK);
        let initial = pages.stats();
        let mut model = Model::default();
        let mut blocks: Vec<PageBlock> = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Alloc(order) => match pages.alloc_pages(order) {
                    Ok(block) => {
                        let (ptr, len) = (block.as_ptr(), block.len());
                        prop_assert_eq!(ptr.addr() % len, 0);
                        let live = Live { addr: ptr.addr(), len, fill: i as u8 };
                        model.insert(live);
                        // SAFETY: the block is ours.
                        unsafe { fill(ptr, len, live.fill) };
                        blocks.push(block);
                    }
                    Err(_) => {
                        // Only when no block of that order or above is free.
                        let stats = pages.stats();
                        prop_assert!(stats.free_blocks[order..].iter().all(|&n| n == 0));
                    }
                },
                Op::Free(pick) if !blocks.is_empty() => {
                    let index = pick % blocks.len();
                    let block = blocks.swap_remove(index);
                    let live = model.live.swap_remove(index);
                    // SAFETY: the block is ours and was filled with `live.fill`.
                    unsafe { check(block.as_ptr(), live.len, live.fill) };
                    pages.free_pages(block).unwrap();
                }
                Op::Free(_) => {}
            }
            let stats = pages.stats();
            let held: usize = blocks.iter().map(|b| 1 << b.order()).sum();
            prop_assert_eq!(stats.free_pages + held, stats.total_pages);
        }
        for (block, live) in blocks.into_iter().zip(model.live) {
            // SAFETY: as above.
            unsafe { check(block.as_ptr(), live.len, live.fill) };
            pages.free_pages(block).unwrap();
        }
        prop_assert_eq!(pages.stats(), initial);
    }
}
