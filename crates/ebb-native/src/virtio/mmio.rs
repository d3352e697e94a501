//! The `unsafe` of the driver: volatile access to device registers and to ring memory
//! shared with the device.
//!
//! Both are plain loads and stores at guest-physical addresses (virtual = physical): the
//! registers live in the virtio-MMIO window that both boot paths map uncached, the rings
//! in memory the driver allocated and keeps alive for as long as the device may use it.

use crate::abi::virtio::{MAGIC, MMIO_SLOTS, regs, slot_addr};

/// One virtio-MMIO transport's registers.
#[derive(Clone, Copy, Debug)]
pub struct Regs {
    base: u64,
}

impl Regs {
    /// The registers of slot `n`, if `n < MMIO_SLOTS`.
    pub fn slot(n: u64) -> Option<Regs> {
        (n < MMIO_SLOTS).then(|| Regs { base: slot_addr(n) })
    }

    /// Guest-physical address of the slot.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// A 32-bit register (an exit to the device under the monitor).
    pub fn read(&self, offset: u64) -> u32 {
        debug_assert!(offset < 0x200 && offset.is_multiple_of(4));
        // SAFETY: `base` is a slot of the MMIO window, which both boot paths map user
        // read-write; `offset` is a register inside the 512-byte slot, 4-aligned. A load
        // there is an MMIO access the device answers; it touches no Rust object.
        unsafe { ((self.base + offset) as *const u32).read_volatile() }
    }

    /// Writes a 32-bit register.
    pub fn write(&self, offset: u64, value: u32) {
        debug_assert!(offset < 0x200 && offset.is_multiple_of(4));
        // SAFETY: as in `read`.
        unsafe { ((self.base + offset) as *mut u32).write_volatile(value) }
    }

    /// A byte of the device config space.
    pub fn config_u8(&self, offset: u64) -> u8 {
        // SAFETY: as in `read`; the config space starts at 0x100 of the slot and byte
        // accesses are allowed there.
        unsafe { ((self.base + regs::CONFIG + offset) as *const u8).read_volatile() }
    }

    /// Whether a transport answers at this slot.
    pub fn present(&self) -> bool {
        self.read(regs::MAGIC) == MAGIC
    }
}

/// Shared ring memory: volatile little-endian accessors at raw addresses.
///
/// Every address passed in is inside a ring allocation (`ring::SplitRing` computes them
/// from the queue size it allocated for), naturally aligned for the access.
pub mod shared {
    /// Reads a `u16` the device may write.
    pub fn read_u16(addr: u64) -> u16 {
        // SAFETY: see the module docs: `addr` is an aligned field of a live ring
        // allocation; volatile because the device writes it behind the compiler's back.
        unsafe { (addr as *const u16).read_volatile() }
    }
    /// Reads a `u32` the device may write.
    pub fn read_u32(addr: u64) -> u32 {
        // SAFETY: as in `read_u16`.
        unsafe { (addr as *const u32).read_volatile() }
    }
    /// Writes a `u16` the device reads.
    pub fn write_u16(addr: u64, value: u16) {
        // SAFETY: as in `read_u16`; only the driver writes driver-owned fields.
        unsafe { (addr as *mut u16).write_volatile(value) }
    }
    /// Writes a `u32` the device reads.
    pub fn write_u32(addr: u64, value: u32) {
        // SAFETY: as in `write_u16`.
        unsafe { (addr as *mut u32).write_volatile(value) }
    }
    /// Writes a `u64` the device reads.
    pub fn write_u64(addr: u64, value: u64) {
        // SAFETY: as in `write_u16`.
        unsafe { (addr as *mut u64).write_volatile(value) }
    }
}
