//! # ebb-xdp — an AF_XDP socket as a network device
//!
//! [`XdpDevice`]: one queue of a Linux interface, taken over with an AF_XDP socket, as an
//! `ebb-net-driver` [`NetDevice`]; so ebb-net runs in a hosted process on a real (or
//! veth) interface with no kernel socket and no TAP in between, and the monitor backs a
//! guest's virtio-net device with it through the byte-slice API
//! ([`transmit_gather`](XdpDevice::transmit_gather), [`transmit_with`](XdpDevice::transmit_with),
//! [`flush`](XdpDevice::flush), [`receive_with`](XdpDevice::receive_with)).
//!
//! **What opening does**: an anonymous, page-aligned UMEM of [`XdpConfig::chunks`]
//! chunks of [`CHUNK_SIZE`] bytes is registered with a new AF_XDP socket; the four rings
//! (fill, RX, TX, completion) are made and mapped; the socket is bound to the interface's
//! queue with `XDP_USE_NEED_WAKEUP`, in zero-copy mode if the driver has it, else in copy
//! mode; the committed XDP program (`bpf/redirect.c`, see [`program`]) is attached
//! through a bpf_link (driver mode if the driver supports XDP, else generic) and its
//! XSKMAP points the queue at the socket. The program and the link go away with the
//! device, or with the process. Every frame arriving on the queue comes to us: the
//! interface is ours (ARP included).
//!
//! **Invariants**:
//! * The UMEM is cut in two pools ([`ring::ChunkLayout`]): receive chunks (fill ring →
//!   RX ring → us → fill ring) and transmit chunks (free list → TX ring → completion
//!   ring → free list), so frames held on one side never starve the other.
//! * A chunk is read or written by us only while no kernel ring holds it: `rx_with_kernel`
//!   and `tx_sent` record which chunks the kernel holds; a chunk comes back only through
//!   a descriptor that [`ring::ChunkLayout::check_rx`] or
//!   [`check_completion`](ring::ChunkLayout::check_completion) accepted, which also
//!   checks the bytes lie in that chunk. Anything else the kernel hands back is counted
//!   (`bad_descriptors`) and ignored, never trusted.
//! * Each ring is at least as large as its pool, so a free chunk always has a ring slot.
//! * No system call per frame: the fill ring is refilled once per `receive` call; a
//!   `transmit` call (or a [`flush`](XdpDevice::flush)) publishes the TX ring once and
//!   kicks the kernel at most once (a zero-length `sendto`, only if the kernel set
//!   need-wakeup); completions are reaped at each transmit.
//! * No checksum offload through XDP: partial checksums are completed before sending,
//!   and received frames are [`FrameChecksum::Complete`] (not verified).
//!
//! **Receive lends** each frame to the stack as an `IOBuf` viewing its UMEM chunk in
//! place ([`XdpConfig::lend_received`]; ebb-core's lent-memory region, which keeps the
//! UMEM mapped while any view lives): the device keeps its own handle on every receive
//! chunk, and a chunk goes back on the fill ring once that handle is unique again (every
//! view dropped), checked oldest first at each `receive`. While the stack holds half
//! the receive chunks, frames are copied instead into frame-sized `IOBuf`s (from a
//! [`ReceiveBuffers`] pool) and their chunks go straight back, so a slow application
//! cannot empty the fill ring. [`receive_with`](XdpDevice::receive_with) always lends a
//! borrowed slice and takes the chunk back when the closure returns.
//!
//! **Privilege**: opening needs `CAP_NET_ADMIN` and `CAP_BPF` (in practice root);
//! without them [`XdpError::NeedsPrivilege`] says so.
//!
//! The crate's only `unsafe` code is in the private `sys` module (system calls, the
//! shared mappings and the accesses into them); `deny(unsafe_code)` everywhere else.

#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use ebb_core::{IOBuf, Instant};
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, DropReason, FrameChecksum, NetDevice, ReceiveBuffers,
    RxFrame, TxFrame,
};

pub mod program;
pub mod ring;
#[allow(unsafe_code)]
mod sys;

use ring::{ChunkLayout, Consumer, Producer};
use sys::Desc;

/// Bytes per UMEM chunk: the kernel's 256-byte headroom and a 1514-byte frame fit.
pub const CHUNK_SIZE: u32 = 2048;

