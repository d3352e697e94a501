//! Typed hypercalls. Each builds its argument block on the stack and writes the block's
//! address to the hypercall port; the monitor reads and writes the block before the `out`
//! instruction completes.
//!
//! Under a standard hypervisor (PVH boot, [`crate::pvh::active`]) there is no monitor:
//! each call is served by [`crate::pvh`] instead. The check is one load of a static that
//! never changes after boot and a branch that always goes the same way.

use crate::abi::{
    HC_CLOCK, HC_CONSOLE_FLUSH, HC_EXIT, HC_PANIC, HC_WAIT, HYPERCALL_PORT, HcClock,
    DOORBELL_PORT, HcConsoleFlush, HcExit, HcPanic, HcWait, HypercallHeader, KICK_PORT, WAIT_KICKED,
};
use crate::arch::out32;
use crate::pvh;

/// Issues the hypercall whose argument block is `block`. Blocks live on the stack, which
/// the monitor places below 4 GiB, so the address fits the 32-bit port value.
fn call<T>(block: &mut T) {
    let addr = block as *mut T as u64;
    debug_assert!(addr < 1 << 32, "hypercall blocks must lie below 4 GiB");
    out32(HYPERCALL_PORT, addr as u32);
}

fn header(nr: u32) -> HypercallHeader {
    HypercallHeader { nr, result: 0 }
}

/// Ends the VM; the monitor exits with `code & 0xff`.
pub fn exit(code: u32) -> ! {
    if pvh::active() {
        pvh::exit(code);
    }
    let mut block = HcExit {
        header: header(HC_EXIT),
        code,
        reserved: 0,
    };
    call(&mut block);
    // The monitor never resumes a vCPU after EXIT; if one did, stop here.
    loop {
        core::hint::spin_loop();
    }
}

/// Asks the monitor to drain this core's console ring now.
pub fn console_flush() {
    if pvh::active() {
        return; // the serial console has no buffer to flush
    }
    let mut block = HcConsoleFlush {
        header: header(HC_CONSOLE_FLUSH),
    };
    call(&mut block);
}

/// `(realtime, monotonic)` in nanoseconds: since the Unix epoch, and since the VM started.
///
/// Under PVH: realtime is 0 (unknown), monotonic counts from the PVH stub's start.
pub fn clock() -> (u64, u64) {
    if pvh::active() {
        return (0, pvh::monotonic_ns());
    }
    let mut block = HcClock {
        header: header(HC_CLOCK),
        ..Default::default()
    };
    call(&mut block);
    (block.realtime_ns, block.monotonic_ns)
}

/// Sleeps this vCPU until another core kicks it (true) or `timeout_ns` passes (false).
/// `u64::MAX` waits for a kick only.
///
/// Under PVH: spins on the TSC until the timeout or until a polled device has work (no
/// monitor to sleep in).
pub fn wait(timeout_ns: u64) -> bool {
    if pvh::active() {
        return pvh::wait(timeout_ns);
    }
    let mut block = HcWait {
        header: header(HC_WAIT),
        timeout_ns,
        ..Default::default()
    };
    call(&mut block);
    block.woken_by == WAIT_KICKED
}

/// Wakes core `core` from its wait (or makes its next wait return at once). Handled in
/// the host kernel: this core does not leave the guest for long.
pub fn kick(core: u32) {
    if pvh::active() {
        return; // one vCPU: no other core to wake
    }
    out32(KICK_PORT, core);
}

/// Rings the host's doorbell ([`DOORBELL_PORT`]; any value does). Only for a VM with a
/// shared window — without one the write ends the VM — so call it through
/// [`crate::window::ring_host_doorbell`], which checks. Handled in the host kernel, like a
/// kick.
pub fn doorbell() {
    if pvh::active() {
        return; // no embedding program to ring
    }
    out32(DOORBELL_PORT, 1);
}

/// Reports a panic and ends the VM.
pub fn panic(message: &[u8], frames: &[u64]) -> ! {
    if pvh::active() {
        pvh::panic(message, frames);
    }
    let mut block = HcPanic {
        header: header(HC_PANIC),
        message_addr: message.as_ptr() as u64,
        message_len: message.len() as u64,
        frames_addr: frames.as_ptr() as u64,
        frames_len: frames.len() as u64,
    };
    call(&mut block);
    loop {
        core::hint::spin_loop();
    }
}

/// Issues a raw hypercall with a caller-built block, for tests of the monitor's checks.
pub fn raw<T>(block: &mut T) {
    call(block);
}
