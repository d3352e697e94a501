//! # ebb-abi — the boot protocol and hypercall ABI between monitor and guest
//!
//! The interface two programs share: `ebb-vmm` (the monitor) and `ebb-native` (the guest
//! runtime) both depend on this crate and on nothing of each other.
//!
//! This crate is the single source of truth for both sides: the monitor writes these
//! structures into guest memory field by field (at `core::mem::offset_of!` offsets), the
//! guest reads them through `#[repr(C)]` references. Under a standard hypervisor the
//! image's own PVH stub (`pvh::boot`) writes the same structures at the same addresses
//! and sets [`BootInfo::host`] to [`HOST_PVH`]. Everything here is plain data, builds
//! on any target and has no `unsafe`. `docs/06-native-monitor.md` describes the protocol in
//! prose; change both together and bump [`BOOT_VERSION`].
//!
//! # Guest-physical memory layout (identity-mapped, virtual = physical)
//!
//! | range | contents | mapping |
//! |---|---|---|
//! | `0x0000..0x1000` | null guard | not present |
//! | [`GDT_ADDR`] (4 KiB) | GDT | supervisor only |
//! | [`TSS_ADDR`] (12 KiB) | 64-bit TSS with an all-zero I/O permission bitmap | supervisor only |
//! | [`PAGE_TABLES_ADDR`]`..`[`PAGE_TABLES_END`] | page tables | not mapped |
//! | [`BOOT_INFO_ADDR`] (4 KiB) | [`BootInfo`] | user, read-only |
//! | [`CMDLINE_ADDR`] ([`CMDLINE_MAX`]) | command line, UTF-8, not NUL-terminated | user, read-only |
//! | [`CONSOLE_ADDR`] + core × [`CONSOLE_STRIDE`] | [`ConsoleRing`] per core | user, read-write |
//! | [`IMAGE_BASE`]`..image_end` | the ELF image's segments | user, read-write, executable |
//! | `percore_addr` = `image_end` + core × [`PERCORE_STRIDE`] | per-core blocks ([`PerCore`] header, then the runtime's part) | user, read-write |
//! | after the per-core blocks | per-core stacks, each below a 4 KiB guard page | user, read-write |
//! | the rest up to the shared window | free ([`MemKind::Usable`]) | user, read-write |
//! | the top `shared` bytes, if the VM has a shared window | [`MemKind::Shared`] | user, read-write |

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod virtio;

/// `BootInfo::magic`: "EBBFLOW1" in little-endian byte order.
pub const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"EBBFLOW1");
/// Version of this protocol; the guest refuses a block with another one. Version 3 added
/// [`BootInfo::host`] (who built the block: the monitor or the PVH entry stub), version 4
/// [`BootInfo::flags`], version 5 [`MemKind::Shared`] and [`DOORBELL_PORT`].
pub const BOOT_VERSION: u32 = 5;

/// [`BootInfo::flags`]: every vCPU shares its host CPU with one of the monitor's device
/// threads (the process may run on no more CPUs than it has vCPUs), and runs at a lower
/// host priority than that thread, which preempts it the moment it has work. An idle
/// core should then poll for a long while (a millisecond) before the WAIT hypercall: its
/// polling costs the device thread nothing, and a WAIT costs an exit and a wake-up of
/// 17–110 µs each under the nested virtualization measured here.
///
/// (Until the monitor lowered the vCPUs' priority, this flag asked for the opposite: no
/// polling at all, since a polling vCPU kept the device thread off the CPU.)
pub const BOOT_FLAG_SHARED_CPUS: u32 = 1 << 0;