/// Frame-sized receive buffers handed over and kept to come back.
const FRAME_BUFFERS_LENT: usize = 256;

/// Lent receive chunks checked for return per `receive` call.
const LENT_SCAN: usize = 64;

/// What interface queue to take over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface, e.g. `veth0`.
    pub interface: String,
    /// Its receive/transmit queue (the interface must have exactly one; see
    /// [`XdpError::MultiQueue`]).
    pub queue: u32,
    /// UMEM chunks, half for receiving and half for sending: a power of two, 16 to
    /// 65,536. Default 4,096 (8 MiB).
    pub chunks: u32,
    /// The IP MTU the stack uses; at most 1500 (a frame fits one chunk).
    pub mtu: usize,
    /// Try zero-copy mode first (falls back to copy mode if the driver has none).
    /// Default on.
    pub zero_copy: bool,
    /// [`NetDevice::receive`] hands the stack frames that view their UMEM chunk in place
    /// (the chunk goes back to the kernel once every view is dropped) instead of copies,
    /// while at least half the receive chunks are not held by the stack. Default on.
    pub lend_received: bool,
}

impl XdpConfig {
    /// Queue 0 of `interface`, 4,096 chunks, MTU 1500.
    pub fn new(interface: impl Into<String>) -> Self {
        Self {
            interface: interface.into(),
            queue: 0,
            chunks: 4096,
            mtu: 1500,
            zero_copy: true,
            lend_received: true,
        }
    }
}

/// Why an AF_XDP device could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The kernel refused the socket or the BPF program.
    #[error(
        "AF_XDP on {interface:?} needs root: CAP_NET_ADMIN and CAP_BPF (the kernel refused {what})"
    )]
    NeedsPrivilege {
        /// The interface asked for.
        interface: String,
        /// What was refused.
        what: &'static str,
    },
    /// No interface of that name (in this network namespace).
    #[error("no such interface {0:?} (in this network namespace)")]
    NoSuchInterface(String),
    /// The interface has several receive queues: frames on the others would bypass us.
    #[error(
        "interface {interface:?} has {queues} receive queues, bind one socket per queue; \
         this device takes one: give the interface one queue (`ethtool -L {interface} combined 1`, \
         or a veth made with `numtxqueues 1 numrxqueues 1`)"
    )]
    MultiQueue {
        /// The interface asked for.
        interface: String,
        /// Its receive queues.
        queues: usize,
    },
    /// The interface is a loopback: taking it over would cut the host off from itself.
    #[error(
        "{0:?} is a loopback interface: AF_XDP would take every frame the host sends itself; use a veth or a NIC"
    )]
    Loopback(String),
    /// Another AF_XDP socket (another device, another process) has the queue.
    #[error(
        "queue {queue} of {interface:?} already has an AF_XDP socket (another XdpDevice or process): one socket per queue"
    )]
    QueueBusy {
        /// The interface asked for.
        interface: String,
        /// The queue asked for.
        queue: u32,
    },
    /// The configuration is out of range.
    #[error("bad AF_XDP configuration: {0}")]
    BadConfig(String),
    /// A frame handed to [`XdpDevice::transmit_gather`] does not fit a chunk.
    #[error("frame of {len} bytes is longer than the device's {max}")]
    FrameTooLong {
        /// Its length.
        len: usize,
        /// The longest frame the device sends.
        max: usize,
    },
    /// Loading or attaching the XDP program failed for another reason.
    #[error("XDP program on {interface:?}: {message}")]
    Program {
        /// The interface asked for.
        interface: String,
        /// What aya said.
        message: String,
    },
    /// Another system error.
    #[error("AF_XDP on {interface:?}: {what}: {source}")]
    Io {
        /// The interface asked for.
        interface: String,
        /// The step that failed.
        what: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

/// The socket's own counters (`XDP_STATISTICS`) and the device's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames the kernel dropped for another reason than a full ring.
    pub rx_dropped: u64,
    /// Frames the kernel dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty (a frame dropped each time).
    pub rx_fill_ring_empty: u64,
    /// TX descriptors the kernel refused.
    pub tx_invalid_descs: u64,
    /// RX or completion descriptors from the kernel that failed our checks.
    pub bad_descriptors: u64,
    /// Wake-ups (`sendto`) made for the TX ring.
    pub kicks: u64,
    /// Frames handed to the stack as views of their chunk (no copy).
    pub rx_lent: u64,
    /// Frames handed to the stack as copies.
    pub rx_copied: u64,
    /// The socket was bound in zero-copy mode.
    pub zero_copy: bool,
    /// The program runs in driver (native) mode, not generic.
    pub native: bool,
}

