//! Nodes booted by the front end (hosted only): the [`NodeAllocator`] trait and two local
//! backends.
//!
//! A front end asks for a node with a [`NodeSpec`] — an image, vCPUs, memory, a network
//! and the image's command line — and gets a [`NodeHandle`]: where the node's forwarded
//! ports are on the host, its console, its **shared window** when the spec asked for one
//! (local backend only: [`NodeHandle::shared_window`]), an **exit notification** ([`NodeExit`]: a
//! blocking wait with a bound, or a future) that says how the node ended — exit code,
//! guest panic, fault — and [`NodeHandle::free`], which stops the node and releases
//! everything it held within a stated bound.
//!
//! * [`LocalNodeAllocator`] boots each node **in this process**: ebb-vmm as a library on
//!   a thread the allocator owns (the VM's vCPU and device threads are that run's, as
//!   `Vm::run` makes them), its network rootless through ebb-usernet (ports forwarded
//!   both ways, no passt needed) or a TAP device. The one kept: a later shared-memory
//!   Messenger transport needs the node's guest memory in the front end's process.
//! * [`ProcessNodeAllocator`] boots each node as a **child process** (`ebb run IMAGE`),
//!   for comparison (see `docs/benchmarks.md`).
//!
//! A cluster backend (Kubernetes pods with `/dev/kvm`, Nomad) would implement the same
//! trait: `allocate` creates the pod and returns when its forwarded addresses are known,
//! the exit notification follows the pod's status, `free` deletes it.
//!
//! ## One process, many VMs
//!
//! What the monitor does process-wide, and why it is safe beside a hosted runtime:
//!
//! * **Signals.** Every VM's run installs a no-op SIGRTMIN handler (a vCPU's kick out of
//!   `KVM_RUN`); the hosted runtime uses no signals. The local backend runs VMs with
//!   `Vm::run_embedded`, which installs *no* SIGINT/SIGTERM/SIGUSR1 handler: the front
//!   end's Ctrl-C stays the front end's (the standalone monitor's handlers would swallow
//!   it and stop one VM of many).
//! * **Exit.** A node's end is an outcome, never the process's: the local backend never
//!   calls `Remains::exit_process` (the standalone monitor's way to skip the ≈ 10 ms
//!   teardown by exiting); the VM is torn down on the node's thread.
//! * **Pinning.** Threads inherit their creator's CPU affinity, and the hosted runtime
//!   pins each event loop to one CPU: a node allocated from an event loop would put all
//!   its vCPUs on that loop's CPU. The node's thread first widens its affinity to every
//!   CPU the process's cpuset allows, so the VM's threads (created from it) start
//!   unpinned.
//!
//! ## Invariants
//!
//! * Every node ends with exactly one [`NodeOutcome`], published to every [`NodeExit`]
//!   and future waiting on it; nothing waits without a bound.
//! * [`NodeHandle::free`] (and dropping a handle) stops the node and returns once its
//!   threads are joined and its ports closed, within [`FREE_BOUND`]; a node that does not
//!   stop in time is reported as an error, not waited for forever.
//! * A node's console is kept up to [`CONSOLE_KEEP`] bytes (the newest).

mod console;
mod exit;
mod local;
mod process;

use std::boxed::Box;
use std::future::Future;
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::string::String;
use std::sync::Arc;
use std::time::Duration;
use std::vec::Vec;

pub use console::{CONSOLE_KEEP, ConsoleLog};
pub use ebb_usernet::GuestForward;
pub use ebb_vmm::SharedWindow;
pub use exit::{NodeExit, NodeExitFuture, NodeOutcome};
pub use local::LocalNodeAllocator;
pub use process::ProcessNodeAllocator;

/// How long [`NodeHandle::free`] may take at most: the monitor's grace for vCPU threads
/// to leave `KVM_RUN` (1 s), the device thread's longest sleep (20 ms), the VM's
/// teardown (≈ 10 ms under nested PVM), with room. A child process gets the same, then
/// SIGKILL.
pub const FREE_BOUND: Duration = Duration::from_secs(2);

/// A node's image.
#[derive(Clone, Debug)]
pub enum NodeImage {
    /// An image file (mapped, not copied, by the local backend).
    Path(PathBuf),
    /// An image in memory.
    Bytes(Arc<[u8]>),
}

