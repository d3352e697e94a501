//! The vCPU's initial architectural state: GDT and TSS contents, segment registers,
//! control registers and general registers for a start at CPL 3 in 64-bit mode.
//!
//! Pure data: the caller ([`crate::vm`]) writes [`gdt_page`] into guest memory and hands the
//! register sets to KVM.

use ebb_abi::{
    GDT_ADDR, GDT_ENTRIES, PAGE_TABLES_ADDR, TSS_ADDR, TSS_IO_BITMAP_OFFSET, TSS_SIZE, gdt_entries,
    selectors,
};
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};

const CR0_PE: u64 = 1 << 0;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const CR4_OSFXSR: u64 = 1 << 9;
const CR4_OSXMMEXCPT: u64 = 1 << 10;
const CR4_FSGSBASE: u64 = 1 << 16;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const EFER_NXE: u64 = 1 << 11;
/// RFLAGS: bit 1 is always set; IOPL = 3 lets CPL 3 run `in`/`out` (the hypercalls).
pub const RFLAGS_INITIAL: u64 = 0x2 | (3 << 12);

/// The GDT page's bytes: [`gdt_entries`] (null, ring-0 code and data, ring-3 code and
/// data, and a 64-bit TSS descriptor at [`selectors::TSS`] for the TSS at [`TSS_ADDR`]),
/// shared with the PVH entry stub, then zeros.
pub fn gdt_page() -> Vec<u8> {
    let mut page = vec![0u8; 0x1000];
    for (i, e) in gdt_entries().iter().enumerate() {
        page[i * 8..i * 8 + 8].copy_from_slice(&e.to_le_bytes());
    }
    page
}

/// The TSS's bytes: RSP0..2 and ISTs zero (there is no ring 0 to enter), the I/O map base
/// at offset 102 pointing right after the TSS proper, an all-zero bitmap (every port
/// allowed at CPL 3: see [`TSS_ADDR`] for why IOPL is not enough) and the terminating
/// all-ones byte.
pub fn tss() -> Vec<u8> {
    let mut tss = vec![0u8; TSS_SIZE as usize];
    tss[102..104].copy_from_slice(&TSS_IO_BITMAP_OFFSET.to_le_bytes());
    tss[TSS_SIZE as usize - 1] = 0xff;
    tss
}

fn segment(selector: u16, type_: u8, dpl: u8, l: u8, db: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl,
        db,
        s: 1,
        l,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Fills `sregs` (as read from KVM, so the fields this does not own keep KVM's defaults)
/// for 64-bit mode at CPL 3 with GS based at `gs_base`.
pub fn setup_sregs(sregs: &mut kvm_sregs, gs_base: u64) {
    let code = segment(selectors::USER_CODE, 0xb, 3, 1, 0);
    let data = segment(selectors::USER_DATA, 0x3, 3, 0, 1);
    sregs.cs = code;
    sregs.ss = data;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = kvm_segment {
        base: gs_base,
        ..data
    };
    sregs.tr = kvm_segment {
        base: TSS_ADDR,
        limit: (TSS_SIZE - 1) as u32,
        selector: selectors::TSS,
        type_: 0xb,
        present: 1,
        dpl: 0,
        db: 0,
        s: 0,
        l: 0,
        g: 0,
        avl: 0,
        unusable: 0,
        padding: 0,
    };
    sregs.ldt = kvm_segment {
        selector: 0,
        type_: 0x2,
        present: 1,
        s: 0,
        limit: 0xffff,
        ..Default::default()
    };
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = (GDT_ENTRIES * 8 - 1) as u16;
    // No IDT: any exception at CPL 3 escalates to a triple fault, which the monitor reports.
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.cr3 = PAGE_TABLES_ADDR;
    sregs.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT | CR4_FSGSBASE;
    sregs.efer = EFER_LME | EFER_LMA | EFER_NXE;
}

/// General registers for entry: RIP at the image entry, RSP at the stack top, RDI the
/// boot-info address, RSI the core id.
pub fn initial_regs(entry: u64, stack_top: u64, boot_info: u64, core: u32) -> kvm_regs {
    kvm_regs {
        rip: entry,
        rsp: stack_top,
        rdi: boot_info,
        rsi: u64::from(core),
        rflags: RFLAGS_INITIAL,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_match_the_usual_encodings() {
        let page = gdt_page();
        let e = |i: usize| u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(e(1), 0x00af_9b00_0000_ffff);
        assert_eq!(e(2), 0x00cf_9300_0000_ffff);
        assert_eq!(e(3), 0x00af_fb00_0000_ffff);
        assert_eq!(e(4), 0x00cf_f300_0000_ffff);
        assert_eq!(usize::from(selectors::USER_CODE) / 8, 3);
        assert_eq!(usize::from(selectors::USER_DATA) / 8, 4);
        assert_eq!(usize::from(selectors::TSS) / 8, 5);
    }
}
