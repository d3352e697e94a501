//! The monitor's only `unsafe` code (the crate root denies it everywhere else): adopting
//! an inherited `/dev/kvm` descriptor ([`kvm_from_inherited_fd`]), registering guest
//! memory with KVM, asking for it on huge pages, borrowing an eventfd for `poll`, reading
//! the internal-error union of `kvm_run`, handing the VM's teardown to a background
//! process at exit ([`release_in_background`]), asking a helper process to die with the
//! monitor ([`die_with_the_monitor`]), passing a descriptor to a helper
//! ([`pass_descriptor`]), a real-time class for the device thread ([`become_real_time`]),
//! and `readv`/`writev` straight between a
//! backend's descriptor and guest memory ([`IoVecs`]). Each block has a `// SAFETY:`
//! comment; each function around one is safe to call.

use kvm_bindings::{kvm_run, kvm_userspace_memory_region};
use kvm_ioctls::VmFd;
use rustix::fd::BorrowedFd;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering as AtomicOrdering};
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};
use vmm_sys_util::eventfd::EventFd;

/// Asks for `[addr, addr + len)` of guest memory on transparent huge pages
/// (`MADV_HUGEPAGE`; the host's THP mode `madvise` or `always` honours it). Only the
/// 2 MiB-aligned host pages inside the range can become huge; for KVM to map a guest
/// page with one, the guest and host addresses must also agree modulo 2 MiB. Nothing
/// but the kernel's choice of pages changes.
pub fn advise_huge_pages(mem: &crate::guest::GuestMem, addr: u64, len: u64) -> std::io::Result<()> {
    let len = usize::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let base = mem
        .host_ptr(addr, len)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFAULT))?;
    // SAFETY: `base..base + len` lies inside the guest-memory mapping `mem` owns (checked
    // by `host_ptr`); MADV_HUGEPAGE changes only how the kernel backs those pages, never
    // their contents or the mapping, so no reference into them is invalidated.
    let rc = unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

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

/// The VM file descriptor the teardown process keeps, and the monitor's pid: written once
/// by [`release_in_background`] before the process exists, read only by it.
static REAPER_KEEP_FD: AtomicI32 = AtomicI32::new(-1);
static REAPER_PARENT: AtomicI32 = AtomicI32::new(0);

/// The teardown process's stack (it runs a few system calls, nothing else).
#[repr(C, align(16))]
struct ReaperStack([u8; 16 * 1024]);
static REAPER_STACK: Mutex<ReaperStack> = Mutex::new(ReaperStack([0; 16 * 1024]));

/// A raw system call with up to three arguments: no libc, so no `errno` (the teardown
/// process shares the monitor's memory, including the thread-local `errno`).
///
/// # Safety
///
/// `nr` and its arguments must be a system call that does not touch memory the caller
/// does not own.
unsafe fn raw_syscall3(nr: libc::c_long, a: u64, b: u64, c: u64) -> i64 {
    let ret: i64;
    // SAFETY: the caller's duty; `syscall` clobbers RCX and R11 only.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        )
    };
    ret
}

/// The teardown process: keeps only the VM descriptor and waits for the monitor to die.
extern "C" fn reaper(_: *mut libc::c_void) -> libc::c_int {
    let keep = REAPER_KEEP_FD.load(AtomicOrdering::SeqCst) as u64;
    let parent = REAPER_PARENT.load(AtomicOrdering::SeqCst) as i64;
    // Soundness: prctl, getppid, close_range, pause and exit take no pointers, and
    // sched_setscheduler only reads a `sched_param` on this process's own stack; closing
    // this process's own copies of the descriptors does not affect the monitor's (no
    // CLONE_FILES).
    // SAFETY: by the argument just above.
    unsafe {
        raw_syscall3(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG as u64,
            libc::SIGKILL as u64,
            0,
        );
        // The teardown runs in this process when it dies: at idle priority, so that it
        // does not compete with whatever the caller runs next (say, the next boot).
        let idle = libc::sched_param { sched_priority: 0 };
        raw_syscall3(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_IDLE as u64,
            &raw const idle as u64,
        );
        // The monitor may have exited before PDEATHSIG was armed.
        if raw_syscall3(libc::SYS_getppid, 0, 0, 0) == parent {
            if keep > 0 {
                raw_syscall3(libc::SYS_close_range, 0, keep - 1, 0);
            }
            raw_syscall3(libc::SYS_close_range, keep + 1, u64::from(u32::MAX), 0);
            loop {
                raw_syscall3(libc::SYS_pause, 0, 0, 0);
            }
        }
        raw_syscall3(libc::SYS_exit, 0, 0, 0);
    }
    0
}

