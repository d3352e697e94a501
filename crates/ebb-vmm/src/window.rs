//! The shared window: the top of a VM's guest memory ([`MemKind::Shared`](ebb_abi::MemKind::Shared)),
//! which the program that embeds the monitor reads and writes directly, and its two
//! doorbells.
//!
//! * Guest → host: the guest's `out` to [`DOORBELL_PORT`](ebb_abi::DOORBELL_PORT) signals
//!   [`SharedWindow::doorbell`] through a KVM ioeventfd, in the host kernel (no exit to the
//!   monitor).
//! * Host → guest: [`SharedWindow::wake_vcpu`] writes a vCPU's kick eventfd, the one its
//!   WAIT hypercall sleeps on (and the guest's kicks signal), so a sleeping core wakes.
//!
//! ebb-vmm provides only the memory and the doorbells; what the window holds is up to the
//! embedder and the guest.
//!
//! Invariants:
//! * A [`SharedWindow`] keeps the guest-memory mapping alive by itself: it holds a clone of
//!   the [`GuestMemoryMmap`], whose regions are `Arc`s (vm-memory 0.18's
//!   `GuestRegionCollection` is a `Vec<Arc<GuestRegionMmap>>`, and a `GuestRegionMmap`
//!   holds an `Arc<MmapRegion>`), so the mapping is unmapped only when the VM *and* every
//!   window are gone. [`SharedWindow::as_ptr`] is therefore valid for as long as the window
//!   exists, even after the VM ended.
//! * The pointer is derived from the mapping each time (no address stored as an integer),
//!   and `[as_ptr, as_ptr + len)` lies inside it: [`SharedWindow::new`] checks the range.
//! * The eventfds are duplicates of the VM's: writing a kick eventfd after the VM ended
//!   wakes nobody and harms nothing; the doorbell simply never fires again.

use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

/// The window of guest memory shared with the program that embeds the monitor, with its
/// doorbells. Obtained from [`Vm::shared_window`](crate::Vm::shared_window); cheap to clone
/// (clones share the eventfds), `Send + Sync`.
///
/// **The guest writes the window concurrently, and the guest is hostile.** Access it only
/// with atomic or volatile operations (never through a `&`/`&mut` reference to its bytes),
/// and treat every byte read from it as untrusted input: check every index, length and
/// offset before use, and expect values to change between two reads.
#[derive(Clone, Debug)]
pub struct SharedWindow {
    inner: std::sync::Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The guest memory, kept mapped by this clone.
    mem: GuestMemoryMmap,
    /// Guest-physical address of the first byte (also its offset in the one region).
    guest_addr: u64,
    len: usize,
    /// Signalled when the guest rings ([`ebb_abi::DOORBELL_PORT`]).
    doorbell: EventFd,
    /// Each vCPU's kick eventfd, by core id.
    vcpu_kicks: Vec<EventFd>,
}

impl SharedWindow {
    /// The window `[guest_addr, guest_addr + len)` of `mem` (one region from guest address
    /// 0, as the monitor allocates it), with the guest's `doorbell` and the vCPUs' kick
    /// eventfds (duplicates: the VM keeps its own). `None` unless the range lies inside the
    /// mapping.
    pub(crate) fn new(
        mem: GuestMemoryMmap,
        guest_addr: u64,
        len: usize,
        doorbell: EventFd,
        vcpu_kicks: Vec<EventFd>,
    ) -> Option<SharedWindow> {
        let region = mem.iter().next()?;
        let end = guest_addr.checked_add(len as u64)?;
        if region.start_addr().0 != 0 || end > region.len() {
            return None;
        }
        Some(SharedWindow {
            inner: std::sync::Arc::new(Inner {
                mem,
                guest_addr,
                len,
                doorbell,
                vcpu_kicks,
            }),
        })
    }

    /// Host address of the window's first byte. Valid while this window (or a clone)
    /// exists; see the type's docs for how to access it.
    pub fn as_ptr(&self) -> *mut u8 {
        let inner = &*self.inner;
        match inner.mem.iter().next() {
            // `new` checked that the window lies inside this region; `wrapping_add` keeps
            // the mapping's provenance without an `unsafe` offset.
            Some(region) => region.as_ptr().wrapping_add(inner.guest_addr as usize),
            None => std::ptr::null_mut(),
        }
    }

    /// Bytes of the window.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the window is empty (never, for a window a VM hands out).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Guest-physical (and, identity-mapped, guest-virtual) address of the first byte.
    pub fn guest_addr(&self) -> u64 {
        self.inner.guest_addr
    }

