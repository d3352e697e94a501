//! Identity-mapped 4-level page tables built from a [`Layout`](crate::layout::Layout)'s
//! page map.
//!
//! A 2 MiB chunk whose pages are all mapped alike becomes one large page; a chunk with
//! mixed pages (the low 2 MiB with its null guard and supervisor GDT page, the chunks
//! holding stack guard pages) gets a page table of 4 KiB pages. The tables are built in a
//! host buffer and copied into the guest's page-table area in one write.

use crate::layout::{LARGE_PAGE_SIZE, MappedRange, PAGE_SIZE, PageKind};
use ebb_abi::{PAGE_TABLES_ADDR, PAGE_TABLES_END};

const PRESENT: u64 = 1 << 0;
const WRITABLE: u64 = 1 << 1;
const USER: u64 = 1 << 2;
const LARGE: u64 = 1 << 7;
const WRITE_THROUGH: u64 = 1 << 3;
const CACHE_DISABLE: u64 = 1 << 4;
const NO_EXECUTE: u64 = 1 << 63;
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
const ENTRIES: usize = 512;
const GIB: u64 = 1 << 30;

/// Why the page tables cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PagingError {
    /// The page-table area is too small for this map.
    #[error("page tables need {needed} pages, the page-table area holds {available}")]
    AreaFull {
        /// Pages needed.
        needed: u64,
        /// Pages available.
        available: u64,
    },
}

/// Page tables ready to be copied to [`PAGE_TABLES_ADDR`]; the PML4 is the first page.
#[derive(Debug)]
pub struct PageTables {
    /// The table words, 512 per page.
    pub words: Vec<u64>,
}

fn leaf_flags(kind: PageKind) -> u64 {
    match kind {
        PageKind::Supervisor => PRESENT | WRITABLE | NO_EXECUTE,
        PageKind::UserReadOnly => PRESENT | USER | NO_EXECUTE,
        PageKind::UserData => PRESENT | WRITABLE | USER | NO_EXECUTE,
        PageKind::UserCode => PRESENT | WRITABLE | USER,
    }
}

/// Intermediate entries allow everything; the leaf decides.
const TABLE_FLAGS: u64 = PRESENT | WRITABLE | USER;

/// The kind of the page at `addr`, if mapped (`map` sorted and disjoint).
fn kind_at(map: &[MappedRange], addr: u64) -> Option<PageKind> {
    let i = map.partition_point(|r| r.end <= addr);
    map.get(i).filter(|r| r.start <= addr).map(|r| r.kind)
}

/// Appends a zeroed table page to `words` (`pages` of them so far) and returns its
/// number, or [`PagingError::AreaFull`] past `available` pages.
fn new_table(words: &mut Vec<u64>, pages: &mut u64, available: u64) -> Result<u64, PagingError> {
    let page = *pages;
    *pages += 1;
    if *pages > available {
        return Err(PagingError::AreaFull {
            needed: *pages,
            available,
        });
    }
    words.resize(*pages as usize * ENTRIES, 0);
    Ok(page)
}

impl PageTables {
    /// Builds tables mapping `map` (sorted, disjoint, page-aligned, below `mem_size`, which
    /// is a multiple of 2 MiB) at identical virtual and physical addresses.
    pub fn build(map: &[MappedRange], mem_size: u64) -> Result<Self, PagingError> {
        let available = (PAGE_TABLES_END - PAGE_TABLES_ADDR) / PAGE_SIZE;
        let gibs = mem_size.div_ceil(GIB);
        let mut pages = 2 + gibs; // PML4, PDPT, one PD per GiB
        let mut words = vec![0u64; (pages as usize) * ENTRIES];
        let page_addr = |page: u64| PAGE_TABLES_ADDR + page * PAGE_SIZE;
        words[0] = page_addr(1) | TABLE_FLAGS;
        for gib in 0..gibs {
            words[ENTRIES + gib as usize] = page_addr(2 + gib) | TABLE_FLAGS;
        }
        for chunk in (0..mem_size).step_by(LARGE_PAGE_SIZE as usize) {
            let end = chunk + LARGE_PAGE_SIZE;
            let pde = (2 * ENTRIES as u64 + chunk / LARGE_PAGE_SIZE) as usize;
            let first = map.partition_point(|r| r.end <= chunk);
            let Some(r) = map.get(first).filter(|r| r.start < end) else {
                continue; // nothing mapped in this chunk
            };
            if r.start <= chunk && r.end >= end {
                words[pde] = chunk | leaf_flags(r.kind) | LARGE;
                continue;
            }
            let pt = new_table(&mut words, &mut pages, available)?;
            words[pde] = page_addr(pt) | TABLE_FLAGS;
            for (i, addr) in (chunk..end).step_by(PAGE_SIZE as usize).enumerate() {
                if let Some(kind) = kind_at(map, addr) {
                    words[pt as usize * ENTRIES + i] = addr | leaf_flags(kind);
                }
            }
        }
        // The virtio-MMIO window: one uncached user read-write large page above RAM
        // (`Layout` keeps RAM below it), in the PD of the fourth GiB.
        let window = ebb_abi::virtio::MMIO_WINDOW_START;
        debug_assert!(mem_size <= window);
        let window_gib = window / GIB;
        let pd = if window_gib < gibs {
            2 + window_gib
        } else {
            let pd = new_table(&mut words, &mut pages, available)?;
            words[ENTRIES + window_gib as usize] = page_addr(pd) | TABLE_FLAGS;
            pd
        };
        let pde = pd as usize * ENTRIES + ((window % GIB) / LARGE_PAGE_SIZE) as usize;
        words[pde] =
            window | PRESENT | WRITABLE | USER | NO_EXECUTE | WRITE_THROUGH | CACHE_DISABLE | LARGE;
        Ok(PageTables { words })
    }

