//! Building a VM from an image and running it to its [`Outcome`].
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

use crate::console::{Console, Sink};
use crate::cpu;
use crate::guest::GuestMem;
use crate::image::{Image, ImageError};
use crate::layout::{Layout, LayoutError};
use crate::paging::{PageTables, PagingError};
use crate::report::{Outcome, VcpuState};
use crate::sys;
use ebb_abi::{
    BOOT_FLAG_SHARED_CPUS, BOOT_INFO_ADDR, BOOT_MAGIC, BOOT_VERSION, BootInfo, CMDLINE_ADDR,
    GDT_ADDR, HOST_EBB_VMM, HYPERCALL_PORT, KICK_PORT, MAX_MEM_REGIONS, MemRegion,
    PAGE_TABLES_ADDR, PERCORE_STRIDE, PerCore, TSS_ADDR,
};
use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use kvm_ioctls::{IoEventAddress, Kvm, VcpuFd, VmFd};
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};
use vmm_sys_util::signal::{Killable, SIGRTMIN, register_signal_handler};

/// How often the main thread drains the console rings.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// How long the monitor waits for vCPU threads to stop once the VM has ended.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// How often a vCPU thread that has not stopped yet is signalled again.
const STOP_SIGNAL_INTERVAL: Duration = Duration::from_micros(200);

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
    /// A virtio-net device, if any.
    pub net: Option<NetConfig>,
    /// An open `/dev/kvm` to use instead of opening it (`--kvm-fd`): a parent that may
    /// open it can run the monitor as a user that may not. The VM takes the descriptor
    /// over (it is closed with the VM), so one config must not build two VMs.
    pub kvm_fd: Option<std::os::fd::RawFd>,
    /// Ask for the guest's free memory on transparent huge pages (`--huge-pages`, default
    /// on; see [`Vm::new`]).
    pub huge_pages: bool,
}

/// The VM's network device: where its frames go.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// The backend.
    pub backend: NetBackend,
    /// The guest's MAC address.
    pub mac: [u8; 6],
    /// Seeded faults between guest and backend (`--net-faults`).
    pub faults: Option<(ebb_net_driver::FaultConfig, u64)>,
    /// Offer checksum offload and TCP segmentation offload where the backend can honour
    /// them (TAP only; `--net-offload off` turns both off, for comparison).
    pub offload: bool,
}

impl NetConfig {
    /// Whether the device offers checksum offload: asked for, and a TAP backend (see
    /// `virtio::net`, "Checksum offload", for why not with passt).
    pub fn checksum_offload(&self) -> bool {
        self.offload && matches!(self.backend, NetBackend::Tap(_))
    }

    /// Whether the device offers TCP segmentation offload both ways, HOST_TSO4 on
    /// transmit and GUEST_TSO4 (large receive) on receive: with checksum offload (the TAP
    /// then has a virtio-net header to carry the request) and no `--net-faults` (the
    /// injector takes the copying path, which hands the TAP bare frames and the guest
    /// frames without the TAP's header). See `virtio::net`, "Segmentation offload".
    pub fn segmentation_offload(&self) -> bool {
        self.checksum_offload() && self.faults.is_none()
    }

    /// What the device offers: [`checksum_offload`](Self::checksum_offload) and
    /// [`segmentation_offload`](Self::segmentation_offload) (both directions).
    pub fn device_offload(&self) -> crate::virtio::Offload {
        crate::virtio::Offload {
            checksum: self.checksum_offload(),
            tso4: self.segmentation_offload(),
            guest_tso4: self.segmentation_offload(),
        }
    }
}