/// GDT page.
pub const GDT_ADDR: u64 = 0x1000;
/// The 64-bit TSS and its I/O permission bitmap (three pages).
///
/// Under the nested PVM KVM of our machines, RFLAGS.IOPL does not survive into ring 3, so
/// `out` at CPL 3 raises #GP, which KVM emulates; the emulator then consults the TSS I/O
/// permission bitmap. An all-zero bitmap lets the hypercall and kick ports through there
/// and on any other KVM (where IOPL 3 alone would do).
pub const TSS_ADDR: u64 = 0x2000;
/// Bytes of the TSS: 104 for the TSS proper, 8 KiB of I/O bitmap (one bit per port) and
/// the terminating all-ones byte.
pub const TSS_SIZE: u64 = 104 + 8192 + 1;
/// First page-table page (the PML4).
pub const PAGE_TABLES_ADDR: u64 = 0x1_0000;
/// End (exclusive) of the page-table area.
pub const PAGE_TABLES_END: u64 = 0x8_0000;
/// The [`BootInfo`] block; the monitor passes this address in RDI.
pub const BOOT_INFO_ADDR: u64 = 0x8_0000;
/// The command line bytes.
pub const CMDLINE_ADDR: u64 = 0x8_1000;
/// Longest command line, in bytes.
pub const CMDLINE_MAX: u64 = 0x1000;
/// Size of, and distance between, per-core blocks: one page for the [`PerCore`] header
/// and the runtime's per-core words, then 32 KiB for ebb-core's Ebb translation table
/// (`ebb_core::percore::MAX_EBBS` pointers; the guest runtime checks at compile time that
/// ebb-core's GS layout fits). The blocks follow the image, core `i`'s at
/// `BootInfo::percore_addr + i * PERCORE_STRIDE`; each vCPU's GS base points at its own.
pub const PERCORE_STRIDE: u64 = 0x9000;
/// First console ring; core `i`'s is at `CONSOLE_ADDR + i * CONSOLE_STRIDE`.
pub const CONSOLE_ADDR: u64 = 0x10_0000;
/// Distance between console rings (header and data).
pub const CONSOLE_STRIDE: u64 = 0x4000;
/// Where the ELF image's lowest segment must start (the linker script's base).
pub const IMAGE_BASE: u64 = 0x20_0000;
/// Most vCPUs a VM can have (per-core blocks and console rings are sized for this many).
pub const MAX_CPUS: u32 = 64;
/// Size of each vCPU's stack (a guard page below each is left unmapped).
pub const STACK_SIZE: u64 = 256 * 1024;

/// I/O port of the hypercall: a 32-bit `out` whose value is the guest-physical address of
/// an argument block starting with a [`HypercallHeader`]. The block must lie below 4 GiB,
/// be 8-byte aligned and lie entirely inside guest memory.
pub const HYPERCALL_PORT: u16 = 0x0eb0;
/// I/O port of the kick: a 32-bit `out` of the target core's id wakes that core from its
/// [`HC_WAIT`]. The host kernel handles it (ioeventfd): it never returns to the monitor.
pub const KICK_PORT: u16 = 0x0eb4;
/// I/O port of the host doorbell: a 32-bit `out` of any value tells the program that
/// embeds the monitor that the guest wrote something into the shared window
/// ([`MemKind::Shared`]). The host kernel handles it (ioeventfd signals an eventfd the
/// embedder polls): like a kick, it never returns to the monitor. Present only when the
/// memory map has a [`MemKind::Shared`] region; otherwise a write is an ABI violation like
/// one to any unknown port.
pub const DOORBELL_PORT: u16 = 0x0eb8;

/// Hypercall: drain the calling core's [`ConsoleRing`] now. No arguments.
pub const HC_CONSOLE_FLUSH: u32 = 1;
/// Hypercall: end the VM with an exit code ([`HcExit`]).
pub const HC_EXIT: u32 = 2;
/// Hypercall: report a panic and end the VM ([`HcPanic`]).
pub const HC_PANIC: u32 = 3;
/// Hypercall: read the wall clock and the monotonic clock ([`HcClock`]).
pub const HC_CLOCK: u32 = 4;
/// Hypercall: sleep this vCPU until a timeout or a kick ([`HcWait`]).
pub const HC_WAIT: u32 = 5;

/// Longest panic message the monitor accepts, in bytes.
pub const PANIC_MESSAGE_MAX: u64 = 64 * 1024;
/// Most backtrace frames the monitor accepts in a panic report.
pub const PANIC_FRAMES_MAX: u64 = 64;

/// The block the monitor hands every vCPU in RDI. Read-only for the guest.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BootInfo {
    /// [`BOOT_MAGIC`].
    pub magic: u64,
    /// [`BOOT_VERSION`].
    pub version: u32,
    /// `size_of::<BootInfo>()` as the monitor knows it.
    pub size: u32,
    /// Number of vCPUs; cores are numbered `0..cpu_count`.
    pub cpu_count: u32,
    /// [`HYPERCALL_PORT`].
    pub hypercall_port: u16,
    /// [`KICK_PORT`].
    pub kick_port: u16,
    /// TSC frequency in kHz (0 if the monitor could not tell).
    pub tsc_khz: u64,
    /// Bytes of guest memory, from guest-physical address 0.
    pub mem_size: u64,
    /// Guest-physical address of the command line.
    pub cmdline_addr: u64,
    /// Length of the command line in bytes.
    pub cmdline_len: u64,
    /// Guest-physical address of core 0's [`PerCore`] block.
    pub percore_addr: u64,
    /// Distance between per-core blocks.
    pub percore_stride: u64,
    /// Lowest address of the loaded image.
    pub image_start: u64,
    /// End (exclusive) of the loaded image, BSS included.
    pub image_end: u64,
    /// Number of valid entries in `regions`.
    pub region_count: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// The memory map: non-overlapping, sorted by `start`.
    pub regions: [MemRegion; MAX_MEM_REGIONS],
    /// Who booted the image: [`HOST_EBB_VMM`] (hypercalls go to the monitor) or
    /// [`HOST_PVH`] (a standard hypervisor: serial console, `isa-debug-exit`, no monitor).
    pub host: u32,
    /// `BOOT_FLAG_*` bits: the monitor's advice on how the guest should run.
    pub flags: u32,
}

