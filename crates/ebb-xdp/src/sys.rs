//! Every `unsafe` operation of the crate: the AF_XDP socket's system calls, the shared
//! mappings (UMEM and the four rings) and the raw accesses into them.
//!
//! What this module guarantees to the safe code above it:
//!
//! * [`Mapping`] owns one `mmap`ed area and unmaps it on drop; it is only ever accessed
//!   through the bounds-checked methods below.
//! * [`RingMap`] reads and writes ring entries at an index **masked by the ring size**
//!   (a power of two checked at construction), so no index, however wrong, reaches
//!   outside the mapping; the producer and consumer words are accessed as `AtomicU32`
//!   with Acquire loads and Release stores (the kernel's side uses `smp_load_acquire` /
//!   `smp_store_release`).
//! * [`Umem`] hands out byte slices of a chunk only after checking the range lies in
//!   the area. Whether the kernel may be writing that chunk at the moment is the
//!   caller's invariant (the device's chunk bookkeeping: a chunk is touched only while it
//!   is not on the fill or TX ring), stated at each call site.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ebb_core::IOBuf;
use ebb_core::iobuf::{Keeper, LentMemory};

/// One descriptor of the RX or TX ring (`struct xdp_desc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Desc {
    /// Offset of the frame's first byte in the UMEM.
    pub addr: u64,
    /// Bytes of the frame.
    pub len: u32,
    /// `XDP_PKT_CONTD` etc.; zero without multi-buffer.
    pub options: u32,
}

const _: () = assert!(std::mem::size_of::<libc::xdp_desc>() == 16);

/// A private or shared memory mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving it to another thread
// moves the ownership (no thread-local state).
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` gives only the address and length; the bytes are reached through
// `Umem` (and the IOBuf regions it lends), under their own rules.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A fresh anonymous, private, zeroed and populated area of `len` bytes
    /// (page-aligned, as the UMEM must be).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mapping> {
        // SAFETY: a new anonymous mapping at an address the kernel picks: it aliases
        // nothing. The result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Self::checked(ptr, len)
    }

    /// The ring of socket `fd` at page offset `offset`, `len` bytes, shared with the
    /// kernel.
    fn ring(fd: &OwnedFd, offset: u64, len: usize) -> io::Result<Mapping> {
        // SAFETY: maps the kernel's ring memory of our own socket at a fresh address;
        // aliases none of our memory. The result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        Self::checked(ptr, len)
    }

    fn checked(ptr: *mut libc::c_void, len: usize) -> io::Result<Mapping> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { ptr, len })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is a mapping this value made and owns; nothing borrows
        // it any more (every borrow handed out is tied to `&self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The UMEM: the area whose chunks hold every frame received and sent. Shared with the
/// IOBufs lent over receive chunks ([`lend`](Umem::lend)), which keep it mapped.
#[derive(Debug)]
pub(crate) struct Umem {
    area: Arc<Mapping>,
}

impl Umem {
    pub(crate) fn new(len: usize) -> io::Result<Umem> {
        Ok(Umem {
            area: Arc::new(Mapping::anonymous(len)?),
        })
    }

    /// An IOBuf over `offset..offset+len` (a receive chunk), for the device to keep as
    /// its own handle on the chunk and lend clones of; it keeps the UMEM mapped. None
    /// outside the area.
    pub(crate) fn lend(&self, offset: u64, len: usize) -> Option<IOBuf> {
        let start = self.check(offset, len)?;
        // In bounds (checked), so inside the allocation and non-null.
        let data = NonNull::new(self.area.ptr.as_ptr().wrapping_add(start))?;
        let keeper: Keeper = self.area.clone();
        // SAFETY: the bytes lie in the UMEM mapping (checked), which the keeper keeps
        // mapped; an anonymous mapping is zero-filled, so initialized. The kernel writes
        // a receive chunk only while it is on the fill ring, and the device puts it there
        // only while its own handle (this IOBuf) is unique (`IOBuf::recycle` succeeded),
        // never reading through that handle meanwhile, and the device, with its handles,
        // stays on one thread; nothing else writes receive chunks (`bytes_mut` is used on
        // transmit chunks only).
        let lent = unsafe { LentMemory::new(data, len, keeper) };
        Some(IOBuf::from_lent(lent))
    }

