//! Error values of the memory Ebbs. Allocation failure is a value, never a panic.

use core::alloc::Layout;

/// Why an allocation could not be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// No free block of the requested order (or larger) is left, and no more memory could
    /// be obtained.
    #[error("out of memory: no free block of order {order} or larger")]
    OutOfPages {
        /// The buddy order that was requested.
        order: u8,
    },
    /// The request is larger than anything this allocator can ever serve.
    #[error("request too large: {size} bytes (align {align})")]
    TooLarge {
        /// Requested size in bytes.
        size: usize,
        /// Requested alignment in bytes.
        align: usize,
    },
}

impl AllocError {
    /// The error for a layout that cannot be served at all.
    pub(crate) fn too_large(layout: Layout) -> Self {
        AllocError::TooLarge {
            size: layout.size(),
            align: layout.align(),
        }
    }
}

/// Why a block handed back to an allocator was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreeError {
    /// The address is not inside any region of this allocator.
    #[error("address {addr:#x} does not belong to this allocator")]
    Foreign {
        /// The address that was freed.
        addr: usize,
    },
    /// The address is not the start of an allocated block of that order (a double free, a
    /// wrong order, or a pointer into the middle of a block).
    #[error("address {addr:#x} is not an allocated block of order {order}")]
    NotAllocated {
        /// The address that was freed.
        addr: usize,
        /// The order it was freed with.
        order: u8,
    },
}

/// Why a memory region could not be added to a page allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// After page alignment and room for metadata, nothing usable is left.
    #[error("region too small to hold any page")]
    TooSmall,
    /// The allocator's fixed table of regions is full.
    #[error("the region table is full")]
    TableFull,
    /// The region overlaps one already added.
    #[error("region overlaps one already added")]
    Overlap,
}
