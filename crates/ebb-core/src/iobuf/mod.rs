//! Zero-copy I/O buffers: [`IOBuf`], [`IOBufChain`] and a [`Cursor`] over them.
//!
//! After EbbRT's `IOBuf`: a buffer owns (a share of) a memory region and a *view* of
//! part of it. Data flows from a device to the application and back without copies:
//! a driver fills a buffer's tailroom and commits it, protocol layers strip their
//! headers by trimming the view's front, the application splits and chains views,
//! and on the way out each layer prepends its header into the headroom reserved in
//! front of the payload.
//!
//! # Design
//!
//! * **Storage.** A buffer's region is either a reference-counted heap region or a
//!   `&'static [u8]`. A heap region (`region.rs`) is one allocation: a 32-byte header
//!   (an atomic strong count, the bytes' address, the capacity, the initialized length)
//!   followed by the bytes, so making a buffer is one allocation and freeing it one
//!   free, and an `IOBuf` holds a thin pointer to the header. [`IOBuf::from_vec`]
//!   adopts the `Vec`'s buffer instead (no copy): its region is a bare header pointing
//!   at the `Vec`'s bytes, two allocations as before. Cloning or splitting a buffer
//!   shares the region (a relaxed reference-count increment, never a copy; dropping is
//!   `Arc`'s release decrement and acquire fence before the free). A heap region is
//!   *unique* while exactly one `IOBuf` refers to it; uniqueness is checked at the
//!   moment of mutation (a strong count of one, then an acquire fence — what
//!   `Arc::get_mut` checks, without its locked compare-exchange, since no weak handle
//!   exists), so a buffer whose clones have all been dropped becomes mutable again.
//!   Static regions are never mutable.
//! * **No needless zero-fill.** A region's initialized length only grows, and only as
//!   far as bytes are actually handed out, so creating a large buffer and copying data
//!   into it with [`IOBuf::extend_from_slice`] writes each byte once. Only the bytes a
//!   caller can see through `&mut [u8]` are initialized (with zeros where nothing else
//!   was written). All `unsafe` is in `region.rs`, which hands out the initialized bytes
//!   (shared, or writable while unique) and writes or zero-fills past them; this module
//!   and the rest are safe code.
//! * **Chains.** An [`IOBufChain`] is a `VecDeque` of buffers with a cached total
//!   length. Splitting a chain in the middle of a segment splits that segment's view,
//!   sharing its storage. [`IOBufChain::segments`] yields what a `writev` needs.
//! * **Cursor.** A [`Cursor`] reads integers and byte ranges across segment
//!   boundaries. [`Cursor::read_bytes`] borrows when the range lies within one segment
//!   and copies only when it straddles segments.
//! * **Errors are values.** Every length that can come from the network (trim, split,
//!   cursor reads, headroom/tailroom requests) is checked and reported as an
//!   [`IOBufError`]; a failed operation leaves its buffer, chain or cursor unchanged.
//!
//! # Invariants
//!
//! * For every `IOBuf`: `start + len <= initialized <= capacity` of its region, where
//!   `initialized` is the heap region's initialized length, which never decreases (for
//!   a static region all three are the slice's length). So the headroom `[0, start)`
//!   and the view are always initialized, and the tailroom is `capacity - (start + len)`.
//! * Mutation (of the view, headroom or tailroom, and of `initialized`) happens only
//!   through `Storage::unique_mut`, which requires the strong count to be one (no weak
//!   handle exists), so no byte is ever written while another `IOBuf` can read it.
//! * A region never grows or moves: its capacity is fixed when it is made, so a region
//!   never moves while it is shared.
//! * An `IOBufChain`'s cached length equals the sum of its segments' lengths, and a
//!   chain holds no empty segments.
//! * A `Cursor`'s `position() + remaining()` equals the length of what it reads.

mod buf;
mod chain;
mod cursor;
#[allow(unsafe_code)] // all of the IOBuf `unsafe`: see above
mod region;
mod segments;
#[cfg(test)]
mod tests;

use core::fmt;

pub use buf::{IOBuf, MAX_REGION, Tailroom};
pub use chain::{IOBufChain, SegmentMut};
pub use cursor::Cursor;
pub use region::{Keeper, LentMemory, REGION_OVERHEAD};
pub use segments::{IntoIter as ChainIntoIter, Iter as ChainIter};

/// Why an [`IOBuf`], [`IOBufChain`] or [`Cursor`] operation was refused.
///
/// A refused operation leaves its receiver unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IOBufError {
    /// A length or offset lies beyond the bytes available (the view, the chain, or
    /// what remains under a cursor).
    OutOfRange {
        /// The length or offset asked for.
        requested: usize,
        /// How many bytes there were.
        available: usize,
    },
    /// Not enough headroom in front of the view.
    NoHeadroom {
        /// The number of bytes asked for.
        requested: usize,
        /// The headroom there was.
        available: usize,
    },
    /// Not enough tailroom after the view.
    NoTailroom {
        /// The number of bytes asked for.
        requested: usize,
        /// The tailroom there was.
        available: usize,
    },
    /// The storage is shared with another `IOBuf`; see [`IOBuf::make_unique`].
    Shared,
    /// The storage is static and can never be written; see [`IOBuf::make_unique`].
    ReadOnly,
    /// The allocator could not provide a region (only from the `try_` constructors).
    OutOfMemory {
        /// The bytes asked for.
        requested: usize,
    },
}

impl fmt::Display for IOBufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::OutOfRange {
                requested,
                available,
            } => {
                write!(
                    f,
                    "{requested} bytes requested but only {available} available"
                )
            }
            Self::NoHeadroom {
                requested,
                available,
            } => {
                write!(
                    f,
                    "{requested} bytes of headroom requested but only {available} available"
                )
            }
            Self::NoTailroom {
                requested,
                available,
            } => {
                write!(
                    f,
                    "{requested} bytes of tailroom requested but only {available} available"
                )
            }
            Self::Shared => f.write_str("buffer storage is shared and cannot be mutated"),
            Self::ReadOnly => f.write_str("buffer storage is static and cannot be mutated"),
            Self::OutOfMemory { requested } => {
                write!(f, "no memory for a buffer of {requested} bytes")
            }
        }
    }
}

impl core::error::Error for IOBufError {}

/// Shorthand for this module's fallible results.
type Result<T> = core::result::Result<T, IOBufError>;

/// Checks that `requested <= available`, the common bounds check of this module.
fn check_range(requested: usize, available: usize) -> Result<()> {
    if requested <= available {
        Ok(())
    } else {
        Err(IOBufError::OutOfRange {
            requested,
            available,
        })
    }
}
