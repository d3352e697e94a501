//! [`LocalNodeAllocator`]: each node's VM run by ebb-vmm in this process, on a thread of
//! its own (see the module docs of [`allocator`](super)).
//!
//! A node's thread widens its CPU affinity, builds the VM (`Vm::new`: image, memory,
//! vCPU threads, network link), reports that to `allocate` with the VM's stopper and
//! shared window (both only obtainable before the run takes the VM), runs
//! it (`Vm::run_embedded`, which joins the vCPU and device threads before it returns),
//! publishes the outcome, then tears the VM down (≈ 10 ms) and ends. `free` stops the
//! VM through its stopper and joins that thread.

use std::boxed::Box;
use std::format;
use std::net::Ipv4Addr;
use std::string::{String, ToString};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::vec::Vec;

use ebb_usernet::{UserNet, UserNetConfig};
use ebb_vmm::image::Symbolizer;
use ebb_vmm::virtio::{HostLink, HostLinkError, PortForward};
use ebb_vmm::vm::{ExternalLink, HostLinkConfig, HostLinkFactory, VmNetwork};
use ebb_vmm::{Outcome, SharedWindow, Vm, VmConfig, VmStopper};

use super::{
    AllocateError, ConsoleLog, ForwardedPort, FreeError, NodeAllocator, NodeControl, NodeExit,
    NodeHandle, NodeImage, NodeNetwork, NodeOutcome, NodeSpec,
};

/// How long `allocate` waits for a node's VM to be built (image loaded, memory written,
/// passt started when asked): far above the ≈ 10-30 ms it takes, for a loaded machine.
const START_BOUND: Duration = Duration::from_secs(30);

/// Boots nodes in this process: see the module docs.
#[derive(Debug, Default)]
pub struct LocalNodeAllocator {
    next: AtomicU32,
}

impl LocalNodeAllocator {
    /// An allocator; its nodes are named `node0`, `node1`, ...
    pub fn new() -> LocalNodeAllocator {
        LocalNodeAllocator::default()
    }
}

/// An image as the node's thread holds it.
enum LoadedImage {
    Mapped(ebb_vmm::image::ImageBytes),
    Bytes(Arc<[u8]>),
}

impl std::ops::Deref for LoadedImage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            LoadedImage::Mapped(m) => m,
            LoadedImage::Bytes(b) => b,
        }
    }
}

impl NodeAllocator for LocalNodeAllocator {
    fn allocate(&self, spec: NodeSpec) -> Result<NodeHandle, AllocateError> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("node{index}");
        let image = match &spec.image {
            NodeImage::Path(path) => {
                LoadedImage::Mapped(ebb_vmm::image::read(path).map_err(|e| {
                    AllocateError::Image {
                        path: path.clone(),
                        detail: e.to_string(),
                    }
                })?)
            }
            NodeImage::Bytes(bytes) => LoadedImage::Bytes(bytes.clone()),
        };
        let (net, link, guest_ports) = network(&spec.network, index);
        // The node's vCPUs run off the allocating core's CPU when that core is pinned to
        // one. With a window the core polls the window and answers: the scheduler likes
        // to put a woken thread beside its waker, and a vCPU there waits for the core's
        // idle poll to lapse (measured: 48 µs round trips against 1.6). On the network
        // the same placement decided between two modes from run to run: a message round
        // trip through the user-mode network of 20 µs, or 52 µs with the vCPU polling
        // beside the front end and the device thread taking turns with one of them (3 of
        // 4 runs slow before, 10 of 10 fast since; docs/benchmarks.md, "Distributed
        // Ebbs"). Not on a TAP device: there the round trip had no slow mode with every
        // CPU (16.8-16.9 µs in every round of two 5-round runs), and with the vCPU kept
        // off the front end's CPU two 5-round runs had one of 18.2-19.0 µs in most rounds.
        // Only the vCPUs: the device thread and the node's own thread may use every CPU
        // (beside a polling vCPU the device thread waits for it: 9-13x Linux TCP's round
        // trip, measured with it pinned there).
        let avoid = pinned_cpu()
            .filter(|_| spec.shared_window > 0 || !matches!(spec.network, NodeNetwork::Tap(_)));
        let config = VmConfig {
            mem_size: spec.memory,
            cpus: spec.cpus,
            cmdline: spec.args.join(" "),
            timeout: spec.timeout,
            pin: false,
            net,
            kvm_fd: None,
            huge_pages: true,
            shared_window: spec.shared_window,
            vcpu_avoid_cpu: avoid,
        };
        let exit = NodeExit::default();
        let console = ConsoleLog::default();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = {
            let exit = exit.clone();
            let sink = console.sink(spec.console_to_stdout);
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || node_main(image, config, Box::new(sink), ready_tx, exit))
                .map_err(|source| AllocateError::Os {
                    what: "spawning a node's thread",
                    source,
                })?
        };
        let Ready { stopper, window } = match ready_rx.recv_timeout(START_BOUND) {
            Ok(Ok(ready)) => ready,
            Ok(Err(message)) => {
                let _ = thread.join();
                return Err(AllocateError::Vm(message));
            }
            Err(_) => return Err(AllocateError::StartTimeout(START_BOUND)),
        };
        let listening = link
            .map(|l| {
                l.listening
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
            })
            .unwrap_or_default();
        let forwards = guest_ports
            .into_iter()
            .zip(listening)
            .map(|(guest_port, host)| ForwardedPort { guest_port, host })
            .collect();
        Ok(NodeHandle {
            name,
            forwards,
            exit,
            console,
            shared_window: window.map(Arc::new),
            control: Some(Box::new(LocalControl {
                stopper,
                thread: Some(thread),
            })),
        })
    }
}