    /// The table bytes, little-endian, for copying to [`PAGE_TABLES_ADDR`].
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Walks the tables like the MMU: the physical address and leaf flags for `vaddr`.
    pub fn translate(&self, vaddr: u64) -> Option<(u64, u64)> {
        let entry = |table_addr: u64, index: u64| -> u64 {
            let page = (table_addr - PAGE_TABLES_ADDR) / PAGE_SIZE;
            self.words[(page * ENTRIES as u64 + index) as usize]
        };
        let pml4e = entry(PAGE_TABLES_ADDR, (vaddr >> 39) & 511);
        if pml4e & PRESENT == 0 {
            return None;
        }
        let pdpte = entry(pml4e & ADDR_MASK, (vaddr >> 30) & 511);
        if pdpte & PRESENT == 0 {
            return None;
        }
        let pde = entry(pdpte & ADDR_MASK, (vaddr >> 21) & 511);
        if pde & PRESENT == 0 {
            return None;
        }
        if pde & LARGE != 0 {
            return Some(((pde & ADDR_MASK) + (vaddr & (LARGE_PAGE_SIZE - 1)), pde));
        }
        let pte = entry(pde & ADDR_MASK, (vaddr >> 12) & 511);
        (pte & PRESENT != 0).then(|| ((pte & ADDR_MASK) + (vaddr & (PAGE_SIZE - 1)), pte))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;
    use ebb_abi::{BOOT_INFO_ADDR, GDT_ADDR, IMAGE_BASE, PERCORE_STRIDE};

    #[test]
    fn maps_layout_like_the_page_map() {
        let mem = 1u64 << 31; // 2 GiB: two page directories
        let l = Layout::new(mem, 2, IMAGE_BASE, IMAGE_BASE + 0x5_3000).unwrap();
        let map = l.page_map();
        let pt = PageTables::build(&map, mem).unwrap();
        assert_eq!(pt.translate(0), None, "null page must fault");
        assert_eq!(
            pt.translate(PAGE_TABLES_ADDR),
            None,
            "page-table area is not mapped"
        );
        let (pa, f) = pt.translate(GDT_ADDR + 8).unwrap();
        assert_eq!(pa, GDT_ADDR + 8);
        assert_eq!(f & USER, 0, "GDT is supervisor-only");
        let (_, f) = pt.translate(BOOT_INFO_ADDR).unwrap();
        assert_eq!(f & (USER | WRITABLE), USER, "boot info is user read-only");
        let (_, f) = pt.translate(l.percore(1) + PERCORE_STRIDE - 8).unwrap();
        assert_eq!(f & (USER | WRITABLE), USER | WRITABLE);
        assert_eq!(l.percore(1) + PERCORE_STRIDE, l.stacks_start);
        assert_eq!(
            pt.translate(l.stacks_start),
            None,
            "the first stack guard follows the per-core blocks"
        );
        let (_, f) = pt.translate(IMAGE_BASE + 0x100).unwrap();
        assert_eq!(f & NO_EXECUTE, 0, "image is executable");
        let (bottom, top) = l.stack(1);
        assert_eq!(pt.translate(bottom - 1), None, "stack guard page");
        let (_, f) = pt.translate(top - 8).unwrap();
        assert_ne!(f & NO_EXECUTE, 0, "stack is not executable");
        let (pa, f) = pt.translate(mem - 1).unwrap();
        assert_eq!(pa, mem - 1);
        assert_ne!(f & LARGE, 0, "free memory uses 2 MiB pages");
        assert_eq!(pt.translate(mem), None);
        // Every page agrees with the map.
        for addr in (0..8 << 20).step_by(PAGE_SIZE as usize) {
            assert_eq!(
                pt.translate(addr).is_some(),
                kind_at(&map, addr).is_some(),
                "{addr:#x}"
            );
        }
    }

    #[test]
    fn the_largest_memory_fits_the_area() {
        let mem = crate::layout::MAX_MEM;
        let l = Layout::new(mem, 64, IMAGE_BASE, IMAGE_BASE + (40 << 20)).unwrap();
        PageTables::build(&l.page_map(), mem).unwrap();
    }

    #[test]
    fn the_virtio_window_is_mapped_uncached_for_the_user() {
        for mem in [64 << 20, crate::layout::MAX_MEM] {
            let l = Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000).unwrap();
            let tables = PageTables::build(&l.page_map(), mem).unwrap();
            let (phys, flags) = tables
                .translate(ebb_abi::virtio::MMIO_BASE + 0x50)
                .expect("the window is mapped");
            assert_eq!(phys, ebb_abi::virtio::MMIO_BASE + 0x50);
            assert_eq!(
                flags & (USER | WRITABLE | CACHE_DISABLE),
                USER | WRITABLE | CACHE_DISABLE
            );
        }
    }
}
