//! How a VM ended, and how the monitor reports it.
//!
//! [`Outcome::exit_code`] is the monitor's process exit code; [`Outcome::report`] is what it
//! prints on stderr, with guest addresses symbolized from the image.

use crate::abi_error::AbiError;
use crate::image::Symbolizer;
use kvm_bindings::{kvm_regs, kvm_sregs};
use std::fmt::Write;
use std::time::Duration;

/// Exit code when the guest panicked.
pub const EXIT_PANIC: i32 = 101;
/// Exit code when the guest faulted (triple fault, failed entry, unexpected exit).
pub const EXIT_FAULT: i32 = 102;
/// Exit code when the guest broke the hypercall ABI.
pub const EXIT_ABI_VIOLATION: i32 = 103;
/// Exit code when the monitor itself failed while the VM ran.
pub const EXIT_MONITOR_ERROR: i32 = 1;
/// Exit code when `--timeout` expired (as GNU `timeout`).
pub const EXIT_TIMEOUT: i32 = 124;

/// A vCPU's registers when the VM ended.
#[derive(Clone, Debug)]
pub struct VcpuState {
    /// General registers.
    pub regs: kvm_regs,
    /// Segment and control registers.
    pub sregs: kvm_sregs,
}

impl VcpuState {
    fn render(&self, sym: &Symbolizer, out: &mut String) {
        let r = &self.regs;
        let s = &self.sregs;
        let _ = writeln!(out, "    rip    {}", sym.describe(r.rip));
        let _ = writeln!(
            out,
            "    rsp    {:#018x}  rbp {:#018x}  rflags {:#x}",
            r.rsp, r.rbp, r.rflags
        );
        let _ = writeln!(
            out,
            "    cr2    {:#018x}  cr3 {:#x}  cs {:#x} (CPL {})  gs.base {:#x}",
            s.cr2,
            s.cr3,
            s.cs.selector,
            s.cs.selector & 3,
            s.gs.base
        );
        let _ = writeln!(
            out,
            "    rax {:#x} rbx {:#x} rcx {:#x} rdx {:#x} rsi {:#x} rdi {:#x}",
            r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi
        );
    }
}

/// How a VM ended.
#[derive(Debug)]
pub enum Outcome {
    /// The guest made the exit hypercall.
    Exited {
        /// The guest's code.
        code: u32,
    },
    /// The guest made the panic hypercall.
    Panicked {
        /// Core that panicked.
        core: u32,
        /// The panic message.
        message: String,
        /// Return addresses, innermost first.
        backtrace: Vec<u64>,
    },
    /// The vCPU stopped in a way a healthy guest never does.
    Fault {
        /// Core.
        core: u32,
        /// What KVM reported.
        reason: String,
        /// Registers, if they could be read.
        state: Option<VcpuState>,
    },
    /// The guest broke the ABI.
    AbiViolation {
        /// Core.
        core: u32,
        /// The violation.
        error: AbiError,
        /// Registers, if they could be read.
        state: Option<VcpuState>,
    },
    /// `--timeout` expired.
    Timeout {
        /// The timeout.
        after: Duration,
        /// Each core's registers, if it stopped in time to read them.
        states: Vec<Option<VcpuState>>,
    },
    /// The monitor was asked to stop (SIGINT or SIGTERM: Ctrl-C, `kill`), or the VM's
    /// owner stopped it ([`VmStopper`](crate::vm::VmStopper)).
    Stopped {
        /// The signal's number; 0 when the owner stopped it.
        signal: i32,
    },
    /// The monitor failed (an ioctl error while running).
    MonitorError {
        /// Core.
        core: u32,
        /// The error.
        message: String,
    },
}

