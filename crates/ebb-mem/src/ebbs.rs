//! The memory Ebbs as Ebbs: how cores reach their node's page allocator.
//!
//! EbbRT's page allocator is an Ebb with one representative per NUMA node. Here each
//! core's representative is a reference to its node's [`PageAllocator`], made by a
//! [`MulticoreEbb`] on the core's first call; cores of a node share the node's allocator
//! (and its lock). The slab and general-purpose allocators keep their per-core caches in
//! fixed arrays instead (see [`crate::SlabAllocator`]): the global allocator cannot use an
//! Ebb whose miss handler allocates.

use crate::page::PageAllocator;
use ebb_core::ebb::{EbbError, MulticoreEbb};
use ebb_core::{CoreId, EbbRef};

/// The page-allocator Ebb: each core's representative is its node's allocator.
pub type PageAllocatorEbb = MulticoreEbb<&'static PageAllocator>;

/// Creates the page-allocator Ebb over one allocator per node; `node_of(core)` says which
/// node a core belongs to (out-of-range answers are clamped to the last node).
pub fn create_page_allocator_ebb(
    nodes: &'static [PageAllocator],
    node_of: impl Fn(CoreId) -> usize + Send + Sync + 'static,
) -> Result<EbbRef<PageAllocatorEbb>, EbbError> {
    if nodes.is_empty() {
        return Err(EbbError::CoreOutOfRange);
    }
    MulticoreEbb::create(move |core| &nodes[node_of(core).min(nodes.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Arena;
    use ebb_core::percore;

    #[test]
    fn each_core_reaches_its_nodes_allocator() {
        let nodes: &'static [PageAllocator] = std::boxed::Box::leak(std::boxed::Box::new([
            PageAllocator::new(),
            PageAllocator::new(),
        ]));
        for node in nodes {
            let arena = Arena::new(64 * 4096);
            let len = arena.len();
            // SAFETY: the arena is leaked, so it lives as long as the (leaked) allocator,
            // and nothing else uses it.
            unsafe { node.add_region(arena.leak(), len).unwrap() };
        }
        let ebb = create_page_allocator_ebb(nodes, |core| core.index() % 2).unwrap();
        std::thread::scope(|s| {
            for core in 0..4u32 {
                s.spawn(move || {
                    percore::set_current_core(Some(CoreId(core)));
                    let rep: &PageAllocator = ebb.rep();
                    assert!(core::ptr::eq(rep, &nodes[core as usize % 2]));
                    let block = rep.alloc_pages(0).unwrap();
                    rep.free_pages(block).unwrap();
                    percore::set_current_core(None);
                });
            }
        });
    }
}
