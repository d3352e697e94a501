//! Building a VM from an image and running it to its [`Outcome`](crate::Outcome).
//!
//! Threads: the caller's thread spawns one parked thread per vCPU, builds the VM, hands
//! each thread its vCPU, then waits for the outcome while draining the console every
//! [`DRAIN_INTERVAL`] and enforcing the timeout; each vCPU thread runs
//! [`crate::vcpu::run`]. The first outcome reported wins; the others are dropped. Ending
//! the VM sets a stop flag and signals every vCPU thread (SIGRTMIN, a no-op handler) until
//! each has left `KVM_RUN` or its wait, so the monitor never hangs on a busy guest.
//!
//! Boot time (see `docs/06-native-monitor.md`, "Boot time"): under nested PVM, memory-map
//! changes and page faults of a process that owns a KVM VM are expensive and destroying a
//! VM takes ≈ 10 ms, so guest memory is written and threads are started before
//! `KVM_CREATE_VM`, and [`Remains::exit_process`] lets the binary exit without waiting for
//! the teardown.
//!
//! Files: [`build`] makes the VM ([`Vm::new`]), [`threads`] starts, stops and joins its
//! threads ([`Vm::run`]), [`boot_info`] writes the boot info and per-core blocks, and
//! [`network`] opens the backends of its network device.
//!
//! What the threads share — guest memory, the console, the stop flag and the outcome — is
//! a [`Shared`], defined in [`shared`](crate::shared) below the vCPU, hypercall and
//! device code that use it (this module builds it); each vCPU thread gets the virtio-net
//! device beside it.

mod boot_info;
mod build;
mod network;
mod threads;

pub use build::FOLLOW_TRAFFIC_ENV;
pub use network::{ExternalLink, HostLinkConfig, HostLinkFactory, VmNetwork, net_summary};
use threads::VcpuThread;
pub use threads::{
    DRAIN_INTERVAL, Remains, STOP_GRACE, VCPU_NICE_ENV, VCPU_NICE_ON_SHARED_CPUS, VmStopper,
};

use crate::image::ImageError;
use crate::layout::LayoutError;
use crate::paging::PagingError;
use crate::shared::Shared;
use crate::virtio::{IoThread, VirtioNetDevice};
use crate::window::SharedWindow;
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::Arc;
use std::time::Duration;
use vmm_sys_util::eventfd::EventFd;

/// What to boot and how.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// Bytes of guest memory (a multiple of 2 MiB).
    pub mem_size: u64,
    /// Number of vCPUs.
    pub cpus: u32,
    /// Command line handed to the guest.
    pub cmdline: String,
    /// End the guest after this long.
    pub timeout: Option<Duration>,
    /// Pin vCPU `i` to host CPU `i` (modulo the host's CPU count).
    pub pin: bool,
    /// Without `pin`: keep the vCPU threads off this host CPU where the process may use
    /// another (an embedder whose pinned event loop on that CPU serves the guest through
    /// shared memory: a vCPU beside it would wait for it to stop polling).
    pub vcpu_avoid_cpu: Option<usize>,
    /// A virtio-net device, if any.
    pub net: Option<VmNetwork>,
    /// An open `/dev/kvm` to use instead of opening it (`--kvm-fd`): a parent that may
    /// open it can run the monitor as a user that may not. The VM takes the descriptor
    /// over (it is closed with the VM), so one config must not build two VMs.
    pub kvm_fd: Option<std::os::fd::RawFd>,
    /// Ask for the guest's free memory on transparent huge pages (`--huge-pages`, default
    /// on; see [`Vm::new`]).
    pub huge_pages: bool,
    /// Bytes of a window at the top of guest memory shared with the program that embeds
    /// the monitor ([`Vm::shared_window`]): a multiple of 4 KiB, at most half of
    /// `mem_size`; 0 (the default) for none.
    pub shared_window: u64,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            mem_size: 128 << 20,
            cpus: 1,
            cmdline: String::new(),
            timeout: None,
            pin: false,
            vcpu_avoid_cpu: None,
            net: None,
            kvm_fd: None,
            huge_pages: true,
            shared_window: 0,
        }
    }
}

/// Why a VM could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// `/dev/kvm` could not be opened.
    #[error("cannot open /dev/kvm: {0}")]
    OpenKvm(kvm_ioctls::Error),
    /// KVM refused to create a VM.
    #[error("KVM_CREATE_VM failed: {0}")]
    CreateVm(kvm_ioctls::Error),
    /// The image is not loadable.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The image and stacks do not fit the memory size.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The page tables do not fit their area.
    #[error(transparent)]
    Paging(#[from] PagingError),
    /// Guest memory could not be allocated.
    #[error("cannot allocate {size:#x} bytes of guest memory: {detail}")]
    Memory {
        /// Bytes requested.
        size: u64,
        /// The error.
        detail: String,
    },
    /// A KVM ioctl failed while setting up.
    #[error("{what} failed: {source}")]
    Kvm {
        /// The ioctl.
        what: &'static str,
        /// The error.
        source: kvm_ioctls::Error,
    },
    /// A boot structure did not fit guest memory (a layout bug).
    #[error("cannot write {0} into guest memory")]
    GuestWrite(&'static str),
    /// The network backend could not start.
    #[error(transparent)]
    Net(#[from] crate::virtio::HostLinkError),
    /// An OS resource could not be created.
    #[error("{what}: {source}")]
    Os {
        /// What was being created.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

fn kvm_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Kvm { what, source }
}

/// Checks that this process can create a KVM VM; the error says why not.
pub fn kvm_usable() -> Result<(), VmError> {
    let kvm = Kvm::new().map_err(VmError::OpenKvm)?;
    kvm.create_vm().map_err(VmError::CreateVm)?;
    Ok(())
}

/// A VM ready to run.
pub struct Vm {
    _kvm: Kvm,
    _vm: VmFd,
    shared: Arc<Shared>,
    vcpus: Vec<(VcpuFd, EventFd)>,
    vcpu_threads: Vec<VcpuThread>,
    config: VmConfig,
    /// The virtio-net device, when the VM has one: its MMIO exits go there, and its
    /// counters make [`net_summary`].
    net: Option<Arc<VirtioNetDevice>>,
    net_io: Option<IoThread>,
    /// Whether the vCPUs share their host CPUs with the device thread (decided once, in
    /// [`Vm::new`]); they then run below it ([`VCPU_NICE_ON_SHARED_CPUS`]).
    cpus_shared: bool,
    /// The shared window and its doorbells, when [`VmConfig::shared_window`] asked for one.
    window: Option<SharedWindow>,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm").field("config", &self.config).finish()
    }
}