/// See [`NetConfig::backend`].
#[derive(Clone, Debug)]
pub enum NetBackend {
    /// A TAP device (one queue per vCPU); needs root or CAP_NET_ADMIN.
    Tap(String),
    /// passt user-mode networking with TCP port forwards; no root.
    User(Vec<crate::virtio::PortForward>),
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            mem_size: 128 << 20,
            cpus: 1,
            cmdline: String::new(),
            timeout: None,
            pin: false,
            net: None,
            kvm_fd: None,
            huge_pages: true,
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
    Net(#[from] crate::virtio::BackendError),
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
    pub net: std::sync::OnceLock<Arc<crate::virtio::VirtioNet>>,
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

/// One line of network and exit counters, printed at the VM's end and on SIGUSR1 (so a
/// benchmark or test can take the difference over a steady phase).
pub fn net_summary(shared: &Shared) -> Option<String> {
    let net = shared.net.get()?;
    let s = &net.stats;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    // With `--net-faults`: what the injector did, `rx_` toward the guest, `tx_` from it.
    let faults = s
        .faults
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|f| {
            let mut out = String::new();
            for (dir, c) in [("rx", f.rx), ("tx", f.tx)] {
                out.push_str(&format!(
                    " {dir}_fault_seen={} {dir}_fault_dropped={} {dir}_fault_reordered={} \
                     {dir}_fault_duplicated={} {dir}_fault_corrupted={}",
                    c.seen, c.dropped, c.reordered, c.duplicated, c.corrupted
                ));
            }
            out
        })
        .unwrap_or_default();
    // Checksum and segmentation offload: what was offered and negotiated (1 or 0), and
    // how many frames used it.
    use ebb_abi::virtio::features::{NET_CSUM, NET_GUEST_CSUM, NET_GUEST_TSO4, NET_HOST_TSO4, bit};
    let has = |bits: u64, b| u8::from(bits & bit(b) != 0);
    let (offered, negotiated) = (net.offered(), net.features().unwrap_or(0));
    let csum = format!(
        " csum_offered={} csum={} guest_csum={} tso4_offered={} tso4={} \
         guest_tso4_offered={} guest_tso4={} tx_csum_partial={} tx_gso={} rx_gso={} \
         rx_csum_partial={} rx_csum_valid={}",
        has(offered, NET_CSUM),
        has(negotiated, NET_CSUM),
        has(negotiated, NET_GUEST_CSUM),
        has(offered, NET_HOST_TSO4),
        has(negotiated, NET_HOST_TSO4),
        has(offered, NET_GUEST_TSO4),
        has(negotiated, NET_GUEST_TSO4),
        get(&s.tx_csum_partial),
        get(&s.tx_gso),
        get(&s.rx_gso),
        get(&s.rx_csum_partial),
        get(&s.rx_csum_valid),
    );
    Some(format!(
        "ebb-vmm: virtio-net: tx_frames={} rx_frames={} rx_dropped={} tx_dropped={} exits={} \
         mmio_exits={} kicks={} wakeups={}{csum}{faults}{}",
        get(&s.tx_frames),
        get(&s.rx_frames),
        get(&s.rx_dropped),
        get(&s.tx_dropped),
        shared.exits.load(Ordering::Relaxed),
        get(&s.mmio_exits),
        get(&s.kicks),
        get(&s.wakes),
        net.broken()
            .map(|b| format!(" broken: {b}"))
            .unwrap_or_default(),
    ))
}

/// A VM ready to run.
pub struct Vm {
    _kvm: Kvm,
    _vm: VmFd,
    shared: Arc<Shared>,
    vcpus: Vec<(VcpuFd, EventFd)>,
    vcpu_threads: Vec<VcpuThread>,
    config: VmConfig,
    net_io: Option<crate::virtio::IoThread>,
    /// Whether the vCPUs share their host CPUs with the device thread (decided once, in
    /// [`Vm::new`]); they then run below it ([`VCPU_NICE_ON_SHARED_CPUS`]).
    cpus_shared: bool,
}

/// The nice value a vCPU thread takes when it shares its host CPU with the device
/// thread (`cpus_shared`). The guest then polls while idle ([`BOOT_FLAG_SHARED_CPUS`]),
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
struct VcpuThread {
    handle: JoinHandle<()>,
    start: mpsc::Sender<VcpuStart>,
}

/// Spawns one parked thread per vCPU, first thing, so that the threads start up (0.1–3.5
/// ms measured here: a clone, then the new thread's stack, signal stack and glibc malloc
/// arena) while the main thread loads the image and builds the VM, instead of after.
/// Their start-up `mmap`s then mostly happen before the VM exists, too, when they are
/// cheaper (under nested PVM the host keeps shadow page tables of a process that owns a
/// KVM VM in sync with every mapping change).
fn spawn_vcpu_threads(cpus: u32, pin: bool) -> Result<Vec<VcpuThread>, VmError> {
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

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm").field("config", &self.config).finish()
    }
}

