//! # ebb-tap — a Linux TAP device as a network device
//!
//! [`TapDevice`]: a Linux TAP device as an `ebb-net-driver` [`NetDevice`], so the ebb-net
//! stack runs in a hosted process (`ebb-hosted` registers the descriptor with its
//! reactor) and the monitor (`ebb-vmm`) backs a guest's virtio-net device with it; either
//! way it talks to the host (or a network namespace) over a virtual Ethernet link.
//!
//! The device is opened from `/dev/net/tun` with `IFF_TAP | IFF_NO_PI` (plain Ethernet
//! frames, no packet-info header) and is **non-blocking**: `receive` reads frames until
//! the kernel has none (`EAGAIN`), `transmit` writes until the kernel pushes back
//! (`EAGAIN` leaves the rest queued). Each frame is written with one `writev`, a slice
//! per chain segment, so a header buffer and the application's payload buffers go out
//! without being copied together. [`TapDevice::as_fd`] gives the descriptor for the
//! reactor's epoll.
//!
//! The device lives as long as the `TapDevice` (it is not made persistent). Creating
//! one needs `CAP_NET_ADMIN` (root); a missing `/dev/net/tun` or a refusal is reported
//! as its own [`TapError`]. No offload unless asked: the stack computes every checksum.
//!
//! **Checksum offload** ([`TapConfig::vnet_hdr`]): the device is opened with
//! `IFF_VNET_HDR` (a 12-byte `virtio_net_hdr` in front of every frame, `TUNSETVNETHDRSZ`)
//! and `TUNSETOFFLOAD(TUN_F_CSUM)`, so the kernel may hand us frames with partial
//! checksums (`NEEDS_CSUM`, from a local sender) or verified ones (`DATA_VALID`), and
//! completes the partial checksums we send. Per frame this is an `ebb-net-driver`
//! [`FrameChecksum`], carried by the frame: [`NetDevice::receive`] reports it,
//! [`NetDevice::transmit`] passes partial checksums on (without the header it completes
//! them itself).
//!
//! **Segmentation offload** comes with the header, on transmit: the device reports
//! [`DeviceCapabilities::tso_max_len`] 65,535, so TCP may hand it frames up to a whole
//! IPv4 packet long, and a frame longer than the MTU goes to the kernel as one write
//! with a `GSO_TCPV4` header ([`ebb_net_driver::Segmentation`] gives its segment size).
//! The kernel takes it as one packet and cuts it only if it must: delivered to a local
//! socket, it never is.
//!
//! **Large receive** ([`TapConfig::large_receive`], with the header): `TUNSETOFFLOAD`
//! adds `TUN_F_TSO4`, so the kernel hands us a local sender's TCP stream in frames of up
//! to 64 KiB instead of cutting it into MTU-sized ones. Frames are then read with one
//! `readv` into a frame-sized buffer followed by a 64 KiB one: a frame that fits the
//! first is handed over in it, uncopied, and the large buffer read into again (a small
//! frame never pins 64 KiB); a larger one has its first part copied in front of the rest
//! and is handed over in the large buffer, which is read into again once the stack and
//! the application have dropped it ([`ebb_net_driver::ReceiveBuffers`]: a fresh one
//! would be zeroed whole first).
//!
//! Frame-sized buffers — what every frame is read into first — come from a second such
//! pool, so a steady stream of small frames (a request-response protocol) allocates
//! nothing per frame once warm.
//!
//! The crate's only `unsafe` code — the `TUNSETIFF`, `TUNSETVNETHDRSZ` and
//! `TUNSETOFFLOAD` ioctls, which `rustix` does not wrap — is fenced in the private `sys`
//! module below (`deny(unsafe_code)` everywhere else).

#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use ebb_abi::virtio::{NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM, NET_HDR_LEN, NetHdr};
use ebb_core::{IOBuf, Instant};
use ebb_net_driver::{
    ChecksumOffload, DeviceCapabilities, DeviceCounters, DropReason, ETHERNET_HEADER_LEN,
    FrameChecksum, NetDevice, ReceiveBufferCounts, ReceiveBuffers, RxFrame, Segmentation, TxFrame,
};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// Longest interface name Linux accepts (`IFNAMSIZ` − 1).
pub const MAX_NAME_LEN: usize = 15;

