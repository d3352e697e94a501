//! Where everything goes in guest-physical memory, and how each page is mapped.
//!
//! Pure computation (no KVM, no guest memory, no allocation): [`Layout::new`] places the
//! image, the stacks and the free memory for a VM and [`Layout::page_map`] says how every
//! 4 KiB page is mapped; [`crate::paging`] turns that into page tables. The fixed part of
//! the layout is in [`ebb_abi`]. The monitor lays out every VM with it, and the PVH stub
//! lays out its one core with it, so both boot paths place everything alike.

use core::ops::Deref;
use ebb_abi::{
    BOOT_INFO_ADDR, CMDLINE_ADDR, CMDLINE_MAX, CONSOLE_ADDR, CONSOLE_STRIDE, GDT_ADDR, IMAGE_BASE,
    MAX_CPUS, MemKind, MemRegion, PERCORE_STRIDE, STACK_SIZE, TSS_ADDR, TSS_SIZE,
};

/// 4 KiB.
pub const PAGE_SIZE: u64 = 0x1000;
/// 2 MiB, the size of a large page.
pub const LARGE_PAGE_SIZE: u64 = 0x20_0000;
/// Smallest guest memory accepted.
pub const MIN_MEM: u64 = 8 << 20;
/// Largest guest memory accepted: RAM ends below the virtio-MMIO window
/// ([`ebb_abi::virtio::MMIO_WINDOW_START`], 4,074 MiB), which every guest has mapped.
pub const MAX_MEM: u64 = ebb_abi::virtio::MMIO_WINDOW_START;

/// Why a layout cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// Guest memory must be a multiple of 2 MiB between [`MIN_MEM`] and [`MAX_MEM`].
    #[error("guest memory of {0:#x} bytes is not a multiple of 2 MiB between 8 MiB and 4074 MiB")]
    BadMemSize(u64),
    /// The vCPU count must be between 1 and [`MAX_CPUS`].
    #[error("{0} vCPUs requested: must be between 1 and {MAX_CPUS}")]
    BadCpuCount(u32),
    /// The image, stacks and a minimum of free memory do not fit.
    #[error(
        "image ({image_start:#x}..{image_end:#x}) and {cpus} stacks need {needed:#x} bytes, \
         guest memory has {mem_size:#x}"
    )]
    TooSmall {
        /// Lowest image address.
        image_start: u64,
        /// End of the image.
        image_end: u64,
        /// vCPUs (one stack each).
        cpus: u32,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        mem_size: u64,
    },
    /// The command line is longer than [`CMDLINE_MAX`].
    #[error("command line of {0} bytes is longer than {CMDLINE_MAX}")]
    CmdlineTooLong(usize),
}

/// How one 4 KiB page is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Reachable only at CPL 0 (the CPU's implicit GDT/TSS accesses), read-write.
    Supervisor,
    /// User, read-only, not executable.
    UserReadOnly,
    /// User, read-write, not executable.
    UserData,
    /// User, read-write, executable (the image: segments are not split by permission yet).
    UserCode,
}

/// A page-aligned range `[start, end)` mapped as `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedRange {
    /// First byte.
    pub start: u64,
    /// End, exclusive.
    pub end: u64,
    /// Mapping.
    pub kind: PageKind,
}

/// Regions of [`Layout::memory_map`].
pub const MEMORY_MAP_LEN: usize = 5;

/// Most ranges of a [`PageMap`]: the fixed ones, one stack per core and the free memory.
pub const PAGE_MAP_MAX: usize = 6 + MAX_CPUS as usize + 1;

/// Every mapped range of a layout ([`Layout::page_map`]), sorted and disjoint, held in
/// place (the PVH stub has no heap); it reads as a slice.
#[derive(Clone, Debug)]
pub struct PageMap {
    ranges: [MappedRange; PAGE_MAP_MAX],
    len: usize,
}

