//! The boot info and the per-core blocks of a [`Layout`], as values and as the bytes the
//! guest reads: the monitor copies the bytes into guest memory, the PVH stub stores the
//! values at their addresses. Either way each field is decided here, once.

use crate::layout::Layout;
use core::mem::{offset_of, size_of};
use ebb_abi::{
    BOOT_INFO_ADDR, BOOT_MAGIC, BOOT_VERSION, BootInfo, CMDLINE_ADDR, HYPERCALL_PORT, KICK_PORT,
    MAX_MEM_REGIONS, MemRegion, PERCORE_STRIDE, PerCore,
};

/// Bytes of an encoded [`BootInfo`].
pub const BOOT_INFO_BYTES: usize = size_of::<BootInfo>();
/// Bytes of an encoded [`PerCore`] header (the runtime's part of the block follows).
pub const PER_CORE_BYTES: usize = size_of::<PerCore>();

// The layout's memory map fits the boot info's.
const _: () = assert!(crate::layout::MEMORY_MAP_LEN <= MAX_MEM_REGIONS);

/// The boot info of `layout`: its memory map, a command line of `cmdline_len` bytes at
/// [`CMDLINE_ADDR`], the TSC frequency (`tsc_khz`, 0 when not known yet), who booted the
/// image (`host`, a `HOST_*`) and the monitor's advice (`flags`, `BOOT_FLAG_*` bits).
pub fn boot_info(
    layout: &Layout,
    cmdline_len: u64,
    tsc_khz: u64,
    host: u32,
    flags: u32,
) -> BootInfo {
    let map = layout.memory_map();
    let mut regions = [MemRegion::default(); MAX_MEM_REGIONS];
    regions[..map.len()].copy_from_slice(&map);
    BootInfo {
        magic: BOOT_MAGIC,
        version: BOOT_VERSION,
        size: BOOT_INFO_BYTES as u32,
        cpu_count: layout.cpus,
        hypercall_port: HYPERCALL_PORT,
        kick_port: KICK_PORT,
        tsc_khz,
        mem_size: layout.mem_size,
        cmdline_addr: CMDLINE_ADDR,
        cmdline_len,
        percore_addr: layout.percore_start,
        percore_stride: PERCORE_STRIDE,
        image_start: layout.image_start,
        image_end: layout.image_end,
        region_count: map.len() as u32,
        reserved: 0,
        regions,
        host,
        flags,
    }
}

/// The [`PerCore`] header of core `core` of `layout`.
pub fn per_core(layout: &Layout, core: u32) -> PerCore {
    let (stack_bottom, stack_top) = layout.stack(core);
    PerCore {
        self_addr: layout.percore(core),
        core_id: core,
        reserved: 0,
        boot_info: BOOT_INFO_ADDR,
        stack_bottom,
        stack_top,
        console: layout.console(core),
    }
}

/// Little-endian fields at their `#[repr(C)]` offsets.
struct Fields<'a>(&'a mut [u8]);