/// Chain segments written with one `writev` before a frame is coalesced instead: a
/// header and a 64 KiB offloaded frame of MSS-sized received buffers (an echo's).
const MAX_IOVECS: usize = 64;

/// Gather entries of the common frame (a header and a few payload pieces): a frame that
/// fits gathers into an array this long, so the 64-entry one is not filled per frame.
const FEW_IOVECS: usize = 8;

/// The largest IPv4 packet a TCP frame may carry with segmentation offload, either way.
const TSO_MAX_LEN: usize = u16::MAX as usize;

/// Large receive buffers handed over with frames that are kept to come back (8 MiB).
const LARGE_BUFFERS_LENT: usize = 128;
/// Frame-sized receive buffers handed over and kept to come back (about 400 KiB).
const FRAME_BUFFERS_LENT: usize = 256;

/// What TAP device to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapConfig {
    /// The interface name, e.g. `ebb0`; a `%d` in it lets the kernel pick a number.
    pub name: String,
    /// The IP MTU the stack uses (frames are up to 14 bytes longer). Set the Linux side
    /// to the same (`ip link set NAME mtu N`); 1500 is Linux's default.
    pub mtu: usize,
    /// Queue pairs (`IFF_MULTI_QUEUE` when more than one): [`TapDevice::open_queues`]
    /// opens one descriptor per queue, each a `TapDevice` a different core can drive.
    /// Linux hands a flow's frames to the queue that last transmitted for it (else to
    /// a queue chosen by the flow's hash). Default 1.
    pub queues: usize,
    /// Open with a virtio-net header and checksum offload (see the module docs).
    /// Default off.
    pub vnet_hdr: bool,
    /// With `vnet_hdr`: take TCP frames up to 64 KiB from the kernel (`TUN_F_TSO4`; see
    /// the module docs). Default off.
    pub large_receive: bool,
}

impl TapConfig {
    /// A device called `name` with MTU 1500.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            mtu: 1500,
            queues: 1,
            vnet_hdr: false,
            large_receive: false,
        }
    }
}

/// Why a TAP device could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// `/dev/net/tun` does not exist.
    #[error(
        "/dev/net/tun does not exist: load the tun module (`modprobe tun`) or run where TAP devices are available"
    )]
    NoTunDevice,
    /// Not allowed to open `/dev/net/tun` or to create the device.
    #[error("permission denied creating TAP device {name:?}: needs root or CAP_NET_ADMIN")]
    PermissionDenied {
        /// The name asked for.
        name: String,
    },
    /// The name is empty, too long or has a NUL byte.
    #[error("bad TAP device name {0:?}: 1 to 15 bytes, no NUL")]
    BadName(String),
    /// Another system error.
    #[error("creating TAP device {name:?}: {source}")]
    Io {
        /// The name asked for.
        name: String,
        /// What the kernel said.
        #[source]
        source: std::io::Error,
    },
}

/// A TAP device: see the module docs.
#[derive(Debug)]
pub struct TapDevice {
    fd: OwnedFd,
    name: String,
    caps: DeviceCapabilities,
    counters: DeviceCounters,
    io_errors: u64,
    /// A frame-sized receive buffer taken and not yet handed over.
    spare: Option<IOBuf>,
    /// With large receive, the large buffer read into behind `spare` when no frame
    /// needed it.
    spare_large: Option<IOBuf>,
    /// `TUN_F_TSO4` is on: frames read may be up to 64 KiB ([`TapConfig::large_receive`]).
    large_receive: bool,
    /// Large receive buffers, which come back once released (see the module docs).
    large_buffers: ReceiveBuffers,
    /// Frame-sized receive buffers (header, largest frame and one byte), likewise.
    frame_buffers: ReceiveBuffers,
    /// Opened with `IFF_VNET_HDR`: every frame has a [`VNET_HDR_LEN`]-byte header.
    vnet_hdr: bool,
}

/// Bytes of the `virtio_net_hdr` (with `num_buffers`, as virtio 1.x) in front of each
/// frame with [`TapConfig::vnet_hdr`].
pub const VNET_HDR_LEN: usize = NET_HDR_LEN;

