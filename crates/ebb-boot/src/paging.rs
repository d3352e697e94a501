//! Identity-mapped 4-level page tables built from a [`Layout`](crate::layout::Layout)'s
//! page map, written into the page-table area the caller gives.
//!
//! A 2 MiB chunk whose pages are all mapped alike becomes one large page; a chunk with
//! mixed pages (the low 2 MiB with its null guard and supervisor GDT page, the chunks
//! holding stack guard pages) gets a page table of 4 KiB pages. The tables are written
//! into a slice of words that will lie at [`PAGE_TABLES_ADDR`] (the PML4 first): the
//! monitor builds them in a host buffer and copies them into guest memory in one write,
//! the PVH stub builds them in place. [`table_pages`] says beforehand how many pages
//! they take; those must be zero when [`build`] writes them (a fresh buffer, or pages
//! the caller cleared).

use crate::layout::{LARGE_PAGE_SIZE, MappedRange, PAGE_SIZE, PageKind};
use ebb_abi::{PAGE_TABLES_ADDR, PAGE_TABLES_END};

/// Entry bit: the entry is present.
pub const PRESENT: u64 = 1 << 0;
/// Entry bit: writes are allowed.
pub const WRITABLE: u64 = 1 << 1;
/// Entry bit: CPL 3 may access it.
pub const USER: u64 = 1 << 2;
/// Entry bit (PDE): a 2 MiB page.
pub const LARGE: u64 = 1 << 7;
/// Entry bit: write-through caching.
pub const WRITE_THROUGH: u64 = 1 << 3;
/// Entry bit: caching off (the virtio-MMIO window).
pub const CACHE_DISABLE: u64 = 1 << 4;
/// Entry bit: not executable (needs EFER.NXE, else the bit is reserved).
pub const NO_EXECUTE: u64 = 1 << 63;
/// The physical-address bits of an entry.
pub const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Entries (words) per table page.
pub const ENTRIES: usize = 512;
/// Pages of the page-table area ([`PAGE_TABLES_ADDR`]`..`[`PAGE_TABLES_END`]).
pub const AREA_PAGES: usize = ((PAGE_TABLES_END - PAGE_TABLES_ADDR) / PAGE_SIZE) as usize;
/// Words of the whole page-table area.
pub const AREA_WORDS: usize = AREA_PAGES * ENTRIES;
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

/// The leaf flags of a page of `kind`, NO_EXECUTE included where it applies (see
/// [`build`]'s `no_execute`).
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

/// Takes the next table page of `area` (`pages` of them used so far) and returns its
/// number, or [`PagingError::AreaFull`] past the area.
fn new_table(area: &mut [u64], pages: &mut u64) -> Result<u64, PagingError> {
    let page = *pages;
    *pages += 1;
    let available = (area.len() / ENTRIES).min(AREA_PAGES) as u64;
    if *pages > available {
        return Err(PagingError::AreaFull {
            needed: *pages,
            available,
        });
    }
    Ok(page)
}

/// How many table pages [`build`] writes for `map` and `mem_size` (its arguments), found
/// without building them, so a caller can size the area exactly: the PML4, the PDPT, one
/// PD per GiB, a page table for every 2 MiB chunk a mapped range starts or ends inside
/// (the chunks of mixed pages), and a PD for the virtio-MMIO window above the RAM's GiBs.
pub fn table_pages(map: &[MappedRange], mem_size: u64) -> usize {
    let gibs = mem_size.div_ceil(GIB);
    let mut pages = 2 + gibs as usize;
    // The ranges are sorted and disjoint, so their unaligned boundaries come in order and
    // a chunk holding several is counted once.
    let mut last_mixed = None;
    for boundary in map.iter().flat_map(|r| [r.start, r.end]) {
        let chunk = boundary / LARGE_PAGE_SIZE;
        if boundary % LARGE_PAGE_SIZE != 0 && boundary < mem_size && last_mixed != Some(chunk) {
            last_mixed = Some(chunk);
            pages += 1;
        }
    }
    if ebb_abi::virtio::MMIO_WINDOW_START / GIB >= gibs {
        pages += 1;
    }
    pages
}

