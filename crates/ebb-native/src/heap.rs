//! The guest's interim global allocator: power-of-two size classes with one free list each,
//! carved by a bump pointer out of the largest [`MemKind::Usable`] region of the boot
//! memory map, behind one spin lock.
//!
//! Deliberately small and obviously correct, to be replaced by ebb-mem's allocators (turn
//! off the `global-allocator` feature and declare another `#[global_allocator]`):
//!
//! * a request of `size` bytes aligned to `align` gets a block of class
//!   `max(size, align, 16).next_power_of_two()`;
//! * fresh blocks come from the bump pointer, aligned to `min(class, 4 KiB)` (or to `align`
//!   if larger); a freed block goes onto its class's list and is reused by the next request
//!   of that class whose alignment it satisfies;
//! * nothing is ever coalesced or returned to the bump area, so memory use is at worst
//!   about twice the peak live bytes of each class, and out-of-memory returns null (Rust's
//!   default handler then panics, which the monitor reports).
//!
//! The heap is set up on first use, from whichever core allocates first.

use crate::abi::MemKind;
use crate::entry::boot_info;
use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

/// Smallest block: 16 bytes (2^4), room for a free-list link and 16-byte alignment.
const MIN_SHIFT: u32 = 4;
/// Number of classes: 16 B … 2^47 B.
const CLASSES: usize = 44;
/// Fresh blocks are aligned to their size up to this.
const MAX_NATURAL_ALIGN: usize = 4096;

/// The allocator; the image's `#[global_allocator]` when the `global-allocator` feature is on.
#[derive(Debug)]
pub struct Heap {
    state: spin::Mutex<State>,
}

#[derive(Debug)]
struct State {
    initialized: bool,
    /// Next fresh byte and end of the heap region.
    next: usize,
    start: usize,
    end: usize,
    /// Address of the first free block of each class (0: none); each free block's first
    /// word holds the address of the next.
    free: [usize; CLASSES],
    /// Bytes in blocks handed out and not yet freed (class sizes).
    live: usize,
}

/// What the heap holds, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Size of the heap region in bytes.
    pub capacity: usize,
    /// Bytes taken from the region by the bump pointer so far.
    pub carved: usize,
    /// Bytes in live blocks (rounded up to their classes).
    pub live: usize,
}

/// `(class index, block size)` for `layout`, or `None` if no class is that large.
fn class_of(layout: Layout) -> Option<(usize, usize)> {
    let size = layout
        .size()
        .max(layout.align())
        .max(1 << MIN_SHIFT)
        .checked_next_power_of_two()?;
    let class = (size.trailing_zeros() - MIN_SHIFT) as usize;
    (class < CLASSES).then_some((class, size))
}

impl State {
    fn init(&mut self) {
        self.initialized = true;
        let info = boot_info();
        let count = (info.region_count as usize).min(info.regions.len());
        let best = info.regions[..count]
            .iter()
            .filter(|r| r.kind == MemKind::Usable as u32)
            .max_by_key(|r| r.len);
        if let Some(r) = best {
            self.start = r.start as usize;
            self.next = self.start;
            self.end = r.start.saturating_add(r.len) as usize;
        }
    }

    fn alloc(&mut self, layout: Layout) -> *mut u8 {
        if !self.initialized {
            self.init();
        }
        let Some((class, size)) = class_of(layout) else {
            return ptr::null_mut();
        };
        let head = self.free[class];
        if head != 0 && head.is_multiple_of(layout.align()) {
            self.free[class] = links::next(head);
            self.live += size;
            return head as *mut u8;
        }
        let align = size.min(MAX_NATURAL_ALIGN).max(layout.align());
        let Some(start) = self.next.checked_next_multiple_of(align) else {
            return ptr::null_mut();
        };
        match start.checked_add(size) {
            Some(end) if end <= self.end => {
                self.next = end;
                self.live += size;
                start as *mut u8
            }
            _ => ptr::null_mut(),
        }
    }

    fn dealloc(&mut self, block: *mut u8, layout: Layout) {
        let Some((class, size)) = class_of(layout) else {
            return;
        };
        let addr = block as usize;
        links::set_next(addr, self.free[class]);
        self.free[class] = addr;
        self.live -= size;
    }
}

impl Heap {
    /// An empty heap; it claims its region on first use.
    pub const fn new() -> Heap {
        Heap {
            state: spin::Mutex::new(State {
                initialized: false,
                next: 0,
                start: 0,
                end: 0,
                free: [0; CLASSES],
                live: 0,
            }),
        }
    }

    /// Current usage.
    pub fn stats(&self) -> HeapStats {
        let s = self.state.lock();
        HeapStats {
            capacity: s.end - s.start,
            carved: s.next - s.start,
            live: s.live,
        }
    }
}

impl Default for Heap {
    fn default() -> Self {
        Heap::new()
    }
}

// SAFETY: `alloc` returns either null or a block of at least `layout.size()` bytes aligned
// to `layout.align()` (the class size is >= both, fresh blocks are aligned to
// max(min(class, 4 KiB), align) and reused blocks are checked), inside the usable region
// that nothing else in the guest uses, and never hands out a block twice: a block is
// either live, on exactly one free list, or not yet carved. `dealloc` receives, per the
// `GlobalAlloc` contract, a live block with the layout it was allocated with, so its class
// is the one it came from. The spin lock serializes all cores.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.state.lock().alloc(layout)
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        self.state.lock().dealloc(block, layout)
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        if class_of(layout).is_some() && class_of(layout) == class_of(new_layout) {
            return block; // the block already has room
        }
        let mut state = self.state.lock();
        let new = state.alloc(new_layout);
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct (the old one is not freed yet) and at
            // least `min(old, new)` bytes long.
            unsafe {
                ptr::copy_nonoverlapping(block, new, layout.size().min(new_size));
            }
            state.dealloc(block, layout);
        }
        new
    }
}

/// The free-list links stored in the first word of each free block.
mod links {
    /// The link stored in the free block at `addr`.
    pub(super) fn next(addr: usize) -> usize {
        // SAFETY: `addr` is a free block of the heap (at least 16 bytes, 16-aligned), owned
        // by the free list under the heap's lock; its first word was written by `set_next`.
        unsafe { (addr as *const usize).read() }
    }

    /// Stores `next` in the free block at `addr`.
    pub(super) fn set_next(addr: usize, next: usize) {
        // SAFETY: `addr` was just freed (at least 16 bytes, 16-aligned) and is owned by
        // the heap under its lock; nobody else reads or writes it until it is reused.
        unsafe { (addr as *mut usize).write(next) }
    }
}

/// The image's global allocator.
#[cfg(feature = "global-allocator")]
#[global_allocator]
pub static HEAP: Heap = Heap::new();

/// Usage of the global heap.
#[cfg(feature = "global-allocator")]
pub fn stats() -> HeapStats {
    HEAP.stats()
}