/// The header of a frame with `checksum`, cut into segments as `segmentation` says.
fn vnet_header(checksum: FrameChecksum, segmentation: Option<Segmentation>) -> [u8; VNET_HDR_LEN] {
    let FrameChecksum::Partial { start, offset } = checksum else {
        return NetHdr::PLAIN.to_bytes();
    };
    let header = NetHdr::needs_csum(start, offset);
    match segmentation {
        Some(cut) => header.with_tcpv4_gso(cut.header_len, cut.segment_payload),
        None => header,
    }
    .to_bytes()
}

/// What a received header says of its frame of `len` bytes (a partial checksum whose
/// field lies outside the frame is not trusted).
fn vnet_checksum(h: &[u8; VNET_HDR_LEN], len: usize) -> FrameChecksum {
    let h = NetHdr::from_bytes(h);
    if h.flags & NET_HDR_F_NEEDS_CSUM != 0 {
        let (start, offset) = (h.csum_start, h.csum_offset);
        if usize::from(start) + usize::from(offset) + 2 <= len {
            return FrameChecksum::Partial { start, offset };
        }
        return FrameChecksum::Complete;
    }
    if h.flags & NET_HDR_F_DATA_VALID != 0 {
        return FrameChecksum::Verified;
    }
    FrameChecksum::Complete
}

impl TapDevice {
    /// Creates the TAP device `config.name` and opens it, non-blocking (its first queue
    /// only, if `config.queues` asks for several: see [`open_queues`](Self::open_queues)).
    pub fn open(config: &TapConfig) -> Result<Self, TapError> {
        Self::open_queue(config, &config.name, config.queues > 1)
    }

    /// Creates the TAP device `config.name` with `config.queues` queues and opens every
    /// one (non-blocking); the first device returned is queue 0.
    pub fn open_queues(config: &TapConfig) -> Result<Vec<Self>, TapError> {
        let first = Self::open(config)?;
        let name = first.name.clone();
        let mut queues = vec![first];
        for _ in 1..config.queues {
            queues.push(Self::open_queue(config, &name, true)?);
        }
        Ok(queues)
    }

    fn open_queue(config: &TapConfig, name: &str, multi_queue: bool) -> Result<Self, TapError> {
        let name = name.to_string();
        if name.is_empty() || name.len() > MAX_NAME_LEN || name.contains('\0') {
            return Err(TapError::BadName(name));
        }
        let fd = rustix::fs::open(
            "/dev/net/tun",
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOENT | Errno::NODEV | Errno::NXIO => TapError::NoTunDevice,
            Errno::ACCESS | Errno::PERM => TapError::PermissionDenied { name: name.clone() },
            e => TapError::Io {
                name: name.clone(),
                source: e.into(),
            },
        })?;
        let actual =
            sys::set_tap_iff(&fd, &name, multi_queue, config.vnet_hdr).map_err(|e| match e {
                Errno::PERM | Errno::ACCESS => TapError::PermissionDenied { name: name.clone() },
                e => TapError::Io {
                    name: name.clone(),
                    source: e.into(),
                },
            })?;
        let mut caps = DeviceCapabilities::ETHERNET;
        caps.mtu = config.mtu;
        caps.queues = config.queues.max(1);
        if config.vnet_hdr {
            caps.checksum.tcp = ChecksumOffload::PARTIAL;
            caps.checksum.udp = ChecksumOffload::PARTIAL;
            caps.tso_max_len = TSO_MAX_LEN;
        }
        let mut tap = Self {
            fd,
            name: actual,
            vnet_hdr: config.vnet_hdr,
            caps,
            counters: DeviceCounters::default(),
            io_errors: 0,
            spare: None,
            spare_large: None,
            large_receive: false,
            large_buffers: ReceiveBuffers::new(
                VNET_HDR_LEN + ETHERNET_HEADER_LEN + TSO_MAX_LEN + 1,
                LARGE_BUFFERS_LENT,
            ),
            frame_buffers: ReceiveBuffers::new(
                VNET_HDR_LEN + caps.max_frame_len() + 1,
                FRAME_BUFFERS_LENT,
            ),
        };
        if config.large_receive {
            tap.set_large_receive(true).map_err(|e| TapError::Io {
                name: name.clone(),
                source: e,
            })?;
        }
        Ok(tap)
    }

    /// Turns large receive (`TUN_F_TSO4`, see [`TapConfig::large_receive`]) on or off
    /// for the whole device, all its queues: the monitor does once the guest's driver
    /// said whether it takes such frames. Needs the virtio-net header.
    pub fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        if on && !self.vnet_hdr {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "large receive needs the virtio-net header (TapConfig::vnet_hdr)",
            ));
        }
        if self.vnet_hdr {
            sys::set_offload(&self.fd, on)?;
        }
        if !on {
            self.spare_large = None;
        }
        self.large_receive = on;
        Ok(())
    }

    /// Where the frame-sized receive buffers came from so far: allocated, or recycled
    /// once every view of them was dropped (see the module docs).
    pub fn frame_buffer_counts(&self) -> ReceiveBufferCounts {
        self.frame_buffers.counts()
    }

    /// Whether large receive is on ([`set_large_receive`](Self::set_large_receive)).
    pub fn has_large_receive(&self) -> bool {
        self.large_receive
    }

    /// The interface name the kernel gave the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether every frame read or written carries a [`VNET_HDR_LEN`]-byte virtio-net
    /// header ([`TapConfig::vnet_hdr`]), for callers that read and write the descriptor
    /// themselves.
    pub fn has_vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Reads and writes that failed with an unexpected error (the frame written was
    /// dropped and counted in `tx_dropped.queue_full`; a failed read ends the batch).
    pub fn io_errors(&self) -> u64 {
        self.io_errors
    }
}

