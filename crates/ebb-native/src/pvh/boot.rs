//! The PVH entry: the only code of an image that ever runs at CPL 0, and only when a
//! standard hypervisor (QEMU `-kernel IMAGE`) boots it instead of `ebb-vmm`.
//!
//! PVH (Xen's direct boot protocol, also QEMU's) finds the entry in an ELF note of type
//! `XEN_ELFNOTE_PHYS32_ENTRY` (18, name "Xen") and starts the first vCPU there in 32-bit
//! protected mode, paging off, interrupts off, no stack, EBX = the physical address of an
//! `hvm_start_info` block. From there:
//!
//! 1. `ebb_pvh_start32` (assembly, below) switches to long mode on static boot page
//!    tables that identity-map the first GiB, loads a three-entry boot GDT, and calls
//! 2. [`ebb_pvh_setup`] (Rust, ring 0, 64-bit, on a 16 KiB boot stack in the BSS), which
//!    reads the start info (memory map, command line), measures the TSC frequency, writes
//!    exactly the structures the monitor writes — boot info, command line, per-core block,
//!    page tables, GDT, TSS — at the addresses of [`crate::abi`], their contents computed
//!    by [`ebb_boot`] as the monitor's are, and
//! 3. [`enter_ring3`] loads them (CR3, GDT, TR, GS base) and `iretq`s to CPL 3 at the
//!    same `_start` the monitor enters, with the same registers (RDI = boot info, RSI = 0,
//!    RSP = the stack top, RFLAGS = IOPL 3).
//!
//! The boot info says [`HOST_PVH`], which routes the console, EXIT, WAIT and CLOCK to
//! [`super`]'s monitor-less versions. One vCPU (the others stay halted in the firmware).
//!
//! # Invariants
//!
//! * Under the monitor none of this runs: the monitor enters `_start` and ignores the note
//!   (it loads `PT_LOAD` segments only). The static boot tables and stack cost 28 KiB of
//!   image.
//! * The hypervisor's loader has zero-filled the BSS (QEMU's ELF loader does: the part of
//!   a segment past its file size is zero), so statics start at their initial values.
//! * Everything is written before it is used and nothing the hypervisor handed over is
//!   read after it may have been overwritten: the start info and command line are copied
//!   first.
//! * Memory: the RAM region of the PVH memory map that holds [`IMAGE_BASE`], up to the
//!   virtio-MMIO window ([`MAX_MEM`], as under the monitor) and rounded down to 2 MiB, is
//!   `mem_size`; the layout is the monitor's for one core ([`Layout`]): the image is
//!   followed by core 0's per-core block, a guard page and the stack, and the rest is
//!   [`MemKind::Usable`](crate::abi::MemKind::Usable).

use crate::abi::{
    BOOT_INFO_ADDR, BootInfo, CMDLINE_ADDR, CMDLINE_MAX, GDT_ADDR, GDT_ENTRIES, HOST_PVH,
    IMAGE_BASE, PAGE_TABLES_ADDR, PERCORE_STRIDE, PVH_DEBUG_EXIT_PORT, PerCore, TSS_ADDR, TSS_SIZE,
    gdt_entries, selectors,
};
use core::arch::x86_64::__cpuid;
use core::arch::{asm, global_asm};
use ebb_boot::cpu::{CR0_GUEST, CR4_FSGSBASE, CR4_GUEST, EFER_NXE, GDT_BYTES, RFLAGS_RING3};
use ebb_boot::layout::{LARGE_PAGE_SIZE, Layout, MAX_MEM};
use ebb_boot::paging::{AREA_PAGES, ENTRIES};