/// The VM's network device for `network`, the user-mode link (to read its listening
/// addresses once built) and the forwarded guest ports in order.
fn network(
    network: &NodeNetwork,
    index: u32,
) -> (Option<VmNetwork>, Option<Arc<NodeLink>>, Vec<u16>) {
    // One MAC per node: nodes on one bridge must not share it.
    let mac = [0x02, 0xeb, 0xb0, 0x01, (index >> 8) as u8, index as u8];
    match network {
        NodeNetwork::None => (None, None, Vec::new()),
        NodeNetwork::User {
            forwards,
            guest_forwards,
            outbound,
        } => {
            let mut config = UserNetConfig::new(
                forwards
                    .iter()
                    .map(|&guest_port| PortForward {
                        host_addr: Ipv4Addr::LOCALHOST,
                        host_port: 0,
                        guest_port,
                    })
                    .collect(),
            );
            config.guest_forwards = guest_forwards.clone();
            let link = Arc::new(NodeLink {
                config,
                outbound: *outbound,
                listening: Mutex::new(Vec::new()),
            });
            let net = VmNetwork {
                link: HostLinkConfig::External(ExternalLink {
                    name: "node user-mode network (ebb-usernet)".to_string(),
                    factory: link.clone(),
                }),
                mac,
                faults: None,
                offload: true,
            };
            (Some(net), Some(link), forwards.clone())
        }
        NodeNetwork::Tap(device) => {
            let net = VmNetwork {
                link: HostLinkConfig::Tap(device.clone()),
                mac,
                faults: None,
                offload: true,
            };
            (Some(net), None, Vec::new())
        }
    }
}

/// A node's user-mode link: ebb-usernet's forwarder (passt behind it with `outbound`),
/// remembering the addresses its forwards listen on.
struct NodeLink {
    config: UserNetConfig,
    outbound: bool,
    listening: Mutex<Vec<std::net::SocketAddrV4>>,
}