impl AsFd for TapDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for TapDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl NetDevice for TapDevice {
    fn capabilities(&self) -> DeviceCapabilities {
        self.caps
    }

    /// Each frame with what its virtio-net header said of its checksum (without a
    /// header, every frame is `Complete`).
    ///
    /// Every frame is read into a frame-sized buffer; with large receive, a large buffer
    /// behind it (one `readv`) takes what does not fit, and such a frame is moved into
    /// the large buffer whole (its first part copied, a frame-sized copy per large
    /// frame). A small frame is then neither copied nor pins the large buffer, which
    /// stays for the next read. (Reading into the large buffer first and copying small
    /// frames out cost a request-response exchange about 150 instructions per frame.)
    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let max_frame = self.caps.max_frame_len();
        let header = if self.vnet_hdr { VNET_HDR_LEN } else { 0 };
        // With large receive a frame may be a whole IPv4 packet.
        let max_read = if self.large_receive {
            ETHERNET_HEADER_LEN + TSO_MAX_LEN
        } else {
            max_frame
        };
        let mut received = 0;
        while received < max {
            // One byte more than the largest frame, to tell an oversized frame (which
            // the kernel would cut to fit) from one that fits exactly. The buffers stay
            // in their slots until a frame is handed over in one: polling an idle device
            // allocates and moves nothing.
            if self.spare.is_none() {
                self.spare = Some(self.frame_buffers.take());
            }
            if self.large_receive && self.spare_large.is_none() {
                self.spare_large = Some(self.large_buffers.take());
            }
            let Some(buf) = self.spare.as_mut() else {
                break; // Unreachable: filled above.
            };
            let Ok(space) = buf.spare_capacity_mut() else {
                // Unreachable (a taken buffer is unique); a buffer that cannot be
                // written must not stay in its slot for good.
                self.spare = None;
                break;
            };
            let fits = space.len();
            let result = match self.spare_large.as_mut().filter(|_| self.large_receive) {
                None => rustix::io::read(&self.fd, space),
                Some(large) => {
                    let Ok(rest) = large.spare_capacity_mut() else {
                        self.spare_large = None; // As above.
                        break;
                    };
                    let behind = fits.min(rest.len());
                    rustix::io::readv(
                        &self.fd,
                        &mut [IoSliceMut::new(space), IoSliceMut::new(&mut rest[behind..])],
                    )
                }
            };
            match result {
                Ok(0) => break,
                Ok(len) if len > header + max_read || len < header => {
                    self.counters.rx_dropped.record(DropReason::Oversized);
                }
                Ok(len) => {
                    let is_large = len > fits;
                    let taken = if is_large {
                        // The frame's start is in the frame-sized buffer, the rest behind
                        // it in the large one: the start goes in front, and the
                        // frame-sized buffer is read into next.
                        let (Some(buf), Some(mut whole)) =
                            (self.spare.as_mut(), self.spare_large.take())
                        else {
                            break; // Unreachable: only large receive reads past `fits`.
                        };
                        let (Ok(start), Ok(dst)) =
                            (buf.spare_capacity_mut(), whole.spare_capacity_mut())
                        else {
                            break;
                        };
                        let Some(dst) = dst.get_mut(..fits) else {
                            break; // Unreachable: the large buffer holds `len > fits`.
                        };
                        dst.copy_from_slice(&start[..fits]);
                        Some(whole)
                    } else {
                        self.spare.take()
                    };
                    let Some(mut buf) = taken else {
                        break; // Unreachable: both slots were filled above.
                    };
                    if buf.commit(len).is_err() {
                        break;
                    }
                    let mut checksum = FrameChecksum::Complete;
                    if header > 0 {
                        let Some(h) = buf.as_slice().first_chunk::<VNET_HDR_LEN>() else {
                            break; // Unreachable: `len >= header` was checked.
                        };
                        checksum = vnet_checksum(h, len - header);
                        if buf.trim_front(header).is_err() {
                            break;
                        }
                    }
                    self.counters.record_rx(len - header);
                    if is_large {
                        self.large_buffers.lend(&buf);
                    } else {
                        self.frame_buffers.lend(&buf);
                    }
                    out.push(RxFrame { buf, checksum });
                    received += 1;
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => break,
                Err(_) => {
                    self.io_errors += 1;
                    break;
                }
            }
        }
        received
    }