// The note, the 32-bit entry, the boot page tables, the boot GDT and the boot stack.
//
// Notes on the 32-bit code: the PVH contract gives no stack, so nothing is pushed before
// RSP is set; absolute addresses are fine (the image is linked where it is loaded, below
// 4 GiB, and the loader identity-places it); after the far jump the upper halves of the
// 64-bit registers are undefined, hence `movl %edi, %edi` to zero-extend the argument.
global_asm!(
    // The PVH note: namesz 4 ("Xen\0"), descsz 4 (a 32-bit physical address), type 18
    // (XEN_ELFNOTE_PHYS32_ENTRY). The linker script keeps it and puts it in a PT_NOTE.
    ".pushsection .note.Xen, \"a\", @note",
    ".balign 4",
    ".long 4",
    ".long 4",
    ".long 18",
    ".asciz \"Xen\"",
    ".balign 4",
    ".long ebb_pvh_start32",
    ".balign 4",
    ".popsection",
    //
    ".pushsection .text.ebb_pvh, \"ax\", @progbits",
    ".code32",
    ".global ebb_pvh_start32",
    ".type ebb_pvh_start32, @function",
    "ebb_pvh_start32:",
    // Keep the start-info address (EBX) as the first argument of ebb_pvh_setup.
    "    cli",
    "    cld",
    "    movl %ebx, %edi",
    // Long mode, step 1: CR3 = the boot PML4, CR4.PAE, EFER.LME.
    "    movl $ebb_pvh_boot_pml4, %eax",
    "    movl %eax, %cr3",
    "    movl %cr4, %eax",
    "    orl ${cr4_pae}, %eax",
    "    movl %eax, %cr4",
    "    movl ${efer_msr}, %ecx",
    "    rdmsr",
    "    orl ${efer_lme}, %eax",
    "    wrmsr",
    // Step 2: CR0.PG (with PE, already set) activates long mode (compatibility mode).
    "    movl %cr0, %eax",
    "    orl ${cr0_pe_pg}, %eax",
    "    movl %eax, %cr0",
    // Step 3: a GDT with a 64-bit code segment, and a far jump into it: 64-bit mode.
    "    lgdt ebb_pvh_boot_gdtr",
    "    ljmp ${kernel_code}, $ebb_pvh_start64",
    ".code64",
    "ebb_pvh_start64:",
    // Flat data segments, the boot stack, then Rust (ring 0) with the start info in RDI.
    "    movl ${kernel_data}, %eax",
    "    movl %eax, %ds",
    "    movl %eax, %es",
    "    movl %eax, %ss",
    "    movl %eax, %fs",
    "    movl %eax, %gs",
    "    leaq ebb_pvh_boot_stack_top(%rip), %rsp",
    "    movl %edi, %edi",
    "    xorl %ebp, %ebp",
    "    call ebb_pvh_setup",
    "    ud2",
    ".size ebb_pvh_start32, . - ebb_pvh_start32",
    ".popsection",
    //
    // The boot GDT: null and the final GDT's next two entries (`gdt_entries`), 64-bit
    // ring-0 code (KERNEL_CODE, 0x08) and ring-0 data (KERNEL_DATA, 0x10), whose accessed
    // bits are preset so the CPU never writes to it. Then its 6-byte GDTR.
    ".pushsection .rodata.ebb_pvh, \"a\", @progbits",
    ".balign 8",
    "ebb_pvh_boot_gdt:",
    ".quad 0",
    ".quad {gdt_kernel_code}",
    ".quad {gdt_kernel_data}",
    "ebb_pvh_boot_gdtr:",
    ".word 23",
    ".long ebb_pvh_boot_gdt",
    ".popsection",
    //
    // The boot page tables: PML4[0] -> PDPT[0] -> one PD of 512 2-MiB pages, present and
    // writable: the first GiB identity-mapped, supervisor only. Used only until
    // enter_ring3 loads the real tables.
    ".pushsection .data.ebb_pvh, \"aw\", @progbits",
    ".balign 4096",
    "ebb_pvh_boot_pml4:",
    ".quad ebb_pvh_boot_pdpt + 0x3",
    ".fill 511, 8, 0",
    "ebb_pvh_boot_pdpt:",
    ".quad ebb_pvh_boot_pd + 0x3",
    ".fill 511, 8, 0",
    "ebb_pvh_boot_pd:",
    ".set ebb_pvh_page, 0",
    ".rept 512",
    ".quad (ebb_pvh_page << 21) | 0x83",
    ".set ebb_pvh_page, ebb_pvh_page + 1",
    ".endr",
    ".popsection",
    //
    // The ring-0 stack of ebb_pvh_setup (abandoned at iretq).
    ".pushsection .bss.ebb_pvh, \"aw\", @nobits",
    ".balign 16",
    "ebb_pvh_boot_stack:",
    ".skip 16384",
    "ebb_pvh_boot_stack_top:",
    ".popsection",
    cr4_pae = const ebb_boot::cpu::CR4_PAE,
    efer_msr = const EFER_MSR,
    efer_lme = const ebb_boot::cpu::EFER_LME,
    cr0_pe_pg = const ebb_boot::cpu::CR0_PE | ebb_boot::cpu::CR0_PG,
    kernel_code = const selectors::KERNEL_CODE,
    kernel_data = const selectors::KERNEL_DATA,
    gdt_kernel_code = const gdt_entries()[1],
    gdt_kernel_data = const gdt_entries()[2],
    options(att_syntax),
);