    pub(crate) fn mapping(&self) -> &Mapping {
        &self.area
    }

    fn area_ptr(&self) -> *mut u8 {
        self.area.ptr.as_ptr()
    }

    fn check(&self, offset: u64, len: usize) -> Option<usize> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        (end <= self.area.len).then_some(start)
    }

    /// The bytes `offset..offset+len`, or None outside the area. The caller holds the
    /// chunk they lie in (it is on no kernel ring), so the kernel does not write them.
    pub(crate) fn bytes(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = self.check(offset, len)?;
        // SAFETY: in bounds (checked); the area lives as long as `&self`; no `&mut`
        // into it can exist at the same time (those borrow `&mut self`); the kernel does
        // not write a chunk the device holds (the caller's invariant, see module docs).
        Some(unsafe { std::slice::from_raw_parts(self.area_ptr().add(start), len) })
    }

    /// The bytes `offset..offset+len` to write, or None outside the area. Same caller
    /// invariant as [`bytes`](Self::bytes).
    pub(crate) fn bytes_mut(&mut self, offset: u64, len: usize) -> Option<&mut [u8]> {
        let start = self.check(offset, len)?;
        // SAFETY: in bounds (checked); unique through `&mut self`; the kernel neither
        // reads nor writes a chunk the device holds (caller's invariant).
        Some(unsafe { std::slice::from_raw_parts_mut(self.area_ptr().add(start), len) })
    }
}

/// One of the four rings, mapped from the socket.
#[derive(Debug)]
pub(crate) struct RingMap {
    /// Shared with the ring's [`RingProbe`]s, which may outlive the socket.
    map: Arc<Mapping>,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    /// Entries; a power of two.
    size: u32,
    /// Bytes per entry: 16 (`xdp_desc`, RX/TX) or 8 (`u64` address, fill/completion).
    entry: usize,
}

// SAFETY: the mapping is shared only with the kernel, not with other threads of ours;
// moving the owner moves the only user-space handle.
unsafe impl Send for RingMap {}

/// A ring's producer and consumer words, read-only: what a core spinning before it
/// sleeps loads instead of asking epoll (`XdpDevice::rx_probe`). It keeps the ring's
/// mapping alive (a mapping stays valid after its socket is closed), so it may outlive
/// the device; it then reports what the ring held when the socket closed.
#[derive(Clone, Debug)]
pub(crate) struct RingProbe {
    map: Arc<Mapping>,
    producer: usize,
    consumer: usize,
}

impl RingProbe {
    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is the producer or consumer offset of the `RingMap` this probe
        // was made from, checked there to be 4-aligned and inside this same mapping,
        // which the `Arc` keeps mapped; the kernel and the consumer access the word
        // atomically too.
        unsafe { &*self.map.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// Whether entries are published that the consumer has not released (two loads).
    /// The consumer releases only after taking, so a `true` may be entries it is
    /// taking right now: spurious, never missing.
    pub(crate) fn has_entries(&self) -> bool {
        let producer = self.word(self.producer).load(Ordering::Acquire);
        producer != self.word(self.consumer).load(Ordering::Relaxed)
    }
}

/// Which ring to map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RingKind {
    Rx,
    Tx,
    Fill,
    Completion,
}

