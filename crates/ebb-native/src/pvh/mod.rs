//! Running under a standard hypervisor: the same image booted by QEMU (`-kernel IMAGE`)
//! through its PVH entry instead of by `ebb-vmm`.
//!
//! [`boot`] is the ring-0 part: the PVH ELF note, the 32-bit entry stub and the setup that
//! builds what the monitor would have built (page tables, GDT, TSS, boot info, per-core
//! block) and drops to CPL 3 into the same `_start` the monitor enters. It marks the boot
//! info [`HOST_PVH`]. This module is the ring-3 part: with no monitor to serve hypercalls,
//! the typed hypercalls in [`crate::hypercall`] and the console come here instead:
//!
//! | monitor service | under PVH |
//! |---|---|
//! | console ring | bytes written to the 16550 UART at [`PVH_SERIAL_PORT`] (COM1) |
//! | EXIT | a 32-bit write of the code to QEMU's `isa-debug-exit` at [`PVH_DEBUG_EXIT_PORT`]; QEMU exits with `(code << 1) \| 1` |
//! | PANIC | message and raw return addresses to the serial port, then EXIT 101 |
//! | CLOCK | monotonic = TSC since the stub started, scaled by the boot info's `tsc_khz`; realtime = 0 (unknown) |
//! | WAIT | spin on the TSC until the deadline or until a polled device (`crate::poll`) has work |
//! | CONSOLE_FLUSH, kick | nothing to do |
//!
//! # Invariants
//!
//! * [`active`] is false until `_start` has validated a boot info whose `host` is
//!   [`HOST_PVH`], and never changes afterwards. Under the monitor it stays false, so the
//!   monitor path pays one load of a read-mostly static and a never-taken branch per
//!   hypercall or console write — no hypercall, no extra exit.
//! * Under PVH there is exactly one vCPU (core 0): nothing here is shared between cores.

pub(crate) mod boot;

use crate::abi::{HOST_PVH, PVH_DEBUG_EXIT_PORT, PVH_SERIAL_PORT};
use crate::arch;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set once by `_start` when the boot info says [`HOST_PVH`].
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The TSC when the PVH stub started (written at ring 0 before `_start`): the zero of the
/// monotonic clock.
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);
/// The TSC's frequency from the boot info, kept here so the clock needs nothing of the
/// entry module (which calls [`init`]).
static TSC_KHZ: AtomicU64 = AtomicU64::new(1);

/// The 16550's line status register and its "transmit holding register empty" bit.
const SERIAL_LINE_STATUS: u16 = PVH_SERIAL_PORT + 5;
const SERIAL_THR_EMPTY: u8 = 1 << 5;
/// Polls of the line status per byte before writing anyway (a missing or stuck UART must
/// not hang the guest).
const SERIAL_SPIN_LIMIT: u32 = 100_000;

/// Exit code of a panic, as under the monitor.
const EXIT_PANIC: u32 = 101;

/// Whether this image runs under a standard hypervisor (PVH entry) rather than `ebb-vmm`.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Called by `_start` on core 0 with the validated boot info's `host` and `tsc_khz`
/// fields, before any other core runs.
pub(crate) fn init(host: u32, tsc_khz: u64) {
    TSC_KHZ.store(tsc_khz.max(1), Ordering::Relaxed);
    ACTIVE.store(host == HOST_PVH, Ordering::Relaxed);
}

/// Writes `bytes` to the serial port, waiting for the transmitter before each byte.
pub fn serial_write(bytes: &[u8]) {
    for &b in bytes {
        let mut spins = 0;
        while arch::in8(SERIAL_LINE_STATUS) & SERIAL_THR_EMPTY == 0 && spins < SERIAL_SPIN_LIMIT {
            core::hint::spin_loop();
            spins += 1;
        }
        arch::out8(PVH_SERIAL_PORT, b);
    }
}

/// Ends the VM through `isa-debug-exit`: QEMU exits with status `(code << 1) | 1`.
pub fn exit(code: u32) -> ! {
    arch::out32(PVH_DEBUG_EXIT_PORT, code);
    // Without the device the write goes nowhere. `ud2` with no IDT is a triple fault,
    // which ends QEMU under `-no-reboot` (status 0: never a valid debug-exit status).
    // SAFETY: `ud2` only raises #UD; it touches no memory.
    unsafe { core::arch::asm!("ud2", options(noreturn, nomem, nostack)) }
}

/// Nanoseconds since the PVH stub started, from the TSC and the boot info's frequency.
pub fn monotonic_ns() -> u64 {
    let khz = TSC_KHZ.load(Ordering::Relaxed);
    let ticks = arch::rdtsc().saturating_sub(BOOT_TSC.load(Ordering::Relaxed));
    (u128::from(ticks) * 1_000_000 / u128::from(khz)) as u64
}

/// WAIT without a monitor: spins until `timeout_ns` has passed (`u64::MAX`: forever) or
/// a device on this core's poll list has work (true, as if the device had kicked us).
///
/// Under the monitor a device wakes a sleeping vCPU through its kick eventfd; here no one
/// can (the guest takes no interrupts), so the spin itself must look at the devices, or
/// a frame arriving while the event loop waits for a far deadline (an idle listener
/// waits for `u64::MAX`) would never be seen.
pub fn wait(timeout_ns: u64) -> bool {
    let deadline = monotonic_ns().saturating_add(timeout_ns);
    while monotonic_ns() < deadline {
        if crate::poll::any_work() {
            return true;
        }
        core::hint::spin_loop();
    }
    false
}

/// PANIC without a monitor: prints the message and the raw return addresses (symbolize
/// them against the image, e.g. with `addr2line -e IMAGE`), then exits with 101.
pub fn panic(message: &[u8], frames: &[u64]) -> ! {
    serial_write(b"ebb-native: guest panicked on core 0: ");
    serial_write(message);
    serial_write(b"\nbacktrace (return addresses):\n");
    for &frame in frames {
        let mut line = *b"  0x0000000000000000\n";
        for (i, digit) in line[4..20].iter_mut().enumerate() {
            let nibble = (frame >> (60 - 4 * i)) & 0xf;
            *digit = b"0123456789abcdef"[nibble as usize];
        }
        serial_write(&line);
    }
    exit(EXIT_PANIC)
}
