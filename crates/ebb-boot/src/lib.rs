//! # ebb-boot — the boot structures a native guest starts on
//!
//! What the guest finds in memory at its first instruction, computed once for both ways
//! an image boots: `ebb-vmm` (the KVM monitor) writes it into guest memory before the VM
//! exists, and under a standard hypervisor the image's own PVH stub (`ebb-native`'s
//! `pvh::boot`) writes the same at ring 0. The addresses and structure layouts are the
//! ABI in [`ebb_abi`]; this crate decides their contents:
//!
//! * [`layout`]: where the image, per-core blocks, stacks, free memory and the shared
//!   window go, and how every page is mapped;
//! * [`paging`]: the identity-mapped page tables of a layout;
//! * [`cpu`]: the GDT and TSS bytes, and the control-register bits of a CPL-3 start;
//! * [`boot_info`]: the boot info and per-core blocks.
//!
//! ## Invariants
//!
//! * **No `unsafe`, no allocation, no I/O.** Every writer fills a slice its caller gives
//!   (the PVH stub runs before any heap exists and hands slices over fixed guest-physical
//!   addresses; the monitor hands host buffers it then copies into guest memory). So
//!   everything here is tested on the host.
//! * **One definition.** A constant or an encoding both boot paths need lives here (or,
//!   when it is ABI the guest reads, in `ebb-abi`), never in a copy on either side.
//! * Pure functions of their arguments: the same layout gives the same bytes.

#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod boot_info;
pub mod cpu;
pub mod layout;
pub mod paging;