impl Fields<'_> {
    fn u16(&mut self, at: usize, v: u16) {
        self.0[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes `info` as the guest reads it into `out` ([`BOOT_INFO_BYTES`] bytes; padding
/// and reserved fields zero).
///
/// # Panics
///
/// If `out` is not [`BOOT_INFO_BYTES`] bytes long.
pub fn encode_boot_info(info: &BootInfo, out: &mut [u8]) {
    assert_eq!(out.len(), BOOT_INFO_BYTES, "the boot-info slice");
    out.fill(0);
    let mut f = Fields(out);
    f.u64(offset_of!(BootInfo, magic), info.magic);
    f.u32(offset_of!(BootInfo, version), info.version);
    f.u32(offset_of!(BootInfo, size), info.size);
    f.u32(offset_of!(BootInfo, cpu_count), info.cpu_count);
    f.u16(offset_of!(BootInfo, hypercall_port), info.hypercall_port);
    f.u16(offset_of!(BootInfo, kick_port), info.kick_port);
    f.u64(offset_of!(BootInfo, tsc_khz), info.tsc_khz);
    f.u64(offset_of!(BootInfo, mem_size), info.mem_size);
    f.u64(offset_of!(BootInfo, cmdline_addr), info.cmdline_addr);
    f.u64(offset_of!(BootInfo, cmdline_len), info.cmdline_len);
    f.u64(offset_of!(BootInfo, percore_addr), info.percore_addr);
    f.u64(offset_of!(BootInfo, percore_stride), info.percore_stride);
    f.u64(offset_of!(BootInfo, image_start), info.image_start);
    f.u64(offset_of!(BootInfo, image_end), info.image_end);
    f.u32(offset_of!(BootInfo, region_count), info.region_count);
    f.u32(offset_of!(BootInfo, reserved), info.reserved);
    for (i, r) in info.regions.iter().enumerate() {
        let at = offset_of!(BootInfo, regions) + i * size_of::<MemRegion>();
        f.u64(at + offset_of!(MemRegion, start), r.start);
        f.u64(at + offset_of!(MemRegion, len), r.len);
        f.u32(at + offset_of!(MemRegion, kind), r.kind);
        f.u32(at + offset_of!(MemRegion, reserved), r.reserved);
    }
    f.u32(offset_of!(BootInfo, host), info.host);
    f.u32(offset_of!(BootInfo, flags), info.flags);
}

/// Writes `block` as the guest reads it into `out` ([`PER_CORE_BYTES`] bytes).
///
/// # Panics
///
/// If `out` is not [`PER_CORE_BYTES`] bytes long.
pub fn encode_per_core(block: &PerCore, out: &mut [u8]) {
    assert_eq!(out.len(), PER_CORE_BYTES, "the per-core slice");
    out.fill(0);
    let mut f = Fields(out);
    f.u64(offset_of!(PerCore, self_addr), block.self_addr);
    f.u32(offset_of!(PerCore, core_id), block.core_id);
    f.u32(offset_of!(PerCore, reserved), block.reserved);
    f.u64(offset_of!(PerCore, boot_info), block.boot_info);
    f.u64(offset_of!(PerCore, stack_bottom), block.stack_bottom);
    f.u64(offset_of!(PerCore, stack_top), block.stack_top);
    f.u64(offset_of!(PerCore, console), block.console);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_abi::{CONSOLE_ADDR, CONSOLE_STRIDE, HOST_EBB_VMM, IMAGE_BASE, MemKind};

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }
    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn the_boot_info_encodes_at_the_documented_offsets() {
        let l = Layout::new(64 << 20, 2, IMAGE_BASE, IMAGE_BASE + 0x5000, 0).unwrap();
        let info = boot_info(&l, 7, 2_000_000, HOST_EBB_VMM, 1);
        let mut bytes = [0xaa; BOOT_INFO_BYTES];
        encode_boot_info(&info, &mut bytes);
        assert_eq!(&bytes[..8], b"EBBFLOW1");
        assert_eq!(u32_at(&bytes, 16), 2, "cpu_count");
        assert_eq!(u64_at(&bytes, 24), 2_000_000, "tsc_khz");
        assert_eq!(u64_at(&bytes, 32), 64 << 20, "mem_size");
        assert_eq!(u64_at(&bytes, 48), 7, "cmdline_len");
        assert_eq!(u32_at(&bytes, 88), 5, "region_count");
        // The last region: the free memory after the stacks.
        let last = 96 + 4 * 24;
        assert_eq!(u64_at(&bytes, last), l.stacks_end);
        assert_eq!(u64_at(&bytes, last + 8), (64 << 20) - l.stacks_end);
        assert_eq!(u32_at(&bytes, last + 16), MemKind::Usable as u32);
        assert!(bytes[96 + 5 * 24..96 + 8 * 24].iter().all(|&b| b == 0));
        assert_eq!(u32_at(&bytes, 96 + 8 * 24), HOST_EBB_VMM, "host");
        assert_eq!(u32_at(&bytes, 96 + 8 * 24 + 4), 1, "flags");
    }

    #[test]
    fn a_per_core_block_names_its_core_stack_and_console() {
        let l = Layout::new(64 << 20, 2, IMAGE_BASE, IMAGE_BASE + 0x5000, 0).unwrap();
        let block = per_core(&l, 1);
        let mut bytes = [0xaa; PER_CORE_BYTES];
        encode_per_core(&block, &mut bytes);
        assert_eq!(
            u64_at(&bytes, 0),
            l.percore(1),
            "gs:[0] is the block itself"
        );
        assert_eq!(u32_at(&bytes, 8), 1);
        assert_eq!(u32_at(&bytes, 12), 0);
        assert_eq!(u64_at(&bytes, 16), BOOT_INFO_ADDR);
        assert_eq!((u64_at(&bytes, 24), u64_at(&bytes, 32)), l.stack(1));
        assert_eq!(u64_at(&bytes, 40), CONSOLE_ADDR + CONSOLE_STRIDE);
    }

    #[test]
    fn the_boot_info_carries_the_shared_window_as_the_last_region() {
        let window = 1 << 20;
        let l = Layout::new(64 << 20, 2, IMAGE_BASE, IMAGE_BASE + 0x5000, window).unwrap();
        let info = boot_info(&l, 0, 0, HOST_EBB_VMM, 0);
        let mut bytes = [0xaa; BOOT_INFO_BYTES];
        encode_boot_info(&info, &mut bytes);
        assert_eq!(u32_at(&bytes, 88), 6, "region_count");
        let usable = 96 + 4 * 24;
        assert_eq!(
            u64_at(&bytes, usable + 8),
            (64 << 20) - window - l.stacks_end
        );
        assert_eq!(u32_at(&bytes, usable + 16), MemKind::Usable as u32);
        let shared = 96 + 5 * 24;
        assert_eq!(u64_at(&bytes, shared), (64 << 20) - window);
        assert_eq!(u64_at(&bytes, shared + 8), window);
        assert_eq!(u32_at(&bytes, shared + 16), MemKind::Shared as u32);
        assert!(bytes[96 + 6 * 24..96 + 8 * 24].iter().all(|&b| b == 0));
    }
}
