//! The x86_64 instructions the runtime needs at CPL 3, each wrapped in a safe function.
//!
//! All of them are unprivileged here: `in`/`out` because every vCPU starts with IOPL 3 and
//! an all-zero TSS I/O bitmap (set by the monitor, or by the PVH stub in `pvh::boot`),
//! `rdtsc` because CR4.TSD is clear, `mov reg, gs:[0]` because the GS base points at this
//! core's per-core block before the first instruction.

use crate::abi::PerCore;
use core::arch::asm;

/// This core's per-core block.
pub fn percore() -> &'static PerCore {
    let addr: u64;
    // SAFETY: the monitor sets GS base to this core's PerCore block, whose first field is
    // its own address; reading it has no side effects.
    unsafe { asm!("mov {}, gs:[0]", out(reg) addr, options(nostack, readonly, preserves_flags)) };
    // SAFETY: the address is the monitor's per-core block: mapped read-write for this
    // core for the whole run, aligned, and initialized before the vCPU started. The
    // runtime never creates a `&mut` to it.
    unsafe { &*(addr as *const PerCore) }
}

/// Writes `value` to I/O port `port` (a hypercall or a kick). The monitor may read and
/// write guest memory before this returns, so it is a compiler memory barrier.
pub fn out32(port: u16, value: u32) {
    // SAFETY: IOPL 3 makes `out` legal at CPL 3; the asm is not marked `nomem`, so the
    // compiler assumes it reads and writes any memory (the monitor does).
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nostack, preserves_flags))
    };
}

/// Writes the byte `value` to I/O port `port` (the serial port and `isa-debug-exit` under a
/// standard hypervisor; see [`crate::abi::HOST_PVH`]).
pub fn out8(port: u16, value: u8) {
    // SAFETY: IOPL 3 (and the all-zero TSS I/O bitmap) make `out` legal at CPL 3; like
    // `out32`, not `nomem`, so it also orders memory accesses around it.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nostack, preserves_flags)) };
}

/// Reads a byte from I/O port `port` (the serial port's status register).
pub fn in8(port: u16) -> u8 {
    let value: u8;
    // SAFETY: IOPL 3 (and the all-zero TSS I/O bitmap) make `in` legal at CPL 3; reading
    // the ports this runtime uses has no effect on memory.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack, preserves_flags))
    };
    value
}

/// Reads the time-stamp counter.
pub fn rdtsc() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdtsc is unprivileged (CR4.TSD is clear) and has no memory effects.
    unsafe {
        asm!("rdtsc", out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The current privilege level (the low two bits of CS): 3 for the whole run.
pub fn current_privilege_level() -> u8 {
    let cs: u16;
    // SAFETY: reading CS has no side effects.
    unsafe { asm!("mov {0:x}, cs", out(reg) cs, options(nomem, nostack, preserves_flags)) };
    (cs & 3) as u8
}

/// The current frame pointer (RBP); images are built with frame pointers.
pub fn frame_pointer() -> u64 {
    let rbp: u64;
    // SAFETY: reading RBP has no side effects.
    unsafe { asm!("mov {}, rbp", out(reg) rbp, options(nomem, nostack, preserves_flags)) };
    rbp
}

/// Reads the `u64` at `addr` if it lies 8-aligned within `[low, high)` — for walking
/// frames on this core's stack, whose bounds come from the per-core block.
pub fn read_stack_word(addr: u64, low: u64, high: u64) -> Option<u64> {
    if !addr.is_multiple_of(8) || addr < low || addr.checked_add(8)? > high {
        return None;
    }
    // SAFETY: the address is aligned and inside this core's stack, which is mapped
    // read-write for the whole run; a stale value is harmless (it is only printed).
    Some(unsafe { core::ptr::read_volatile(addr as *const u64) })
}

/// One `RDRAND` word, if the CPU has the instruction (CPUID.1:ECX bit 30) and it
/// delivers within the ten tries Intel recommends.
pub fn rdrand() -> Option<u64> {
    // CPUID is unprivileged (it exits to the monitor, once per call: only at start-up).
    let has_rdrand = core::arch::x86_64::__cpuid(1).ecx & (1 << 30) != 0;
    if !has_rdrand {
        return None;
    }
    (0..10).find_map(|_| {
        let mut word = 0u64;
        // SAFETY: CPUID said the CPU implements RDRAND, the one requirement of the
        // intrinsic; it writes only `word`.
        let ok = unsafe { core::arch::x86_64::_rdrand64_step(&mut word) };
        (ok == 1).then_some(word)
    })
}