/// Puts the calling thread (only it: Linux's `sched_setscheduler` with pid 0) in the
/// `SCHED_FIFO` class at `priority` (1 to 99). Needs root, `CAP_SYS_NICE` or an
/// `RLIMIT_RTPRIO` of at least `priority`; without them it fails with `EPERM`.
pub fn become_real_time(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid `sched_param` that lives across the call, which only
    // reads it; the call changes this thread's scheduling class and touches no memory of
    // ours.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Lets the process `cmd` starts inherit `fd`, and no other process: close-on-exec is
/// cleared in the forked child only, just before `exec`. Clearing it in this process
/// instead would let a process that another thread spawns meanwhile inherit the
/// descriptor too, and keep the socket open after its real owner died (a test saw a
/// killed passt's socket stay writable that way). The caller keeps `fd` open until
/// `cmd` has been spawned.
pub fn pass_descriptor(cmd: &mut std::process::Command, fd: BorrowedFd<'_>) {
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed: `fcntl` is (no locks, no allocation), and it
    // touches no memory but its own copy of `raw`, a descriptor the child inherited
    // (still open: the caller holds it until the spawn returns).
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(raw, libc::F_GETFD);
            if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the process `cmd` starts be killed (SIGKILL) when the thread that starts it ends
/// — the monitor exiting, killed or not. A helper that outlives the monitor serves
/// nobody: passt, its peer gone, was seen spinning on `EPIPE` at 80% of a CPU for good
/// after a test killed its monitor. (`PR_SET_PDEATHSIG` follows the spawning *thread*:
/// call this on a thread that lives as long as the helper should, as a VM's own thread
/// does.) If that thread is already gone by the time the child arms the signal, the
/// child exits at once.
pub fn die_with_the_monitor(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed: `prctl`, `getppid` and `_exit` are (they take
    // no locks and allocate nothing), and it touches no memory but its own copy of
    // `parent`.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Hands the last reference to the VM `vm` to a background process, so that this process
/// can exit without waiting for KVM to destroy the VM (≈ 10 ms on our nested PVM hosts,
/// most of the monitor's run time). The process shares this one's memory (`CLONE_VM`:
/// nothing is copied, and the guest memory's unmapping is deferred too), gets its own
/// copy of the descriptor table and closes everything but `vm` in it (so stdout's reader
/// sees end-of-file when the monitor exits), asks to be killed when the monitor dies
/// (`PR_SET_PDEATHSIG`), drops to `SCHED_IDLE` (the teardown then yields to other work)
/// and waits. The caller must exit soon after and must not unmap
/// guest memory or touch the VM before it does: call this last.
pub fn release_in_background(vm: &VmFd) -> std::io::Result<()> {
    let mut stack = REAPER_STACK.lock().unwrap_or_else(|e| e.into_inner());
    if REAPER_KEEP_FD.swap(vm.as_raw_fd(), AtomicOrdering::SeqCst) != -1 {
        return Err(std::io::Error::other(
            "the VM teardown was already handed off",
        ));
    }
    REAPER_PARENT.store(std::process::id() as i32, AtomicOrdering::SeqCst);
    let top = stack.0.as_mut_ptr_range().end as *mut libc::c_void;
    // Soundness: `reaper` runs on REAPER_STACK (16 KiB, 16-byte aligned at its top, held
    // locked for the rest of the process and never used by anything else), reads two
    // atomics written above and makes raw system calls only: it touches no memory this
    // process is using. Without CLONE_THREAD it is a process of its own; exit signal 0 (no
    // SIGCHLD for us: init reaps it).
    // SAFETY: by the argument just above.
    let pid = unsafe { libc::clone(reaper, top, libc::CLONE_VM, std::ptr::null_mut()) };
    std::mem::forget(stack);
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A file mapped read-only into memory (`MAP_PRIVATE`): its pages come from the page
/// cache as they are touched, instead of being copied into fresh anonymous memory.
pub struct MappedFile {
    addr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; sharing `&[u8]` views of it
// between threads is as safe as sharing any immutable byte slice.
unsafe impl Send for MappedFile {}
// SAFETY: as above.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps all of `file` (an empty file maps as an empty slice).
    pub fn new(file: &std::fs::File) -> std::io::Result<MappedFile> {
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("file too large to map"))?;
        if len == 0 {
            return Ok(MappedFile {
                addr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh read-only private mapping chosen by the kernel: it aliases no
        // Rust object. The descriptor may be closed afterwards; the mapping stays.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedFile { addr, len })
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // Soundness: `addr..addr + len` is a live read-only mapping owned by `self`. The
        // bytes can change only if another process truncates or rewrites the file while
        // it is mapped (truncation would raise SIGBUS on access); build tools replace
        // outputs with new files rather than rewriting them in place, and the monitor
        // parses and copies what it needs right after mapping.
        // SAFETY: by the argument just above.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: unmaps exactly the mapping this value owns; no slice of it outlives
            // `self` (they borrow it).
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }
}

/// A scatter-gather list for one `readv` or `writev` on a backend descriptor: ranges of
/// guest memory, checked against it when added, and bytes of the monitor's own (a
/// virtio-net header it built). The lifetime ties the list to both, so the pointers it
/// holds stay valid for as long as it exists.
///
/// The kernel copies to or from the guest's pages while the guest runs; a guest that
/// writes its own buffer meanwhile garbles only its own frame (what a NIC's DMA would
/// give it too). Nothing the monitor itself decides on is read through a list: the
/// header it sends is its own validated copy.
pub struct IoVecs<'a> {
    /// A frame's few ranges in place: no allocation per `readv`/`writev`.
    iov: smallvec::SmallVec<[libc::iovec; 8]>,
    /// Holds monitor bytes ([`push_host`](Self::push_host)): not a list to read into.
    has_host: bool,
    _borrows: std::marker::PhantomData<(&'a crate::guest::GuestMem, &'a [u8])>,
}

impl<'a> IoVecs<'a> {
    /// An empty list with room for `n` ranges.
    pub fn with_capacity(n: usize) -> Self {
        IoVecs {
            iov: smallvec::SmallVec::with_capacity(n),
            has_host: false,
            _borrows: std::marker::PhantomData,
        }
    }

    /// Appends `len` bytes of guest memory at `addr`; `None` (nothing appended) unless
    /// the whole range lies in guest memory.
    pub fn push_guest(
        &mut self,
        mem: &'a crate::guest::GuestMem,
        addr: u64,
        len: usize,
    ) -> Option<()> {
        if len == 0 {
            return Some(());
        }
        let base = mem.host_ptr(addr, len)?;
        self.iov.push(libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        });
        Some(())
    }

    /// Appends the monitor's own `bytes` (only ever read: `writev` lists).
    pub fn push_host(&mut self, bytes: &'a [u8]) {
        if bytes.is_empty() {
            return;
        }
        self.iov.push(libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        });
        self.has_host = true;
    }

    /// Appends the monitor's own writable `bytes`, for a `readv` to spill into (one byte
    /// after the guest's buffers tells a frame that did not fit from one that just did).
    pub fn push_spill(&mut self, bytes: &'a mut [u8]) {
        if bytes.is_empty() {
            return;
        }
        self.iov.push(libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        });
    }

    /// Writes the list to `fd` with one `writev`: the bytes taken.
    pub fn write_to(&self, fd: BorrowedFd<'_>) -> Result<usize, rustix::io::Errno> {
        // Each entry is guest memory checked by `push_guest` (mapped as long as the
        // `GuestMem` borrowed for 'a) or a slice borrowed for 'a by `push_host`; a list has
        // at most a chain's descriptors plus one, so its length fits a c_int.
        // SAFETY: every entry points at `iov_len` readable bytes that outlive `self` (see
        // above), and the kernel only reads them.
        let n = unsafe {
            libc::writev(
                fd.as_raw_fd(),
                self.iov.as_ptr(),
                self.iov.len() as libc::c_int,
            )
        };
        result(n)
    }

    /// Reads from `fd` into the list with one `readv`: the bytes read. A list holding
    /// the monitor's own bytes is refused (`EINVAL`): they are borrowed read-only.
    pub fn read_from(&self, fd: BorrowedFd<'_>) -> Result<usize, rustix::io::Errno> {
        if self.has_host {
            return Err(rustix::io::Errno::INVAL);
        }
        // SAFETY: as for `write_to`, and every entry is writable: guest memory (a
        // read-write mapping owned by the `GuestMem`) or a slice borrowed mutably for 'a
        // (`push_spill`); read-only entries were refused above.
        let n = unsafe {
            libc::readv(
                fd.as_raw_fd(),
                self.iov.as_ptr(),
                self.iov.len() as libc::c_int,
            )
        };
        result(n)
    }
}

/// A `readv`/`writev` return value as a byte count or the call's errno.
fn result(n: isize) -> Result<usize, rustix::io::Errno> {
    usize::try_from(n).map_err(|_| {
        rustix::io::Errno::from_io_error(&std::io::Error::last_os_error())
            .unwrap_or(rustix::io::Errno::IO)
    })
}

/// The `/dev/kvm` a parent opened and handed over as `fd` ([`crate::VmConfig::kvm_fd`]),
/// owned from here on: closed with the VM.
pub fn kvm_from_inherited_fd(fd: std::os::fd::RawFd) -> kvm_ioctls::Kvm {
    use std::os::fd::FromRawFd;
    // SAFETY: `VmConfig::kvm_fd` is documented as an open /dev/kvm the VM takes over;
    // nothing else in this process uses or closes it. A descriptor that is not KVM fails
    // the caller's API version check instead of being used.
    unsafe { kvm_ioctls::Kvm::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests {
    use crate::guest::GuestMem;
    use vm_memory::{GuestAddress, GuestMemoryMmap};

    #[test]
    fn host_ptr_points_at_the_guest_bytes() {
        let mmap = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 1 << 16)]).unwrap();
        let g = GuestMem::new(mmap, 1 << 16);
        g.write_bytes(100, b"guest").unwrap();
        let p = g.host_ptr(100, 5).unwrap();
        // SAFETY: `p` points at 5 bytes of the live mapping `g` owns; nothing writes them
        // meanwhile.
        let seen = unsafe { std::slice::from_raw_parts(p, 5) };
        assert_eq!(seen, b"guest");
        assert_eq!(g.host_ptr(u64::MAX, 1), None);
        assert_eq!(g.host_ptr(1 << 16, 1), None);
    }
}
