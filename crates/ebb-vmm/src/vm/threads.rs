//! Thread control: the vCPU threads spawned parked before the VM exists and started
//! with their vCPUs, the main thread's wait for an outcome, and the stop of every thread
//! (flag, then a repeated signal) when the VM ends.

use super::network::net_summary;
use super::{Vm, VmError};
use crate::abi_error::AbiError;
use crate::report::Outcome;
use crate::shared::Shared;
use crate::sys;
use crate::virtio::VirtioNetDevice;
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::signal::{Killable, SIGRTMIN, register_signal_handler};

/// How often the main thread drains the console rings.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// How long the monitor waits for vCPU threads to stop once the VM has ended.
pub const STOP_GRACE: Duration = Duration::from_secs(1);
/// How often a vCPU thread that has not stopped yet is signalled again.
const STOP_SIGNAL_INTERVAL: Duration = Duration::from_micros(200);

extern "C" fn on_stop_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Nothing to do: the signal's only job is to make KVM_RUN or poll return EINTR.
}

fn install_stop_signal() -> Result<(), VmError> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_signal_handler(SIGRTMIN(), on_stop_signal).map_err(|e| VmError::Os {
            what: "installing the vCPU stop signal handler",
            source: std::io::Error::from_raw_os_error(e.errno()),
        });
    });
    result
}

