//! Building a VM: the image loaded and the boot structures written into guest memory
//! before the VM exists, then the VM, its vCPUs and its virtio-net device created.

use super::boot_info::{boot_flags, write_boot_info, write_descriptor_tables, write_percore};
use super::network::open_backends;
use super::threads::{VcpuThread, spawn_vcpu_threads};
use super::{Vm, VmConfig, VmError, kvm_err};
use crate::console::{Console, Sink};
use crate::cpu;
use crate::guest::GuestMem;
use crate::image::Image;
use crate::layout::{Layout, LayoutError};
use crate::paging::PageTables;
use crate::shared::Shared;
use crate::sys;
use crate::window::SharedWindow;
use ebb_abi::{BOOT_INFO_ADDR, BootInfo, CMDLINE_ADDR, DOORBELL_PORT, KICK_PORT};
use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
use kvm_ioctls::{IoEventAddress, Kvm, NoDatamatch, VmFd};
use std::mem::offset_of;
use std::sync::Arc;
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

impl Vm {
    /// Builds a VM for the ELF image `bytes`: validates and loads it, writes the boot
    /// structures and creates the vCPUs. Console output goes to `sink`.
    pub fn new(bytes: &[u8], config: VmConfig, sink: Sink) -> Result<Self, VmError> {
        let image = Image::parse(bytes)?;
        let layout = Layout::new(
            config.mem_size,
            config.cpus,
            image.start,
            image.end,
            config.shared_window,
        )?;
        let vcpu_threads = spawn_vcpu_threads(layout.cpus, config.pin, config.vcpu_avoid_cpu)?;
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
        write_descriptor_tables(&mem, &tables)?;
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
                let kvm = sys::kvm_from_inherited_fd(fd);
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
        let window = shared_window(&vm, &mem, &layout, &vcpus)?;
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
                    crate::virtio::VirtioNetDevice::new(
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
                Some(crate::virtio::IoThread {
                    device,
                    shared: shared.clone(),
                    backends,
                    queue_kicks,
                    vcpu_wakes,
                    idle_poll: crate::virtio::net::io_poll_window(cpus_shared),
                    guest_first: cpus_shared,
                    placement: traffic_placement(&config, net, &vcpu_threads),
                })
            }
            _ => None,
        };
        let net = net_io.as_ref().map(|io| Arc::clone(&io.device));
        Ok(Vm {
            _kvm: kvm,
            _vm: vm,
            shared,
            vcpus,
            vcpu_threads,
            config,
            net,
            net_io,
            cpus_shared,
            window,
        })
    }
}

/// The layout's shared window, if it has one: its doorbell registered on
/// [`DOORBELL_PORT`] and duplicates of the vCPUs' kick eventfds for
/// [`SharedWindow::wake_vcpu`].
fn shared_window(
    vm: &VmFd,
    mem: &GuestMem,
    layout: &Layout,
    vcpus: &[(kvm_ioctls::VcpuFd, EventFd)],
) -> Result<Option<SharedWindow>, VmError> {
    if layout.shared_window == 0 {
        return Ok(None);
    }
    let os = |what| move |source| VmError::Os { what, source };
    let doorbell = EventFd::new(EFD_NONBLOCK).map_err(os("creating the doorbell eventfd"))?;
    // No datamatch: any value rings. kvm-ioctls then registers length 0, which KVM takes
    // as "any width at exactly this port", so the guest's 32-bit `out` is claimed in the
    // host kernel like a kick and never reaches the monitor.
    vm.register_ioevent(
        &doorbell,
        &IoEventAddress::Pio(u64::from(DOORBELL_PORT)),
        NoDatamatch,
    )
    .map_err(kvm_err("KVM_IOEVENTFD (doorbell)"))?;
    let mut kicks = Vec::with_capacity(vcpus.len());
    for (_, kick) in vcpus {
        kicks.push(kick.try_clone().map_err(os("cloning a kick eventfd"))?);
    }
    let len = usize::try_from(layout.shared_window)
        .map_err(|_| VmError::GuestWrite("the shared window (larger than this address space)"))?;
    SharedWindow::new(
        mem.inner().clone(),
        layout.shared_window_start(),
        len,
        doorbell,
        kicks,
    )
    .map(Some)
    .ok_or(VmError::GuestWrite(
        "the shared window (outside guest memory)",
    ))
}

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

/// Environment variable that turns [`TrafficPlacement`](crate::virtio::TrafficPlacement)
/// off (`0`), for measuring without it.
pub const FOLLOW_TRAFFIC_ENV: &str = "EBB_VMM_FOLLOW_TRAFFIC";

/// The device thread moves the vCPUs onto the front end's CPU for a bulk stream, and
/// itself off it ([`TrafficPlacement`](crate::virtio::TrafficPlacement)), when: the vCPUs
/// avoid a front end's CPU (`vcpu_avoid_cpu`), the link is an external one (the
/// user-mode network: where it was measured; on a TAP device the same move did not
/// raise the bulk rate, 0.75x against 0.78-0.80x), and the threads outnumber the CPUs:
/// one vCPU on two CPUs (with a spare CPU there is nothing to trade).
fn traffic_placement(
    config: &VmConfig,
    net: &super::VmNetwork,
    vcpu_threads: &[VcpuThread],
) -> Option<crate::virtio::TrafficPlacement> {
    let front_cpu = config.vcpu_avoid_cpu?;
    if std::env::var(FOLLOW_TRAFFIC_ENV).is_ok_and(|v| v.trim() == "0")
        || !matches!(net.link, super::HostLinkConfig::External(_))
    {
        return None;
    }
    // One vCPU: the measured case. Several would all land on the front end's CPU
    // during a stream, polling beside each other and it.
    let cpus = rustix::thread::sched_getaffinity(None).ok()?.count() as usize;
    if vcpu_threads.len() != 1 || cpus != 2 {
        return None;
    }
    Some(crate::virtio::TrafficPlacement::new(
        front_cpu,
        vcpu_threads.iter().map(|t| t.tid.clone()).collect(),
    ))
}