/// A node's network.
#[derive(Clone, Debug, Default)]
pub enum NodeNetwork {
    /// No network device.
    #[default]
    None,
    /// Rootless user-mode networking: each of `forwards` (a guest port) is reachable at a
    /// host address on 127.0.0.1 the kernel picks ([`NodeHandle::forwarded`]), and each
    /// of `guest_forwards` lets the guest reach a host address through the endpoint
    /// (10.0.2.3). With `outbound`, passt serves the guest's other traffic (when
    /// installed); without, there is nothing but the forwards.
    User {
        /// Guest ports to forward from the host.
        forwards: Vec<u16>,
        /// Endpoint ports the guest connects to, each spliced to a host address.
        guest_forwards: Vec<GuestForward>,
        /// passt behind the forwards for everything else.
        outbound: bool,
    },
    /// An existing TAP device (on a bridge, say), one queue per vCPU; needs root. The
    /// image configures its own address (its command line).
    Tap(String),
}

/// What to boot.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// The image.
    pub image: NodeImage,
    /// vCPUs.
    pub cpus: u32,
    /// Guest memory in bytes (a multiple of 2 MiB).
    pub memory: u64,
    /// The network.
    pub network: NodeNetwork,
    /// The image's command line, as arguments (joined with spaces): how a node learns
    /// its role (the join protocol adds `--ebb-front-end ADDR --ebb-join-token T`).
    pub args: Vec<String>,
    /// End the node after this long (`None`: never).
    pub timeout: Option<Duration>,
    /// Also copy the node's console to this process's stdout (it is kept in the
    /// handle's [`ConsoleLog`] either way).
    pub console_to_stdout: bool,
    /// Bytes of guest memory shared with this process ([`NodeHandle::shared_window`]):
    /// the top of the node's memory, a multiple of 4 KiB, at most half of `memory`; 0 for
    /// none. Only the local backend can share memory; the process backend refuses it.
    pub shared_window: u64,
}

impl NodeSpec {
    /// `image` with one vCPU, 128 MiB, no network, no arguments.
    pub fn new(image: NodeImage) -> NodeSpec {
        NodeSpec {
            image,
            cpus: 1,
            memory: 128 << 20,
            network: NodeNetwork::None,
            args: Vec::new(),
            timeout: None,
            console_to_stdout: false,
            shared_window: 0,
        }
    }
}

/// A guest port and where the host reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardedPort {
    /// The guest's port.
    pub guest_port: u16,
    /// The host address forwarded to it.
    pub host: SocketAddrV4,
}

/// Why a node could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    /// The image file could not be read.
    #[error("cannot read the image {path}: {detail}")]
    Image {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// The monitor refused to build the VM (bad image, KVM unusable, memory, network).
    #[error("cannot boot the node: {0}")]
    Vm(String),
    /// The spec asks for something this backend cannot give.
    #[error("{0}")]
    Unsupported(String),
    /// An OS resource (a thread, a process, a port) could not be had.
    #[error("{what}: {source}")]
    Os {
        /// What was being made.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The node did not come up within the bound.
    #[error("the node did not start within {0:?}")]
    StartTimeout(Duration),
}

/// Why [`NodeHandle::free`] did not finish cleanly.
#[derive(Debug, thiserror::Error)]
pub enum FreeError {
    /// The node did not stop within [`FREE_BOUND`]; its remains were left behind.
    #[error("the node did not stop within {0:?}")]
    Timeout(Duration),
}

/// Allocates nodes: see the module docs.
pub trait NodeAllocator {
    /// Boots a node as `spec` says; returns once it runs (its ports forwarded, its exit
    /// watched) — not once its application is ready, which it says on its own. It
    /// blocks the caller while the VM is built (2-15 ms measured locally, a child
    /// process's start for the process backend): from an event loop, use
    /// [`allocate_in_background`], which does not stall it.
    fn allocate(&self, spec: NodeSpec) -> Result<NodeHandle, AllocateError>;
}

/// [`NodeAllocator::allocate`] without stalling the calling event loop: the allocation
/// runs on a thread of its own, and the future completes with its result (woken from
/// that thread), while the loop serves everything else — a join already under way, the
/// Messenger's heartbeats. Dropping the future before it completes frees the node once
/// it is built: a node nobody holds is never left running.
pub fn allocate_in_background<A>(
    allocator: Arc<A>,
    spec: NodeSpec,
) -> impl Future<Output = Result<NodeHandle, AllocateError>> + 'static
where
    A: NodeAllocator + Send + Sync + ?Sized + 'static,
{
    let (promise, answer) = ebb::future::promise();
    let started = std::thread::Builder::new()
        .name("ebb-allocate".into())
        .spawn(move || {
            // `Err(handle)`: the caller is gone; dropping the handle frees the node.
            let _ = promise.set(allocator.allocate(spec));
        });
    async move {
        started.map_err(|source| AllocateError::Os {
            what: "spawning the allocating thread",
            source,
        })?;
        answer.await.unwrap_or_else(|_| {
            Err(AllocateError::Vm(
                "the allocating thread ended without an answer".into(),
            ))
        })
    }
}

/// How a backend stops and releases one node.
trait NodeControl: Send {
    /// Asks the node to stop (returns at once).
    fn stop(&mut self);
    /// Waits, up to `bound`, until everything the node held is released.
    fn release(&mut self, bound: Duration) -> Result<(), FreeError>;
}

/// A running (or ended) node: see the module docs. Dropping it frees the node.
pub struct NodeHandle {
    name: String,
    forwards: Vec<ForwardedPort>,
    exit: NodeExit,
    console: ConsoleLog,
    /// The node's shared window, when it has one (local backend).
    shared_window: Option<Arc<SharedWindow>>,
    control: Option<Box<dyn NodeControl>>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle")
            .field("name", &self.name)
            .field("forwards", &self.forwards)
            .field("outcome", &self.exit.outcome())
            .finish()
    }
}

