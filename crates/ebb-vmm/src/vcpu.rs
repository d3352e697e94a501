//! One vCPU thread: runs the guest, handles each exit (a hypercall, an access to the
//! virtio-net device's registers, a fault), and stops when the VM ends.
//!
//! Exits are copied out of `kvm_run` into [`Exit`] before anything else touches the vCPU,
//! so handling never holds a borrow of the shared run page.

use crate::abi_error::AbiError;
use crate::hypercall::{self, Caller, Step};
use crate::report::{Outcome, VcpuState};
use crate::shared::Shared;
use crate::virtio::VirtioNetDevice;
use ebb_abi::{DOORBELL_PORT, HYPERCALL_PORT, KICK_PORT};
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::sync::Arc;
use vmm_sys_util::eventfd::EventFd;

/// An exit, owned.
#[derive(Debug)]
enum Exit {
    Hypercall(u32),
    PortWrite(u16, Vec<u8>),
    PortRead(u16),
    Mmio(&'static str, u64),
    InternalError,
    Fault(String),
    Interrupted,
    Failed(String),
}

fn value(data: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    u64::from_le_bytes(b)
}

fn next_exit(vcpu: &mut VcpuFd, shared: &Shared, net: Option<&VirtioNetDevice>) -> Exit {
    let exit = vcpu.run();
    if exit.is_ok() {
        shared
            .exits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match exit {
        Ok(VcpuExit::MmioRead(addr, data)) if VirtioNetDevice::claims(addr) && net.is_some() => {
            if let Some(net) = net {
                net.mmio_read(addr, data);
            }
            Exit::Interrupted
        }
        Ok(VcpuExit::MmioWrite(addr, data)) if VirtioNetDevice::claims(addr) && net.is_some() => {
            if let Some(net) = net {
                net.mmio_write(addr, data);
            }
            Exit::Interrupted
        }
        Ok(VcpuExit::IoOut(HYPERCALL_PORT, data)) if data.len() == 4 => {
            Exit::Hypercall(value(data) as u32)
        }
        Ok(VcpuExit::IoOut(port, data)) => Exit::PortWrite(port, data.to_vec()),
        Ok(VcpuExit::IoIn(port, _)) => Exit::PortRead(port),
        Ok(VcpuExit::MmioRead(addr, _)) => Exit::Mmio("read", addr),
        Ok(VcpuExit::MmioWrite(addr, _)) => Exit::Mmio("write", addr),
        Ok(VcpuExit::Shutdown) => Exit::Fault(
            "triple fault (KVM_EXIT_SHUTDOWN): an exception at CPL 3 with no handler".into(),
        ),
        Ok(VcpuExit::Hlt) => Exit::Fault("hlt (KVM_EXIT_HLT)".into()),
        Ok(VcpuExit::FailEntry(reason, cpu)) => Exit::Fault(format!(
            "KVM_EXIT_FAIL_ENTRY: hardware entry failure reason {reason:#x} on host cpu {cpu}"
        )),
        Ok(VcpuExit::InternalError) => Exit::InternalError,
        Ok(VcpuExit::Intr) => Exit::Interrupted,
        Ok(other) => Exit::Fault(format!("unexpected exit {other:?}")),
        Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => Exit::Interrupted,
        Err(e) => Exit::Failed(format!("KVM_RUN failed: {e}")),
    }
}

/// Reads the vCPU's registers for a report.
fn state(vcpu: &VcpuFd) -> Option<VcpuState> {
    Some(VcpuState {
        regs: vcpu.get_regs().ok()?,
        sregs: vcpu.get_sregs().ok()?,
    })
}

/// Runs core `core` until the VM ends, then records its registers. The virtio-net
/// device's register accesses go to `net`, when the VM has one.
pub fn run(
    shared: Arc<Shared>,
    net: Option<Arc<VirtioNetDevice>>,
    mut vcpu: VcpuFd,
    core: u32,
    kick: EventFd,
) {
    let caller = Caller {
        shared: &shared,
        core,
        kick: &kick,
    };
    let violation = |vcpu: &VcpuFd, error: AbiError| Outcome::AbiViolation {
        core,
        error,
        state: state(vcpu),
    };
    log::debug!("vcpu{core}: first KVM_RUN");
    while !shared.stopping() {
        let outcome = match next_exit(&mut vcpu, &shared, net.as_deref()) {
            Exit::Hypercall(v) => match hypercall::handle(&caller, v) {
                Ok(Step::Continue) => continue,
                Ok(Step::End(outcome)) => *outcome,
                Err(error) => violation(&vcpu, error),
            },
            Exit::Interrupted => continue,
            Exit::PortWrite(HYPERCALL_PORT, data) => {
                violation(&vcpu, AbiError::BadWidth(data.len()))
            }
            Exit::PortWrite(KICK_PORT, data) => violation(
                &vcpu,
                AbiError::BadKick {
                    target: value(&data),
                },
            ),
            Exit::PortWrite(DOORBELL_PORT, data) => violation(
                &vcpu,
                AbiError::DoorbellWithoutWindow {
                    value: value(&data),
                },
            ),
            Exit::PortWrite(port, data) => violation(
                &vcpu,
                AbiError::UnexpectedPort {
                    dir: "write",
                    port,
                    value: Some(value(&data)),
                },
            ),
            Exit::PortRead(port) => violation(
                &vcpu,
                AbiError::UnexpectedPort {
                    dir: "read",
                    port,
                    value: None,
                },
            ),
            Exit::Mmio(dir, addr) => violation(&vcpu, AbiError::Mmio { dir, addr }),
            Exit::InternalError => {
                let (suberror, data) = crate::sys::internal_error(vcpu.get_kvm_run());
                Outcome::Fault {
                    core,
                    reason: format!(
                        "KVM_EXIT_INTERNAL_ERROR suberror {suberror} data {data:x?} (under PVM \
                         an unhandled exception at CPL 3 ends this way)"
                    ),
                    state: state(&vcpu),
                }
            }
            Exit::Fault(reason) => Outcome::Fault {
                core,
                reason,
                state: state(&vcpu),
            },
            Exit::Failed(message) => Outcome::MonitorError { core, message },
        };
        shared.finish(outcome);
    }
    shared.vcpu_stopped(core, state(&vcpu));
}
