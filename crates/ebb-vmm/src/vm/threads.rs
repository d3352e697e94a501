//! Thread control: the vCPU threads spawned parked before the VM exists and started
//! with their vCPUs, the main thread's wait for an outcome, and the stop of every thread
//! (flag, then a repeated signal) when the VM ends.

use super::network::net_summary;
use super::{Vm, VmError};
use crate::abi_error::AbiError;
use crate::console::Console;
use crate::guest::GuestMem;
use crate::report::{Outcome, VcpuState};
use crate::sys;
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::signal::{Killable, SIGRTMIN, register_signal_handler};

/// How often the main thread drains the console rings.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// How long the monitor waits for vCPU threads to stop once the VM has ended.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// How often a vCPU thread that has not stopped yet is signalled again.
const STOP_SIGNAL_INTERVAL: Duration = Duration::from_micros(200);

/// VM-wide state shared by the vCPU threads and the main thread.
pub struct Shared {
    /// Guest memory.
    pub mem: GuestMem,
    /// The console rings.
    pub console: Console,
    /// When the VM was started (the monotonic clock's zero).
    pub started: Instant,
    stop: AtomicBool,
    outcome: Mutex<Option<Outcome>>,
    changed: Condvar,
    states: Mutex<Vec<Option<VcpuState>>>,
    stopped: AtomicU32,
    /// Exits to this process (every `KVM_RUN` return but errors), all vCPUs.
    pub exits: std::sync::atomic::AtomicU64,
    /// The virtio-net device, when the VM has one (its MMIO exits go there).
    pub net: std::sync::OnceLock<Arc<crate::virtio::VirtioNetDevice>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// The state of a VM with `cpus` vCPUs over `mem`, its clock starting now. Needs no
    /// KVM: the hypercall and console tests build one over plain host memory.
    pub(crate) fn new(mem: GuestMem, console: Console, cpus: u32) -> Shared {
        Shared {
            mem,
            console,
            started: Instant::now(),
            stop: AtomicBool::new(false),
            outcome: Mutex::new(None),
            changed: Condvar::new(),
            states: Mutex::new(vec![None; cpus as usize]),
            stopped: AtomicU32::new(0),
            exits: std::sync::atomic::AtomicU64::new(0),
            net: std::sync::OnceLock::new(),
        }
    }