/// Set by SIGINT or SIGTERM (the signal's number): stop the guest and end as
/// [`Outcome::Stopped`], with the usual summary, instead of dying mid-run.
static STOP_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_stop_request(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Set by SIGUSR1: print the network counters now (see [`net_summary`]).
static STATS_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stats_signal(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    STATS_REQUESTED.store(true, Ordering::SeqCst);
}

/// The nice value a vCPU thread takes when it shares its host CPU with the device
/// thread (`cpus_shared`). The guest then polls while idle ([`BOOT_FLAG_SHARED_CPUS`](ebb_abi::BOOT_FLAG_SHARED_CPUS)),
/// and the device thread (at `SCHED_FIFO` 1 when the monitor may raise it,
/// [`IO_REAL_TIME_PRIORITY`](crate::virtio::net::IO_REAL_TIME_PRIORITY), else at nice 0)
/// must preempt it the moment a kick or a frame wakes it rather than wait for the polling
/// vCPU's time slice to end: p99 of a 64-byte
/// ping-pong 2 ms at nice 0, 77 µs at 10, 74 µs at 19 (docs/10); under memcached at a
/// paced 8k requests/s over 32 connections, where the device thread is busy 40% of the
/// time, 1.0 ms at nice 10 and 0.3–0.4 ms at 19, with a closed loop as fast or faster
/// (docs/benchmarks.md, "Fifth sitting"). The price: a vCPU that competes with other
/// busy host work on its CPU gets about 1/70 of it instead of 1/10 (`SCHED_IDLE`, the
/// same tail, would get 1/340 and make the CPU look idle to the scheduler's placement
/// of other tasks). Lowering one's own priority needs no privilege. [`VCPU_NICE_ENV`]
/// overrides it.
pub const VCPU_NICE_ON_SHARED_CPUS: i32 = 19;

/// Environment variable overriding [`VCPU_NICE_ON_SHARED_CPUS`] (0 to 19).
pub const VCPU_NICE_ENV: &str = "EBB_VMM_VCPU_NICE";

/// [`VCPU_NICE_ON_SHARED_CPUS`], or [`VCPU_NICE_ENV`]'s value if it is one from 0 to 19.
fn vcpu_nice_on_shared_cpus() -> i32 {
    std::env::var(VCPU_NICE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| (0..=19).contains(n))
        .unwrap_or(VCPU_NICE_ON_SHARED_CPUS)
}

/// What a vCPU thread needs to run its vCPU.
struct VcpuStart {
    shared: Arc<Shared>,
    /// The virtio-net device, when the VM has one (its MMIO exits go there).
    net: Option<Arc<VirtioNetDevice>>,
    vcpu: VcpuFd,
    kick: EventFd,
    /// Take [`VCPU_NICE_ON_SHARED_CPUS`] before running.
    below_device: bool,
}

/// A vCPU thread, spawned before the VM exists and waiting for its [`VcpuStart`]. It ends
/// without running anything if the sender is dropped (a `Vm` dropped unrun).
pub(super) struct VcpuThread {
    handle: JoinHandle<()>,
    start: mpsc::Sender<VcpuStart>,
    /// The thread's id, once it published it (for the device thread's
    /// [`TrafficPlacement`](crate::virtio::TrafficPlacement)).
    pub(super) tid: crate::virtio::VcpuTid,
}

/// Spawns one parked thread per vCPU, first thing, so that the threads start up (0.1–3.5
/// ms measured here: a clone, then the new thread's stack, signal stack and glibc malloc
/// arena) while the main thread loads the image and builds the VM, instead of after.
/// Their start-up `mmap`s then mostly happen before the VM exists, too, when they are
/// cheaper (under nested PVM the host keeps shadow page tables of a process that owns a
/// KVM VM in sync with every mapping change).
pub(super) fn spawn_vcpu_threads(
    cpus: u32,
    pin: bool,
    avoid: Option<usize>,
) -> Result<Vec<VcpuThread>, VmError> {
    // Only read when pinning: it parses cgroup files, which costs boot time.
    let host_cpus = if pin {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    };
    let mut threads = Vec::new();
    for core in 0..cpus {
        let (start_tx, start_rx) = mpsc::channel::<VcpuStart>();
        let pin = pin.then_some(core as usize % host_cpus);
        let tid = crate::virtio::VcpuTid::default();
        let handle = std::thread::Builder::new()
            .name(format!("vcpu{core}"))
            .spawn({
                let tid = tid.clone();
                move || {
                    tid.store(
                        rustix::thread::gettid().as_raw_nonzero().get(),
                        std::sync::atomic::Ordering::Release,
                    );
                    if let Some(cpu) = pin {
                        let mut set = rustix::thread::CpuSet::new();
                        set.set(cpu);
                        if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
                            log::warn!("cannot pin vcpu{core} to host cpu {cpu}: {e}");
                        }
                    } else if let Some(cpu) = avoid {
                        // Every CPU but `cpu`; the kernel intersects with the cpuset and
                        // refuses an empty result, which leaves the thread as it was.
                        let mut set = rustix::thread::CpuSet::new();
                        for other in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| c != cpu) {
                            set.set(other);
                        }
                        let _ = rustix::thread::sched_setaffinity(None, &set);
                    }
                    // Make glibc create this thread's malloc arena now, before the VM exists.
                    drop(std::hint::black_box(Box::new(0u64)));
                    if let Ok(start) = start_rx.recv() {
                        if start.below_device {
                            let nice = vcpu_nice_on_shared_cpus();
                            // The calling thread only (Linux: PRIO_PROCESS with 0 is the thread).
                            if let Err(e) = rustix::process::setpriority_process(None, nice) {
                                log::warn!("vcpu{core}: cannot lower its priority: {e}");
                            }
                        }
                        crate::vcpu::run(start.shared, start.net, start.vcpu, core, start.kick);
                    }
                    // Gone: its id may be reused by another thread, which must not be moved.
                    tid.store(0, std::sync::atomic::Ordering::Release);
                }
            })
            .map_err(|source| VmError::Os {
                what: "spawning a vCPU thread",
                source,
            })?;
        threads.push(VcpuThread {
            handle,
            start: start_tx,
            tid,
        });
    }
    Ok(threads)
}

impl Vm {
    /// Runs the VM until it ends, and says how. The VM is torn down before this returns
    /// (≈ 10 ms under nested PVM); a process that exits right after can skip that wait
    /// with [`run_keeping_vm`](Self::run_keeping_vm).
    pub fn run(self) -> Result<Outcome, VmError> {
        self.run_keeping_vm().map(|(outcome, _remains)| outcome)
    }

    /// Like [`run`](Self::run), but returns the ended VM's [`Remains`] with the outcome
    /// instead of tearing it down, for [`Remains::exit_process`].
    pub fn run_keeping_vm(self) -> Result<(Outcome, Remains), VmError> {
        self.run_with(true)
    }

