//! The guest's page tables, built by [`ebb_boot::paging`] (shared with the PVH stub) in a
//! host buffer that [`crate::vm`] copies into the page-table area in one write.

use crate::layout::MappedRange;
pub use ebb_boot::paging::PagingError;
use ebb_boot::paging::{AREA_PAGES, ENTRIES};

/// Page tables ready to be copied to [`ebb_abi::PAGE_TABLES_ADDR`]; the PML4 is the
/// first page.
#[derive(Debug)]
pub struct PageTables {
    /// The table words, 512 per page, only the pages used.
    pub words: Vec<u64>,
}

impl PageTables {
    /// Builds tables mapping `map` (sorted, disjoint, page-aligned, below `mem_size`, which
    /// is a multiple of 2 MiB) at identical virtual and physical addresses, with what is
    /// not code not executable (every vCPU runs with EFER.NXE).
    pub fn build(map: &[MappedRange], mem_size: u64) -> Result<Self, PagingError> {
        // Exactly the pages the tables take (the whole area when they do not fit, so that
        // the error says how large it is).
        let pages = ebb_boot::paging::table_pages(map, mem_size).min(AREA_PAGES);
        let mut words = vec![0u64; pages * ENTRIES];
        let written = ebb_boot::paging::build(map, mem_size, true, &mut words)?;
        debug_assert_eq!(written, pages);
        Ok(PageTables { words })
    }

    /// The table bytes, little-endian, for copying to [`ebb_abi::PAGE_TABLES_ADDR`].
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Walks the tables like the MMU: the physical address and leaf flags for `vaddr`.
    pub fn translate(&self, vaddr: u64) -> Option<(u64, u64)> {
        ebb_boot::paging::translate(&self.words, vaddr)
    }
}
