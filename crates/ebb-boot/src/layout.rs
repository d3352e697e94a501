//! Where everything goes in guest-physical memory, and how each page is mapped.
//!
//! Pure computation (no KVM, no guest memory, no allocation): [`Layout::new`] places the
//! image, the stacks, the free memory and the shared window for a VM and
//! [`Layout::page_map`] says how every 4 KiB page is mapped; [`crate::paging`] turns that
//! into page tables. The fixed part of
//! the layout is in [`ebb_abi`]. The monitor lays out every VM with it, and the PVH stub
//! lays out its one core with it, so both boot paths place everything alike.
//!
//! Invariants: the memory map and the page map are sorted and disjoint; the shared window,
//! when there is one, is the top of guest memory, page-aligned, never part of the
//! `Usable` region (the guest's allocators take only that) and mapped as user data.

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
    /// The image, stacks, a minimum of free memory and the shared window do not fit.
    #[error(
        "image ({image_start:#x}..{image_end:#x}), {cpus} stacks and a shared window of \
         {shared_window:#x} bytes need {needed:#x} bytes, guest memory has {mem_size:#x}"
    )]
    TooSmall {
        /// Lowest image address.
        image_start: u64,
        /// End of the image.
        image_end: u64,
        /// vCPUs (one stack each).
        cpus: u32,
        /// Bytes of the shared window.
        shared_window: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        mem_size: u64,
    },
    /// The shared window is not a multiple of 4 KiB no larger than half of guest memory.
    #[error(
        "shared window of {shared:#x} bytes: must be a multiple of 4 KiB and at most half \
         of guest memory ({mem_size:#x} bytes)"
    )]
    BadSharedWindow {
        /// Bytes asked for.
        shared: u64,
        /// Bytes of guest memory.
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

/// Most regions of a [`Layout::memory_map`]: five, and the shared window if any.
pub const MEMORY_MAP_LEN: usize = 6;

/// Most ranges of a [`PageMap`]: the fixed ones, one stack per core, the free memory and
/// the shared window.
pub const PAGE_MAP_MAX: usize = 6 + MAX_CPUS as usize + 2;

/// The memory map of a layout ([`Layout::memory_map`]), sorted and disjoint, held in
/// place like a [`PageMap`]; it reads as a slice.
#[derive(Clone, Debug)]
pub struct MemoryMap {
    regions: [MemRegion; MEMORY_MAP_LEN],
    len: usize,
}

impl Deref for MemoryMap {
    type Target = [MemRegion];

    fn deref(&self) -> &[MemRegion] {
        &self.regions[..self.len]
    }
}

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
    /// Bytes of the shared window at the top of guest memory (0: none); free memory ends
    /// where it starts ([`Layout::shared_window_start`]).
    pub shared_window: u64,
}

/// Least free memory a layout leaves for the guest's allocators.
const MIN_FREE: u64 = 2 << 20;

fn align_up(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? & !(a - 1))
}

