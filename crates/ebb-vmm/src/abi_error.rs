//! The error that ends a VM whose guest broke the boot protocol or the hypercall ABI.
//!
//! Every check of guest input that can fail — a hypercall's argument block and the
//! addresses and lengths inside it ([`hypercall`](crate::hypercall)), a console ring's
//! header ([`console`](crate::console)), a port or MMIO access the vCPU does not expect
//! (the vCPU thread) — fails with an [`AbiError`] naming what was wrong and the
//! offending value; the VM then ends with
//! [`Outcome::AbiViolation`](crate::Outcome::AbiViolation). It sits below all of them, and
//! below [`report`](crate::report), which prints it.

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
    /// A write to the doorbell port reached the monitor: the VM has no shared window, so
    /// no ioeventfd claims the port (with a window, KVM signals the doorbell instead).
    #[error(
        "write of the doorbell port {port:#x} (value {value:#x}), but this VM has no shared \
         window",
        port = ebb_abi::DOORBELL_PORT
    )]
    DoorbellWithoutWindow {
        /// The value written.
        value: u64,
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
