//! The buddy allocator's state: free lists threaded through the free blocks themselves and
//! one metadata byte per page. All raw memory access of the page allocator is here.
//!
//! Invariants (hold whenever the state is not borrowed):
//!
//! 1. Every block on `heads[o]` is a free, `PAGE_SIZE << o`-aligned block of `2^o` pages
//!    inside region `node.region`, its first bytes hold its [`FreeNode`], and its
//!    metadata byte is `o`. The lists are doubly linked and hold no block twice.
//! 2. Every page's metadata byte is `o` (head of a free block of order `o`),
//!    `ALLOCATED | o` (head of an allocated block of order `o`) or [`TAIL`] (any other page).
//! 3. Blocks never straddle regions, so a buddy is only merged when it lies in the same
//!    region. Buddies are found by address: `addr ^ (PAGE_SIZE << o)`.
//! 4. Every pointer to a page is derived from its region's `meta` pointer (the start of the
//!    memory the region was given), so it carries provenance over the whole region.
//! 5. A region's whole largest-order blocks from `frontier` to `frontier_end` are free,
//!    on no list, marked [`TAIL`], and have never been written: [`BuddyState::alloc`]
//!    takes one from there only when no list can serve a request. Largest blocks never
//!    merge, so keeping them off the lists changes no placement or merging; the smaller
//!    blocks at a region's unaligned edges go on the lists when it is added. So adding a
//!    region writes its metadata bytes and at most a few pages at its edges, and memory
//!    the program never asks for stays untouched — a guest whose host backs it lazily,
//!    with huge pages or not, is not charged for all of it at boot.

use super::geometry::{MAX_BLOCK, MAX_ORDER, MAX_REGIONS, ORDERS, PAGE_SIZE};
use super::stats::PageStats;
use crate::error::{FreeError, RegionError};
use core::ptr::{self, NonNull};

/// Metadata byte of a page that is not the head of any block.
const TAIL: u8 = 0xFF;
/// Flag in the metadata byte of the head of an allocated block (ORed with its order).
const ALLOCATED: u8 = 0x80;

/// What a free block holds in its first bytes.
#[repr(C)]
struct FreeNode {
    next: *mut FreeNode,
    prev: *mut FreeNode,
    region: usize,
}

/// One contiguous range of memory given to the allocator.
struct Region {
    /// Start of the memory given (the metadata bytes live here).
    meta: *mut u8,
    /// Address of the first usable page (just after the metadata pages).
    base: usize,
    /// Number of usable pages, and of metadata bytes.
    pages: usize,
    /// The largest-order blocks never handed to a free list: `[frontier, frontier_end)`
    /// (invariant 5).
    frontier: usize,
    frontier_end: usize,
}

impl Region {
    const EMPTY: Region = Region {
        meta: ptr::null_mut(),
        base: 0,
        pages: 0,
        frontier: 0,
        frontier_end: 0,
    };

    fn end(&self) -> usize {
        self.base + self.pages * PAGE_SIZE
    }

    /// Whether `[addr, addr + bytes)` lies in the usable pages.
    fn holds(&self, addr: usize, bytes: usize) -> bool {
        addr >= self.base && addr.checked_add(bytes).is_some_and(|end| end <= self.end())
    }

    fn page_index(&self, addr: usize) -> usize {
        (addr - self.base) / PAGE_SIZE
    }

    /// A pointer to `addr` (inside the region) with the region's provenance.
    fn ptr(&self, addr: usize) -> *mut u8 {
        self.meta.with_addr(addr)
    }

    fn meta(&mut self) -> &mut [u8] {
        if self.pages == 0 {
            return &mut [];
        }
        // SAFETY: `meta` points at `pages` bytes carved from the start of the region in
        // `add_region`, owned by the allocator and never handed out; `&mut self` (the state
        // is only reached under the allocator's lock) makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.meta, self.pages) }
    }
}

/// The order of the largest naturally aligned block at `addr` that ends by `end`
/// (`addr` page-aligned and below `end`).
fn largest_block_at(addr: usize, end: usize) -> usize {
    (0..=MAX_ORDER)
        .rev()
        .find(|&o| {
            let bytes = PAGE_SIZE << o;
            addr.is_multiple_of(bytes) && addr + bytes <= end
        })
        .unwrap_or(0)
}

/// The whole state of one buddy allocator (one NUMA node).
pub(crate) struct BuddyState {
    heads: [*mut FreeNode; ORDERS],
    free_blocks: [usize; ORDERS],
    regions: [Region; MAX_REGIONS],
    nregions: usize,
    total_pages: usize,
    free_pages: usize,
}

// SAFETY: the raw pointers refer to memory handed to this allocator exclusively and for
// good (`add_region`'s contract); moving the state to another thread moves that ownership.
unsafe impl Send for BuddyState {}