/// Whether an [`XdpDevice`]'s RX ring holds frames not yet taken: two loads from the
/// ring's shared memory, no system call. Made by [`XdpDevice::rx_probe`]; it can be kept
/// apart from the device (by the runtime's poll list while the stack owns the device)
/// and may outlive it. A `true` may be spurious (frames being taken at that moment),
/// never a missed frame: after it says `false`, a frame that arrives makes the socket
/// readable in epoll as before.
#[derive(Clone, Debug)]
pub struct RxProbe(sys::RingProbe);

impl RxProbe {
    /// Whether frames wait on the RX ring.
    pub fn has_received(&self) -> bool {
        self.0.has_entries()
    }
}

/// One interface queue over AF_XDP: see the module docs.
#[derive(Debug)]
pub struct XdpDevice {
    // Field order is drop order: detach the program, close the socket, unmap the rings,
    // then the UMEM.
    program: program::AttachedProgram,
    fd: OwnedFd,
    fill: Producer,
    rx: Consumer,
    tx: Producer,
    completion: Consumer,
    umem: sys::Umem,
    layout: ChunkLayout,
    /// `rx_with_kernel[i]`: receive chunk `i` is on the fill ring or the RX ring (the kernel's).
    rx_with_kernel: Vec<bool>,
    /// Receive chunks we hold, to go back on the fill ring.
    rx_free: Vec<u32>,
    /// The device's own handle on each receive chunk (with `lend_received`): a view of
    /// the whole chunk whose clones are lent to the stack; unique again = no view left.
    rx_views: Vec<IOBuf>,
    /// Receive chunks whose views the stack may still hold, oldest first.
    rx_with_stack: VecDeque<u32>,
    /// Validated RX descriptors of the current batch: (chunk, UMEM address, length).
    rx_batch: Vec<(u32, u64, u32)>,
    /// `tx_sent[i]`: transmit chunk `i` (counted from the first) is the kernel's.
    tx_sent: Vec<bool>,
    /// Transmit chunks free to fill (indices among the transmit chunks).
    tx_free: Vec<u32>,
    interface: String,
    caps: DeviceCapabilities,
    counters: DeviceCounters,
    stats: XdpStats,
    io_errors: u64,
    frame_buffers: ReceiveBuffers,
}

/// Receive queues of `interface`, from sysfs (None if it cannot be read).
fn rx_queue_count(interface: &str) -> Option<usize> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{interface}/queues")).ok()?;
    Some(
        dir.filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count(),
    )
}

/// Whether `interface` has `IFF_LOOPBACK` set (from sysfs; false if unreadable).
fn is_loopback(interface: &str) -> bool {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/flags"))
        .ok()
        .and_then(|flags| u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & libc::IFF_LOOPBACK as u32 != 0)
}

