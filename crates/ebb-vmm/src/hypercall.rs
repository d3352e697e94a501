//! Hypercall decoding and handling: the trust boundary between the guest and the monitor.
//!
//! A hypercall is a 32-bit `out` to [`HYPERCALL_PORT`](ebb_native::abi::HYPERCALL_PORT)
//! whose value is the guest-physical address of an argument block. Everything in the block
//! is guest-controlled: the block itself, and every address and length inside it, is
//! checked against guest memory before use, and anything malformed ends the VM with an
//! [`AbiError`] naming the hypercall and the offending value. Nothing the guest supplies
//! can make the monitor panic, block forever or touch memory outside the guest.

use crate::report::Outcome;
use crate::vm::Shared;
use ebb_native::abi::{
    HC_CLOCK, HC_CONSOLE_FLUSH, HC_EXIT, HC_PANIC, HC_WAIT, HcClock, HcExit, HcPanic, HcWait,
    HypercallHeader, PANIC_FRAMES_MAX, PANIC_MESSAGE_MAX, WAIT_KICKED, WAIT_TIMED_OUT,
};
use std::mem::{offset_of, size_of};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vmm_sys_util::eventfd::EventFd;

/// A guest broke the boot protocol or the hypercall ABI; the VM ends with this error.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AbiError {
    /// The argument block address is not 8-byte aligned.
    #[error("hypercall argument block {addr:#x} is not 8-byte aligned")]
    Misaligned {
        /// The value written to the port.
        addr: u64,
    },
    /// The argument block does not lie inside guest memory.
    #[error("{hypercall}: argument block {addr:#x}+{len:#x} lies outside guest memory")]
    BlockOutside {
        /// Hypercall name.
        hypercall: &'static str,
        /// Block address.
        addr: u64,
        /// Block length.
        len: u64,
    },
    /// The hypercall number is not one the monitor knows.
    #[error("unknown hypercall number {nr} (argument block {addr:#x})")]
    Unknown {
        /// The number.
        nr: u32,
        /// Block address.
        addr: u64,
    },
    /// A buffer named in an argument block lies outside guest memory.
    #[error("{hypercall}: {what} {addr:#x}+{len:#x} lies outside guest memory")]
    RangeOutside {
        /// Hypercall name.
        hypercall: &'static str,
        /// Which buffer.
        what: &'static str,
        /// Buffer address.
        addr: u64,
        /// Buffer length.
        len: u64,
    },
    /// A length in an argument block is over the hypercall's limit.
    #[error("{hypercall}: {what} length {len:#x} is over the limit of {max:#x}")]
    TooLong {
        /// Hypercall name.
        hypercall: &'static str,
        /// Which length.
        what: &'static str,
        /// The length given.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A core's console ring header is inconsistent.
    #[error(
        "console ring of core {core} is corrupt: head {head:#x} is more than a ring ahead of \
         tail {tail:#x} or unreadable"
    )]
    ConsoleCorrupt {
        /// Core.
        core: u32,
        /// Head the guest published.
        head: u64,
        /// Tail the monitor holds.
        tail: u64,
    },
    /// A hypercall was not a 32-bit write.
    #[error("hypercall port written with {0} bytes, not 4")]
    BadWidth(usize),
    /// Port I/O to a port that is not a hypercall or a valid kick.
    #[error("{dir} of unexpected I/O port {port:#x}{}", value.map(|v| format!(" (value {v:#x})")).unwrap_or_default())]
    UnexpectedPort {
        /// "write" or "read".
        dir: &'static str,
        /// Port.
        port: u16,
        /// Value written, if a write.
        value: Option<u64>,
    },
    /// A kick named a core that does not exist (no ioeventfd matched).
    #[error("kick of core {target}, which does not exist")]
    BadKick {
        /// The value written to the kick port.
        target: u64,
    },
    /// A guest-physical access outside guest memory (an MMIO exit).
    #[error("{dir} of guest-physical address {addr:#x}, outside guest memory")]
    Mmio {
        /// "read" or "write".
        dir: &'static str,
        /// Address.
        addr: u64,
    },
}

/// What the vCPU does after a hypercall.
#[derive(Debug)]
pub enum Step {
    /// Resume the guest.
    Continue,
    /// End the VM.
    End(Box<Outcome>),
}

fn name(nr: u32) -> &'static str {
    match nr {
        HC_CONSOLE_FLUSH => "CONSOLE_FLUSH",
        HC_EXIT => "EXIT",
        HC_PANIC => "PANIC",
        HC_CLOCK => "CLOCK",
        HC_WAIT => "WAIT",
        _ => "UNKNOWN",
    }
}

/// What a hypercall needs from its vCPU.
pub struct Caller<'a> {
    /// VM-wide state.
    pub shared: &'a Shared,
    /// The calling core.
    pub core: u32,
    /// The core's kick eventfd (signalled by other cores through ioeventfd).
    pub kick: &'a EventFd,
}