    /// Like [`run_keeping_vm`](Self::run_keeping_vm), for a process that runs VMs among
    /// other work (a distributed application's front end, which boots nodes in its own
    /// process): installs no SIGINT, SIGTERM or SIGUSR1 handler (the process keeps its
    /// own; such a VM is ended by its [`VmStopper`], its guest or its timeout), prints
    /// nothing (the network counters go to the log), and joins the VM's vCPU and
    /// device threads before it returns (each within [`STOP_GRACE`]; one that does not
    /// stop in time is reported and left detached). Only SIGRTMIN's no-op handler is
    /// installed, process-wide, as by every run: it is what kicks a vCPU out of
    /// `KVM_RUN`.
    pub fn run_embedded(self) -> Result<(Outcome, Remains), VmError> {
        self.run_with(false)
    }

    /// The window of guest memory shared with the program that embeds the monitor, with
    /// its doorbells, when [`VmConfig::shared_window`](super::VmConfig::shared_window) asked
    /// for one; call it after [`Vm::new`] and before the run, like
    /// [`stopper`](Self::stopper). The window stays usable (mapped) after the VM ended.
    pub fn shared_window(&self) -> Option<crate::window::SharedWindow> {
        self.window.clone()
    }

    /// What ends this VM from another thread: see [`VmStopper`].
    pub fn stopper(&self) -> VmStopper {
        VmStopper {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The run; `standalone`: the process is this VM's monitor (stop and statistics
    /// signals handled, counters printed).
    fn run_with(self, standalone: bool) -> Result<(Outcome, Remains), VmError> {
        install_stop_signal()?;
        let Vm {
            _kvm: kvm,
            _vm: vm,
            shared,
            vcpus,
            vcpu_threads,
            config,
            net,
            net_io,
            cpus_shared,
            window: _,
        } = self;
        let mut io_thread = None;
        if let Some(io) = net_io {
            if standalone {
                register_signal_handler(libc::SIGUSR1, on_stats_signal).map_err(|e| {
                    VmError::Os {
                        what: "installing the SIGUSR1 (network counters) handler",
                        source: std::io::Error::from_raw_os_error(e.errno()),
                    }
                })?;
            }
            io_thread = Some(
                std::thread::Builder::new()
                    .name("virtio-net".into())
                    .spawn(move || io.run())
                    .map_err(|source| VmError::Os {
                        what: "spawning the virtio-net thread",
                        source,
                    })?,
            );
        }
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        for (core, (thread, (vcpu, kick))) in vcpu_threads.into_iter().zip(vcpus).enumerate() {
            let start = VcpuStart {
                shared: Arc::clone(&shared),
                net: net.clone(),
                vcpu,
                kick,
                below_device: cpus_shared,
            };
            if thread.start.send(start).is_err() {
                shared.finish(Outcome::MonitorError {
                    core: core as u32,
                    message: "the vCPU thread ended before its vCPU started".into(),
                });
            }
            threads.push(thread.handle);
        }

        if standalone {
            for signal in [libc::SIGINT, libc::SIGTERM] {
                register_signal_handler(signal, on_stop_request).map_err(|e| VmError::Os {
                    what: "installing the SIGINT/SIGTERM (stop) handler",
                    source: std::io::Error::from_raw_os_error(e.errno()),
                })?;
            }
        }
        let deadline = config.timeout.and_then(|t| shared.started.checked_add(t));
        loop {
            if shared.wait_for_outcome(DRAIN_INTERVAL) {
                break;
            }
            if let Err(error) = shared.console.drain_all(&shared.mem) {
                let core = match &error {
                    AbiError::ConsoleCorrupt { core, .. } => *core,
                    _ => 0,
                };
                shared.finish(Outcome::AbiViolation {
                    core,
                    error,
                    state: None,
                });
            }
            let signal = if standalone {
                STOP_SIGNAL.swap(0, Ordering::SeqCst)
            } else {
                0
            };
            if signal != 0 {
                shared.finish(Outcome::Stopped { signal });
            }
            if standalone
                && STATS_REQUESTED.swap(false, Ordering::SeqCst)
                && let Some(net) = &net
            {
                eprintln!("{}", net_summary(net, &shared));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                shared.finish(Outcome::Timeout {
                    after: config.timeout.unwrap_or_default(),
                    states: Vec::new(),
                });
            }
        }

        log::debug!("VM ended");
        // Stop every vCPU thread: signal until each has left KVM_RUN (a signal that lands
        // just before KVM_RUN is lost, hence the repetition). The thread that ended the VM
        // usually stops on its own at once: wait for `changed` (vcpu_stopped notifies it)
        // rather than sleep a fixed interval.
        shared.stop();
        let give_up = Instant::now() + STOP_GRACE;
        shared.wait_for_vcpus(threads.len(), give_up, STOP_SIGNAL_INTERVAL, || {
            for t in &threads {
                if !t.is_finished() {
                    let _ = t.kill(SIGRTMIN());
                }
            }
        });
        log::debug!("vCPU threads stopped");
        if !standalone {
            // Every thread has seen the stop flag (the device thread within its longest
            // sleep, 20 ms): join them, bounded, so the owner knows they are gone.
            let give_up = Instant::now() + STOP_GRACE;
            for t in threads.drain(..).chain(io_thread.take()) {
                while !t.is_finished() && Instant::now() < give_up {
                    std::thread::sleep(Duration::from_millis(1));
                }
                if t.is_finished() {
                    let _ = t.join();
                } else {
                    log::warn!(
                        "ebb-vmm: thread {:?} did not stop within {STOP_GRACE:?}: left detached",
                        t.thread().name()
                    );
                }
            }
        }
        if let Some(net) = &net {
            if standalone {
                eprintln!("{}", net_summary(net, &shared));
            } else {
                log::debug!("{}", net_summary(net, &shared));
            }
        }
        // The guest is stopped (or lost): what is left in the rings is final.
        let _ = shared.console.drain_all(&shared.mem);
        let mut outcome = shared.take_outcome().unwrap_or(Outcome::MonitorError {
            core: 0,
            message: "the VM ended without an outcome".into(),
        });
        if let Outcome::Timeout { states, .. } = &mut outcome {
            *states = shared.vcpu_states();
        }
        Ok((
            outcome,
            Remains {
                _kvm: kvm,
                vm,
                _shared: shared,
                _net: net,
            },
        ))
    }
}

/// Ends a running VM from any thread, as its owner: the VM's run returns
/// [`Outcome::Stopped`] with `signal` 0 (unless another outcome came first). Cheap to
/// clone; stopping a VM that already ended does nothing.
#[derive(Clone, Debug)]
pub struct VmStopper {
    shared: Arc<Shared>,
}

impl VmStopper {
    /// Ends the VM; its run then stops every vCPU (signalled out of `KVM_RUN`) and
    /// returns within [`STOP_GRACE`] plus the device thread's longest sleep.
    pub fn stop(&self) {
        self.shared.finish(Outcome::Stopped { signal: 0 });
    }

    /// Whether the VM is ending or ended.
    pub fn stopping(&self) -> bool {
        self.shared.stopping()
    }
}

/// What is left of a VM after [`Vm::run_keeping_vm`]: the KVM handles and guest memory,
/// still alive. Dropping it tears the VM down as [`Vm::run`] does.
pub struct Remains {
    _kvm: Kvm,
    vm: VmFd,
    _shared: Arc<Shared>,
    _net: Option<Arc<VirtioNetDevice>>,
}

impl std::fmt::Debug for Remains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remains").finish_non_exhaustive()
    }
}

impl Remains {
    /// Exits the process with `code` without waiting for KVM to destroy the VM: flushes
    /// stdout and stderr, hands the VM's last reference to a background process
    /// (`sys::release_in_background`: it shares this process's memory, keeps only the VM
    /// descriptor and dies with this process, paying the teardown after our exit status
    /// is already out), and exits. Measured here: the VM's `close` takes ≈ 10 ms of a
    /// ≈ 20 ms run. If the hand-off fails, the process exits normally (teardown included).
    pub fn exit_process(self, code: u8) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        match sys::release_in_background(&self.vm) {
            // Neither close the VM nor unmap guest memory: the process's exit drops our
            // references, the background process holds the last ones.
            Ok(()) => std::mem::forget(self),
            Err(e) => {
                log::debug!("VM teardown stays in the foreground: {e}");
                drop(self);
            }
        }
        std::process::exit(i32::from(code))
    }
}