impl Vm {
    /// Builds a VM for the ELF image `bytes`: validates and loads it, writes the boot
    /// structures and creates the vCPUs. Console output goes to `sink`.
    pub fn new(bytes: &[u8], config: VmConfig, sink: Sink) -> Result<Self, VmError> {
        let image = Image::parse(bytes)?;
        let layout = Layout::new(config.mem_size, config.cpus, image.start, image.end)?;
        let vcpu_threads = spawn_vcpu_threads(layout.cpus, config.pin)?;
        if config.cmdline.len() as u64 > ebb_abi::CMDLINE_MAX {
            return Err(LayoutError::CmdlineTooLong(config.cmdline.len()).into());
        }
        let tables = PageTables::build(&layout.page_map(), layout.mem_size)?;

        // Guest memory is allocated and written before the VM exists: under nested PVM,
        // every page fault of a process that owns a KVM VM costs far more (the host keeps
        // shadow mappings in sync), and the boot structures are most of our faults.
        let size = layout.mem_size;
        let mmap = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size as usize)])
            .map_err(|e| VmError::Memory {
                size,
                detail: e.to_string(),
            })?;
        let mem = GuestMem::new(mmap, size);
        if config.huge_pages {
            advise_huge_pages_above_stacks(&mem, &layout);
        }

        for seg in &image.segments {
            mem.write_bytes(seg.addr, seg.data)
                .ok_or(VmError::GuestWrite("an image segment"))?;
        }
        mem.write_bytes(GDT_ADDR, &cpu::gdt_page())
            .ok_or(VmError::GuestWrite("the GDT"))?;
        mem.write_bytes(TSS_ADDR, &cpu::tss())
            .ok_or(VmError::GuestWrite("the TSS"))?;
        mem.write_bytes(PAGE_TABLES_ADDR, &tables.to_bytes())
            .ok_or(VmError::GuestWrite("the page tables"))?;
        mem.write_bytes(CMDLINE_ADDR, config.cmdline.as_bytes())
            .ok_or(VmError::GuestWrite("the command line"))?;
        for core in 0..layout.cpus {
            write_percore(&mem, &layout, core)?;
        }
        // The TSC frequency comes from a vCPU; it is filled in once one exists.
        // Decided once, for both sides: the guest's idle policy (boot flags) and the
        // I/O thread's poll window must agree.
        let cpus_shared = config.net.is_some()
            && crate::virtio::net::shares_cpus_with_vcpus(config.cpus as usize);
        write_boot_info(&mem, &layout, &config, boot_flags(cpus_shared), 0)?;
        let console =
            Console::new(&mem, &layout, sink).ok_or(VmError::GuestWrite("the console rings"))?;

        log::debug!("guest memory written");
        let backends = match &config.net {
            Some(net) => Some(open_backends(net, layout.cpus)?),
            None => None,
        };
        let kvm = match config.kvm_fd {
            None => Kvm::new().map_err(VmError::OpenKvm)?,
            Some(fd) => {
                use std::os::fd::FromRawFd;
                // SAFETY: `kvm_fd` is documented as an open /dev/kvm the VM takes over;
                // nothing else in this process uses or closes it. A descriptor that is not
                // KVM fails the API version check below instead of being used.
                let kvm = unsafe { Kvm::from_raw_fd(fd) };
                if kvm.get_api_version() != 12 {
                    return Err(VmError::OpenKvm(kvm_ioctls::Error::new(libc::ENOTTY)));
                }
                kvm
            }
        };
        let vm = kvm.create_vm().map_err(VmError::CreateVm)?;
        log::debug!("VM created");
        sys::register_memory(&vm, mem.inner()).map_err(kvm_err("KVM_SET_USER_MEMORY_REGION"))?;
        let cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
        let mut vcpus = Vec::new();
        let mut tsc_khz = 0;
        for core in 0..layout.cpus {
            let vcpu = vm
                .create_vcpu(u64::from(core))
                .map_err(kvm_err("KVM_CREATE_VCPU"))?;
            vcpu.set_cpuid2(&cpuid).map_err(kvm_err("KVM_SET_CPUID2"))?;
            let mut sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
            cpu::setup_sregs(&mut sregs, layout.percore(core));
            vcpu.set_sregs(&sregs).map_err(kvm_err("KVM_SET_SREGS"))?;
            let (_, stack_top) = layout.stack(core);
            let regs = cpu::initial_regs(image.entry, stack_top, BOOT_INFO_ADDR, core);
            vcpu.set_regs(&regs).map_err(kvm_err("KVM_SET_REGS"))?;
            if core == 0 {
                tsc_khz = vcpu.get_tsc_khz().unwrap_or(0);
            }
            let kick = EventFd::new(EFD_NONBLOCK).map_err(|source| VmError::Os {
                what: "creating a kick eventfd",
                source,
            })?;
            vm.register_ioevent(&kick, &IoEventAddress::Pio(u64::from(KICK_PORT)), core)
                .map_err(kvm_err("KVM_IOEVENTFD"))?;
            vcpus.push((vcpu, kick));
        }
        log::debug!("vCPUs created");
        mem.write_u64(
            BOOT_INFO_ADDR + offset_of!(BootInfo, tsc_khz) as u64,
            u64::from(tsc_khz),
        )
        .ok_or(VmError::GuestWrite("the boot info"))?;

        let shared = Arc::new(Shared::new(mem, console, layout.cpus));
        let net_io = match (&config.net, backends) {
            (Some(net), Some(backends)) => {
                let os = |what| move |source| VmError::Os { what, source };
                let device = Arc::new(
                    crate::virtio::VirtioNet::new(
                        net.mac,
                        layout.cpus as u16,
                        net.device_offload(),
                    )
                    .map_err(os("creating the virtio-net control eventfd"))?,
                );
                let mut queue_kicks = Vec::new();
                for queue in 0..device.queue_count() {
                    let kick =
                        EventFd::new(EFD_NONBLOCK).map_err(os("creating a queue eventfd"))?;
                    let notify = ebb_abi::virtio::MMIO_BASE + ebb_abi::virtio::regs::QUEUE_NOTIFY;
                    vm.register_ioevent(&kick, &IoEventAddress::Mmio(notify), u32::from(queue))
                        .map_err(kvm_err("KVM_IOEVENTFD (virtio-net notify)"))?;
                    queue_kicks.push(kick);
                }
                let mut vcpu_wakes = Vec::new();
                for (_, kick) in &vcpus {
                    vcpu_wakes.push(kick.try_clone().map_err(os("cloning a kick eventfd"))?);
                }
                let _ = shared.net.set(device.clone());
                Some(crate::virtio::IoThread {
                    device,
                    shared: shared.clone(),
                    backends,
                    queue_kicks,
                    vcpu_wakes,
                    idle_poll: crate::virtio::net::io_poll_window(cpus_shared),
                })
            }
            _ => None,
        };
        Ok(Vm {
            _kvm: kvm,
            _vm: vm,
            shared,
            vcpus,
            vcpu_threads,
            config,
            net_io,
            cpus_shared,
        })
    }

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
                    crate::hypercall::AbiError::ConsoleCorrupt { core, .. } => *core,
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

