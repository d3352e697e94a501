//! The window shared with the program that embeds the monitor: the boot memory map's
//! [`MemKind::Shared`] region (the top of guest memory, identity-mapped, read-write, never
//! handed to the heap), and the doorbell that tells the host the guest wrote to it.
//!
//! What the window holds is agreed between the guest and the embedder (ebb-vmm only maps
//! it); the host writes it concurrently, so access it only atomically or volatilely. The
//! host wakes a core sleeping in the WAIT hypercall as another core's kick would.
//!
//! Invariant: the window is looked up once, from the boot info, which never changes; under
//! PVH (a standard hypervisor, no embedding program) there is none.

use crate::abi::MemKind;
use crate::entry::boot_info;
use crate::{hypercall, pvh};

/// The lookup, done on first use.
static WINDOW: spin::Once<Option<(usize, usize)>> = spin::Once::new();

/// `(address, length)` of the shared window: the address is guest-physical and, memory
/// being identity-mapped, usable as a pointer. `None` when the VM has no window or runs
/// under PVH.
pub fn shared_window() -> Option<(usize, usize)> {
    *WINDOW.call_once(|| {
        if pvh::active() {
            return None;
        }
        let info = boot_info();
        let count = (info.region_count as usize).min(info.regions.len());
        info.regions[..count]
            .iter()
            .find(|r| r.kind == MemKind::Shared as u32 && r.len > 0)
            .map(|r| (r.start as usize, r.len as usize))
    })
}

/// Tells the host that this guest wrote to the shared window: an `out` to
/// [`DOORBELL_PORT`](crate::abi::DOORBELL_PORT), which the host kernel turns into an
/// eventfd signal without leaving the guest for long. Does nothing when there is no window
/// (the port is then not the host's doorbell, and writing it would end the VM).
pub fn ring_host_doorbell() {
    if shared_window().is_some() {
        hypercall::doorbell();
    }
}

/// The window as `ebb-shm`'s rings see it (what `ebb::shm` opens on a node).
#[derive(Clone, Copy, Debug)]
pub struct GuestWindow {
    base: usize,
    size: usize,
}

impl GuestWindow {
    /// This VM's window, if it has one.
    pub fn get() -> Option<GuestWindow> {
        shared_window().map(|(base, size)| GuestWindow { base, size })
    }
}

// SAFETY: the Shared region is identity-mapped read-write for the VM's whole life (the
// monitor's page tables, built before boot, never change) and no allocator hands it out,
// so nothing in the guest holds references into it; its bounds come from the boot info,
// which never changes.
unsafe impl ebb_shm::Mapping for GuestWindow {
    fn base(&self) -> *mut u8 {
        self.base as *mut u8
    }
    fn size(&self) -> usize {
        self.size
    }
}
