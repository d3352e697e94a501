//! What the monitor writes for the guest at boot besides the image and page tables: the
//! boot info and each core's per-core block.

use super::{VmConfig, VmError};
use crate::guest::GuestMem;
use crate::layout::Layout;
use ebb_abi::{
    BOOT_FLAG_SHARED_CPUS, BOOT_INFO_ADDR, BOOT_MAGIC, BOOT_VERSION, BootInfo, CMDLINE_ADDR,
    HOST_EBB_VMM, HYPERCALL_PORT, KICK_PORT, MAX_MEM_REGIONS, MemRegion, PERCORE_STRIDE, PerCore,
};
use std::mem::{offset_of, size_of};

pub(super) fn write_percore(mem: &GuestMem, layout: &Layout, core: u32) -> Result<(), VmError> {
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

pub(super) fn boot_flags(cpus_shared: bool) -> u32 {
    if cpus_shared {
        BOOT_FLAG_SHARED_CPUS
    } else {
        0
    }
}

pub(super) fn write_boot_info(
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
