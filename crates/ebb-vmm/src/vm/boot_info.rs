//! What the monitor writes for the guest at boot besides the image: the GDT, TSS and page
//! tables, the boot info and each core's per-core block — their contents from
//! [`ebb_boot`] (shared with the PVH stub), copied into guest memory here.

use super::{VmConfig, VmError};
use crate::guest::GuestMem;
use crate::layout::{Layout, PAGE_SIZE};
use crate::paging::PageTables;
use ebb_abi::{
    BOOT_FLAG_SHARED_CPUS, BOOT_INFO_ADDR, GDT_ADDR, HOST_EBB_VMM, PAGE_TABLES_ADDR, TSS_ADDR,
    TSS_SIZE,
};
use ebb_boot::boot_info::{
    BOOT_INFO_BYTES, PER_CORE_BYTES, boot_info, encode_boot_info, encode_per_core, per_core,
};

/// Writes the GDT page, the TSS and `tables`.
pub(super) fn write_descriptor_tables(mem: &GuestMem, tables: &PageTables) -> Result<(), VmError> {
    let mut gdt = [0u8; PAGE_SIZE as usize];
    ebb_boot::cpu::write_gdt(&mut gdt);
    mem.write_bytes(GDT_ADDR, &gdt)
        .ok_or(VmError::GuestWrite("the GDT"))?;
    let mut tss = [0u8; TSS_SIZE as usize];
    ebb_boot::cpu::write_tss(&mut tss);
    mem.write_bytes(TSS_ADDR, &tss)
        .ok_or(VmError::GuestWrite("the TSS"))?;
    mem.write_bytes(PAGE_TABLES_ADDR, &tables.to_bytes())
        .ok_or(VmError::GuestWrite("the page tables"))
}

pub(super) fn write_percore(mem: &GuestMem, layout: &Layout, core: u32) -> Result<(), VmError> {
    let mut bytes = [0u8; PER_CORE_BYTES];
    encode_per_core(&per_core(layout, core), &mut bytes);
    mem.write_bytes(layout.percore(core), &bytes)
        .ok_or(VmError::GuestWrite("a per-core block"))
}

/// The monitor's advice to the guest ([`BootInfo::flags`](ebb_abi::BootInfo::flags)).
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
    let info = boot_info(
        layout,
        config.cmdline.len() as u64,
        u64::from(tsc_khz),
        HOST_EBB_VMM,
        flags,
    );
    let mut bytes = [0u8; BOOT_INFO_BYTES];
    encode_boot_info(&info, &mut bytes);
    mem.write_bytes(BOOT_INFO_ADDR, &bytes)
        .ok_or(VmError::GuestWrite("the boot info"))
}