    /// With a virtio-net header, partial checksums go to the kernel as `NEEDS_CSUM`;
    /// without one they are completed here.
    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let max_frame = self.caps.max_frame_len();
        let mut taken = 0;
        while let Some(front) = frames.front_mut() {
            if !self.vnet_hdr {
                // Completed in place: left in the queue (the kernel pushes back), it is
                // not completed again.
                front.complete();
            }
            let TxFrame {
                chain: frame,
                checksum,
            } = &*front;
            let (len, checksum) = (frame.len(), *checksum);
            // A TCP frame longer than the MTU is for the kernel to cut (only with a
            // header to say so, and its checksum left partial as GSO needs).
            // (A frame within the MTU needs none: its headers are not parsed for it.)
            let segmentation = match (self.vnet_hdr, checksum) {
                (true, FrameChecksum::Partial { .. }) if len > max_frame => frame
                    .segments()
                    .next()
                    .and_then(|head| Segmentation::of(head, self.caps.mtu)),
                _ => None,
            };
            let max_len = match segmentation {
                Some(_) => ETHERNET_HEADER_LEN + TSO_MAX_LEN,
                None => max_frame,
            };
            if len > max_len {
                frames.pop_front();
                self.counters.tx_dropped.record(DropReason::Oversized);
                taken += 1;
                continue;
            }
            let header = vnet_header(checksum, segmentation);
            let header: &[u8] = if self.vnet_hdr { &header } else { &[] };
            let segments = frame.segment_count();
            let result = if segments < FEW_IOVECS {
                writev_gathered::<FEW_IOVECS>(&self.fd, header, frame)
            } else if segments < MAX_IOVECS {
                writev_gathered::<MAX_IOVECS>(&self.fd, header, frame)
            } else {
                let mut bytes = header.to_vec();
                bytes.extend_from_slice(&frame.to_vec());
                rustix::io::write(&self.fd, &bytes)
            };
            match result {
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Ok(_) => self.counters.record_tx(len),
                Err(_) => {
                    // The interface is down, or gone: nobody will take this frame.
                    self.io_errors += 1;
                    self.counters.tx_dropped.record(DropReason::QueueFull);
                }
            }
            frames.pop_front();
            taken += 1;
        }
        taken
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

/// Writes `header` and `frame`'s segments (fewer than `N`) with one `writev`.
#[inline]
fn writev_gathered<const N: usize>(
    fd: &OwnedFd,
    header: &[u8],
    frame: &ebb_core::IOBufChain,
) -> rustix::io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); N];
    slices[0] = IoSlice::new(header);
    let mut used = 1;
    for (slot, segment) in slices[1..].iter_mut().zip(frame.segments()) {
        *slot = IoSlice::new(segment);
        used += 1;
    }
    rustix::io::writev(fd, &slices[..used])
}