fn write_percore(mem: &GuestMem, layout: &Layout, core: u32) -> Result<(), VmError> {
    let base = layout.percore(core);
    let (bottom, top) = layout.stack(core);
    let put = |off: usize, v: u64| mem.write_u64(base + off as u64, v);
    put(offset_of!(PerCore, self_addr), base)
        .and_then(|()| mem.write_u32(base + offset_of!(PerCore, core_id) as u64, core))
        .and_then(|()| put(offset_of!(PerCore, boot_info), BOOT_INFO_ADDR))
        .and_then(|()| put(offset_of!(PerCore, stack_bottom), bottom))
        .and_then(|()| put(offset_of!(PerCore, stack_top), top))
        .and_then(|()| put(offset_of!(PerCore, console), layout.console(core)))
        .ok_or(VmError::GuestWrite("a per-core block"))
}

/// The monitor's advice to the guest ([`BootInfo::flags`]).
/// Asks for the guest's free memory (above its image, per-core blocks and stacks, from the
/// next 2 MiB boundary) on transparent huge pages, so the host can shadow the guest's
/// 2 MiB pages with 2 MiB pages: fewer guest TLB misses and far fewer faults under PVM
/// (docs/06). Not below: there the monitor writes the boot structures, and huge faults on
/// those made a small guest's boot about 0.3 ms longer. The guest's page allocator writes
/// a 4 MiB block only when it hands it out, so this does not make the host supply memory
/// the guest never uses. A failure (a kernel without THP) is not worth a warning: 4 KiB
/// pages work.
fn advise_huge_pages_above_stacks(mem: &GuestMem, layout: &Layout) {
    let size = layout.mem_size;
    let free = layout
        .stacks_end
        .next_multiple_of(crate::layout::LARGE_PAGE_SIZE);
    if free < size
        && let Err(e) = crate::sys::advise_huge_pages(mem, free, size - free)
    {
        log::debug!("guest memory stays on 4 KiB pages (MADV_HUGEPAGE: {e})");
    }
    if let Some(host) = mem.host_ptr(0, 1)
        && !host
            .addr()
            .is_multiple_of(crate::layout::LARGE_PAGE_SIZE as usize)
    {
        // KVM maps a guest page with a host huge page only where both addresses agree
        // modulo 2 MiB; kernels before about 6.7 do not align large anonymous mappings,
        // so there huge pages save host faults but not guest TLB misses.
        log::info!(
            "guest memory at {host:p} is not 2 MiB-aligned: the guest keeps 4 KiB TLB entries"
        );
    }
}

