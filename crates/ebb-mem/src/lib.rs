//! # ebb-mem — Ebbflow's memory Ebbs
//!
//! EbbRT's memory management, in Rust, from the bottom up:
//!
//! * [`PageAllocator`] — a binary buddy allocator over one or more physical ranges: blocks
//!   of `2^order` 4 KiB pages (order `0..=MAX_ORDER`, up to 4 MiB), one free list per
//!   order, split on allocation, merged with the buddy (`addr ^ size`) on free. One per
//!   NUMA node, each behind a spin lock: pages are the slow path.
//! * [`SlabAllocator`] — fixed-size objects from per-core caches, after Linux's SLQB: each
//!   core allocates from its own slabs without locks or atomics; an object freed on another
//!   core goes onto the owning core's lock-free *remote-free list*, which the owner drains
//!   on its next allocation. The owner is read from the slab header, found by masking the
//!   object's address (slabs are naturally aligned page blocks).
//! * [`GeneralPurposeAllocator`] — size classes (8 B … 2 KiB) over per-core slabs, larger
//!   requests from the page allocator, giant ones from a [`PageSource`]; a
//!   [`GlobalAlloc`](core::alloc::GlobalAlloc), so it is the `#[global_allocator]` of the
//!   native image and can be that of a hosted process ([`MmapSource`], feature `std`).
//! * [`VMemAllocator`] — virtual address ranges (first fit, coalescing), for the parts of
//!   the library OS that manage their own mappings.
//! * [`ebbs`] — the page allocators as a multicore Ebb (each core's representative is its
//!   node's allocator).
//!
//! ## Invariants
//!
//! * **Allocation failure is a value.** Fallible callers get [`AllocError`]; the
//!   `GlobalAlloc` returns null and records the request, and
//!   [`GeneralPurposeAllocator::report`] says what was asked for and what is free. Nothing
//!   in this crate panics on exhaustion.
//! * **A core's caches are its own.** The per-core caches are indexed by
//!   `ebb_core::percore::current_core()` and touched only by the thread running as that core
//!   — ebb-core's rule that at most one thread acts as a given core at a time, which the
//!   allocator relies on for soundness exactly as `MulticoreEbb` reps do. Threads that are
//!   not cores share one extra cache behind a spin lock.
//! * **No allocation inside the allocator.** All metadata lives in the managed memory
//!   (page metadata bytes at the start of each region, free-list links inside free blocks,
//!   slab headers at the start of slabs) or in fixed-size arrays, so the general-purpose
//!   allocator can be the global allocator.
//! * **`unsafe` stays in small modules** — `page/buddy.rs` (free lists and page metadata),
//!   `page/mod.rs` (handing regions and raw blocks in and out), `slab/raw.rs` (slab
//!   headers and objects), `slab/mod.rs` (the per-core cell), `slab/provider.rs` (a
//!   slab's pages given back), `general.rs` (the `GlobalAlloc` implementation),
//!   `source.rs` (the `PageSource` contract), `ebbs.rs` (giving a node its arena),
//!   `mmap.rs` (Linux) and the tests' `testing.rs` — each block with a `// SAFETY:`
//!   comment, denied in every other module; pointers keep provenance over their region
//!   (strict-provenance APIs), so the pure tests run under Miri.
//!
//! The crate is `no_std`; `alloc` is used only by [`VMemAllocator`]. The `std` feature
//! enables ebb-core's thread-local per-core backend and [`MmapSource`].

#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

#[allow(unsafe_code)] // listed above
pub mod ebbs;
mod error;
#[allow(unsafe_code)] // listed above
mod general;
#[cfg(feature = "std")]
#[allow(unsafe_code)] // listed above
mod mmap;
#[allow(unsafe_code)] // listed above
pub mod page;
#[allow(unsafe_code)] // listed above
mod slab;
#[allow(unsafe_code)] // listed above
mod source;
pub mod vmem;

pub use error::{AllocError, FreeError, RegionError};
pub use general::{GeneralPurposeAllocator, MAX_SMALL, MemReport, SIZE_CLASSES, allocation_size};
#[cfg(feature = "std")]
pub use mmap::MmapSource;
pub use page::{MAX_BLOCK, MAX_ORDER, PAGE_SIZE, PageAllocator, PageBlock, PageStats};
pub use slab::SlabAllocator;
pub use source::{FixedMemory, PageSource};
pub use vmem::{VMemAllocator, VMemError};

#[cfg(test)]
#[allow(unsafe_code)] // listed above
mod testing;
