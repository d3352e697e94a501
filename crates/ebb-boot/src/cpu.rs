//! The CPU state both boot paths give the guest: the GDT and TSS bytes, and the control
//! register, EFER and RFLAGS bits of a 64-bit start at CPL 3. The monitor hands the
//! registers to KVM; the PVH stub loads them itself at ring 0.

use ebb_abi::{GDT_ENTRIES, TSS_IO_BITMAP_OFFSET, TSS_SIZE, gdt_entries};

/// CR0: protected mode.
pub const CR0_PE: u64 = 1 << 0;
/// CR0: `wait`/`fwait` honour TS.
pub const CR0_MP: u64 = 1 << 1;
/// CR0: a 387-style FPU (always 1 on x86_64).
pub const CR0_ET: u64 = 1 << 4;
/// CR0: native FPU error reporting.
pub const CR0_NE: u64 = 1 << 5;
/// CR0: read-only pages are read-only at ring 0 too.
pub const CR0_WP: u64 = 1 << 16;
/// CR0: paging.
pub const CR0_PG: u64 = 1 << 31;
/// CR4: physical address extension (required for long mode).
pub const CR4_PAE: u64 = 1 << 5;
/// CR4: `fxsave`/`fxrstor` and SSE.
pub const CR4_OSFXSR: u64 = 1 << 9;
/// CR4: unmasked SIMD floating-point exceptions.
pub const CR4_OSXMMEXCPT: u64 = 1 << 10;
/// CR4: `rdfsbase` and friends at CPL 3 (the guest's per-core pointer).
pub const CR4_FSGSBASE: u64 = 1 << 16;
/// EFER: long mode enabled.
pub const EFER_LME: u64 = 1 << 8;
/// EFER: long mode active.
pub const EFER_LMA: u64 = 1 << 10;
/// EFER: the no-execute bit of page-table entries.
pub const EFER_NXE: u64 = 1 << 11;

/// CR0 of the guest: protected mode and paging, the FPU and SSE usable, write protection.
pub const CR0_GUEST: u64 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
/// CR4 of the guest without the optional FSGSBASE, which the monitor always sets and the
/// PVH stub sets where CPUID has it.
pub const CR4_GUEST: u64 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT;
/// RFLAGS at entry: bit 1 (always set) and IOPL 3, which lets CPL 3 run `in`/`out` (the
/// hypercalls); interrupts off.
pub const RFLAGS_RING3: u64 = 0x2 | (3 << 12);

/// Bytes of the GDT proper ([`gdt_entries`]).
pub const GDT_BYTES: usize = GDT_ENTRIES * 8;

/// Writes the GDT ([`gdt_entries`]: null, ring-0 code and data, ring-3 code and data, the
/// TSS descriptor) little-endian at the start of `gdt` and zeros the rest of it.
///
/// # Panics
///
/// If `gdt` is shorter than [`GDT_BYTES`].
pub fn write_gdt(gdt: &mut [u8]) {
    let (entries, rest) = gdt.split_at_mut(GDT_BYTES);
    for (bytes, entry) in entries.chunks_exact_mut(8).zip(gdt_entries()) {
        bytes.copy_from_slice(&entry.to_le_bytes());
    }
    rest.fill(0);
}

/// Writes the TSS into `tss` ([`TSS_SIZE`] bytes): RSP0..2 and ISTs zero (there is no
/// ring 0 to enter), the I/O map base at offset 102 pointing right after the 104-byte TSS
/// proper, an all-zero bitmap (every port allowed at CPL 3: see [`ebb_abi::TSS_ADDR`] for
/// why IOPL is not enough) and the terminating all-ones byte.
///
/// # Panics
///
/// If `tss` is not [`TSS_SIZE`] bytes long.
pub fn write_tss(tss: &mut [u8]) {
    assert_eq!(tss.len() as u64, TSS_SIZE, "the TSS slice");
    tss.fill(0);
    tss[102..104].copy_from_slice(&TSS_IO_BITMAP_OFFSET.to_le_bytes());
    tss[TSS_SIZE as usize - 1] = 0xff;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_abi::{TSS_ADDR, selectors};

    /// A segment descriptor's fields: (base, limit, access byte, flags nibble).
    fn decode(d: u64) -> (u64, u64, u8, u8) {
        let limit = (d & 0xffff) | (((d >> 48) & 0xf) << 16);
        let base = ((d >> 16) & 0xff_ffff) | (((d >> 56) & 0xff) << 24);
        (base, limit, (d >> 40) as u8, ((d >> 52) & 0xf) as u8)
    }

    #[test]
    fn gdt_descriptors_decode_to_the_expected_segments() {
        let mut page = [0xaa; 0x1000];
        write_gdt(&mut page);
        let e = |i: usize| u64::from_le_bytes(page[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(e(0), 0, "null descriptor");
        assert_eq!(e(1), 0x00af_9b00_0000_ffff);
        assert_eq!(e(2), 0x00cf_9300_0000_ffff);
        assert_eq!(e(3), 0x00af_fb00_0000_ffff);
        assert_eq!(e(4), 0x00cf_f300_0000_ffff);
        // Ring-3 code: present, DPL 3, code exec/read accessed; L (64-bit), G.
        assert_eq!(decode(e(3)), (0, 0xf_ffff, 0xfb, 0xa));
        // Ring-3 data: present, DPL 3, data read/write accessed; D/B, G.
        assert_eq!(decode(e(4)), (0, 0xf_ffff, 0xf3, 0xc));
        // The TSS: a busy 64-bit TSS at TSS_ADDR, DPL 0, byte-granular limit.
        let (base, limit, access, flags) = decode(e(5));
        assert_eq!(base | (e(6) << 32), TSS_ADDR);
        assert_eq!(limit, TSS_SIZE - 1);
        assert_eq!((access, flags), (0x8b, 0));
        assert_eq!(usize::from(selectors::USER_CODE) / 8, 3);
        assert_eq!(usize::from(selectors::USER_DATA) / 8, 4);
        assert_eq!(usize::from(selectors::TSS) / 8, 5);
        assert!(page[GDT_BYTES..].iter().all(|&b| b == 0), "the rest zeroed");
    }

    #[test]
    fn the_tss_allows_every_port() {
        let mut tss = [0xaa; TSS_SIZE as usize];
        write_tss(&mut tss);
        assert_eq!(u16::from_le_bytes([tss[102], tss[103]]), 104);
        assert!(tss[..102].iter().all(|&b| b == 0));
        assert!(tss[104..TSS_SIZE as usize - 1].iter().all(|&b| b == 0));
        assert_eq!(tss[TSS_SIZE as usize - 1], 0xff);
    }
}