impl XdpDevice {
    /// Takes over `config.interface`'s queue: see the module docs.
    pub fn open(config: &XdpConfig) -> Result<Self, XdpError> {
        let interface = config.interface.clone();
        let layout = Self::layout(config)?;
        let name = CString::new(interface.as_bytes())
            .map_err(|_| XdpError::BadConfig(format!("interface name {interface:?} has a NUL")))?;
        let ifindex =
            sys::if_index(&name).ok_or_else(|| XdpError::NoSuchInterface(interface.clone()))?;
        if is_loopback(&interface) {
            return Err(XdpError::Loopback(interface));
        }
        if let Some(queues) = rx_queue_count(&interface)
            && queues > 1
        {
            return Err(XdpError::MultiQueue { interface, queues });
        }
        let io = |what: &'static str| {
            let interface = interface.clone();
            move |source: io::Error| match source.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => XdpError::NeedsPrivilege {
                    interface: interface.clone(),
                    what,
                },
                _ => XdpError::Io {
                    interface: interface.clone(),
                    what,
                    source,
                },
            }
        };
        let fd = sys::socket().map_err(io("the AF_XDP socket"))?;
        let umem = sys::Umem::new(layout.umem_len()).map_err(io("mapping the UMEM"))?;
        let sizes = sys::RingSizes {
            rx: layout.rx_chunks.next_power_of_two(),
            fill: layout.rx_chunks.next_power_of_two(),
            tx: layout.tx_chunks.next_power_of_two(),
            completion: layout.tx_chunks.next_power_of_two(),
        };
        let rings = sys::register(&fd, &umem, layout.chunk_size, sizes)
            .map_err(io("registering the UMEM and its rings"))?;
        let mut zero_copy = false;
        let mut bound = Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        if config.zero_copy {
            bound = sys::bind(
                &fd,
                ifindex,
                config.queue,
                libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP,
            );
            zero_copy = bound.is_ok();
        }
        if bound.is_err() {
            bound = sys::bind(
                &fd,
                ifindex,
                config.queue,
                libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP,
            );
        }
        bound.map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => XdpError::QueueBusy {
                interface: interface.clone(),
                queue: config.queue,
            },
            _ => io("binding the socket to the queue")(e),
        })?;
        let mut program = program::AttachedProgram::attach(&interface)
            .map_err(|e| Self::program_error(&interface, e))?;
        program
            .bind(config.queue, fd.as_fd())
            .map_err(|e| Self::program_error(&interface, e))?;
        let mut caps = DeviceCapabilities::ETHERNET;
        caps.mtu = config.mtu;
        let mut device = Self {
            program,
            fd,
            fill: Producer::new(rings.fill),
            rx: Consumer::new(rings.rx),
            tx: Producer::new(rings.tx),
            completion: Consumer::new(rings.completion),
            umem,
            layout,
            rx_with_kernel: vec![false; layout.rx_chunks as usize],
            rx_free: (0..layout.rx_chunks).rev().collect(),
            rx_views: Vec::new(),
            rx_with_stack: VecDeque::new(),
            rx_batch: Vec::new(),
            tx_sent: vec![false; layout.tx_chunks as usize],
            tx_free: (0..layout.tx_chunks).rev().collect(),
            interface,
            caps,
            counters: DeviceCounters::default(),
            stats: XdpStats {
                zero_copy,
                ..XdpStats::default()
            },
            io_errors: 0,
            frame_buffers: ReceiveBuffers::new(caps.max_frame_len(), FRAME_BUFFERS_LENT),
        };
        if config.lend_received {
            for chunk in 0..layout.rx_chunks {
                let view = device
                    .umem
                    .lend(layout.chunk_addr(chunk), layout.chunk_size as usize)
                    .ok_or_else(|| {
                        XdpError::BadConfig("a receive chunk outside the UMEM".into())
                    })?;
                device.rx_views.push(view);
            }
        }
        device.refill();
        Ok(device)
    }

    fn program_error(interface: &str, e: program::ProgramError) -> XdpError {
        if e.permission {
            XdpError::NeedsPrivilege {
                interface: interface.to_string(),
                what: "the XDP program",
            }
        } else {
            XdpError::Program {
                interface: interface.to_string(),
                message: e.message,
            }
        }
    }

    /// The UMEM layout `config` asks for, or why it is out of range.
    fn layout(config: &XdpConfig) -> Result<ChunkLayout, XdpError> {
        if config.interface.is_empty() || config.interface.len() > 15 {
            return Err(XdpError::BadConfig(format!(
                "interface name {:?}: 1 to 15 bytes",
                config.interface
            )));
        }
        if !config.chunks.is_power_of_two() || !(16..=65_536).contains(&config.chunks) {
            return Err(XdpError::BadConfig(format!(
                "chunks {}: a power of two from 16 to 65536",
                config.chunks
            )));
        }
        let layout = ChunkLayout {
            chunk_size: CHUNK_SIZE,
            rx_chunks: config.chunks / 2,
            tx_chunks: config.chunks / 2,
        };
        let max_frame = config.mtu + ebb_net_driver::ETHERNET_HEADER_LEN;
        if config.mtu < 576 || max_frame > layout.max_rx_frame() as usize {
            return Err(XdpError::BadConfig(format!(
                "MTU {}: 576 to {} (a frame fits one chunk)",
                config.mtu,
                layout.max_rx_frame() as usize - ebb_net_driver::ETHERNET_HEADER_LEN
            )));
        }
        Ok(layout)
    }

    /// The interface taken over.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The socket's and the device's counters (one `getsockopt`).
    pub fn stats(&mut self) -> XdpStats {
        match sys::statistics(&self.fd) {
            Ok(s) => {
                self.stats.rx_dropped = s.rx_dropped;
                self.stats.rx_ring_full = s.rx_ring_full;
                self.stats.rx_fill_ring_empty = s.rx_fill_ring_empty_descs;
                self.stats.tx_invalid_descs = s.tx_invalid_descs;
            }
            Err(_) => self.io_errors += 1,
        }
        self.stats.native = self.program.native;
        self.stats
    }

    /// Operations that failed unexpectedly (a kick the kernel refused, statistics).
    pub fn io_errors(&self) -> u64 {
        self.io_errors
    }

    /// Whether the RX ring holds a frame we have not taken (one Acquire load, no system
    /// call).
    pub fn has_received(&self) -> bool {
        self.rx.has_entries()
    }

    /// A handle that answers [`has_received`](Self::has_received) without the device:
    /// what the runtime of the device's core polls while it spins before sleeping, so
    /// that spinning makes no system call (see [`RxProbe`]).
    pub fn rx_probe(&self) -> RxProbe {
        RxProbe(self.rx.map.probe())
    }

    /// Longest frame sent or received (Ethernet header included).
    pub fn max_frame_len(&self) -> usize {
        self.caps.max_frame_len()
    }

    /// Puts every receive chunk we hold back on the fill ring (one publish).
    fn refill(&mut self) {
        while let Some(&chunk) = self.rx_free.last() {
            if !self.fill.has_room(1) {
                break;
            }
            self.rx_free.pop();
            self.rx_with_kernel[chunk as usize] = true;
            self.fill.push_addr(self.layout.chunk_addr(chunk));
        }
        self.fill.publish();
    }

    /// Takes up to `max` descriptors off the RX ring into `rx_batch`, each checked
    /// (a bad one is counted and its chunk, if it names one the kernel held, taken back);
    /// the chunks of the batch are ours, on no list yet.
    fn take_rx_batch(&mut self, max: usize) {
        self.rx_batch.clear();
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let ready = self.rx.available(max);
        for _ in 0..ready {
            let index = self.rx.take();
            let desc = self.rx.map.read_desc(index);
            match self
                .layout
                .check_rx((desc.addr, desc.len, desc.options), &self.rx_with_kernel)
            {
                Ok(chunk) => {
                    // The chunk came back through the RX ring: ours until refilled.
                    self.rx_with_kernel[chunk as usize] = false;
                    if desc.len as usize > self.caps.max_frame_len() {
                        self.counters.rx_dropped.record(DropReason::Oversized);
                        self.rx_free.push(chunk);
                    } else {
                        self.rx_batch.push((chunk, desc.addr, desc.len));
                    }
                }
                Err(_) => {
                    self.stats.bad_descriptors += 1;
                    self.reclaim_rx(desc.addr);
                }
            }
        }
        if ready > 0 {
            self.rx.release();
        }
    }

    /// Takes up to `max` frames off the RX ring, handing each one's bytes to `f`, and
    /// gives every chunk back to the kernel (the fill ring is refilled once, at the
    /// end). Returns the frames handed to `f`; a descriptor that fails the checks is
    /// counted and skipped.
    pub fn receive_with(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        self.take_rx_batch(max);
        let mut received = 0;
        for i in 0..self.rx_batch.len() {
            let (chunk, addr, len) = self.rx_batch[i];
            // The chunk is ours (taken off the RX ring, not yet refilled).
            if let Some(bytes) = self.umem.bytes(addr, len as usize) {
                self.counters.record_rx(len as usize);
                f(bytes);
                received += 1;
            }
            self.rx_free.push(chunk);
        }
        self.refill();
        received
    }

    /// Receive chunks whose views the stack dropped go back to the free list (at most
    /// `LENT_SCAN` looked at per call, oldest first, so a held one costs no rescan of
    /// the rest every time).
    fn reclaim_lent(&mut self) {
        for _ in 0..self.rx_with_stack.len().min(LENT_SCAN) {
            let Some(chunk) = self.rx_with_stack.pop_front() else {
                break;
            };
            let view = &mut self.rx_views[chunk as usize];
            // `recycle` checks uniqueness with an acquire fence (the last view's reads
            // happen before the kernel writes the chunk again) and empties the view.
            if view.recycle() && view.commit(self.layout.chunk_size as usize).is_ok() {
                self.rx_free.push(chunk);
            } else {
                self.rx_with_stack.push_back(chunk);
            }
        }
    }

    /// A descriptor failed the checks but names a chunk the kernel held: take the
    /// chunk back (not its bytes), so a bad descriptor does not leak receive chunks.
    fn reclaim_rx(&mut self, addr: u64) {
        let chunk = addr / u64::from(self.layout.chunk_size);
        if chunk < u64::from(self.layout.rx_chunks) && self.rx_with_kernel[chunk as usize] {
            self.rx_with_kernel[chunk as usize] = false;
            self.rx_free.push(chunk as u32);
        }
    }

    /// Takes back the transmit chunks the kernel has sent.
    fn reap_completions(&mut self) {
        let ready = self.completion.available(self.completion.map.size());
        for _ in 0..ready {
            let index = self.completion.take();
            let addr = self.completion.map.read_addr(index);
            match self.layout.check_completion(addr, &self.tx_sent) {
                Some(i) => {
                    self.tx_sent[i as usize] = false;
                    self.tx_free.push(i);
                }
                None => self.stats.bad_descriptors += 1,
            }
        }
        if ready > 0 {
            self.completion.release();
        }
    }

    /// Copies one frame of `len` bytes into a free transmit chunk by handing `fill` the
    /// chunk's first `len` bytes (it writes every byte; returning false abandons the
    /// frame and the chunk stays free). `Ok(false)`: no chunk free (back-pressure), or
    /// `fill` abandoned it. Queued for the next [`flush`](Self::flush).
    pub fn transmit_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<bool, XdpError> {
        let max = self.caps.max_frame_len();
        if len > max {
            return Err(XdpError::FrameTooLong { len, max });
        }
        if self.tx_free.is_empty() {
            self.reap_completions();
        }
        let Some(&i) = self.tx_free.last() else {
            return Ok(false);
        };
        // A free chunk has a ring slot (the ring is as large as the pool); checked all
        // the same, as the kernel's consumer index is read here.
        if !self.tx.has_room(1) {
            return Ok(false);
        }
        let addr = self.layout.chunk_addr(self.layout.rx_chunks + i);
        // The chunk is on the free list: no kernel ring holds it.
        let Some(bytes) = self.umem.bytes_mut(addr, len) else {
            return Ok(false);
        };
        if !fill(bytes) {
            return Ok(false);
        }
        self.tx_free.pop();
        self.tx_sent[i as usize] = true;
        self.tx.push_desc(Desc {
            addr,
            len: len as u32,
            options: 0,
        });
        self.counters.record_tx(len);
        Ok(true)
    }

    /// Copies one frame, given as consecutive `segments`, into a free transmit chunk.
    /// `Ok(false)`: no chunk free (back-pressure). Queued for the next
    /// [`flush`](Self::flush).
    pub fn transmit_gather(&mut self, segments: &[&[u8]]) -> Result<bool, XdpError> {
        let len = segments.iter().map(|s| s.len()).sum();
        self.transmit_with(len, |chunk| {
            let mut at = 0;
            for segment in segments {
                chunk[at..at + segment.len()].copy_from_slice(segment);
                at += segment.len();
            }
            true
        })
    }

    /// Hands the frames queued since the last flush to the kernel: one publish of the TX
    /// ring, and one wake-up if the kernel asked for it. Also reaps completions.
    pub fn flush(&mut self) {
        if self.tx.unpublished() > 0 {
            self.tx.publish();
            if self.tx.map.needs_wakeup() {
                self.stats.kicks += 1;
                match sys::kick(&self.fd) {
                    Ok(()) => {}
                    // The kernel is busy or out of buffers: the frames stay on the ring
                    // and go with the next kick.
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN)
                        ) => {}
                    Err(_) => self.io_errors += 1,
                }
            }
        }
        self.reap_completions();
    }
}