fn boot_flags(cpus_shared: bool) -> u32 {
    if cpus_shared {
        BOOT_FLAG_SHARED_CPUS
    } else {
        0
    }
}

fn write_boot_info(
    mem: &GuestMem,
    layout: &Layout,
    config: &VmConfig,
    flags: u32,
    tsc_khz: u32,
) -> Result<(), VmError> {
    let b = BOOT_INFO_ADDR;
    let u64_at = |off: usize, v: u64| mem.write_u64(b + off as u64, v);
    let u32_at = |off: usize, v: u32| mem.write_u32(b + off as u64, v);
    let map = layout.memory_map();
    debug_assert!(map.len() <= MAX_MEM_REGIONS);
    let mut ok = u64_at(offset_of!(BootInfo, magic), BOOT_MAGIC)
        .and_then(|()| u32_at(offset_of!(BootInfo, version), BOOT_VERSION))
        .and_then(|()| u32_at(offset_of!(BootInfo, size), size_of::<BootInfo>() as u32))
        .and_then(|()| u32_at(offset_of!(BootInfo, cpu_count), layout.cpus))
        .and_then(|()| {
            mem.write_bytes(
                b + offset_of!(BootInfo, hypercall_port) as u64,
                &HYPERCALL_PORT.to_le_bytes(),
            )
        })
        .and_then(|()| {
            mem.write_bytes(
                b + offset_of!(BootInfo, kick_port) as u64,
                &KICK_PORT.to_le_bytes(),
            )
        })
        .and_then(|()| u64_at(offset_of!(BootInfo, tsc_khz), u64::from(tsc_khz)))
        .and_then(|()| u64_at(offset_of!(BootInfo, mem_size), layout.mem_size))
        .and_then(|()| u64_at(offset_of!(BootInfo, cmdline_addr), CMDLINE_ADDR))
        .and_then(|()| {
            u64_at(
                offset_of!(BootInfo, cmdline_len),
                config.cmdline.len() as u64,
            )
        })
        .and_then(|()| u64_at(offset_of!(BootInfo, percore_addr), layout.percore_start))
        .and_then(|()| u64_at(offset_of!(BootInfo, percore_stride), PERCORE_STRIDE))
        .and_then(|()| u64_at(offset_of!(BootInfo, image_start), layout.image_start))
        .and_then(|()| u64_at(offset_of!(BootInfo, image_end), layout.image_end))
        .and_then(|()| u32_at(offset_of!(BootInfo, region_count), map.len() as u32))
        .and_then(|()| u32_at(offset_of!(BootInfo, host), HOST_EBB_VMM))
        .and_then(|()| u32_at(offset_of!(BootInfo, flags), flags));
    for (i, r) in map.iter().take(MAX_MEM_REGIONS).enumerate() {
        let at = offset_of!(BootInfo, regions) + i * size_of::<MemRegion>();
        ok = ok
            .and_then(|()| u64_at(at + offset_of!(MemRegion, start), r.start))
            .and_then(|()| u64_at(at + offset_of!(MemRegion, len), r.len))
            .and_then(|()| u32_at(at + offset_of!(MemRegion, kind), r.kind));
    }
    ok.ok_or(VmError::GuestWrite("the boot info"))
}

