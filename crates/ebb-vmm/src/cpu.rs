//! The vCPU's initial architectural state as KVM takes it: segment registers, control
//! registers and general registers for a start at CPL 3 in 64-bit mode.
//!
//! Pure data: the caller ([`crate::vm`]) hands the register sets to KVM. The GDT and TSS
//! bytes and the control-register bits come from [`ebb_boot::cpu`], shared with the PVH
//! stub.

use ebb_abi::{GDT_ADDR, GDT_ENTRIES, PAGE_TABLES_ADDR, TSS_ADDR, TSS_SIZE, selectors};
use ebb_boot::cpu::{
    CR0_GUEST, CR4_FSGSBASE, CR4_GUEST, EFER_LMA, EFER_LME, EFER_NXE, RFLAGS_RING3,
};
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};

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
    sregs.cr0 = CR0_GUEST;
    sregs.cr3 = PAGE_TABLES_ADDR;
    sregs.cr4 = CR4_GUEST | CR4_FSGSBASE;
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
        rflags: RFLAGS_RING3,
        ..Default::default()
    }
}