impl AsFd for XdpDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for XdpDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl NetDevice for XdpDevice {
    fn capabilities(&self) -> DeviceCapabilities {
        self.caps
    }

    /// Each frame a view of its chunk (with [`XdpConfig::lend_received`], while the
    /// stack holds at most half the receive chunks) or a copy; checksum `Complete`.
    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        if !self.rx_views.is_empty() {
            self.reclaim_lent();
        }
        self.take_rx_batch(max);
        let lend_limit = self.layout.rx_chunks as usize / 2;
        let mut received = 0;
        for i in 0..self.rx_batch.len() {
            let (chunk, addr, len) = self.rx_batch[i];
            let offset = (addr % u64::from(self.layout.chunk_size)) as usize;
            let len = len as usize;
            let buf = if !self.rx_views.is_empty() && self.rx_with_stack.len() < lend_limit {
                let mut view = self.rx_views[chunk as usize].clone();
                let tail = self.layout.chunk_size as usize - offset - len;
                if view.trim_front(offset).is_err() || view.trim_back(tail).is_err() {
                    // Unreachable: `check_rx` kept the frame inside its chunk.
                    self.rx_free.push(chunk);
                    continue;
                }
                self.rx_with_stack.push_back(chunk);
                self.stats.rx_lent += 1;
                view
            } else {
                let Some(bytes) = self.umem.bytes(addr, len) else {
                    self.rx_free.push(chunk);
                    continue;
                };
                let buf = self.frame_buffers.take_copy(bytes);
                self.frame_buffers.lend(&buf);
                self.rx_free.push(chunk);
                self.stats.rx_copied += 1;
                buf
            };
            self.counters.record_rx(len);
            out.push(RxFrame {
                buf,
                checksum: FrameChecksum::Complete,
            });
            received += 1;
        }
        self.refill();
        received
    }

    /// Copies frames into transmit chunks until they run out (back-pressure: the rest
    /// stay queued), then one publish and at most one kick.
    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.reap_completions();
        let max = self.caps.max_frame_len();
        let mut taken = 0;
        while let Some(front) = frames.front() {
            if front.chain.len() > max {
                frames.pop_front();
                self.counters.tx_dropped.record(DropReason::Oversized);
                taken += 1;
                continue;
            }
            if self.tx_free.is_empty() {
                break;
            }
            let Some(frame) = frames.pop_front() else {
                break;
            };
            let chain = frame.into_complete();
            let len = chain.len();
            let sent = self.transmit_with(len, |chunk| {
                let mut at = 0;
                for segment in chain.segments() {
                    chunk[at..at + segment.len()].copy_from_slice(segment);
                    at += segment.len();
                }
                true
            });
            match sent {
                Ok(true) => {}
                // Unreachable (a chunk was free, the length was checked): counted, not
                // lost silently.
                _ => self.counters.tx_dropped.record(DropReason::QueueFull),
            }
            taken += 1;
        }
        self.flush();
        taken
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_are_caught_before_any_system_call() {
        let mut config = XdpConfig::new("veth0");
        config.chunks = 1000;
        assert!(matches!(
            XdpDevice::open(&config),
            Err(XdpError::BadConfig(_))
        ));
        config.chunks = 8;
        assert!(matches!(
            XdpDevice::open(&config),
            Err(XdpError::BadConfig(_))
        ));
        let mut config = XdpConfig::new("veth0");
        config.mtu = 9000;
        let err = XdpDevice::open(&config).unwrap_err();
        assert!(err.to_string().contains("MTU 9000"), "{err}");
        for name in ["", "a-name-too-long-for-linux"] {
            let err = XdpDevice::open(&XdpConfig::new(name)).unwrap_err();
            assert!(matches!(err, XdpError::BadConfig(_)), "{name:?}: {err}");
        }
    }

    #[test]
    fn a_missing_interface_is_named() {
        let err = XdpDevice::open(&XdpConfig::new("ebbnosuch0")).unwrap_err();
        assert!(matches!(err, XdpError::NoSuchInterface(_)), "{err}");
        assert!(err.to_string().contains("ebbnosuch0"));
    }

    #[test]
    fn the_loopback_is_refused() {
        let err = XdpDevice::open(&XdpConfig::new("lo")).unwrap_err();
        assert!(matches!(err, XdpError::Loopback(_)), "{err}");
    }

    #[test]
    fn errors_say_what_is_missing() {
        let denied = XdpError::NeedsPrivilege {
            interface: "veth0".into(),
            what: "the AF_XDP socket",
        };
        let text = denied.to_string();
        assert!(
            text.contains("CAP_NET_ADMIN") && text.contains("CAP_BPF"),
            "{text}"
        );
        let multi = XdpError::MultiQueue {
            interface: "eth0".into(),
            queues: 4,
        };
        assert!(
            multi
                .to_string()
                .contains("has 4 receive queues, bind one socket per queue")
        );
    }
}