unsafe extern "C" {
    /// End of the image, BSS included (the linker script's `__image_end`).
    static __image_end: u8;
    /// The ring-3 entry both boot paths share (`entry.rs`).
    fn _start() -> !;
}

/// `hvm_start_info` (Xen `public/arch-x86/hvm/start_info.h`), what EBX points at.
#[repr(C)]
#[derive(Clone, Copy)]
struct StartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    /// Version 1 and later.
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

/// One `hvm_memmap_table_entry` (E820 types; 1 = RAM).
#[repr(C)]
#[derive(Clone, Copy)]
struct MemmapEntry {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

const START_INFO_MAGIC: u32 = 0x336e_c578;
const E820_RAM: u32 = 1;
/// Everything the stub touches before the real tables are loaded lies in the boot tables'
/// first GiB.
const BOOT_MAPPED: u64 = 1 << 30;
/// Assumed when the start info has no memory map (version 0).
const FALLBACK_MEM: u64 = 32 << 20;
/// Exit code when the start info or the memory is unusable (the boot-info error code).
const EXIT_BAD_BOOT: u32 = 0xeb;

/// Ring 0, 64-bit, on the boot stack: build the monitor's structures from the PVH start
/// info, then enter `_start` at CPL 3.
#[unsafe(no_mangle)]
extern "C" fn ebb_pvh_setup(start_info_addr: u64) -> ! {
    super::BOOT_TSC.store(crate::arch::rdtsc(), core::sync::atomic::Ordering::Relaxed);
    let (mem_size, cmdline_len) = read_start_info(start_info_addr);
    let image_end = (&raw const __image_end) as u64;
    // The monitor's layout for one core: the same checks, the same placement. No shared
    // window: under a standard hypervisor there is no embedding program to share it with.
    let Ok(layout) = Layout::new(mem_size, 1, IMAGE_BASE, image_end, 0) else {
        fail(b"pvh: guest memory too small for the image and its stack\n");
    };
    let tsc_khz = tsc_khz();
    write_boot_info(&layout, cmdline_len, tsc_khz);
    write_percore(&layout);
    write_gdt_and_tss();
    let features = CpuFeatures::detect();
    let pml4 = write_page_tables(&layout, features);
    enter_ring3(&layout, pml4, features)
}

/// Reports a fatal boot problem on the serial port and exits through `isa-debug-exit`.
fn fail(message: &[u8]) -> ! {
    super::serial_write(message);
    crate::arch::out32(PVH_DEBUG_EXIT_PORT, EXIT_BAD_BOOT);
    loop {
        core::hint::spin_loop();
    }
}

/// Reads the start info: returns the usable memory size and copies the command line to
/// [`CMDLINE_ADDR`] (returning its length). Touches no boot structure before both are
/// read.
fn read_start_info(addr: u64) -> (u64, u64) {
    if addr == 0 || addr + size_of::<StartInfo>() as u64 > BOOT_MAPPED {
        fail(b"pvh: no start info below 1 GiB\n");
    }
    // SAFETY: the hypervisor put an hvm_start_info at `addr` (checked to lie in the
    // identity-mapped first GiB); it is read once, unaligned-safe, before anything is
    // written to low memory.
    let info = unsafe { core::ptr::read_unaligned(addr as *const StartInfo) };
    if info.magic != START_INFO_MAGIC {
        fail(b"pvh: bad start info magic\n");
    }
    let mut mem_size = FALLBACK_MEM;
    let entries = u64::from(info.memmap_entries);
    let table_end = info
        .memmap_paddr
        .checked_add(entries * size_of::<MemmapEntry>() as u64);
    if info.version >= 1 && entries > 0 && table_end.is_some_and(|end| end <= BOOT_MAPPED) {
        mem_size = 0;
        for i in 0..entries {
            let at = info.memmap_paddr + i * size_of::<MemmapEntry>() as u64;
            // SAFETY: entry `i` of the memory map the start info names, inside the
            // identity-mapped first GiB (checked above).
            let e = unsafe { core::ptr::read_unaligned(at as *const MemmapEntry) };
            let end = e.addr.saturating_add(e.size);
            if e.kind == E820_RAM && e.addr <= IMAGE_BASE && IMAGE_BASE < end {
                mem_size = end;
            }
        }
    } else {
        super::serial_write(b"pvh: no memory map in the start info: assuming 32 MiB\n");
    }
    let mem_size = mem_size.min(MAX_MEM) & !(LARGE_PAGE_SIZE - 1);
    let mut cmdline_len = 0;
    if info.cmdline_paddr != 0 {
        let src = info.cmdline_paddr;
        while cmdline_len < CMDLINE_MAX && src + cmdline_len < BOOT_MAPPED {
            // SAFETY: bytes of the NUL-terminated command line the start info names,
            // inside the first GiB.
            if unsafe { core::ptr::read_volatile((src + cmdline_len) as *const u8) } == 0 {
                break;
            }
            cmdline_len += 1;
        }
        // SAFETY: source and destination lie in the identity-mapped first GiB; `copy` is
        // a memmove, so an overlap with the command-line page is harmless. Nothing else
        // has been written yet.
        unsafe {
            core::ptr::copy(
                src as *const u8,
                CMDLINE_ADDR as *mut u8,
                cmdline_len as usize,
            )
        };
    }
    (mem_size, cmdline_len)
}

fn write_boot_info(layout: &Layout, cmdline_len: u64, tsc_khz: u64) {
    let info = ebb_boot::boot_info::boot_info(layout, cmdline_len, tsc_khz, HOST_PVH, 0);
    // SAFETY: BOOT_INFO_ADDR is the boot-info page of the fixed layout, RAM in the first
    // GiB, reserved for this block (the start info was read before).
    unsafe { core::ptr::write(BOOT_INFO_ADDR as *mut BootInfo, info) };
}

fn write_percore(layout: &Layout) {
    let block = layout.percore(0) as *mut u8;
    // SAFETY: the per-core block lies right after the image, in RAM (checked against
    // mem_size by `Layout::new`) inside the first GiB; nothing else uses it yet. The
    // runtime's part must start zeroed, so the whole block is cleared first.
    unsafe { core::ptr::write_bytes(block, 0, PERCORE_STRIDE as usize) };
    let header = ebb_boot::boot_info::per_core(layout, 0);
    // SAFETY: as above; the block is page-aligned, so aligned for PerCore.
    unsafe { core::ptr::write(block as *mut PerCore, header) };
}

fn write_gdt_and_tss() {
    // SAFETY: the GDT page of the fixed layout, RAM below 1 MiB reserved for it; no other
    // reference to it exists.
    let gdt = unsafe { core::slice::from_raw_parts_mut(GDT_ADDR as *mut u8, GDT_BYTES) };
    ebb_boot::cpu::write_gdt(gdt);
    // SAFETY: the TSS pages of the fixed layout (TSS_SIZE bytes), RAM below 1 MiB reserved
    // for it; no other reference to them exists.
    let tss = unsafe { core::slice::from_raw_parts_mut(TSS_ADDR as *mut u8, TSS_SIZE as usize) };
    ebb_boot::cpu::write_tss(tss);
}

/// Builds the monitor's identity-mapped tables for `layout` in place, in the page-table
/// area at [`PAGE_TABLES_ADDR`] (the same tables the monitor writes, with what is not code
/// marked not executable only if the CPU has NX). Returns the PML4's address.
fn write_page_tables(layout: &Layout, features: CpuFeatures) -> u64 {
    let map = layout.page_map();
    let pages = ebb_boot::paging::table_pages(&map, layout.mem_size);
    if pages > AREA_PAGES {
        fail(b"pvh: the page tables do not fit their area\n");
    }
    // SAFETY: the first `pages` pages of the page-table area of the fixed layout, RAM in
    // the first GiB reserved for the tables; the start info and command line that may
    // have lain there were read before, and nothing else refers to them.
    let area =
        unsafe { core::slice::from_raw_parts_mut(PAGE_TABLES_ADDR as *mut u64, pages * ENTRIES) };
    area.fill(0);
    if ebb_boot::paging::build(&map, layout.mem_size, features.nx, area).is_err() {
        fail(b"pvh: the page tables do not fit their area\n");
    }
    PAGE_TABLES_ADDR
}

/// What CPUID says about the optional control-register bits.
#[derive(Clone, Copy)]
struct CpuFeatures {
    fsgsbase: bool,
    nx: bool,
}

impl CpuFeatures {
    fn detect() -> CpuFeatures {
        let max = __cpuid(0).eax;
        let max_ext = __cpuid(0x8000_0000).eax;
        CpuFeatures {
            fsgsbase: max >= 7 && __cpuid(7).ebx & 1 != 0,
            nx: max_ext >= 0x8000_0001 && __cpuid(0x8000_0001).edx & (1 << 20) != 0,
        }
    }
}

/// PIT input clock, Hz.
const PIT_HZ: u64 = 1_193_182;
/// PIT ticks to calibrate over (10 ms).
const PIT_CALIBRATION_TICKS: u64 = PIT_HZ / 100;
/// Assumed when nothing else tells the TSC frequency (and said so on the console).
const TSC_KHZ_GUESS: u64 = 1_000_000;

/// TSC frequency in kHz: CPUID leaf 0x15 (TSC/crystal ratio), 0x16 (base MHz), the
/// hypervisor's leaf 0x40000010 (kHz), else measured against PIT channel 0.
fn tsc_khz() -> u64 {
    let max = __cpuid(0).eax;
    if max >= 0x15 {
        let l = __cpuid(0x15);
        if l.eax != 0 && l.ebx != 0 && l.ecx != 0 {
            return u64::from(l.ecx) * u64::from(l.ebx) / u64::from(l.eax) / 1000;
        }
    }
    if max >= 0x16 && __cpuid(0x16).eax & 0xffff != 0 {
        return u64::from(__cpuid(0x16).eax & 0xffff) * 1000;
    }
    let under_hypervisor = __cpuid(1).ecx & (1 << 31) != 0;
    if under_hypervisor && __cpuid(0x4000_0000).eax >= 0x4000_0010 {
        let khz = __cpuid(0x4000_0010).eax;
        if khz != 0 {
            return u64::from(khz);
        }
    }
    pit_calibrate().unwrap_or_else(|| {
        super::serial_write(b"pvh: cannot measure the TSC frequency: assuming 1 GHz\n");
        TSC_KHZ_GUESS
    })
}

/// Counts TSC ticks over 10 ms of PIT channel 0, programmed as a free-running rate
/// generator (mode 2, reload 65536) and read through counter latches. `None` when the PIT
/// does not count (no PIT: the reads return a constant) within 20,000 reads
/// (milliseconds on hardware or TCG, seconds where every port access is emulated).
fn pit_calibrate() -> Option<u64> {
    use crate::arch::{in8, out8, rdtsc};
    const PIT_CH0: u16 = 0x40;
    const PIT_CMD: u16 = 0x43;
    let read = || {
        out8(PIT_CMD, 0x00); // latch channel 0
        let lo = in8(PIT_CH0);
        let hi = in8(PIT_CH0);
        u16::from_le_bytes([lo, hi])
    };
    out8(PIT_CMD, 0x34); // channel 0, lobyte/hibyte, mode 2, binary
    out8(PIT_CH0, 0);
    out8(PIT_CH0, 0);
    let mut prev = read();
    let start = rdtsc();
    let mut elapsed: u64 = 0;
    let mut reads: u32 = 0;
    while elapsed < PIT_CALIBRATION_TICKS {
        let now = read();
        elapsed += u64::from(prev.wrapping_sub(now));
        prev = now;
        reads += 1;
        if reads > 20_000 && elapsed == 0 {
            return None;
        }
    }
    let ticks = rdtsc() - start;
    Some((u128::from(ticks) * u128::from(PIT_HZ) / u128::from(elapsed) / 1000) as u64)
}

const EFER_MSR: u32 = 0xc000_0080;
const GS_BASE_MSR: u32 = 0xc000_0101;
const FS_BASE_MSR: u32 = 0xc000_0100;

#[repr(C, packed)]
struct Gdtr {
    limit: u16,
    base: u64,
}

/// Loads the real tables and control registers, then `iretq`s to `_start` at CPL 3.
fn enter_ring3(layout: &Layout, pml4: u64, features: CpuFeatures) -> ! {
    let mut cr4 = CR4_GUEST;
    if features.fsgsbase {
        cr4 |= CR4_FSGSBASE;
    }
    let gdtr = Gdtr {
        limit: (GDT_ENTRIES * 8 - 1) as u16,
        base: GDT_ADDR,
    };
    // SAFETY: ring 0, 64-bit. CR0 keeps PE/PG and adds the monitor's bits (FPU and SSE
    // usable, write protection); CR4 keeps PAE and adds SSE and, when present, FSGSBASE;
    // EFER.NXE only when CPUID has it. None of this changes the current mappings.
    unsafe {
        asm!("mov cr0, {}", in(reg) CR0_GUEST,
             options(nostack, preserves_flags));
        asm!("mov cr4, {}", in(reg) cr4, options(nostack, preserves_flags));
        if features.nx {
            let efer = rdmsr(EFER_MSR) | EFER_NXE;
            wrmsr(EFER_MSR, efer);
        }
    }
    // Soundness: the new tables (write_page_tables) identity-map everything this code
    // still touches: the image (this function, `_start`, and the boot stack in its BSS,
    // all user pages, which ring 0 may use since SMEP and SMAP are off) and the GDT and
    // TSS (supervisor pages). The GDT is complete and its TSS descriptor names the TSS
    // written above; `ltr` needs that descriptor "available", while gdt_entries marks it
    // busy (the monitor loads TR directly), so its type is flipped first (the CPU sets it
    // busy again). Data selectors are loaded before the FS/GS base MSRs (loading a
    // selector resets the base). `iretq` pops RIP, CS, RFLAGS, RSP, SS: `_start` at CPL 3
    // on core 0's stack with IOPL 3, RDI = the boot info, RSI = core 0; it never returns.
    // SAFETY: by the argument just above.
    unsafe {
        let tss_descriptor = (GDT_ADDR + u64::from(selectors::TSS)) as *mut u64;
        tss_descriptor.write(tss_descriptor.read() & !(0x2 << 40));
        asm!(
            "mov cr3, {pml4}",
            "lgdt [{gdtr}]",
            "ltr {tss:x}",
            "mov ds, {data:x}",
            "mov es, {data:x}",
            "mov fs, {data:x}",
            "mov gs, {data:x}",
            pml4 = in(reg) pml4,
            gdtr = in(reg) &raw const gdtr,
            tss = in(reg) selectors::TSS,
            data = in(reg) selectors::USER_DATA,
            options(nostack, preserves_flags),
        );
        wrmsr(FS_BASE_MSR, 0);
        wrmsr(GS_BASE_MSR, layout.percore(0));
        asm!(
            "push {ss}",
            "push {rsp}",
            "push {rflags}",
            "push {cs}",
            "push {rip}",
            "iretq",
            ss = in(reg) u64::from(selectors::USER_DATA),
            rsp = in(reg) layout.stack(0).1,
            rflags = in(reg) RFLAGS_RING3,
            cs = in(reg) u64::from(selectors::USER_CODE),
            rip = in(reg) _start as *const () as u64,
            in("rdi") BOOT_INFO_ADDR,
            in("rsi") 0u64,
            options(noreturn),
        )
    }
}

/// Reads a model-specific register.
///
/// # Safety
///
/// Ring 0 only, and `msr` must exist.
unsafe fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller runs at ring 0 and names an existing MSR.
    unsafe { asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Writes a model-specific register.
///
/// # Safety
///
/// Ring 0 only; `msr` must exist and `value` must be valid for it.
unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller's duties above.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32,
             options(nostack))
    };
}