impl BuddyState {
    pub(crate) const fn new() -> Self {
        BuddyState {
            heads: [ptr::null_mut(); ORDERS],
            free_blocks: [0; ORDERS],
            regions: [const { Region::EMPTY }; MAX_REGIONS],
            nregions: 0,
            total_pages: 0,
            free_pages: 0,
        }
    }

    /// Adds `[start, start + len)` to the allocator; returns how many pages became usable.
    ///
    /// # Safety
    ///
    /// 1. The range is valid for reads and writes and nothing else uses it, for as long as
    ///    the allocator (and any block it hands out) lives.
    /// 2. `start` carries provenance over the whole range.
    pub(crate) unsafe fn add_region(
        &mut self,
        start: *mut u8,
        len: usize,
    ) -> Result<usize, RegionError> {
        if self.nregions == MAX_REGIONS {
            return Err(RegionError::TableFull);
        }
        let first = start.addr().checked_next_multiple_of(PAGE_SIZE);
        let end = start.addr().saturating_add(len) & !(PAGE_SIZE - 1);
        let Some(first) = first.filter(|&f| f < end) else {
            return Err(RegionError::TooSmall);
        };
        let total = (end - first) / PAGE_SIZE;
        // One metadata byte per page; the metadata pages themselves need none, but the
        // slight over-count keeps the arithmetic simple.
        let meta_pages = total.div_ceil(PAGE_SIZE);
        let pages = total - meta_pages;
        if pages == 0 {
            return Err(RegionError::TooSmall);
        }
        let overlaps = self.regions[..self.nregions]
            .iter()
            .any(|r| first < r.end() && r.meta.addr() < end);
        if overlaps {
            return Err(RegionError::Overlap);
        }
        let index = self.nregions;
        let region = &mut self.regions[index];
        let base = first + meta_pages * PAGE_SIZE;
        *region = Region {
            meta: start.with_addr(first),
            base,
            pages,
            frontier: 0,
            frontier_end: 0,
        };
        // SAFETY: the metadata bytes are the first `pages` bytes of the range the caller
        // gave us (duty 1); `write_bytes` initializes them before `meta()` reads them.
        unsafe { ptr::write_bytes(region.meta, TAIL, pages) };
        self.nregions += 1;

        // Cut the usable pages into the largest naturally aligned blocks that fit. The
        // smaller ones (only at the unaligned edges) go on the lists now; the run of
        // largest ones in between stays untouched until needed (invariant 5).
        let (base, region_end) = (self.regions[index].base, self.regions[index].end());
        let mut addr = base;
        while addr < region_end {
            let order = largest_block_at(addr, region_end);
            let region = &mut self.regions[index];
            if order == MAX_ORDER {
                if region.frontier == region.frontier_end {
                    region.frontier = addr;
                }
                region.frontier_end = addr + MAX_BLOCK;
            } else {
                let page = region.page_index(addr);
                region.meta()[page] = order as u8;
                let block = region.ptr(addr);
                // SAFETY: `block` is a free block of `2^order` pages inside the new region
                // that nothing else refers to (duty 1), with the region's provenance
                // (duty 2).
                unsafe { self.push(order, block, index) };
            }
            addr += PAGE_SIZE << order;
        }
        self.total_pages += pages;
        self.free_pages += pages;
        Ok(pages)
    }

    /// Puts a free block on the list of its order.
    ///
    /// # Safety
    ///
    /// `block` is a free block of order `order` in region `region`, no longer used by
    /// anyone, and not on any list; its metadata byte already says `order`.
    unsafe fn push(&mut self, order: usize, block: *mut u8, region: usize) {
        let node = block.cast::<FreeNode>();
        let head = self.heads[order];
        // SAFETY: the block is at least a page, page aligned and ours (the caller's duty),
        // so a `FreeNode` fits at its start; `head`, if any, is a free block on the list
        // (invariant 1), whose node we may update.
        unsafe {
            node.write(FreeNode {
                next: head,
                prev: ptr::null_mut(),
                region,
            });
            if !head.is_null() {
                (*head).prev = node;
            }
        }
        self.heads[order] = node;
        self.free_blocks[order] += 1;
    }