impl HostLinkFactory for NodeLink {
    fn open(&self, guest_mac: [u8; 6]) -> Result<Box<dyn HostLink>, HostLinkError> {
        let rest: Option<Box<dyn HostLink>> = if self.outbound {
            match ebb_vmm::virtio::host_link::Passt::start(&[], guest_mac) {
                Ok(passt) => Some(Box::new(passt)),
                Err(HostLinkError::PasstMissing) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let net = UserNet::new(&self.config, rest)
            .map_err(|e| HostLinkError::External(format!("a node's user-mode network: {e}")))?;
        *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = net.listening();
        Ok(Box::new(net))
    }

    fn offload(&self) -> ebb_vmm::virtio::Offload {
        ebb_usernet::OFFLOAD
    }
}

/// What the node's thread hands `allocate` once the VM is built.
struct Ready {
    stopper: VmStopper,
    window: Option<SharedWindow>,
}

/// The node's thread: see the module docs.
fn node_main(
    image: LoadedImage,
    config: VmConfig,
    sink: ebb_vmm::console::Sink,
    ready: mpsc::Sender<Result<Ready, String>>,
    exit: NodeExit,
) {
    widen_affinity();
    let vm = match Vm::new(&image, config, sink) {
        Ok(vm) => vm,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let window = vm.shared_window();
    let built = Ready {
        stopper: vm.stopper(),
        window: window.clone(),
    };
    if ready.send(Ok(built)).is_err() {
        // `allocate` gave up waiting (START_BOUND): nobody could ever stop this VM, so it
        // never runs (dropped unrun, its vCPU threads end).
        return;
    }
    let ran = vm.run_embedded();
    if let Some(window) = window {
        // The guest is gone: its end of the window says so, and the doorbell makes the
        // front end look now rather than when heartbeats fall silent.
        let _ = ebb::shm::mark_reset(Arc::new(window.clone()), ebb::shm::Side::Guest);
        let _ = window.doorbell().write(1);
    }
    match ran {
        Ok((outcome, remains)) => {
            exit.publish(node_outcome(&outcome, &image));
            // The VM's teardown (≈ 10 ms), after the outcome is out: `free` waits for it.
            drop(remains);
        }
        Err(e) => exit.publish(NodeOutcome::Crashed(format!(
            "the monitor could not run the VM: {e}"
        ))),
    }
}

/// The monitor's outcome as a node's, reports symbolized from `image`.
fn node_outcome(outcome: &Outcome, image: &[u8]) -> NodeOutcome {
    let report = || outcome.report(&Symbolizer::new(image));
    match outcome {
        Outcome::Exited { code } => NodeOutcome::Exited(*code),
        Outcome::Panicked { .. } => NodeOutcome::Panicked(report()),
        Outcome::Fault { .. } | Outcome::AbiViolation { .. } | Outcome::MonitorError { .. } => {
            NodeOutcome::Crashed(report())
        }
        Outcome::Timeout { .. } => NodeOutcome::TimedOut,
        Outcome::Stopped { signal: 0 } => NodeOutcome::Freed,
        Outcome::Stopped { .. } => NodeOutcome::Lost(report()),
    }
}

/// The one CPU the calling thread is pinned to (a hosted event loop's core), if it is
/// pinned to exactly one.
fn pinned_cpu() -> Option<usize> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    if set.count() != 1 {
        return None;
    }
    (0..rustix::thread::CpuSet::MAX_CPU).find(|&cpu| set.is_set(cpu))
}

/// Lets this thread (and the VM threads it creates) run on every CPU the process's
/// cpuset allows: a thread of a pinned event loop would otherwise pass its one CPU on.
/// The kernel intersects the request with the cpuset. (The vCPU threads of a node with a
/// window then leave the allocating core's CPU: `VmConfig::vcpu_avoid_cpu`.)
fn widen_affinity() {
    let mut all = rustix::thread::CpuSet::new();
    for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
        all.set(cpu);
    }
    if let Err(e) = rustix::thread::sched_setaffinity(None, &all) {
        log::warn!("ebb-dist: a node's thread keeps its creator's CPU affinity: {e}");
    }
}

/// Stops a local node and joins its thread.
struct LocalControl {
    stopper: VmStopper,
    thread: Option<JoinHandle<()>>,
}

impl NodeControl for LocalControl {
    fn stop(&mut self) {
        self.stopper.stop();
    }

    fn release(&mut self, bound: Duration) -> Result<(), FreeError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + bound;
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                // Left detached: it ends when the VM's threads do.
                return Err(FreeError::Timeout(bound));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = thread.join();
        Ok(())
    }
}