impl Layout {
    /// Places an image spanning `[image_start, image_end)`, `cpus` stacks and a shared
    /// window of `shared_window` bytes (0 for none; a multiple of 4 KiB, at most half of
    /// `mem_size`) at the top of `mem_size` bytes. The image bounds come from the monitor's ELF parser (`ebb-vmm`'s `image`,
    /// which checked that `image_start >= IMAGE_BASE`) or, in the PVH stub, from
    /// [`IMAGE_BASE`] and the linker's end of the image; a lower start is raised to
    /// [`IMAGE_BASE`].
    pub fn new(
        mem_size: u64,
        cpus: u32,
        image_start: u64,
        image_end: u64,
        shared_window: u64,
    ) -> Result<Self, LayoutError> {
        if !(MIN_MEM..=MAX_MEM).contains(&mem_size) || !mem_size.is_multiple_of(LARGE_PAGE_SIZE) {
            return Err(LayoutError::BadMemSize(mem_size));
        }
        if cpus == 0 || cpus > MAX_CPUS {
            return Err(LayoutError::BadCpuCount(cpus));
        }
        if !shared_window.is_multiple_of(PAGE_SIZE) || shared_window > mem_size / 2 {
            return Err(LayoutError::BadSharedWindow {
                shared: shared_window,
                mem_size,
            });
        }
        let too_small = |needed| LayoutError::TooSmall {
            image_start,
            image_end,
            cpus,
            shared_window,
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
        // The window comes out of the free memory, which keeps its minimum.
        let needed = stacks_end
            .saturating_add(MIN_FREE)
            .saturating_add(shared_window);
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
            shared_window,
        })
    }

    /// First byte of the shared window, which is also the end of the free memory
    /// (`mem_size` when there is no window).
    pub fn shared_window_start(&self) -> u64 {
        self.mem_size - self.shared_window
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

    /// The memory map handed to the guest in the boot info: the `Shared` region last, and
    /// only when the layout has a window.
    pub fn memory_map(&self) -> MemoryMap {
        let region = |start: u64, end: u64, kind: MemKind| MemRegion {
            start,
            len: end - start,
            kind: kind as u32,
            reserved: 0,
        };
        let window = self.shared_window_start();
        let mut map = MemoryMap {
            regions: [
                region(0, IMAGE_BASE, MemKind::Monitor),
                region(IMAGE_BASE, self.image_end, MemKind::Image),
                region(self.percore_start, self.stacks_start, MemKind::PerCore),
                region(self.stacks_start, self.stacks_end, MemKind::Stacks),
                region(self.stacks_end, window, MemKind::Usable),
                region(window, self.mem_size, MemKind::Shared),
            ],
            len: MEMORY_MAP_LEN,
        };
        if self.shared_window == 0 {
            map.len -= 1;
        }
        map
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
        let window = self.shared_window_start();
        map.push(r(self.stacks_end, window, PageKind::UserData));
        if self.shared_window != 0 {
            map.push(r(window, self.mem_size, PageKind::UserData));
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        assert_eq!(
            Layout::new(3 << 20, 1, IMAGE_BASE, IMAGE_BASE + 10, 0).unwrap_err(),
            LayoutError::BadMemSize(3 << 20)
        );
        assert!(Layout::new(MAX_MEM + LARGE_PAGE_SIZE, 1, IMAGE_BASE, IMAGE_BASE, 0).is_err());
        assert_eq!(
            Layout::new(64 << 20, 0, IMAGE_BASE, IMAGE_BASE, 0).unwrap_err(),
            LayoutError::BadCpuCount(0)
        );
        assert!(matches!(
            Layout::new(8 << 20, 1, IMAGE_BASE, IMAGE_BASE + (7 << 20), 0),
            Err(LayoutError::TooSmall { .. })
        ));
        assert!(Layout::new(64 << 20, 1, IMAGE_BASE, u64::MAX - 5, 0).is_err());
    }

    #[test]
    fn page_map_is_sorted_and_disjoint() {
        let l = Layout::new(64 << 20, 4, IMAGE_BASE, IMAGE_BASE + 0x1234, 0).unwrap();
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

    #[test]
    fn a_shared_window_is_the_top_of_memory_and_not_usable() {
        let mem = 64 << 20;
        let window = 1 << 20;
        let l = Layout::new(mem, 2, IMAGE_BASE, IMAGE_BASE + 0x1234, window).unwrap();
        assert_eq!(l.shared_window_start(), mem - window);
        let map = l.memory_map();
        assert_eq!(map.len(), MEMORY_MAP_LEN);
        let usable = map[4];
        let shared = map[5];
        assert_eq!(usable.kind, MemKind::Usable as u32);
        assert_eq!(
            usable.start + usable.len,
            mem - window,
            "Usable ends below the window"
        );
        assert_eq!(shared.kind, MemKind::Shared as u32);
        assert_eq!((shared.start, shared.len), (mem - window, window));
        for w in map.windows(2) {
            assert!(w[0].start + w[0].len <= w[1].start, "{w:?}");
        }
        let pages = l.page_map();
        let last = pages.last().unwrap();
        assert_eq!(
            (last.start, last.end, last.kind),
            (mem - window, mem, PageKind::UserData),
            "the window is user data: read-write, not executable"
        );
        for w in pages.windows(2) {
            assert!(w[0].end <= w[1].start, "{w:?}");
        }
    }

    #[test]
    fn without_a_window_there_is_no_shared_region() {
        let l = Layout::new(64 << 20, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, 0).unwrap();
        let map = l.memory_map();
        assert_eq!(map.len(), MEMORY_MAP_LEN - 1);
        assert!(!map.iter().any(|r| r.kind == MemKind::Shared as u32));
        assert_eq!(
            map.last().unwrap().start + map.last().unwrap().len,
            64 << 20
        );
        assert_eq!(l.shared_window_start(), 64 << 20);
    }

    #[test]
    fn rejects_bad_shared_windows() {
        let mem = 64 << 20;
        let bad = |window| {
            Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, window)
                .map(|_| ())
                .unwrap_err()
        };
        let expected = |shared| LayoutError::BadSharedWindow {
            shared,
            mem_size: mem,
        };
        assert_eq!(bad(0x800), expected(0x800), "not a multiple of 4 KiB");
        assert_eq!(bad(mem / 2 + PAGE_SIZE), expected(mem / 2 + PAGE_SIZE));
        assert_eq!(bad(u64::MAX), expected(u64::MAX));
        assert!(Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + 0x1000, mem / 2).is_ok());
        // Half of memory, but the image leaves too little free memory below it.
        assert!(matches!(
            Layout::new(mem, 1, IMAGE_BASE, IMAGE_BASE + (30 << 20), mem / 2),
            Err(LayoutError::TooSmall { .. })
        ));
    }
}
