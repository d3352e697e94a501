//! # ebb-vmm — Ebbflow's KVM monitor
//!
//! Boots a native Ebbflow image — a static x86_64 ELF linked with `ebb-native` — in its own
//! KVM VM, with the guest running **entirely at CPL 3** and the monitor doing everything
//! privileged (see `docs/00-overview.md` and `docs/06-native-monitor.md`: under the
//! nested PVM KVM of our machines, CPL-0 guest code is emulated about 1,000× slower). The
//! boot protocol and hypercall ABI are in [`ebb_abi`] and
//! `docs/06-native-monitor.md`.
//!
//! Pipeline: [`image`] parses and validates the ELF → [`layout`] places image, stacks and
//! boot structures → [`paging`] and [`cpu`] produce page tables, GDT and registers (the
//! boot structures' contents come from [`ebb_boot`], shared with the PVH stub) →
//! [`vm::Vm::new`] writes them into guest memory and creates the vCPUs → [`vm::Vm::run`]
//! runs one thread per vCPU ([`vcpu`]), serving [`hypercall`]s and draining the
//! [`console`], until an [`Outcome`] ends it.
//!
//! ## Layers
//!
//! A file names only files of its own layer or those below, and no two files name each
//! other, however indirectly (`tests/architecture` checks the circles):
//!
//! 1. Guest memory and what goes into it: [`guest`], [`layout`], [`paging`], [`cpu`],
//!    [`image`], `sys`; the error a hostile guest ends its VM with, [`abi_error`];
//!    [`option_values`]; and [`window`], the part of guest memory an embedding program
//!    shares, with its doorbells.
//! 2. What a running VM's threads share: [`report`] (how a VM ends), [`console`], and
//!    [`shared`] (guest memory, console, stop flag and outcome, in one
//!    [`Shared`](shared::Shared)).
//! 3. The device, the hypercalls and the vCPUs: [`virtio`] (queues, host links and the
//!    virtio-net device with its I/O thread), [`hypercall`], then `vcpu`, which serves
//!    both.
//! 4. On top, [`vm`], which builds a VM and wires its threads, and [`net_options`] (the
//!    command line's network options, made into a [`vm::VmNetwork`]).
//!
//! ## Invariants
//!
//! * **Trust boundary.** Everything in guest memory is hostile input. The monitor reads
//!   and writes guest memory only through [`guest::GuestMem`], which checks every range
//!   (with overflow checks) against the guest's size; a malformed hypercall, a bad pointer
//!   or length, an unexpected port or MMIO access ends *that VM* with an
//!   [`abi_error::AbiError`] naming the hypercall and value. No guest input panics the
//!   monitor.
//! * **The monitor never hangs.** Every vCPU thread leaves `KVM_RUN` and its wait when the
//!   VM ends (stop flag plus a repeated signal); `--timeout` bounds a runaway guest; the
//!   main thread gives stuck vCPU threads a bounded grace period and reports them.
//! * **The guest never runs at CPL 0.** Every vCPU starts at CPL 3 with IOPL 3 and there
//!   is no IDT: any exception becomes a triple fault (or, under PVM, an internal error),
//!   reported with registers and a symbolized RIP.
//! * `unsafe` lives only in [`sys`] (denied everywhere else), each block with a
//!   `// SAFETY:` comment — and one `unsafe impl` in [`window`]: the shared window is an
//!   `ebb_shm::Mapping`, whose contract (the memory stays mapped) the window keeps.

#![deny(unsafe_code)]
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod abi_error;
pub mod console;
pub mod cpu;
pub mod guest;
pub mod hypercall;
pub mod image;
pub mod net_options;
pub mod option_values;
pub mod paging;
pub mod report;
pub mod shared;
#[allow(unsafe_code)] // the one module with `unsafe`: see its docs
mod sys;
#[cfg(test)]
mod testing;
mod vcpu;
pub mod virtio;
pub mod vm;
pub mod window;

pub use ebb_boot::layout;
pub use report::Outcome;
/// Makes a helper process die with the program that started it (used for passt, and by
/// `ebb run` for an app it runs hosted).
pub use sys::die_with_the_monitor;
pub use vm::{
    FOLLOW_TRAFFIC_ENV, Remains, VCPU_NICE_ENV, VCPU_NICE_ON_SHARED_CPUS, Vm, VmConfig, VmError,
    VmStopper, kvm_usable,
};
pub use window::SharedWindow;