    /// Ends the VM with `outcome`, unless another outcome came first.
    pub fn finish(&self, outcome: Outcome) {
        let mut slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(outcome);
        }
        self.stop.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Whether the VM is ending.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Records that core `core`'s thread stopped, with its registers.
    pub fn vcpu_stopped(&self, core: u32, state: Option<VcpuState>) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = states.get_mut(core as usize) {
            *s = state;
        }
        drop(states);
        // Under the outcome lock, so the main thread cannot miss the notification between
        // its check of `stopped` and its wait.
        let _slot = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        self.stopped.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Sleeps until `kick` is signalled (true) or `timeout` passes (false); returns early,
    /// as a timeout, when the VM is ending.
    pub fn wait(&self, kick: &EventFd, timeout: Option<Duration>) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.stopping() {
                return false;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ts = left.map(|l| Timespec {
                tv_sec: l.as_secs() as i64,
                tv_nsec: i64::from(l.subsec_nanos()),
            });
            let fd = sys::borrow_eventfd(kick);
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, ts.as_ref()) {
                Ok(0) => return false,
                Ok(_) => {
                    // Consume every pending kick: one wake-up serves them all.
                    let _ = kick.read();
                    return true;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

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
/// and the device thread, at the default 0, preempts it the moment a kick or a frame
/// wakes it, instead of waiting for the polling vCPU's time slice to end (p99 of a
/// 64-byte ping-pong 2 ms at nice 0, 77 µs at 10, 74 µs at 19; docs/10). Lowering one's
/// own priority needs no privilege. 10, not 19: a vCPU that competes with other busy
/// host work still gets about a tenth of the CPU rather than a seventieth.
pub const VCPU_NICE_ON_SHARED_CPUS: i32 = 10;

/// What a vCPU thread needs to run its vCPU.
struct VcpuStart {
    shared: Arc<Shared>,
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
}

/// Spawns one parked thread per vCPU, first thing, so that the threads start up (0.1–3.5
/// ms measured here: a clone, then the new thread's stack, signal stack and glibc malloc
/// arena) while the main thread loads the image and builds the VM, instead of after.
/// Their start-up `mmap`s then mostly happen before the VM exists, too, when they are
/// cheaper (under nested PVM the host keeps shadow page tables of a process that owns a
/// KVM VM in sync with every mapping change).
pub(super) fn spawn_vcpu_threads(cpus: u32, pin: bool) -> Result<Vec<VcpuThread>, VmError> {
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
        let handle = std::thread::Builder::new()
            .name(format!("vcpu{core}"))
            .spawn(move || {
                if let Some(cpu) = pin {
                    let mut set = rustix::thread::CpuSet::new();
                    set.set(cpu);
                    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
                        log::warn!("cannot pin vcpu{core} to host cpu {cpu}: {e}");
                    }
                }
                // Make glibc create this thread's malloc arena now, before the VM exists.
                drop(std::hint::black_box(Box::new(0u64)));
                if let Ok(start) = start_rx.recv() {
                    if start.below_device {
                        // The calling thread only (Linux: PRIO_PROCESS with 0 is the thread).
                        if let Err(e) =
                            rustix::process::setpriority_process(None, VCPU_NICE_ON_SHARED_CPUS)
                        {
                            log::warn!("vcpu{core}: cannot lower its priority: {e}");
                        }
                    }
                    crate::vcpu::run(start.shared, start.vcpu, core, start.kick);
                }
            })
            .map_err(|source| VmError::Os {
                what: "spawning a vCPU thread",
                source,
            })?;
        threads.push(VcpuThread {
            handle,
            start: start_tx,
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
        install_stop_signal()?;
        let Vm {
            _kvm: kvm,
            _vm: vm,
            shared,
            vcpus,
            vcpu_threads,
            config,
            net_io,
            cpus_shared,
        } = self;
        if let Some(io) = net_io {
            register_signal_handler(libc::SIGUSR1, on_stats_signal).map_err(|e| VmError::Os {
                what: "installing the SIGUSR1 (network counters) handler",
                source: std::io::Error::from_raw_os_error(e.errno()),
            })?;
            std::thread::Builder::new()
                .name("virtio-net".into())
                .spawn(move || io.run())
                .map_err(|source| VmError::Os {
                    what: "spawning the virtio-net thread",
                    source,
                })?;
        }
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        for (core, (thread, (vcpu, kick))) in vcpu_threads.into_iter().zip(vcpus).enumerate() {
            let start = VcpuStart {
                shared: Arc::clone(&shared),
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

        for signal in [libc::SIGINT, libc::SIGTERM] {
            register_signal_handler(signal, on_stop_request).map_err(|e| VmError::Os {
                what: "installing the SIGINT/SIGTERM (stop) handler",
                source: std::io::Error::from_raw_os_error(e.errno()),
            })?;
        }
        let deadline = config.timeout.and_then(|t| shared.started.checked_add(t));
        loop {
            {
                let slot = shared.outcome.lock().unwrap_or_else(|e| e.into_inner());
                if slot.is_some() {
                    break;
                }
                let _ = shared
                    .changed
                    .wait_timeout(slot, DRAIN_INTERVAL)
                    .unwrap_or_else(|e| e.into_inner());
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
            let signal = STOP_SIGNAL.swap(0, Ordering::SeqCst);
            if signal != 0 {
                shared.finish(Outcome::Stopped { signal });
            }
            if STATS_REQUESTED.swap(false, Ordering::SeqCst)
                && let Some(line) = net_summary(&shared)
            {
                eprintln!("{line}");
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
        shared.stop.store(true, Ordering::SeqCst);
        let give_up = Instant::now() + STOP_GRACE;
        loop {
            let slot = shared.outcome.lock().unwrap_or_else(|e| e.into_inner());
            if shared.stopped.load(Ordering::SeqCst) as usize >= threads.len()
                || Instant::now() >= give_up
            {
                break;
            }
            for t in &threads {
                if !t.is_finished() {
                    let _ = t.kill(SIGRTMIN());
                }
            }
            let _ = shared
                .changed
                .wait_timeout(slot, STOP_SIGNAL_INTERVAL)
                .unwrap_or_else(|e| e.into_inner());
        }
        log::debug!("vCPU threads stopped");
        if let Some(line) = net_summary(&shared) {
            eprintln!("{line}");
        }
        // The guest is stopped (or lost): what is left in the rings is final.
        let _ = shared.console.drain_all(&shared.mem);
        let mut outcome = shared
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Outcome::MonitorError {
                core: 0,
                message: "the VM ended without an outcome".into(),
            });
        if let Outcome::Timeout { states, .. } = &mut outcome {
            *states = shared
                .states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
        }
        Ok((
            outcome,
            Remains {
                _kvm: kvm,
                vm,
                _shared: shared,
            },
        ))
    }
}

/// What is left of a VM after [`Vm::run_keeping_vm`]: the KVM handles and guest memory,
/// still alive. Dropping it tears the VM down as [`Vm::run`] does.
pub struct Remains {
    _kvm: Kvm,
    vm: VmFd,
    _shared: Arc<Shared>,
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