/// [`BootInfo::host`]: `ebb-vmm` built the block and serves the hypercalls.
pub const HOST_EBB_VMM: u32 = 0;
/// [`BootInfo::host`]: the image's own PVH entry stub built the block under a standard
/// hypervisor (QEMU `-kernel`); there is no monitor: the console is the serial port
/// [`PVH_SERIAL_PORT`], EXIT writes [`PVH_DEBUG_EXIT_PORT`], WAIT polls the TSC.
pub const HOST_PVH: u32 = 1;
/// Under [`HOST_PVH`]: the 16550 UART (COM1) the console writes to.
pub const PVH_SERIAL_PORT: u16 = 0x3f8;
/// Under [`HOST_PVH`]: QEMU's `isa-debug-exit` device (`-device
/// isa-debug-exit,iobase=0xf4,iosize=0x04`). A 32-bit write of `code` makes QEMU exit with
/// status `(code << 1) | 1`, so codes 0..=127 survive the 8-bit process status.
pub const PVH_DEBUG_EXIT_PORT: u16 = 0xf4;

/// Capacity of [`BootInfo::regions`].
pub const MAX_MEM_REGIONS: usize = 8;

/// One entry of the memory map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRegion {
    /// First byte.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// A [`MemKind`] as `u32`.
    pub kind: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// What a [`MemRegion`] holds.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Boot structures written by the monitor (GDT, page tables, boot info, per-core
    /// blocks, console rings).
    Monitor = 1,
    /// The loaded ELF image.
    Image = 2,
    /// The per-core stacks and their guard pages.
    Stacks = 3,
    /// Free memory for the guest's allocators.
    Usable = 4,
    /// The per-core blocks (GS bases).
    PerCore = 5,
    /// The window shared with the program that embeds the monitor (the top of guest
    /// memory): both sides read and write it concurrently, and the guest's allocators
    /// never use it. [`DOORBELL_PORT`] tells the host that the guest wrote to it.
    Shared = 6,
}

/// One core's block; the vCPU's GS base points at it, so `gs:[0]` is its own address.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PerCore {
    /// Address of this block (`mov rax, gs:[0]` yields a pointer to it).
    pub self_addr: u64,
    /// This core's id.
    pub core_id: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Address of the [`BootInfo`].
    pub boot_info: u64,
    /// Lowest address of this core's stack.
    pub stack_bottom: u64,
    /// Initial RSP (one past the highest stack byte).
    pub stack_top: u64,
    /// Address of this core's [`ConsoleRing`].
    pub console: u64,
}

/// Offset in a per-core block from which the runtime keeps its own per-core data (the
/// monitor zero-fills it; bytes below belong to [`PerCore`]).
pub const PERCORE_RUNTIME_OFFSET: u64 = 256;

/// Header of a console ring: a single-producer (the guest core) single-consumer (the
/// monitor) byte ring. `head` and `tail` count bytes since boot and only grow; the byte
/// with count `n` lives at `data[n % capacity]`, data starting right after this header.
#[repr(C)]
#[derive(Debug)]
pub struct ConsoleRing {
    /// Bytes produced; written only by the guest, with release ordering after the data.
    pub head: u64,
    /// Bytes consumed; written only by the monitor.
    pub tail: u64,
    /// Data capacity in bytes (set by the monitor, constant).
    pub capacity: u64,
    /// Reserved, zero.
    pub reserved: u64,
}

/// Data bytes of every console ring.
pub const CONSOLE_CAPACITY: u64 = CONSOLE_STRIDE - core::mem::size_of::<ConsoleRing>() as u64;

/// First field of every hypercall argument block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HypercallHeader {
    /// One of the `HC_*` numbers.
    pub nr: u32,
    /// Written by the monitor: 0 on success.
    pub result: u32,
}

/// Arguments of [`HC_CONSOLE_FLUSH`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcConsoleFlush {
    /// `nr` = [`HC_CONSOLE_FLUSH`].
    pub header: HypercallHeader,
}