/// Handles the hypercall whose argument block is at `value`.
pub fn handle(caller: &Caller<'_>, value: u32) -> Result<Step, AbiError> {
    let mem = &caller.shared.mem;
    let addr = u64::from(value);
    if !addr.is_multiple_of(8) {
        return Err(AbiError::Misaligned { addr });
    }
    let header_len = size_of::<HypercallHeader>() as u64;
    let nr = mem
        .read_u32(addr + offset_of!(HypercallHeader, nr) as u64)
        .filter(|_| mem.contains(addr, header_len))
        .ok_or(AbiError::BlockOutside {
            hypercall: "hypercall header",
            addr,
            len: header_len,
        })?;
    let hypercall = name(nr);
    let block_len = match nr {
        HC_CONSOLE_FLUSH => header_len,
        HC_EXIT => size_of::<HcExit>() as u64,
        HC_PANIC => size_of::<HcPanic>() as u64,
        HC_CLOCK => size_of::<HcClock>() as u64,
        HC_WAIT => size_of::<HcWait>() as u64,
        _ => return Err(AbiError::Unknown { nr, addr }),
    };
    let outside = AbiError::BlockOutside {
        hypercall,
        addr,
        len: block_len,
    };
    if !mem.contains(addr, block_len) {
        return Err(outside);
    }
    // The block is in range from here on: field reads and writes cannot fail, but are
    // still checked rather than unwrapped.
    let u64_at = |off: usize| mem.read_u64(addr + off as u64).ok_or(outside.clone());
    let step = match nr {
        HC_CONSOLE_FLUSH => {
            caller.shared.console.drain(mem, caller.core)?;
            Step::Continue
        }
        HC_EXIT => {
            let code = mem
                .read_u32(addr + offset_of!(HcExit, code) as u64)
                .ok_or(outside.clone())?;
            Step::End(Box::new(Outcome::Exited { code }))
        }
        HC_PANIC => panic(caller, &u64_at)?,
        HC_CLOCK => {
            let realtime = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let monotonic = caller.shared.started.elapsed();
            mem.write_u64(
                addr + offset_of!(HcClock, realtime_ns) as u64,
                realtime.as_nanos() as u64,
            )
            .ok_or(outside.clone())?;
            mem.write_u64(
                addr + offset_of!(HcClock, monotonic_ns) as u64,
                monotonic.as_nanos() as u64,
            )
            .ok_or(outside.clone())?;
            Step::Continue
        }
        HC_WAIT => {
            let timeout_ns = u64_at(offset_of!(HcWait, timeout_ns))?;
            let timeout = (timeout_ns != u64::MAX).then(|| Duration::from_nanos(timeout_ns));
            let woken_by = match caller.shared.wait(caller.kick, timeout) {
                true => WAIT_KICKED,
                false => WAIT_TIMED_OUT,
            };
            mem.write_u32(addr + offset_of!(HcWait, woken_by) as u64, woken_by)
                .ok_or(outside.clone())?;
            Step::Continue
        }
        _ => unreachable!("numbers were matched above"),
    };
    mem.write_u32(addr + offset_of!(HypercallHeader, result) as u64, 0)
        .ok_or(outside)?;
    Ok(step)
}

fn panic(
    caller: &Caller<'_>,
    u64_at: &dyn Fn(usize) -> Result<u64, AbiError>,
) -> Result<Step, AbiError> {
    let mem = &caller.shared.mem;
    let message_addr = u64_at(offset_of!(HcPanic, message_addr))?;
    let message_len = u64_at(offset_of!(HcPanic, message_len))?;
    let frames_addr = u64_at(offset_of!(HcPanic, frames_addr))?;
    let frames_len = u64_at(offset_of!(HcPanic, frames_len))?;
    if message_len > PANIC_MESSAGE_MAX {
        return Err(AbiError::TooLong {
            hypercall: "PANIC",
            what: "message",
            len: message_len,
            max: PANIC_MESSAGE_MAX,
        });
    }
    if frames_len > PANIC_FRAMES_MAX {
        return Err(AbiError::TooLong {
            hypercall: "PANIC",
            what: "backtrace",
            len: frames_len,
            max: PANIC_FRAMES_MAX,
        });
    }
    let message = mem
        .read_bytes(message_addr, message_len)
        .ok_or(AbiError::RangeOutside {
            hypercall: "PANIC",
            what: "message",
            addr: message_addr,
            len: message_len,
        })?;
    let frames_bytes = if frames_len == 0 {
        Vec::new()
    } else {
        mem.read_bytes(frames_addr, frames_len * 8)
            .ok_or(AbiError::RangeOutside {
                hypercall: "PANIC",
                what: "backtrace",
                addr: frames_addr,
                len: frames_len * 8,
            })?
    };
    let backtrace = frames_bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    Ok(Step::End(Box::new(Outcome::Panicked {
        core: caller.core,
        message: String::from_utf8_lossy(&message).into_owned(),
        backtrace,
    })))
}
