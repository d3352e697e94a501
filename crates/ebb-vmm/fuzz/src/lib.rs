//! What the `image` fuzz target runs, and the minimal valid images its seeds are made of;
//! the `virtqueue` target's counterpart is [`virtqueue`].
//!
//! [`load`] is everything the monitor does with an image before KVM is involved: parse
//! and validate it, plan the guest's memory layout around it, build the page tables,
//! write its segments into guest memory, and symbolize addresses from it. An image the
//! parser accepts and the layout fits must then load without a failed write — the
//! invariant the target asserts.

pub mod virtqueue;

use ebb_vmm::guest::GuestMem;
use ebb_vmm::image::{Image, Symbolizer};
use ebb_vmm::layout::Layout;
use ebb_vmm::paging::PageTables;
use vm_memory::{GuestAddress, GuestMemoryMmap};

/// Guest memory the target loads into: small, so each run is cheap.
pub const MEM_SIZE: u64 = 16 << 20;

/// Loads `bytes` as the monitor would; `Ok(entry)` when the image was accepted.
pub fn load(bytes: &[u8], mem: &GuestMem) -> Result<u64, String> {
    let sym = Symbolizer::new(bytes);
    let image = Image::parse(bytes).map_err(|e| e.to_string())?;
    for addr in [image.entry, image.start, image.end, 0, u64::MAX] {
        let _ = (sym.describe(addr), sym.describe_return(addr));
    }
    let layout = Layout::new(MEM_SIZE, 2, image.start, image.end, 0).map_err(|e| e.to_string())?;
    PageTables::build(&layout.page_map(), layout.mem_size).map_err(|e| e.to_string())?;
    for seg in &image.segments {
        assert!(
            image.start <= seg.addr && seg.addr + seg.size <= image.end,
            "segment {:#x}+{:#x} outside the image's span {:#x}..{:#x}",
            seg.addr,
            seg.size,
            image.start,
            image.end
        );
        assert!(
            mem.write_bytes(seg.addr, seg.data).is_some(),
            "the layout accepted an image whose segment {:#x}+{:#x} does not fit",
            seg.addr,
            seg.data.len()
        );
    }
    Ok(image.entry)
}

/// Fresh guest memory for [`load`].
pub fn guest_memory() -> GuestMem {
    let mmap = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)])
        .expect("host memory for the guest");
    GuestMem::new(mmap, MEM_SIZE)
}

/// A minimal static x86_64 executable: the ELF header, one `PT_LOAD` program header per
/// `(vaddr, file bytes, memory size)` segment, then the segments' bytes, entry at `entry`.
pub fn elf(entry: u64, segments: &[(u64, &[u8], u64)]) -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    let mut out = vec![0u8; EHDR + PHDR * segments.len()];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // ELFCLASS64
    out[5] = 1; // little-endian
    out[6] = 1; // EV_CURRENT
    out[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..32].copy_from_slice(&entry.to_le_bytes());
    out[32..40].copy_from_slice(&(EHDR as u64).to_le_bytes()); // e_phoff
    out[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes());
    out[54..56].copy_from_slice(&(PHDR as u16).to_le_bytes());
    out[56..58].copy_from_slice(&(segments.len() as u16).to_le_bytes());
    for (i, (vaddr, data, memsz)) in segments.iter().enumerate() {
        let offset = out.len() as u64;
        let ph = EHDR + PHDR * i;
        let field = |out: &mut Vec<u8>, at: usize, v: u64| {
            out[ph + at..ph + at + 8].copy_from_slice(&v.to_le_bytes())
        };
        out[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        out[ph + 4..ph + 8].copy_from_slice(&5u32.to_le_bytes()); // R+X
        field(&mut out, 8, offset);
        field(&mut out, 16, *vaddr);
        field(&mut out, 24, *vaddr);
        field(&mut out, 32, data.len() as u64);
        field(&mut out, 40, *memsz);
        field(&mut out, 48, 0x1000);
        out.extend_from_slice(data);
    }
    out
}
