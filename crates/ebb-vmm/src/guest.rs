//! Checked access to guest memory.
//!
//! Every read or write the monitor makes on the guest's behalf goes through [`GuestMem`],
//! which checks the whole range `[addr, addr + len)` against the guest's size (with
//! overflow checks) before vm-memory's own checked accessors touch it. A failed check is a
//! `None`, which callers turn into an [`AbiError`](crate::abi_error::AbiError) naming the
//! hypercall and the value.

use std::sync::atomic::Ordering;
use vm_memory::{
    Bytes, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap,
    MemoryRegionAddress,
};

/// Guest memory: one region from guest-physical address 0.
#[derive(Debug)]
pub struct GuestMem {
    mem: GuestMemoryMmap,
    size: u64,
}

impl GuestMem {
    /// Wraps `mem`, which spans `[0, size)`.
    ///
    /// # Panics
    ///
    /// Unless `mem` is one region from guest address 0 of at least `size` bytes (what
    /// [`region`](Self::region)'s offsets rely on).
    pub fn new(mem: GuestMemoryMmap, size: u64) -> Self {
        let one_region = mem.num_regions() == 1
            && mem
                .iter()
                .next()
                .is_some_and(|r| r.start_addr().0 == 0 && r.len() >= size);
        assert!(one_region, "guest memory is one region from address 0");
        GuestMem { mem, size }
    }

    /// The vm-memory object (for registering it with KVM).
    pub fn inner(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// Bytes of guest memory.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether `[addr, addr + len)` lies inside guest memory.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr.checked_add(len).is_some_and(|end| end <= self.size)
    }

    /// The one region, from guest address 0, so a guest address is its offset in it.
    /// Accessing it directly skips vm-memory's search for the region that holds an
    /// address, which was a fifth of the device thread's user time (every ring index
    /// and descriptor read); the region's accessors check their own bounds all the same.
    #[inline]
    fn region(&self) -> Option<&GuestRegionMmap> {
        self.mem.iter().next()
    }

    /// Reads a little-endian `u32`.
    pub fn read_u32(&self, addr: u64) -> Option<u32> {
        self.contains(addr, 4)
            .then(|| self.region()?.read_obj(MemoryRegionAddress(addr)).ok())
            .flatten()
    }