/// Writes tables mapping `map` (sorted, disjoint, page-aligned, below `mem_size`, which is
/// a multiple of 2 MiB) at identical virtual and physical addresses into `area`, the
/// words to be placed at [`PAGE_TABLES_ADDR`] (the PML4 is its first page; the
/// [`table_pages`] pages it takes, at most [`AREA_PAGES`], must be zero), and maps the
/// virtio-MMIO window. `no_execute`: mark
/// what is not code not executable (the CPU has NX and EFER.NXE is on). Returns the
/// number of table pages written.
pub fn build(
    map: &[MappedRange],
    mem_size: u64,
    no_execute: bool,
    area: &mut [u64],
) -> Result<usize, PagingError> {
    // Without NX (a CPU without it, where the bit is reserved) nothing is marked not
    // executable.
    let kept = if no_execute { !0 } else { !NO_EXECUTE };
    let gibs = mem_size.div_ceil(GIB);
    let mut pages = 0;
    for _ in 0..2 + gibs {
        new_table(area, &mut pages)?; // PML4, PDPT, one PD per GiB
    }
    let page_addr = |page: u64| PAGE_TABLES_ADDR + page * PAGE_SIZE;
    area[0] = page_addr(1) | TABLE_FLAGS;
    for gib in 0..gibs {
        area[ENTRIES + gib as usize] = page_addr(2 + gib) | TABLE_FLAGS;
    }
    for chunk in (0..mem_size).step_by(LARGE_PAGE_SIZE as usize) {
        let end = chunk + LARGE_PAGE_SIZE;
        let pde = (2 * ENTRIES as u64 + chunk / LARGE_PAGE_SIZE) as usize;
        let first = map.partition_point(|r| r.end <= chunk);
        let Some(r) = map.get(first).filter(|r| r.start < end) else {
            continue; // nothing mapped in this chunk
        };
        if r.start <= chunk && r.end >= end {
            area[pde] = chunk | (leaf_flags(r.kind) & kept) | LARGE;
            continue;
        }
        let pt = new_table(area, &mut pages)?;
        area[pde] = page_addr(pt) | TABLE_FLAGS;
        for (i, addr) in (chunk..end).step_by(PAGE_SIZE as usize).enumerate() {
            if let Some(kind) = kind_at(map, addr) {
                area[pt as usize * ENTRIES + i] = addr | (leaf_flags(kind) & kept);
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
        let pd = new_table(area, &mut pages)?;
        area[ENTRIES + window_gib as usize] = page_addr(pd) | TABLE_FLAGS;
        pd
    };
    let pde = pd as usize * ENTRIES + ((window % GIB) / LARGE_PAGE_SIZE) as usize;
    let window_flags = PRESENT | WRITABLE | USER | NO_EXECUTE | WRITE_THROUGH | CACHE_DISABLE;
    area[pde] = window | (window_flags & kept) | LARGE;
    Ok(pages as usize)
}

/// Walks tables written by [`build`] like the MMU: the physical address and leaf flags
/// for `vaddr`, or `None` if it is not mapped.
pub fn translate(area: &[u64], vaddr: u64) -> Option<(u64, u64)> {
    let entry = |table_addr: u64, index: u64| -> u64 {
        let page = (table_addr - PAGE_TABLES_ADDR) / PAGE_SIZE;
        area[(page * ENTRIES as u64 + index) as usize]
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Layout, MAX_MEM};
    use ebb_abi::{BOOT_INFO_ADDR, GDT_ADDR, IMAGE_BASE, PERCORE_STRIDE};
    use std::vec;
    use std::vec::Vec;

    /// Tables for `map`, with NX, in a whole area.
    fn tables(map: &[MappedRange], mem_size: u64) -> Vec<u64> {
        let mut area = vec![0; AREA_WORDS];
        let pages = build(map, mem_size, true, &mut area).unwrap();
        area.truncate(pages * ENTRIES);
        area
    }

    #[test]
    fn maps_layout_like_the_page_map() {
        let mem = 1u64 << 31; // 2 GiB: two page directories
        let l = Layout::new(mem, 2, IMAGE_BASE, IMAGE_BASE + 0x5_3000, 0).unwrap();
        let map = l.page_map();
        let pt = tables(&map, mem);
        assert_eq!(translate(&pt, 0), None, "null page must fault");
        assert_eq!(
            translate(&pt, PAGE_TABLES_ADDR),
            None,
            "page-table area is not mapped"
        );
        let (pa, f) = translate(&pt, GDT_ADDR + 8).unwrap();
        assert_eq!(pa, GDT_ADDR + 8);
        assert_eq!(f & USER, 0, "GDT is supervisor-only");
        let (_, f) = translate(&pt, BOOT_INFO_ADDR).unwrap();
        assert_eq!(f & (USER | WRITABLE), USER, "boot info is user read-only");
        let (_, f) = translate(&pt, l.percore(1) + PERCORE_STRIDE - 8).unwrap();
        assert_eq!(f & (USER | WRITABLE), USER | WRITABLE);
        assert_eq!(l.percore(1) + PERCORE_STRIDE, l.stacks_start);
        assert_eq!(
            translate(&pt, l.stacks_start),
            None,
            "the first stack guard follows the per-core blocks"
        );
        let (_, f) = translate(&pt, IMAGE_BASE + 0x100).unwrap();
        assert_eq!(f & NO_EXECUTE, 0, "image is executable");
        let (bottom, top) = l.stack(1);
        assert_eq!(translate(&pt, bottom - 1), None, "stack guard page");
        let (_, f) = translate(&pt, top - 8).unwrap();
        assert_ne!(f & NO_EXECUTE, 0, "stack is not executable");
        let (pa, f) = translate(&pt, mem - 1).unwrap();
        assert_eq!(pa, mem - 1);
        assert_ne!(f & LARGE, 0, "free memory uses 2 MiB pages");
        assert_eq!(translate(&pt, mem), None);
        // Every page agrees with the map.
        for addr in (0..8 << 20).step_by(PAGE_SIZE as usize) {
            assert_eq!(
                translate(&pt, addr).is_some(),
                kind_at(&map, addr).is_some(),
                "{addr:#x}"
            );
        }
    }

    #[test]
    fn the_shared_window_is_mapped_user_read_write_not_executable() {
        let mem = 64 << 20;
        let window = 0x5_3000; // not a 2 MiB multiple: its low end shares a chunk
        let l = Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, window).unwrap();
        let pt = tables(&l.page_map(), mem);
        for addr in [mem - window, mem - window + 0x1234, mem - 8] {
            let (pa, f) = translate(&pt, addr).unwrap();
            assert_eq!(pa, addr);
            assert_eq!(f & (USER | WRITABLE), USER | WRITABLE, "{addr:#x}");
            assert_ne!(f & NO_EXECUTE, 0, "{addr:#x}");
        }
        assert!(
            translate(&pt, mem - window - 8).is_some(),
            "free memory below it"
        );
        assert_eq!(translate(&pt, mem), None);
    }

    #[test]
    fn the_largest_memory_fits_the_area() {
        let mem = crate::layout::MAX_MEM;
        let l = Layout::new(mem, 64, IMAGE_BASE, IMAGE_BASE + (40 << 20), 0).unwrap();
        tables(&l.page_map(), mem);
    }

    #[test]
    fn the_virtio_window_is_mapped_uncached_for_the_user() {
        for mem in [64 << 20, crate::layout::MAX_MEM] {
            let l = Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, 0).unwrap();
            let tables = tables(&l.page_map(), mem);
            let (phys, flags) = translate(&tables, ebb_abi::virtio::MMIO_BASE + 0x50)
                .expect("the window is mapped");
            assert_eq!(phys, ebb_abi::virtio::MMIO_BASE + 0x50);
            assert_eq!(
                flags & (USER | WRITABLE | CACHE_DISABLE),
                USER | WRITABLE | CACHE_DISABLE
            );
        }
    }

    #[test]
    fn without_nx_nothing_is_marked_not_executable() {
        let mem = 64 << 20;
        let l = Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, 0).unwrap();
        let mut area = vec![0; AREA_WORDS];
        let pages = build(&l.page_map(), mem, false, &mut area).unwrap();
        let with_nx = tables(&l.page_map(), mem);
        assert_eq!(
            with_nx.len(),
            pages * ENTRIES,
            "the same tables, bit 63 aside"
        );
        for (plain, nx) in area.iter().zip(&with_nx) {
            assert_eq!(*plain, nx & !NO_EXECUTE);
        }
        let (_, f) = translate(&area, l.stack(0).0).unwrap();
        assert_eq!(f & NO_EXECUTE, 0);
        let (_, f) = translate(&with_nx, l.stack(0).0).unwrap();
        assert_ne!(f & NO_EXECUTE, 0);
    }

    #[test]
    fn table_pages_counts_what_build_writes() {
        for mem in [
            8 << 20,
            64 << 20,
            1 << 30,
            (1 << 30) + (2 << 20),
            3 << 30,
            MAX_MEM,
        ] {
            for cpus in [1, 2, 7, 64] {
                for image_len in [0x1000, 0x5_3000, 2 << 20, (2 << 20) + 0x1000] {
                    let Ok(l) = Layout::new(mem, cpus, IMAGE_BASE, IMAGE_BASE + image_len, 0)
                    else {
                        continue;
                    };
                    let mut area = vec![0; AREA_WORDS];
                    let built = build(&l.page_map(), mem, true, &mut area);
                    let counted = table_pages(&l.page_map(), mem);
                    match built {
                        Ok(pages) => assert_eq!(pages, counted, "{mem:#x} {cpus} {image_len:#x}"),
                        Err(_) => assert!(counted > AREA_PAGES),
                    }
                }
            }
        }
    }

    #[test]
    fn a_small_area_is_refused_not_overrun() {
        let mem = 64 << 20;
        let l = Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, 0).unwrap();
        let mut area = vec![0; 3 * ENTRIES];
        assert!(matches!(
            build(&l.page_map(), mem, true, &mut area),
            Err(PagingError::AreaFull { available: 3, .. })
        ));
    }
}
