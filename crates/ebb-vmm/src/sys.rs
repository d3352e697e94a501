//! The monitor's only `unsafe` code: registering guest memory with KVM, borrowing an
//! eventfd for `poll`, and reading the internal-error union of `kvm_run`.

use kvm_bindings::{kvm_run, kvm_userspace_memory_region};
use kvm_ioctls::VmFd;
use rustix::fd::BorrowedFd;
use std::os::fd::AsRawFd;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

/// Registers every region of `mem` as a KVM memory slot at its guest address.
pub fn register_memory(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<(), kvm_ioctls::Error> {
    for (slot, region) in mem.iter().enumerate() {
        let host = mem
            .get_host_address(region.start_addr())
            .map_err(|_| kvm_ioctls::Error::new(libc::EFAULT))?;
        let desc = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: `host..host + len` is a live mapping owned by `mem`'s region, which the
        // caller keeps alive (in `Shared`) for as long as the VM exists; no other slot
        // overlaps it because slots are numbered by region and regions do not overlap.
        unsafe { vm.set_user_memory_region(desc) }?;
    }
    Ok(())
}

/// Borrows `fd`'s descriptor for `poll`.
pub fn borrow_eventfd(fd: &EventFd) -> BorrowedFd<'_> {
    // SAFETY: `fd` owns the descriptor and the returned borrow cannot outlive `fd`.
    unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) }
}

/// `(suberror, data)` of a `KVM_EXIT_INTERNAL_ERROR`.
pub fn internal_error(run: &kvm_run) -> (u32, Vec<u64>) {
    // SAFETY: the caller saw exit_reason == KVM_EXIT_INTERNAL_ERROR, for which KVM fills
    // the `internal` member of the union; every bit pattern is a valid u32/u64 array.
    let internal = unsafe { run.__bindgen_anon_1.internal };
    let n = (internal.ndata as usize).min(internal.data.len());
    (internal.suberror, internal.data[..n].to_vec())
}