impl Outcome {
    /// The monitor's exit code for this outcome.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Exited { code } => (code & 0xff) as i32,
            Outcome::Panicked { .. } => EXIT_PANIC,
            Outcome::Fault { .. } => EXIT_FAULT,
            Outcome::AbiViolation { .. } => EXIT_ABI_VIOLATION,
            Outcome::Timeout { .. } => EXIT_TIMEOUT,
            // The shell's convention for a process ended by a signal.
            Outcome::Stopped { signal } => 128 + signal,
            Outcome::MonitorError { .. } => EXIT_MONITOR_ERROR,
        }
    }

    /// The report printed on stderr (empty for a clean exit with code 0..=255).
    pub fn report(&self, sym: &Symbolizer) -> String {
        let mut out = String::new();
        match self {
            Outcome::Exited { code } if *code > 0xff => {
                let _ = writeln!(
                    out,
                    "ebb-vmm: guest exit code {code} truncated to {}",
                    code & 0xff
                );
            }
            Outcome::Exited { .. } => {}
            Outcome::Panicked {
                core,
                message,
                backtrace,
            } => {
                let _ = writeln!(out, "ebb-vmm: guest panicked on core {core}: {message}");
                if !backtrace.is_empty() {
                    let _ = writeln!(out, "  backtrace:");
                    for (i, addr) in backtrace.iter().enumerate() {
                        let _ = writeln!(out, "  {i:>4}: {}", sym.describe_return(*addr));
                    }
                }
            }
            Outcome::Fault {
                core,
                reason,
                state,
            } => {
                let _ = writeln!(out, "ebb-vmm: guest fault on core {core}: {reason}");
                match state {
                    Some(s) => s.render(sym, &mut out),
                    None => out.push_str("    (registers unavailable)\n"),
                }
            }
            Outcome::AbiViolation { core, error, state } => {
                let _ = writeln!(
                    out,
                    "ebb-vmm: guest on core {core} broke the hypercall ABI: {error}"
                );
                if let Some(s) = state {
                    s.render(sym, &mut out);
                }
            }
            Outcome::Stopped { signal } => {
                let name = match *signal {
                    libc::SIGINT => "SIGINT",
                    libc::SIGTERM => "SIGTERM",
                    0 => "its owner",
                    _ => "a signal",
                };
                let _ = writeln!(out, "ebb-vmm: stopped by {name}");
            }
            Outcome::Timeout { after, states } => {
                let _ = writeln!(
                    out,
                    "ebb-vmm: guest timed out after {:.3} s; vCPU registers:",
                    after.as_secs_f64()
                );
                for (core, s) in states.iter().enumerate() {
                    let _ = writeln!(out, "  core {core}:");
                    match s {
                        Some(s) => s.render(sym, &mut out),
                        None => out.push_str("    (did not stop in time)\n"),
                    }
                }
            }
            Outcome::MonitorError { core, message } => {
                let _ = writeln!(out, "ebb-vmm: monitor error on core {core}: {message}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym() -> Symbolizer {
        Symbolizer::from_symbols(vec![(0x20_0000, 0x100, "guest::main".into())])
    }

    fn state(rip: u64) -> VcpuState {
        let regs = kvm_regs {
            rip,
            ..Default::default()
        };
        let mut sregs = kvm_sregs::default();
        sregs.cs.selector = 0x2b;
        sregs.cr2 = 0xdead_0000;
        VcpuState { regs, sregs }
    }

    #[test]
    fn exit_codes_follow_the_outcome() {
        let abi = AbiError::BadKick { target: 9 };
        let cases = [
            (Outcome::Exited { code: 0 }, 0),
            (Outcome::Exited { code: 0x1_0007 }, 7),
            (
                Outcome::Panicked {
                    core: 0,
                    message: String::new(),
                    backtrace: vec![],
                },
                EXIT_PANIC,
            ),
            (
                Outcome::Fault {
                    core: 0,
                    reason: String::new(),
                    state: None,
                },
                EXIT_FAULT,
            ),
            (
                Outcome::AbiViolation {
                    core: 0,
                    error: abi,
                    state: None,
                },
                EXIT_ABI_VIOLATION,
            ),
            (
                Outcome::Timeout {
                    after: Duration::from_secs(1),
                    states: vec![],
                },
                EXIT_TIMEOUT,
            ),
            (
                Outcome::MonitorError {
                    core: 0,
                    message: String::new(),
                },
                EXIT_MONITOR_ERROR,
            ),
            (
                Outcome::Stopped {
                    signal: libc::SIGINT,
                },
                130,
            ),
            (
                Outcome::Stopped {
                    signal: libc::SIGTERM,
                },
                143,
            ),
        ];
        for (outcome, code) in cases {
            assert_eq!(outcome.exit_code(), code, "{outcome:?}");
        }
    }

    #[test]
    fn reports_say_what_happened_and_where() {
        let sym = sym();
        assert_eq!(Outcome::Exited { code: 0 }.report(&sym), "");
        assert_eq!(
            Outcome::Exited { code: 0x1_0007 }.report(&sym),
            "ebb-vmm: guest exit code 65543 truncated to 7\n"
        );
        let panicked = Outcome::Panicked {
            core: 1,
            message: "oops \u{fffd}".into(),
            backtrace: vec![0x20_0010, 0x10],
        }
        .report(&sym);
        assert_eq!(
            panicked,
            "ebb-vmm: guest panicked on core 1: oops \u{fffd}\n  backtrace:\n     0: \
             0x200010 <guest::main+0x10>\n     1: 0x10 <unknown>\n"
        );
        let fault = Outcome::Fault {
            core: 0,
            reason: "triple fault".into(),
            state: Some(state(0x20_0004)),
        }
        .report(&sym);
        assert!(
            fault.starts_with("ebb-vmm: guest fault on core 0: triple fault\n"),
            "{fault}"
        );
        assert!(
            fault.contains("rip    0x200004 <guest::main+0x4>"),
            "{fault}"
        );
        assert!(fault.contains("cr2    0x00000000dead0000"), "{fault}");
        assert!(fault.contains("cs 0x2b (CPL 3)"), "{fault}");
        let no_regs = Outcome::Fault {
            core: 0,
            reason: "x".into(),
            state: None,
        }
        .report(&sym);
        assert!(no_regs.ends_with("(registers unavailable)\n"), "{no_regs}");
        let abi = Outcome::AbiViolation {
            core: 2,
            error: AbiError::Misaligned { addr: 0x13 },
            state: None,
        }
        .report(&sym);
        assert_eq!(
            abi,
            "ebb-vmm: guest on core 2 broke the hypercall ABI: hypercall argument block 0x13 \
             is not 8-byte aligned\n"
        );
        let timeout = Outcome::Timeout {
            after: Duration::from_millis(1500),
            states: vec![Some(state(0x30_0000)), None],
        }
        .report(&sym);
        assert!(
            timeout.starts_with("ebb-vmm: guest timed out after 1.500 s"),
            "{timeout}"
        );
        assert!(
            timeout.contains("  core 0:\n    rip    0x300000 <unknown>"),
            "{timeout}"
        );
        assert!(
            timeout.ends_with("  core 1:\n    (did not stop in time)\n"),
            "{timeout}"
        );
    }
}
