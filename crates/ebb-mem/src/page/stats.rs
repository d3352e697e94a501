//! [`PageStats`]: a snapshot of a page allocator's occupancy.

use super::geometry::{ORDERS, PAGE_SIZE};
use core::fmt;

/// A snapshot of a page allocator's occupancy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageStats {
    /// Pages managed (excluding metadata pages).
    pub total_pages: usize,
    /// Pages currently free.
    pub free_pages: usize,
    /// Number of free blocks of each order.
    pub free_blocks: [usize; ORDERS],
    /// Number of regions added.
    pub regions: usize,
}

impl PageStats {
    /// The largest order with a free block, if any.
    pub fn largest_free_order(&self) -> Option<usize> {
        self.free_blocks.iter().rposition(|&n| n > 0)
    }
}

impl fmt::Display for PageStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} pages free ({} KiB of {} KiB) in {} region(s); free blocks by order:",
            self.free_pages,
            self.total_pages,
            self.free_pages * PAGE_SIZE / 1024,
            self.total_pages * PAGE_SIZE / 1024,
            self.regions
        )?;
        for (order, n) in self.free_blocks.iter().enumerate() {
            write!(f, " {order}:{n}")?;
        }
        Ok(())
    }
}