impl RingMap {
    fn new(
        fd: &OwnedFd,
        kind: RingKind,
        offsets: &libc::xdp_ring_offset,
        size: u32,
    ) -> io::Result<RingMap> {
        assert!(size.is_power_of_two());
        let (page, entry) = match kind {
            RingKind::Rx => (libc::XDP_PGOFF_RX_RING as u64, 16),
            RingKind::Tx => (libc::XDP_PGOFF_TX_RING as u64, 16),
            RingKind::Fill => (libc::XDP_UMEM_PGOFF_FILL_RING, 8),
            RingKind::Completion => (libc::XDP_UMEM_PGOFF_COMPLETION_RING, 8),
        };
        let len = offsets.desc as usize + size as usize * entry;
        let map = Arc::new(Mapping::ring(fd, page, len)?);
        // A 4-byte word, aligned, in front of the entries.
        let word_ok = |offset: u64| offset.is_multiple_of(4) && offset + 4 <= offsets.desc;
        let sound = word_ok(offsets.producer)
            && word_ok(offsets.consumer)
            && word_ok(offsets.flags)
            && offsets.desc.is_multiple_of(8);
        if !sound {
            return Err(io::Error::other(
                "kernel gave ring offsets outside the ring",
            ));
        }
        Ok(RingMap {
            map,
            producer: offsets.producer as usize,
            consumer: offsets.consumer as usize,
            flags: offsets.flags as usize,
            desc: offsets.desc as usize,
            size,
            entry,
        })
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is one of the producer/consumer/flags offsets, checked at
        // construction to be 4-aligned and inside the mapping, which lives as long as
        // `&self`; the kernel accesses these words atomically too.
        unsafe { &*self.map.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    pub(crate) fn load_producer(&self) -> u32 {
        self.word(self.producer).load(Ordering::Acquire)
    }

    pub(crate) fn load_consumer(&self) -> u32 {
        self.word(self.consumer).load(Ordering::Acquire)
    }

    pub(crate) fn store_producer(&self, value: u32) {
        self.word(self.producer).store(value, Ordering::Release)
    }

    pub(crate) fn store_consumer(&self, value: u32) {
        self.word(self.consumer).store(value, Ordering::Release)
    }

    /// A handle that tells, from any later point and without the ring, whether the
    /// kernel has produced entries the consumer has not released.
    pub(crate) fn probe(&self) -> RingProbe {
        RingProbe {
            map: self.map.clone(),
            producer: self.producer,
            consumer: self.consumer,
        }
    }

    /// Whether the kernel asked to be woken (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let masked = (index & (self.size - 1)) as usize;
        // SAFETY: `masked < size` and the mapping holds `desc + size * entry` bytes, so
        // the pointer stays inside it.
        unsafe { self.map.ptr.as_ptr().add(self.desc + masked * self.entry) }
    }

    /// The address in a fill or completion ring entry.
    pub(crate) fn read_addr(&self, index: u32) -> u64 {
        debug_assert_eq!(self.entry, 8);
        // SAFETY: an 8-byte entry inside the mapping (`slot`), 8-aligned (desc offset
        // checked); the kernel published it before the producer index we read with
        // Acquire; volatile because the memory is shared with the kernel.
        unsafe { self.slot(index).cast::<u64>().read_volatile() }
    }

    pub(crate) fn write_addr(&self, index: u32, addr: u64) {
        debug_assert_eq!(self.entry, 8);
        // SAFETY: as `read_addr`; the entry is ours to write until we publish it with
        // the Release store of the producer index.
        unsafe { self.slot(index).cast::<u64>().write_volatile(addr) }
    }

    /// The descriptor in an RX or TX ring entry.
    pub(crate) fn read_desc(&self, index: u32) -> Desc {
        debug_assert_eq!(self.entry, 16);
        // SAFETY: a 16-byte `xdp_desc` inside the mapping, 8-aligned; see `read_addr`.
        let raw = unsafe { self.slot(index).cast::<libc::xdp_desc>().read_volatile() };
        Desc {
            addr: raw.addr,
            len: raw.len,
            options: raw.options,
        }
    }

    pub(crate) fn write_desc(&self, index: u32, desc: Desc) {
        debug_assert_eq!(self.entry, 16);
        let raw = libc::xdp_desc {
            addr: desc.addr,
            len: desc.len,
            options: desc.options,
        };
        // SAFETY: see `write_addr`.
        unsafe {
            self.slot(index)
                .cast::<libc::xdp_desc>()
                .write_volatile(raw)
        }
    }
}

/// Ring sizes asked of the kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingSizes {
    pub rx: u32,
    pub tx: u32,
    pub fill: u32,
    pub completion: u32,
}

