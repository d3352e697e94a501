//! Hosted memory: regions mapped from Linux with `mmap`.

use crate::page::{MAX_BLOCK, PAGE_SIZE};
use crate::source::PageSource;
use core::alloc::Layout;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Size of the first region mapped; later ones double, up to [`MAX_CHUNK`].
const FIRST_CHUNK: usize = 64 << 20;
const MAX_CHUNK: usize = 1 << 30;

/// Grows a general-purpose allocator with anonymous private mappings, aligned to the
/// largest buddy block. Mappings use `MAP_NORESERVE`, so untouched pages cost nothing.
/// Regions are never unmapped (the page allocator keeps them); huge blocks are mapped and
/// unmapped one by one.
#[derive(Debug, Default)]
pub struct MmapSource {
    regions: AtomicUsize,
    mapped: AtomicUsize,
}

impl MmapSource {
    /// A source that has mapped nothing yet.
    pub const fn new() -> Self {
        MmapSource {
            regions: AtomicUsize::new(0),
            mapped: AtomicUsize::new(0),
        }
    }

    /// Bytes mapped for the page allocator so far.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }
}

/// Maps `len` bytes aligned to `align` (a power of two, at least a page).
fn map_aligned(len: usize, align: usize) -> Option<NonNull<u8>> {
    let padded = len.checked_add(align)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
    // no existing memory.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            padded,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let raw = raw.cast::<u8>();
    let start = raw.addr().next_multiple_of(align);
    let head = start - raw.addr();
    let tail = padded - head - len;
    // SAFETY: both ranges are inside the mapping just made and nobody has seen them;
    // unmapping the unaligned head and the tail leaves exactly `[start, start + len)`.
    unsafe {
        if head > 0 {
            libc::munmap(raw.cast(), head);
        }
        if tail > 0 {
            libc::munmap(raw.add(head + len).cast(), tail);
        }
    }
    NonNull::new(raw.with_addr(start))
}

/// Asks Linux to back a region with transparent huge pages (2 MiB) where it can, which
/// most distributions grant only on request (`transparent_hugepage/enabled` = madvise).
/// A server's heap is read at random — memcached's hash chains, items and values over
/// tens of MiB — and with 4 KiB pages nearly every such read also missed the TLB. The
/// cost: the region's memory is committed 2 MiB at a time as it is first touched. A
/// kernel that refuses (no THP, or a region too small) leaves 4 KiB pages: only a hint.
fn ask_for_huge_pages(start: NonNull<u8>, len: usize) {
    // SAFETY: `[start, start + len)` is a private anonymous mapping this source just
    // made; MADV_HUGEPAGE changes how it is backed, never its contents.
    let _ = unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
}

// SAFETY: regions and huge blocks are fresh private mappings, used by nothing else;
// regions are never unmapped, huge blocks only in `free_huge`.
unsafe impl PageSource for MmapSource {
    fn grow(&self, min_bytes: usize) -> Option<(NonNull<u8>, usize)> {
        let n = self.regions.fetch_add(1, Ordering::Relaxed);
        let chunk = FIRST_CHUNK
            .checked_shl(n.min(4) as u32)
            .unwrap_or(MAX_CHUNK)
            .min(MAX_CHUNK);
        let len = min_bytes.checked_next_multiple_of(MAX_BLOCK)?.max(chunk);
        let start = map_aligned(len, MAX_BLOCK)?;
        ask_for_huge_pages(start, len);
        self.mapped.fetch_add(len, Ordering::Relaxed);
        Some((start, len))
    }

    fn alloc_huge(&self, layout: Layout) -> Option<NonNull<u8>> {
        let len = layout.size().checked_next_multiple_of(PAGE_SIZE)?;
        map_aligned(len, layout.align().max(PAGE_SIZE))
    }

    unsafe fn free_huge(&self, ptr: NonNull<u8>, layout: Layout) {
        let len = layout.size().next_multiple_of(PAGE_SIZE);
        // SAFETY: the caller gives back a mapping of `len` bytes made by `alloc_huge`.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
}