    /// The guest → host doorbell: readable (its counter non-zero) once the guest rang
    /// since the last read. Non-blocking: poll it (`poll`/epoll on its descriptor), then
    /// `read` it to reset it.
    pub fn doorbell(&self) -> &EventFd {
        &self.inner.doorbell
    }

    /// Wakes core `core` of the guest from its WAIT hypercall (or makes its next WAIT
    /// return at once), like a kick from another core; `false` if the VM has no such
    /// vCPU. Callable from any thread, also after the VM ended (then harmless).
    pub fn wake_vcpu(&self, core: u32) -> bool {
        match self.inner.vcpu_kicks.get(core as usize) {
            Some(kick) => {
                // A full counter (EAGAIN) means a wake is already pending: nothing lost.
                let _ = kick.write(1);
                true
            }
            None => false,
        }
    }
}

impl SharedWindow {
    /// The doorbell (see [`doorbell`](Self::doorbell)) as a descriptor of its own (a
    /// duplicate), for an event loop that owns what it polls.
    pub fn doorbell_fd(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        crate::sys::borrow_eventfd(&self.inner.doorbell).try_clone_to_owned()
    }
}

// The rings `ebb::shm` runs in the window see it as an `ebb_shm::Mapping`: the crate's
// one `unsafe` outside `sys` (a promise, no code that could break it).
#[allow(unsafe_code)]
// SAFETY: `as_ptr()..as_ptr() + len()` lies inside the guest mapping (checked in `new`),
// which the clone of `GuestMemoryMmap` in `inner` keeps mapped read-write while any clone
// of the window lives; base and length never change; the monitor itself never makes
// references into the window (it only maps it).
unsafe impl ebb_shm::Mapping for SharedWindow {
    fn base(&self) -> *mut u8 {
        self.as_ptr()
    }
    fn size(&self) -> usize {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress};
    use vmm_sys_util::eventfd::EFD_NONBLOCK;

    fn window(mem_size: usize, at: u64, len: usize, cpus: usize) -> Option<SharedWindow> {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), mem_size)]).unwrap();
        let kicks = (0..cpus)
            .map(|_| EventFd::new(EFD_NONBLOCK).unwrap())
            .collect();
        SharedWindow::new(mem, at, len, EventFd::new(EFD_NONBLOCK).unwrap(), kicks)
    }

    #[test]
    fn a_shared_window_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SharedWindow>();
    }

    #[test]
    fn a_window_outside_guest_memory_is_refused() {
        assert!(window(1 << 20, (1 << 20) - 4096, 8192, 1).is_none());
        assert!(window(1 << 20, u64::MAX, 2, 1).is_none());
        assert!(window(1 << 20, (1 << 20) - 4096, 4096, 1).is_some());
    }

    #[test]
    fn the_pointer_is_the_window_in_the_mapping_which_outlives_the_vm_side() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let doorbell = EventFd::new(EFD_NONBLOCK).unwrap();
        let w = SharedWindow::new(mem.clone(), 0xf_0000, 0x1_0000, doorbell, Vec::new()).unwrap();
        assert_eq!(
            w.as_ptr(),
            mem.get_host_address(GuestAddress(0xf_0000)).unwrap()
        );
        assert_eq!((w.guest_addr(), w.len()), (0xf_0000, 0x1_0000));
        mem.write_obj(0x1234_5678_9abc_def0u64, GuestAddress(0xf_0000))
            .unwrap();
        drop(mem); // the "VM" lets go of its memory: the window's clone keeps it mapped
        let kept = &w.inner.mem;
        assert_eq!(
            kept.read_obj::<u64>(GuestAddress(0xf_0000)).unwrap(),
            0x1234_5678_9abc_def0
        );
        assert_eq!(
            w.as_ptr(),
            kept.get_host_address(GuestAddress(0xf_0000)).unwrap()
        );
    }

    #[test]
    fn wake_vcpu_writes_that_cores_kick_and_refuses_others() {
        let w = window(1 << 20, 0, 4096, 2).unwrap();
        assert!(w.wake_vcpu(1));
        assert!(!w.wake_vcpu(2));
        assert_eq!(w.inner.vcpu_kicks[1].read().unwrap(), 1);
        assert!(
            w.inner.vcpu_kicks[0].read().is_err(),
            "core 0 was not woken"
        );
    }
}