/// Arguments of [`HC_EXIT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcExit {
    /// `nr` = [`HC_EXIT`].
    pub header: HypercallHeader,
    /// The exit code; the monitor exits with its low 8 bits.
    pub code: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// Arguments of [`HC_PANIC`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcPanic {
    /// `nr` = [`HC_PANIC`].
    pub header: HypercallHeader,
    /// Address of the UTF-8 message (need not be valid UTF-8; the monitor is lossy).
    pub message_addr: u64,
    /// Length of the message, at most [`PANIC_MESSAGE_MAX`].
    pub message_len: u64,
    /// Address of an array of `u64` return addresses (innermost first), or 0.
    pub frames_addr: u64,
    /// Number of frames, at most [`PANIC_FRAMES_MAX`].
    pub frames_len: u64,
}

/// Arguments of [`HC_CLOCK`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcClock {
    /// `nr` = [`HC_CLOCK`].
    pub header: HypercallHeader,
    /// Written by the monitor: nanoseconds since the Unix epoch.
    pub realtime_ns: u64,
    /// Written by the monitor: nanoseconds since the monitor started the VM.
    pub monotonic_ns: u64,
}

/// Arguments of [`HC_WAIT`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HcWait {
    /// `nr` = [`HC_WAIT`].
    pub header: HypercallHeader,
    /// Longest sleep in nanoseconds; `u64::MAX` waits for a kick only, 0 just polls.
    pub timeout_ns: u64,
    /// Written by the monitor: [`WAIT_KICKED`] or [`WAIT_TIMED_OUT`].
    pub woken_by: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// [`HcWait::woken_by`]: another core kicked this one (pending kicks are consumed).
pub const WAIT_KICKED: u32 = 1;
/// [`HcWait::woken_by`]: the timeout passed without a kick.
pub const WAIT_TIMED_OUT: u32 = 2;

/// Offset of the I/O permission bitmap in the TSS (right after the 104-byte TSS proper).
pub const TSS_IO_BITMAP_OFFSET: u16 = 104;
/// Entries (8 bytes each) of [`gdt_entries`]; the TSS descriptor takes the last two.
pub const GDT_ENTRIES: usize = 7;

/// The GDT both boot paths install (the monitor writes it, the PVH stub builds it): null,
/// ring-0 code and data, ring-3 code and data, and a 64-bit TSS descriptor at
/// [`selectors::TSS`] for a TSS of [`TSS_SIZE`] bytes at [`TSS_ADDR`].
pub const fn gdt_entries() -> [u64; GDT_ENTRIES] {
    /// A flat descriptor from its access byte and flags nibble.
    const fn flat(access: u64, flags: u64) -> u64 {
        0xffff | (access << 40) | (0xf << 48) | (flags << 52)
    }
    let tss_low = (TSS_SIZE - 1)
        | ((TSS_ADDR & 0xff_ffff) << 16)
        | (0x8b << 40) // present, DPL 0, type 11 = busy 64-bit TSS
        | (((TSS_ADDR >> 24) & 0xff) << 56);
    [
        0,
        flat(0x9b, 0xa), // ring-0 code: present, S, exec/read, accessed; L, G
        flat(0x93, 0xc), // ring-0 data: present, S, read/write, accessed; D/B, G
        flat(0xfb, 0xa), // ring-3 code: as ring-0 with DPL 3
        flat(0xf3, 0xc), // ring-3 data: as ring-0 with DPL 3
        tss_low,
        TSS_ADDR >> 32,
    ]
}

/// Selectors in the monitor's GDT.
pub mod selectors {
    /// Ring-0 64-bit code (present for completeness; the guest never runs at CPL 0).
    pub const KERNEL_CODE: u16 = 0x08;
    /// Ring-0 data.
    pub const KERNEL_DATA: u16 = 0x10;
    /// Ring-3 64-bit code, RPL 3.
    pub const USER_CODE: u16 = 0x18 | 3;
    /// Ring-3 data, RPL 3 (SS, DS, ES, FS, GS).
    pub const USER_DATA: u16 = 0x20 | 3;
    /// 64-bit TSS (a 16-byte descriptor).
    pub const TSS: u16 = 0x28;
}

// The layout documented in docs/06-native-monitor.md.
const _: () = {
    assert!(core::mem::offset_of!(BootInfo, tsc_khz) == 24);
    assert!(core::mem::offset_of!(BootInfo, region_count) == 88);
    assert!(core::mem::offset_of!(BootInfo, regions) == 96);
    assert!(core::mem::size_of::<BootInfo>() as u64 <= CMDLINE_ADDR - BOOT_INFO_ADDR);
    assert!(core::mem::size_of::<PerCore>() as u64 <= PERCORE_RUNTIME_OFFSET);
    assert!(PERCORE_STRIDE.is_multiple_of(0x1000));
    assert!(core::mem::offset_of!(BootInfo, host) == 96 + 24 * MAX_MEM_REGIONS);
};