/// The socket and its four rings, set up but not bound.
#[derive(Debug)]
pub(crate) struct XskRings {
    pub rx: RingMap,
    pub tx: RingMap,
    pub fill: RingMap,
    pub completion: RingMap,
}

/// Opens an AF_XDP socket (non-blocking, close-on-exec).
pub(crate) fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_XDP,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(fd: &OwnedFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points at a live `T` of the size passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Registers `umem` with chunks of `chunk_size` bytes, makes the rings and maps them.
pub(crate) fn register(
    fd: &OwnedFd,
    umem: &Umem,
    chunk_size: u32,
    sizes: RingSizes,
) -> io::Result<XskRings> {
    let reg = libc::xdp_umem_reg {
        addr: umem.mapping().addr(),
        len: umem.mapping().len() as u64,
        chunk_size,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    setsockopt(fd, libc::XDP_UMEM_REG, &reg)?;
    setsockopt(fd, libc::XDP_UMEM_FILL_RING, &sizes.fill)?;
    setsockopt(fd, libc::XDP_UMEM_COMPLETION_RING, &sizes.completion)?;
    setsockopt(fd, libc::XDP_RX_RING, &sizes.rx)?;
    setsockopt(fd, libc::XDP_TX_RING, &sizes.tx)?;
    let offsets = mmap_offsets(fd)?;
    Ok(XskRings {
        rx: RingMap::new(fd, RingKind::Rx, &offsets.rx, sizes.rx)?,
        tx: RingMap::new(fd, RingKind::Tx, &offsets.tx, sizes.tx)?,
        fill: RingMap::new(fd, RingKind::Fill, &offsets.fr, sizes.fill)?,
        completion: RingMap::new(fd, RingKind::Completion, &offsets.cr, sizes.completion)?,
    })
}

fn mmap_offsets(fd: &OwnedFd) -> io::Result<libc::xdp_mmap_offsets> {
    let zero = libc::xdp_ring_offset {
        producer: 0,
        consumer: 0,
        desc: 0,
        flags: 0,
    };
    let mut offsets = libc::xdp_mmap_offsets {
        rx: zero,
        tx: zero,
        fr: zero,
        cr: zero,
    };
    let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `offsets` is a live, writable value of `len` bytes; the kernel writes at
    // most `len` bytes and reports how many.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut offsets as *mut libc::xdp_mmap_offsets).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::xdp_mmap_offsets>() {
        // A kernel older than 5.4 (no flags word: no need_wakeup).
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(offsets)
}

/// Binds the socket to `ifindex`'s queue `queue` with `flags` (`XDP_COPY`,
/// `XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`).
pub(crate) fn bind(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let addr = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `addr` is a live `sockaddr_xdp` of the size passed; the kernel reads it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells the kernel the TX ring has work (`sendto` with no data, `MSG_DONTWAIT`).
pub(crate) fn kick(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: a zero-length send with no buffer and no address: the kernel reads nothing.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The socket's `XDP_STATISTICS`.
pub(crate) fn statistics(fd: &OwnedFd) -> io::Result<libc::xdp_statistics> {
    let mut stats = libc::xdp_statistics {
        rx_dropped: 0,
        rx_invalid_descs: 0,
        tx_invalid_descs: 0,
        rx_ring_full: 0,
        rx_fill_ring_empty_descs: 0,
        tx_ring_empty_descs: 0,
    };
    let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
    // SAFETY: `stats` is a live, writable value of `len` bytes; the kernel writes at most
    // `len` bytes (older kernels fewer: the rest stays zero).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            (&mut stats as *mut libc::xdp_statistics).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stats)
}

/// The interface's index, or None if there is no such interface.
pub(crate) fn if_index(name: &std::ffi::CStr) -> Option<u32> {
    // SAFETY: `name` is a NUL-terminated string that lives across the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}
