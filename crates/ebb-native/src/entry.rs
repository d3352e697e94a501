//! `_start`: the first instruction each vCPU runs, at CPL 3 on the stack the monitor (or
//! the PVH stub, `pvh::boot`) set.

use crate::abi::{BOOT_MAGIC, BOOT_VERSION, BootInfo};
use crate::{arch, hypercall};
use core::sync::atomic::{AtomicPtr, Ordering};

core::arch::global_asm!(
    ".section .text._start, \"ax\"",
    ".global _start",
    ".type _start, @function",
    "_start:",
    // RDI = boot info, RSI = core id, RSP = this core's stack top (16-byte aligned).
    // Clear RBP so backtraces end here; `call` leaves RSP as the ABI expects.
    "    xor ebp, ebp",
    "    call {entry}",
    "    ud2",
    ".size _start, . - _start",
    entry = sym native_entry,
);

static BOOT_INFO: AtomicPtr<BootInfo> = AtomicPtr::new(core::ptr::null_mut());

unsafe extern "Rust" {
    fn __ebb_native_main() -> i32;
    fn __ebb_native_secondary(core: u32);
}

/// Exit code when the boot info is not one this runtime understands.
const EXIT_BAD_BOOT_INFO: u32 = 0xeb;

extern "C" fn native_entry(boot_info: *mut BootInfo, core: u64) -> ! {
    // SAFETY: RDI holds the monitor's boot-info address, mapped read-only for the whole
    // run and fully written before any vCPU starts; it is only ever read.
    let info = unsafe { &*boot_info };
    if info.magic != BOOT_MAGIC || info.version != BOOT_VERSION {
        hypercall::exit(EXIT_BAD_BOOT_INFO);
    }
    BOOT_INFO.store(boot_info, Ordering::Release);
    if core == 0 {
        crate::pvh::init(info.host, info.tsc_khz);
        // SAFETY: `entry!` defines this symbol with exactly this signature; an image
        // without `entry!` does not link.
        let code = unsafe { __ebb_native_main() };
        hypercall::exit(code as u32);
    }
    // SAFETY: as above.
    unsafe { __ebb_native_secondary(core as u32) };
    park()
}

/// The boot-info block.
pub fn boot_info() -> &'static BootInfo {
    let addr = arch::percore().boot_info as *const BootInfo;
    // SAFETY: the per-core block names the monitor's boot info, valid and read-only for
    // the whole run.
    unsafe { &*addr }
}

/// The command line the monitor passed (empty if it is not UTF-8).
pub fn cmdline() -> &'static str {
    let info = boot_info();
    let len = info.cmdline_len.min(crate::abi::CMDLINE_MAX) as usize;
    // SAFETY: the monitor wrote `cmdline_len` bytes at `cmdline_addr` (a read-only page
    // reserved for it, CMDLINE_MAX long) before the vCPUs started.
    let bytes = unsafe { core::slice::from_raw_parts(info.cmdline_addr as *const u8, len) };
    core::str::from_utf8(bytes).unwrap_or("")
}

/// This core's id.
pub fn core_id() -> u32 {
    arch::percore().core_id
}

/// Sleeps this core for good (it still answers nothing: a kick only re-parks it).
pub fn park() -> ! {
    loop {
        hypercall::wait(u64::MAX);
    }
}
