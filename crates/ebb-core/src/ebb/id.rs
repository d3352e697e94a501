//! Ebb ids and their allocator.

use super::EbbError;
use crate::percore::MAX_EBBS;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

/// Ids below this are *static*: reserved for the system's own Ebbs, known at compile time.
pub const FIRST_DYNAMIC_ID: u32 = 256;

/// Ids from here to the end of the per-core table are *global*: they name Ebbs that span
/// the nodes of a distributed application, and each node owns a slice of them (handed out
/// by `ebb-dist`). A node's own dynamic ids stay below, so the two never collide.
pub const FIRST_GLOBAL_ID: u32 = 2048;

/// The system-wide name of an Ebb.
///
/// Invariant: the value is below [`MAX_EBBS`], so it indexes the per-core table directly.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EbbId(u32);

impl EbbId {
    /// A static id, for one of the system's own Ebbs. Panics (at compile time in a `const`)
    /// if `n` is not below [`FIRST_DYNAMIC_ID`].
    pub const fn new_static(n: u32) -> EbbId {
        assert!(
            n < FIRST_DYNAMIC_ID,
            "static Ebb ids are below FIRST_DYNAMIC_ID"
        );
        EbbId(n)
    }

    /// The id numbered `n`, for ids that come from elsewhere — a global id a node was
    /// given, one read off the wire. `None` unless `n` indexes the per-core table. (Naming
    /// an id binds nothing: reaching an object still goes through a checked constructor.)
    pub const fn from_u32(n: u32) -> Option<EbbId> {
        if (n as usize) < MAX_EBBS {
            Some(EbbId(n))
        } else {
            None
        }
    }

    /// Whether this id is in the global range ([`FIRST_GLOBAL_ID`] and up).
    pub const fn is_global(self) -> bool {
        self.0 >= FIRST_GLOBAL_ID
    }

    /// The id's number.
    pub const fn as_u32(self) -> u32 {
        self.0
    }

    /// Index into the per-core translation table (always below [`MAX_EBBS`]).
    #[inline(always)]
    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }

    /// Whether this id is in the static range.
    pub const fn is_static(self) -> bool {
        self.0 < FIRST_DYNAMIC_ID
    }
}

impl fmt::Debug for EbbId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EbbId({})", self.0)
    }
}

impl fmt::Display for EbbId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ebb #{}", self.0)
    }
}

/// Hands out dynamic ids from a range, lock-free.
///
/// A node owns one allocator for its whole dynamic range. When nodes form one distributed
/// application, each node's range will come from the GlobalIdMap, so ranges never overlap
/// and an id names the same object everywhere. Ids are not recycled (see the module docs).
pub struct EbbIdAllocator {
    next: AtomicU32,
    end: u32,
}

impl EbbIdAllocator {
    /// An allocator for ids in `start..end` (clamped to the table size).
    pub const fn new(start: u32, end: u32) -> Self {
        let end = if end as usize > MAX_EBBS {
            MAX_EBBS as u32
        } else {
            end
        };
        EbbIdAllocator {
            next: AtomicU32::new(start),
            end,
        }
    }

    /// A fresh id, or [`EbbError::IdsExhausted`].
    pub fn allocate(&self) -> Result<EbbId, EbbError> {
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.end).then_some(n + 1)
            })
            .map(EbbId)
            .map_err(|_| EbbError::IdsExhausted)
    }

    /// How many ids are still free.
    pub fn remaining(&self) -> u32 {
        self.end.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}

/// This node's allocator for its own dynamic ids (the global range above is `ebb-dist`'s).
pub(crate) static NODE_IDS: EbbIdAllocator = EbbIdAllocator::new(FIRST_DYNAMIC_ID, FIRST_GLOBAL_ID);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_hands_out_distinct_ids_then_reports_exhaustion() {
        let ids = EbbIdAllocator::new(10, 13);
        let got: [u32; 3] = [0, 1, 2].map(|_| ids.allocate().unwrap().as_u32());
        assert_eq!(got, [10, 11, 12]);
        assert_eq!(ids.allocate(), Err(EbbError::IdsExhausted));
        assert_eq!(ids.remaining(), 0);
    }

    #[test]
    fn allocator_range_is_clamped_to_the_table() {
        let ids = EbbIdAllocator::new(MAX_EBBS as u32 - 1, u32::MAX);
        assert!(ids.allocate().is_ok());
        assert_eq!(ids.allocate(), Err(EbbError::IdsExhausted));
    }

    #[test]
    fn node_ids_stay_below_the_global_range() {
        assert!(NODE_IDS.remaining() <= FIRST_GLOBAL_ID - FIRST_DYNAMIC_ID);
        assert!(EbbId::from_u32(FIRST_GLOBAL_ID).unwrap().is_global());
        assert!(!EbbId::from_u32(FIRST_GLOBAL_ID - 1).unwrap().is_global());
        assert_eq!(EbbId::from_u32(MAX_EBBS as u32), None);
    }

    #[test]
    fn static_ids_are_below_the_dynamic_range() {
        const ID: EbbId = EbbId::new_static(3);
        assert!(ID.is_static());
        assert!(!EbbId(FIRST_DYNAMIC_ID).is_static());
    }
}