    /// Reads a little-endian `u64`.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        self.contains(addr, 8)
            .then(|| self.region()?.read_obj(MemoryRegionAddress(addr)).ok())
            .flatten()
    }

    /// Writes a `u32`.
    pub fn write_u32(&self, addr: u64, value: u32) -> Option<()> {
        self.contains(addr, 4)
            .then(|| {
                self.region()?
                    .write_obj(value, MemoryRegionAddress(addr))
                    .ok()
            })
            .flatten()
    }

    /// Writes a `u64`.
    pub fn write_u64(&self, addr: u64, value: u64) -> Option<()> {
        self.contains(addr, 8)
            .then(|| {
                self.region()?
                    .write_obj(value, MemoryRegionAddress(addr))
                    .ok()
            })
            .flatten()
    }

    /// Atomically loads an aligned `u16` that the guest writes concurrently (ring indices).
    pub fn load_u16(&self, addr: u64, order: Ordering) -> Option<u16> {
        (self.contains(addr, 2) && addr.is_multiple_of(2))
            .then(|| self.region()?.load(MemoryRegionAddress(addr), order).ok())
            .flatten()
    }

    /// Atomically stores an aligned `u16` that the guest reads concurrently.
    pub fn store_u16(&self, addr: u64, value: u16, order: Ordering) -> Option<()> {
        (self.contains(addr, 2) && addr.is_multiple_of(2))
            .then(|| {
                self.region()?
                    .store(value, MemoryRegionAddress(addr), order)
                    .ok()
            })
            .flatten()
    }

    /// Copies `buf.len()` bytes out of the guest into `buf`.
    pub fn read_into(&self, addr: u64, buf: &mut [u8]) -> Option<()> {
        if !self.contains(addr, buf.len() as u64) {
            return None;
        }
        self.region()?
            .read_slice(buf, MemoryRegionAddress(addr))
            .ok()
    }

    /// Copies `len` bytes out of the guest.
    pub fn read_bytes(&self, addr: u64, len: u64) -> Option<Vec<u8>> {
        if !self.contains(addr, len) {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        self.region()?
            .read_slice(&mut buf, MemoryRegionAddress(addr))
            .ok()?;
        Some(buf)
    }

    /// Copies `bytes` into the guest.
    pub fn write_bytes(&self, addr: u64, bytes: &[u8]) -> Option<()> {
        if !self.contains(addr, bytes.len() as u64) {
            return None;
        }
        self.region()?
            .write_slice(bytes, MemoryRegionAddress(addr))
            .ok()
    }

    /// Where `[addr, addr + len)` lies in the monitor's address space, for the kernel to
    /// copy to or from (a `readv`/`writev` list); `None` unless it lies in guest memory.
    pub fn host_ptr(&self, addr: u64, len: usize) -> Option<*mut u8> {
        if !self.contains(addr, len as u64) {
            return None;
        }
        let slice = self
            .region()?
            .get_slice(MemoryRegionAddress(addr), len)
            .ok()?;
        Some(slice.ptr_guard_mut().as_ptr())
    }

    /// Atomically loads an aligned `u64` that the guest writes concurrently.
    pub fn load_u64(&self, addr: u64, order: Ordering) -> Option<u64> {
        (self.contains(addr, 8) && addr.is_multiple_of(8))
            .then(|| self.region()?.load(MemoryRegionAddress(addr), order).ok())
            .flatten()
    }

    /// Atomically stores an aligned `u64` that the guest reads concurrently.
    pub fn store_u64(&self, addr: u64, value: u64, order: Ordering) -> Option<()> {
        (self.contains(addr, 8) && addr.is_multiple_of(8))
            .then(|| {
                self.region()?
                    .store(value, MemoryRegionAddress(addr), order)
                    .ok()
            })
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestAddress;

    fn mmap(ranges: &[(u64, usize)]) -> GuestMemoryMmap {
        let ranges: Vec<_> = ranges.iter().map(|&(a, n)| (GuestAddress(a), n)).collect();
        GuestMemoryMmap::<()>::from_ranges(&ranges).unwrap()
    }

    #[test]
    #[should_panic(expected = "one region from address 0")]
    fn two_regions_are_refused() {
        GuestMem::new(mmap(&[(0, 1 << 16), (1 << 20, 1 << 16)]), 1 << 16);
    }

    #[test]
    #[should_panic(expected = "one region from address 0")]
    fn a_region_not_at_zero_is_refused() {
        GuestMem::new(mmap(&[(1 << 16, 1 << 16)]), 1 << 16);
    }

    #[test]
    #[should_panic(expected = "one region from address 0")]
    fn a_region_shorter_than_the_size_is_refused() {
        GuestMem::new(mmap(&[(0, 1 << 16)]), 1 << 17);
    }

    #[test]
    fn the_size_bounds_accesses_even_where_the_region_goes_on() {
        let g = GuestMem::new(mmap(&[(0, 2 << 20)]), 1 << 20);
        assert_eq!(g.read_u32((1 << 20) - 4), Some(0));
        assert_eq!(g.read_u32(1 << 20), None);
        assert_eq!(g.load_u16(1 << 20, Ordering::Relaxed), None);
        assert_eq!(g.write_bytes((1 << 20) - 1, &[1, 2]), None);
        assert!(g.host_ptr((1 << 20) - 4, 4).is_some());
        assert_eq!(g.host_ptr((1 << 20) - 4, 5), None);
    }

    #[test]
    fn every_range_is_checked() {
        let size = 1 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        let g = GuestMem::new(mem, size as u64);
        assert_eq!(g.write_u64(8, 7), Some(()));
        assert_eq!(g.read_u64(8), Some(7));
        assert_eq!(g.read_u64(size as u64 - 4), None);
        assert_eq!(g.read_u32(u64::MAX - 1), None);
        assert_eq!(g.read_bytes(16, u64::MAX), None);
        assert_eq!(g.read_bytes(u64::MAX, 2), None);
        assert_eq!(g.read_bytes(size as u64, 0), Some(vec![]));
        assert_eq!(g.write_bytes(size as u64 - 1, &[1, 2]), None);
        assert_eq!(g.load_u64(12, Ordering::Acquire), None, "misaligned");
    }
}