    /// Takes `node` off the list of order `order`; returns its region.
    fn unlink(&mut self, order: usize, node: *mut FreeNode) -> usize {
        // SAFETY: `node` is on list `order` (callers take it from the list or identified it
        // as a free head of that order through the metadata), so it and its neighbours are
        // free blocks holding valid nodes (invariant 1).
        let region = unsafe {
            let FreeNode { next, prev, region } = node.read();
            if prev.is_null() {
                self.heads[order] = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
            region
        };
        self.free_blocks[order] -= 1;
        region
    }

    /// Puts the next untouched largest block of the first region that has one on its
    /// free list; false if none is left.
    fn carve(&mut self) -> bool {
        let Some(index) = self.regions[..self.nregions]
            .iter()
            .position(|r| r.frontier < r.frontier_end)
        else {
            return false;
        };
        let region = &mut self.regions[index];
        let addr = region.frontier;
        region.frontier = addr + MAX_BLOCK;
        let page = region.page_index(addr);
        region.meta()[page] = MAX_ORDER as u8;
        let block = region.ptr(addr);
        // SAFETY: `block` is the first untouched largest block of region `index`: free, on
        // no list and used by nobody (invariant 5), with the region's provenance; its
        // metadata byte now says `MAX_ORDER`.
        unsafe { self.push(MAX_ORDER, block, index) };
        true
    }

    /// Allocates a block of `2^order` pages, splitting a larger one if needed.
    pub(crate) fn alloc(&mut self, order: usize) -> Option<NonNull<u8>> {
        if order > MAX_ORDER {
            return None;
        }
        let mut o = loop {
            if let Some(o) = (order..=MAX_ORDER).find(|&o| !self.heads[o].is_null()) {
                break o;
            }
            if !self.carve() {
                return None;
            }
        };
        let node = self.heads[o];
        let region_index = self.unlink(o, node);
        let block = node.addr();
        while o > order {
            o -= 1;
            let upper = block + (PAGE_SIZE << o);
            let region = &mut self.regions[region_index];
            let page = region.page_index(upper);
            region.meta()[page] = o as u8;
            let upper = region.ptr(upper);
            // SAFETY: `upper` is the upper half of the free block just taken off a list, so
            // it is free, ours, on no list, inside the region, and marked with order `o`.
            unsafe { self.push(o, upper, region_index) };
        }
        let region = &mut self.regions[region_index];
        let page = region.page_index(block);
        region.meta()[page] = ALLOCATED | order as u8;
        self.free_pages -= 1 << order;
        NonNull::new(region.ptr(block))
    }

    /// Returns a block to the free lists, merging it with its buddy as long as the buddy
    /// is free and of the same order.
    ///
    /// # Safety
    ///
    /// If the block is accepted (the address is the head of an allocated block of `order`
    /// in this allocator — checked), nothing may use its memory afterwards.
    pub(crate) unsafe fn free(&mut self, ptr: NonNull<u8>, order: usize) -> Result<(), FreeError> {
        let addr = ptr.addr().get();
        let not_allocated = FreeError::NotAllocated {
            addr,
            order: order.min(u8::MAX as usize) as u8,
        };
        if order > MAX_ORDER {
            return Err(not_allocated);
        }
        let Some(index) = self.regions[..self.nregions]
            .iter()
            .position(|r| r.holds(addr, PAGE_SIZE << order))
        else {
            return Err(FreeError::Foreign { addr });
        };
        let region = &mut self.regions[index];
        let page = region.page_index(addr);
        if !addr.is_multiple_of(PAGE_SIZE << order)
            || region.meta()[page] != ALLOCATED | order as u8
        {
            return Err(not_allocated);
        }
        region.meta()[page] = TAIL;
        let (mut block, mut o) = (addr, order);
        while o < MAX_ORDER {
            let buddy = block ^ (PAGE_SIZE << o);
            let region = &mut self.regions[index];
            if !region.holds(buddy, PAGE_SIZE << o) {
                break;
            }
            let buddy_page = region.page_index(buddy);
            if region.meta()[buddy_page] != o as u8 {
                break;
            }
            region.meta()[buddy_page] = TAIL;
            let node = region.ptr(buddy).cast::<FreeNode>();
            self.unlink(o, node);
            block &= !(PAGE_SIZE << o);
            o += 1;
        }
        let region = &mut self.regions[index];
        let page = region.page_index(block);
        region.meta()[page] = o as u8;
        let block = region.ptr(block);
        // SAFETY: the block (the freed one merged with free buddies, all taken off their
        // lists) is free: the caller gave up the freed part, the buddies were free. It lies
        // in region `index` and its metadata now says `o`.
        unsafe { self.push(o, block, index) };
        self.free_pages += 1 << order;
        Ok(())
    }

    /// Free largest blocks count the untouched ones too, so the figures do not depend on
    /// how many have been taken onto the lists yet.
    pub(crate) fn stats(&self) -> PageStats {
        let mut free_blocks = self.free_blocks;
        for region in &self.regions[..self.nregions] {
            free_blocks[MAX_ORDER] += (region.frontier_end - region.frontier) / MAX_BLOCK;
        }
        PageStats {
            total_pages: self.total_pages,
            free_pages: self.free_pages,
            free_blocks,
            regions: self.nregions,
        }
    }
}