/// The `TUNSETIFF`, `TUNSETVNETHDRSZ` and `TUNSETOFFLOAD` ioctls: the only `unsafe` code
/// in this crate.
#[allow(unsafe_code)]
mod sys {
    use std::os::fd::{AsRawFd, OwnedFd};

    use rustix::io::Errno;

    /// `struct ifreq` with the flags member of its union (40 bytes on Linux).
    #[repr(C)]
    struct IfReqFlags {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }

    /// Attaches `fd` (an open `/dev/net/tun`) to the TAP device `name`
    /// (`IFF_TAP | IFF_NO_PI`, plus `IFF_MULTI_QUEUE` to create or join a multi-queue
    /// device), creating it if needed, and returns the name the kernel gave it.
    pub(super) fn set_tap_iff(
        fd: &OwnedFd,
        name: &str,
        multi_queue: bool,
        vnet_hdr: bool,
    ) -> Result<String, Errno> {
        let queue_flag = if multi_queue {
            libc::IFF_MULTI_QUEUE
        } else {
            0
        } | if vnet_hdr { libc::IFF_VNET_HDR } else { 0 };
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TAP | libc::IFF_NO_PI | queue_flag) as libc::c_short,
            _pad: [0; 22],
        };
        // The caller checked the length; the last byte stays NUL.
        let bytes = name.as_bytes();
        let n = bytes.len().min(libc::IFNAMSIZ - 1);
        req.name[..n].copy_from_slice(&bytes[..n]);
        // Soundness: `fd` is an open descriptor we own; TUNSETIFF reads and writes one
        // `struct ifreq` (40 bytes) through the pointer, and `req` is a live, writable
        // 40-byte `repr(C)` value laid out like it (name, then the flags union member).
        // SAFETY: by the argument just above.
        let rc =
            unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReqFlags) };
        if rc < 0 {
            return Err(last_errno());
        }
        if vnet_hdr {
            // The virtio 1.x header (with `num_buffers`), and partial checksums accepted
            // from the kernel.
            let size: libc::c_int = super::VNET_HDR_LEN as libc::c_int;
            // SAFETY: `fd` is an open TAP descriptor; TUNSETVNETHDRSZ reads one c_int
            // through the pointer, which points at a live one.
            let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) };
            if rc < 0 {
                return Err(last_errno());
            }
            set_offload(fd, false)?;
        }
        let end = req
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(req.name.len());
        Ok(String::from_utf8_lossy(&req.name[..end]).into_owned())
    }

    /// What the kernel may hand us on `fd`'s device (`TUNSETOFFLOAD`): partial checksums
    /// (TUN_F_CSUM) always, and TCPv4 frames longer than the MTU (TUN_F_TSO4) with
    /// `large_receive`. What we send may be large either way (see the module docs).
    pub(super) fn set_offload(fd: &OwnedFd, large_receive: bool) -> Result<(), Errno> {
        let flags = libc::TUN_F_CSUM | if large_receive { libc::TUN_F_TSO4 } else { 0 };
        // SAFETY: TUNSETOFFLOAD takes its flags by value; `fd` is an open TAP descriptor.
        let rc =
            unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, flags as libc::c_ulong) };
        if rc < 0 {
            return Err(last_errno());
        }
        Ok(())
    }

    fn last_errno() -> Errno {
        Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    const _: () = assert!(core::mem::size_of::<IfReqFlags>() == 40);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_any_system_call() {
        for name in ["", "a-name-too-long-for-linux", "nul\0name"] {
            let err = TapDevice::open(&TapConfig::new(name)).unwrap_err();
            assert!(matches!(err, TapError::BadName(_)), "{name:?}: {err}");
        }
    }

    #[test]
    fn errors_say_what_to_do() {
        assert!(TapError::NoTunDevice.to_string().contains("modprobe tun"));
        let denied = TapError::PermissionDenied {
            name: "ebb0".into(),
        };
        assert!(denied.to_string().contains("CAP_NET_ADMIN"));
    }
}