impl NodeHandle {
    /// The node's name (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every forwarded guest port and its host address.
    pub fn forwards(&self) -> &[ForwardedPort] {
        &self.forwards
    }

    /// The host address forwarded to `guest_port`.
    pub fn forwarded(&self, guest_port: u16) -> Option<SocketAddrV4> {
        self.forwards
            .iter()
            .find(|f| f.guest_port == guest_port)
            .map(|f| f.host)
    }

    /// The node's exit notification (clone it freely).
    pub fn exit(&self) -> &NodeExit {
        &self.exit
    }

    /// The node's console.
    pub fn console(&self) -> &ConsoleLog {
        &self.console
    }

    /// The window of the node's guest memory shared with this process, with its doorbells
    /// (see [`SharedWindow`]: the guest writes it concurrently and is not trusted); `None`
    /// unless [`NodeSpec::shared_window`] asked for one (and for the process backend). A
    /// clone keeps the node's guest memory mapped after the node ended or was freed.
    pub fn shared_window(&self) -> Option<&Arc<SharedWindow>> {
        self.shared_window.as_ref()
    }

    /// The node's window as the front end opens it ([`ebb::shm::attach`]): its memory, a
    /// descriptor of its doorbell and the wake of its vCPUs. `None` without a window;
    /// `Some(Err)` when the doorbell's descriptor cannot be duplicated.
    pub fn host_window(&self) -> Option<std::io::Result<ebb::shm::HostWindow>> {
        let window = self.shared_window.clone()?;
        Some(window.doorbell_fd().map(|doorbell| {
            let wake = window.clone();
            ebb::shm::HostWindow {
                mapping: window,
                doorbell,
                wake_guest: Arc::new(move |core| {
                    wake.wake_vcpu(core);
                }),
            }
        }))
    }

    /// Stops the node (if it still runs) and releases everything it held — its threads
    /// joined (or its process reaped), its ports closed, its guest memory unmapped (once
    /// no clone of its [`shared_window`](Self::shared_window) is left) — within
    /// [`FREE_BOUND`]. Returns how it ended ([`NodeOutcome::Freed`] if this
    /// stopped it).
    pub fn free(mut self) -> Result<NodeOutcome, FreeError> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<NodeOutcome, FreeError> {
        let Some(mut control) = self.control.take() else {
            return Ok(self.exit.outcome().unwrap_or(NodeOutcome::Freed));
        };
        control.stop();
        control.release(FREE_BOUND)?;
        // Released means ended: the outcome is there (a backend publishes it first).
        Ok(self
            .exit
            .outcome()
            .unwrap_or_else(|| NodeOutcome::Lost("ended without an outcome".into())))
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            log::warn!("ebb-dist: freeing {}: {e}", self.name);
        }
    }
}