impl PageMap {
    fn push(&mut self, range: MappedRange) {
        // `Layout::new` bounds the core count, so the ranges always fit.
        self.ranges[self.len] = range;
        self.len += 1;
    }
}

impl Deref for PageMap {
    type Target = [MappedRange];

    fn deref(&self) -> &[MappedRange] {
        &self.ranges[..self.len]
    }
}

/// The placement of everything in one VM's guest memory.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Bytes of guest memory.
    pub mem_size: u64,
    /// Number of vCPUs.
    pub cpus: u32,
    /// Lowest image address (page-aligned down).
    pub image_start: u64,
    /// End of the image (page-aligned up), BSS included.
    pub image_end: u64,
    /// Core 0's per-core block (right after the image); core `i`'s is
    /// [`PERCORE_STRIDE`] × `i` further.
    pub percore_start: u64,
    /// Start of the stack area (the first guard page), right after the per-core blocks.
    pub stacks_start: u64,
    /// End of the stack area; free memory starts here.
    pub stacks_end: u64,
}

/// Least free memory a layout leaves for the guest's allocators.
const MIN_FREE: u64 = 2 << 20;

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? & !(a - 1))
}

impl Layout {
    /// Places an image spanning `[image_start, image_end)` and `cpus` stacks in `mem_size`
    /// bytes. The image bounds come from the monitor's ELF parser (`ebb-vmm`'s `image`,
    /// which checked that `image_start >= IMAGE_BASE`) or, in the PVH stub, from
    /// [`IMAGE_BASE`] and the linker's end of the image; a lower start is raised to
    /// [`IMAGE_BASE`].
    pub fn new(
        mem_size: u64,
        cpus: u32,
        image_start: u64,
        image_end: u64,
    ) -> Result<Self, LayoutError> {
        if !(MIN_MEM..=MAX_MEM).contains(&mem_size) || !mem_size.is_multiple_of(LARGE_PAGE_SIZE) {
            return Err(LayoutError::BadMemSize(mem_size));
        }
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(LayoutError::BadCpuCount(cpus));
        }
        let too_small = |needed| LayoutError::TooSmall {
            image_start,
            image_end,
            cpus,
            needed,
            mem_size,
        };
        let image_start = image_start.max(IMAGE_BASE) & !(PAGE_SIZE - 1);
        let image_end = align_up(image_end, PAGE_SIZE).ok_or(too_small(u64::MAX))?;
        let percore_start = image_end;
        let stacks_start = u64::from(cpus)
            .checked_mul(PERCORE_STRIDE)
            .and_then(|s| s.checked_add(percore_start))
            .ok_or(too_small(u64::MAX))?;
        let stacks_end = u64::from(cpus)
            .checked_mul(PAGE_SIZE + STACK_SIZE)
            .and_then(|s| s.checked_add(stacks_start))
            .ok_or(too_small(u64::MAX))?;
        let needed = stacks_end.saturating_add(MIN_FREE);
        if needed > mem_size {
            return Err(too_small(needed));
        }
        Ok(Layout {
            mem_size,
            cpus,
            image_start,
            image_end,
            percore_start,
            stacks_start,
            stacks_end,
        })
    }

    /// `(bottom, top)` of core `core`'s stack; the page below `bottom` is an unmapped guard.
    pub fn stack(&self, core: u32) -> (u64, u64) {
        let bottom = self.stacks_start + u64::from(core) * (PAGE_SIZE + STACK_SIZE) + PAGE_SIZE;
        (bottom, bottom + STACK_SIZE)
    }

    /// Address of core `core`'s per-core block.
    pub fn percore(&self, core: u32) -> u64 {
        self.percore_start + u64::from(core) * PERCORE_STRIDE
    }

    /// Address of core `core`'s console ring.
    pub fn console(&self, core: u32) -> u64 {
        CONSOLE_ADDR + u64::from(core) * CONSOLE_STRIDE
    }

    /// The memory map handed to the guest in the boot info.
    pub fn memory_map(&self) -> [MemRegion; MEMORY_MAP_LEN] {
        let region = |start: u64, end: u64, kind: MemKind| MemRegion {
            start,
            len: end - start,
            kind: kind as u32,
            reserved: 0,
        };
        [
            region(0, IMAGE_BASE, MemKind::Monitor),
            region(IMAGE_BASE, self.image_end, MemKind::Image),
            region(self.percore_start, self.stacks_start, MemKind::PerCore),
            region(self.stacks_start, self.stacks_end, MemKind::Stacks),
            region(self.stacks_end, self.mem_size, MemKind::Usable),
        ]
    }

    /// Every mapped range, sorted and non-overlapping; pages in no range are not present
    /// (the null page, the page tables, the stack guards, unused per-core slots).
    pub fn page_map(&self) -> PageMap {
        let cpus = u64::from(self.cpus);
        let r = |start: u64, end: u64, kind: PageKind| MappedRange { start, end, kind };
        let fixed = [
            r(GDT_ADDR, GDT_ADDR + PAGE_SIZE, PageKind::Supervisor),
            r(
                TSS_ADDR,
                align_up(TSS_ADDR + TSS_SIZE, PAGE_SIZE).unwrap_or(TSS_ADDR),
                PageKind::Supervisor,
            ),
            r(
                BOOT_INFO_ADDR,
                CMDLINE_ADDR + CMDLINE_MAX,
                PageKind::UserReadOnly,
            ),
            r(
                CONSOLE_ADDR,
                CONSOLE_ADDR + cpus * CONSOLE_STRIDE,
                PageKind::UserData,
            ),
            r(IMAGE_BASE, self.image_end, PageKind::UserCode),
            r(self.percore_start, self.stacks_start, PageKind::UserData),
        ];
        let mut map = PageMap {
            ranges: [r(0, 0, PageKind::Supervisor); PAGE_MAP_MAX],
            len: 0,
        };
        for range in fixed {
            map.push(range);
        }
        for core in 0..self.cpus {
            let (bottom, top) = self.stack(core);
            map.push(r(bottom, top, PageKind::UserData));
        }
        map.push(r(self.stacks_end, self.mem_size, PageKind::UserData));
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert_eq!(
            Layout::new(3 << 20, 1, IMAGE_BASE, IMAGE_BASE + 10).unwrap_err(),
            LayoutError::BadMemSize(3 << 20)
        );
        assert!(Layout::new(MAX_MEM + LARGE_PAGE_SIZE, 1, IMAGE_BASE, IMAGE_BASE).is_err());
        assert_eq!(
            Layout::new(64 << 20, 0, IMAGE_BASE, IMAGE_BASE).unwrap_err(),
            LayoutError::BadCpuCount(0)
        );
        assert!(matches!(
            Layout::new(8 << 20, 1, IMAGE_BASE, IMAGE_BASE + (7 << 20)),
            Err(LayoutError::TooSmall { .. })
        ));
        assert!(Layout::new(64 << 20, 1, IMAGE_BASE, u64::MAX - 5).is_err());
    }

    #[test]
    fn page_map_is_sorted_and_disjoint() {
        let l = Layout::new(64 << 20, 4, IMAGE_BASE, IMAGE_BASE + 0x1234).unwrap();
        let map = l.page_map();
        for w in map.windows(2) {
            assert!(w[0].end <= w[1].start, "{w:?}");
        }
        for m in map.iter() {
            assert!(m.start < m.end && m.start % PAGE_SIZE == 0 && m.end % PAGE_SIZE == 0);
        }
        assert_eq!(map.last().unwrap().end, 64 << 20);
        let (bottom, top) = l.stack(3);
        assert_eq!(top, l.stacks_end);
        assert!(!map.iter().any(|m| m.start < bottom && bottom - 1 < m.end));
    }
}