/// The faults of `--net-faults` that passt survives, as (toward the guest, toward passt).
///
/// passt (Debian's 0.0~git20230309) never sends a pure ACK again once it has sent it, and
/// answers a retransmission of data it already acknowledged with nothing (RFC 9293 says
/// it must acknowledge it): a dropped — or corrupted, which the guest's checksum turns
/// into dropped — ACK on its way to the guest stalls that connection for good, whatever
/// the guest does. And passt does not verify the checksums of frames from the guest, so a
/// corrupted one reaches the host socket corrupted. So toward the guest only reordering
/// and duplication are made, toward passt drops too, corruption nowhere (a warning says
/// so). The TAP backend gets every fault both ways: Linux repairs all of them.
fn passt_faults(
    faults: ebb_net_driver::FaultConfig,
) -> (ebb_net_driver::FaultConfig, ebb_net_driver::FaultConfig) {
    use ebb_net_driver::Probability;
    if faults.drop.is_possible() || faults.corrupt.is_possible() {
        log::warn!(
            "--net user: passt cannot recover a frame lost on its way to the guest, nor \
             check one corrupted on its way to it: drops are made toward passt only, \
             corruption not at all (use --net tap for both)"
        );
    }
    let rx = faults
        .with_drop(Probability::NEVER)
        .with_corrupt(Probability::NEVER);
    let tx = faults.with_corrupt(Probability::NEVER);
    (rx, tx)
}

/// Opens the backends of `net`: one TAP queue per vCPU, or one passt.
fn open_backends(
    net: &NetConfig,
    cpus: u32,
) -> Result<Vec<Box<dyn crate::virtio::Backend>>, VmError> {
    use crate::virtio::backend::{Passt, open_tap};
    let mut backends: Vec<Box<dyn crate::virtio::Backend>> = match &net.backend {
        NetBackend::Tap(name) => open_tap(name, cpus as usize, net.checksum_offload())?
            .into_iter()
            .map(|tap| Box::new(tap) as Box<dyn crate::virtio::Backend>)
            .collect(),
        NetBackend::User(forwards) => vec![Box::new(Passt::start(forwards, net.mac)?)],
    };
    if let Some((faults, seed)) = net.faults {
        let (rx_faults, tx_faults) = match &net.backend {
            NetBackend::Tap(_) => (faults, faults),
            NetBackend::User(_) => passt_faults(faults),
        };
        backends = backends
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                Box::new(
                    ebb_net_driver::FaultInjector::new(b, seed.wrapping_add(i as u64))
                        .with_rx_faults(rx_faults)
                        .with_tx_faults(tx_faults),
                ) as Box<dyn crate::virtio::Backend>
            })
            .collect();
    }
    Ok(backends)
}
