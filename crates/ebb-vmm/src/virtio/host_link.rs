//! The host side of the guest's link ([`HostLink`]): where the device's frames go on the
//! host — a TAP device (`--net tap=NAME`, root), an interface through AF_XDP (`--net
//! xdp=IFACE`, root) or passt (`--net user`, no root),
//! optionally through ebb-net-driver's seeded fault injector (`--net-faults`). Every host
//! link is an `ebb-net-driver` `NetDevice` with a descriptor the I/O thread sleeps on.
//! Which one a VM opens is its [`HostLinkConfig`](crate::vm::HostLinkConfig).

use ebb_core::{IOBuf, Instant};
use ebb_net_driver::{
    DeviceCapabilities, DeviceCounters, DropReason, FaultInjector, NetDevice, RxFrame, TxFrame,
};
use ebb_tap::{TapConfig, TapDevice};
use ebb_xdp::{XdpConfig, XdpDevice};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// The host side of the guest's link, which the device's I/O thread drives: a TAP queue,
/// passt, or a fault injector around either (called "backend" in the device's docs).
pub trait HostLink: NetDevice + Send {
    /// The descriptor that becomes readable when frames arrive.
    fn fd(&self) -> BorrowedFd<'_>;

    /// Moves whatever the host side has written into the backend's own buffer, without
    /// handing frames on: called every round, also when the guest has no room, for a
    /// backend whose host side must never find its socket full (passt). Default: nothing
    /// (a TAP queue's frames wait in the kernel, which drops like a NIC when full).
    fn drain(&mut self) {}

    /// Whether bytes the guest sent still wait in the backend's own buffer for the host
    /// side to take them (passt's socket was full). Default: none are kept.
    fn has_pending_output(&self) -> bool {
        false
    }

    /// The descriptor of a backend that moves frames straight between itself and guest
    /// memory (`readv`/`writev`, the virtio-net header in front when it has one): TAP.
    /// `None` (the default): frames go through [`NetDevice`]'s IOBufs (passt, whose
    /// stream needs framing; the fault injector, which must see every frame).
    fn direct(&self) -> Option<Direct<'_>> {
        None
    }

    /// The backend as a [`CopyingLink`]: frames copied once each way between guest memory
    /// and the backend's own buffers (AF_XDP's UMEM chunks), no IOBuf between. `None`
    /// (the default): [`direct`](Self::direct) or the IOBuf path.
    fn copying(&mut self) -> Option<&mut dyn CopyingLink> {
        None
    }

    /// What a fault injector around the backend did (`None`: there is none).
    fn fault_stats(&self) -> Option<ebb_net_driver::FaultStats> {
        None
    }

    /// Asks the backend to read its descriptor only after [`readable`](Self::readable)
    /// says new input came, instead of every round; returns whether it will. For a
    /// backend whose descriptor sits in an edge-triggered epoll that its owner reads
    /// every round anyway (the user-mode network's, which holds passt's socket): each
    /// round's blind read was a system call that nearly always found nothing. Default:
    /// no, the backend reads every round (the device's own I/O thread, while it polls,
    /// reads no epoll that could tell it).
    fn read_on_readiness(&mut self) -> bool {
        false
    }

    /// Frames for the guest as the backend built them — each a chain of buffers (headers
    /// first, then payload pieces) with its checksum state, in a [`TxFrame`] — without
    /// copying each into one buffer first: the device copies the pieces straight into
    /// the guest's buffers. For a backend whose frames come from a stack in this
    /// process (ebb-usernet's endpoint). `None` (the default): the device takes frames
    /// through [`NetDevice::receive`], one buffer each. Otherwise as `receive`: at most
    /// `max` frames appended to `out`, how many.
    fn receive_chains(
        &mut self,
        _now: Instant,
        _out: &mut Vec<TxFrame>,
        _max: usize,
    ) -> Option<usize> {
        None
    }

    /// The descriptor became readable since the backend last found it empty (see
    /// [`read_on_readiness`](Self::read_on_readiness)). Default: nothing.
    fn readable(&mut self) {}

    /// Turns large receive on or off: whether the backend may hand over TCPv4 frames
    /// of up to an Ethernet header and 65,535 bytes, each behind a virtio-net header
    /// with a `GSO_TCPV4` request, instead of MTU-sized ones. The device turns it on
    /// only for a driver that negotiated GUEST_TSO4, and off for one that did not.
    /// Default: always off — turning it off succeeds, turning it on is refused
    /// (`Unsupported`): passt's stream has no header to carry the request, and the
    /// fault injector takes frames through the copying calls, which lose it.
    fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        if on {
            Err(std::io::Error::new(
                ErrorKind::Unsupported,
                "this backend hands over MTU-sized frames only",
            ))
        } else {
            Ok(())
        }
    }
}

/// A backend with buffers of its own that the device copies frames into and out of
/// directly from guest memory: one copy each way, none through an IOBuf (see
/// [`HostLink::copying`]). Frames are bare Ethernet frames with complete checksums (no
/// offload is offered with such a backend); what `receive_with` hands over is untrusted
/// input like any frame.
pub trait CopyingLink {
    /// Queues one frame of `len` bytes: `fill` is handed a buffer of exactly `len`
    /// bytes of the backend's and writes all of them, or returns `false` to abandon the
    /// frame (the buffer stays free). `Ok(false)`: no buffer free now (back-pressure; the
    /// caller keeps the frame), or `fill` abandoned it. Sent at the next [`flush`](Self::flush)
    /// at the latest. An error: this frame cannot be sent (too long, say); dropped.
    fn transmit_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> std::io::Result<bool>;

    /// Hands up to `max` received frames to `take`, one at a time, borrowed from the
    /// backend's buffers (returned to it after `take` returns). Returns how many.
    fn receive_with(&mut self, max: usize, take: &mut dyn FnMut(&[u8])) -> usize;

    /// Whether a received frame waits, without a system call: the device asks the
    /// guest for receive kicks only then (a kick for every re-posted buffer would wake
    /// it for nothing). When in doubt, `true`. A frame arriving later wakes the device
    /// through [`HostLink::fd`].
    fn has_received(&self) -> bool;

    /// Tells the host side about every frame queued since the last flush, with at most
    /// one system call: the device calls it once per round, not per frame.
    fn flush(&mut self);
}

/// See [`HostLink::direct`].
#[derive(Clone, Copy, Debug)]
pub struct Direct<'a> {
    /// Where frames are read and written, one per call.
    pub fd: BorrowedFd<'a>,
    /// Each frame has a virtio-net header of `NET_HDR_LEN` bytes in front (TAP with
    /// `IFF_VNET_HDR`); without, bare frames.
    pub vnet_hdr: bool,
}

impl HostLink for TapDevice {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn direct(&self) -> Option<Direct<'_>> {
        Some(Direct {
            fd: self.as_fd(),
            vnet_hdr: self.has_vnet_hdr(),
        })
    }
    fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        // `TUNSETOFFLOAD` with or without TUN_F_TSO4: for the whole device, every queue.
        TapDevice::set_large_receive(self, on)
    }
}

impl HostLink for XdpDevice {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn copying(&mut self) -> Option<&mut dyn CopyingLink> {
        Some(self)
    }
}

/// The device's frames straight between guest memory and the UMEM's chunks.
impl CopyingLink for XdpDevice {
    fn transmit_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> std::io::Result<bool> {
        XdpDevice::transmit_with(self, len, fill).map_err(std::io::Error::other)
    }
    fn receive_with(&mut self, max: usize, take: &mut dyn FnMut(&[u8])) -> usize {
        XdpDevice::receive_with(self, max, take)
    }
    fn has_received(&self) -> bool {
        XdpDevice::has_received(self)
    }
    fn flush(&mut self) {
        XdpDevice::flush(self)
    }
}

impl<B: HostLink> HostLink for FaultInjector<B> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner().fd()
    }
    fn drain(&mut self) {
        self.inner_mut().drain()
    }
    fn has_pending_output(&self) -> bool {
        self.inner().has_pending_output()
    }
    fn fault_stats(&self) -> Option<ebb_net_driver::FaultStats> {
        Some(self.stats())
    }
    fn read_on_readiness(&mut self) -> bool {
        self.inner_mut().read_on_readiness()
    }
    fn readable(&mut self) {
        self.inner_mut().readable()
    }
    // `set_large_receive`: the default (never on) — frames pass the injector through the
    // copying calls, which carry no GSO request.
}

impl<B: HostLink + ?Sized> HostLink for Box<B> {
    fn fd(&self) -> BorrowedFd<'_> {
        (**self).fd()
    }
    fn drain(&mut self) {
        (**self).drain()
    }
    fn has_pending_output(&self) -> bool {
        (**self).has_pending_output()
    }
    fn direct(&self) -> Option<Direct<'_>> {
        (**self).direct()
    }
    fn copying(&mut self) -> Option<&mut dyn CopyingLink> {
        (**self).copying()
    }
    fn fault_stats(&self) -> Option<ebb_net_driver::FaultStats> {
        (**self).fault_stats()
    }
    fn set_large_receive(&mut self, on: bool) -> std::io::Result<()> {
        (**self).set_large_receive(on)
    }
    fn read_on_readiness(&mut self) -> bool {
        (**self).read_on_readiness()
    }
    fn readable(&mut self) {
        (**self).readable()
    }
    fn receive_chains(
        &mut self,
        now: Instant,
        out: &mut Vec<TxFrame>,
        max: usize,
    ) -> Option<usize> {
        (**self).receive_chains(now, out, max)
    }
}

/// Why a host link could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HostLinkError {
    /// The TAP device could not be opened.
    #[error("--net tap={name}: {source}")]
    Tap {
        /// Interface name.
        name: String,
        /// Why.
        source: ebb_tap::TapError,
    },
    /// An AF_XDP socket could not be opened on the interface.
    #[error("--net xdp={name}: {source}")]
    Xdp {
        /// Interface name.
        name: String,
        /// Why.
        source: ebb_xdp::XdpError,
    },
    /// passt is not installed.
    #[error(
        "--net user needs passt, which is not installed (Debian/Ubuntu: apt-get install passt)"
    )]
    PasstMissing,
    /// A forwarded host port cannot be bound (in use, or privileged).
    #[error("-p {addr}:{port}:...: cannot listen on {addr}:{port}: {reason}")]
    PortUnavailable {
        /// The host address.
        addr: std::net::Ipv4Addr,
        /// The host port.
        port: u16,
        /// Why, with advice.
        reason: String,
    },
    /// passt could not start or exited.
    #[error("--net user: passt failed: {0}")]
    Passt(String),
    /// An external link ([`HostLinkConfig::External`](crate::vm::HostLinkConfig::External))
    /// could not be opened: its own message.
    #[error("{0}")]
    External(String),
}

/// Opens `queues` queues of TAP device `name`; with `offload`, with a virtio-net header
/// and checksum offload (`TapConfig::vnet_hdr`).
pub fn open_tap(name: &str, queues: usize, offload: bool) -> Result<Vec<TapDevice>, HostLinkError> {
    let mut config = TapConfig::new(name);
    config.queues = queues;
    config.vnet_hdr = offload;
    TapDevice::open_queues(&config).map_err(|source| HostLinkError::Tap {
        name: name.to_string(),
        source,
    })
}

/// Opens an AF_XDP socket on interface `name`, which must have one queue (ebb-xdp says
/// how to make one otherwise). One socket serves every vCPU: with one vCPU the device
/// copies frames straight between guest memory and the socket's UMEM
/// ([`HostLink::copying`]); with more, frames take the IOBuf path and are spread over
/// the queue pairs by flow, as with passt.
pub fn open_xdp(name: &str) -> Result<XdpDevice, HostLinkError> {
    XdpDevice::open(&XdpConfig::new(name)).map_err(|source| HostLinkError::Xdp {
        name: name.to_string(),
        source,
    })
}

/// A TCP port forward from the host to the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortForward {
    /// Host address to bind (127.0.0.1 unless given).
    pub host_addr: std::net::Ipv4Addr,
    /// Host port.
    pub host_port: u16,
    /// Guest port.
    pub guest_port: u16,
}

impl std::str::FromStr for PortForward {
    type Err = String;
    /// `[ADDR:]HOST:GUEST`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || format!("{s:?} is not [ADDR:]HOST_PORT:GUEST_PORT");
        let (addr, host, guest) = match parts.as_slice() {
            [h, g] => ("127.0.0.1", *h, *g),
            [a, h, g] => (*a, *h, *g),
            _ => return Err(bad()),
        };
        Ok(PortForward {
            host_addr: addr.parse().map_err(|_| bad())?,
            host_port: host.parse().map_err(|_| bad())?,
            guest_port: guest.parse().map_err(|_| bad())?,
        })
    }
}

/// The guest's address on passt's network, as passt is told to hand out (the same as
/// QEMU's user networking, so an image's defaults work under both).
pub const USER_GUEST_ADDR: &str = "10.0.2.15";
/// The gateway (the host) on passt's network.
pub const USER_GATEWAY: &str = "10.0.2.2";

/// passt, user-mode networking without root: a child process on one end of a socket
/// pair, speaking QEMU's stream protocol (each frame behind a 4-byte big-endian length).
pub struct Passt {
    sock: UnixStream,
    child: Child,
    read_buf: Vec<u8>,
    /// Where each `read` lands before `read_buf`: zero-filled once, at start (a fresh
    /// array per read cost a 64 KiB memset per round of the device thread, which reads
    /// this socket every round).
    read_chunk: Box<[u8]>,
    write_buf: Vec<u8>,
    counters: DeviceCounters,
    /// Read the socket only while [`socket_may_have_input`](Self::socket_may_have_input)
    /// ([`HostLink::read_on_readiness`]); otherwise every round.
    on_readiness: bool,
    /// The socket was reported readable and not yet read empty (starts true: whatever
    /// passt wrote before the watch was set up is read once).
    socket_may_have_input: bool,
    /// passt is gone (its end closed, a write failed other than for room): frames for
    /// it are dropped and counted from then on, so nothing waits for it for good.
    gone: bool,
}

/// The frame that tells passt the guest's MAC address: a minimum Ethernet frame...
const ANNOUNCE_LEN: usize = 60;
/// ...of IEEE 802 local experimental EtherType 1, which passt ignores (see `Passt::start`).
const ANNOUNCE_ETHERTYPE: u16 = 0x88b5;
/// Environment variable naming a file passt writes a pcap capture of the guest's frames
/// to (its `--pcap`; passt must be able to create the file).
pub const PASST_PCAP_ENV: &str = "EBB_VMM_PASST_PCAP";
/// Most bytes queued toward passt before `transmit` pushes back.
const PASST_WRITE_LIMIT: usize = 512 * 1024;
/// Most bytes read from passt and not yet handed to the guest. TCP flow control bounds
/// what passt sends (the guest's receive windows), so this is a safety net only.
const PASST_READ_LIMIT: usize = 64 * 1024 * 1024;
/// Bytes read from passt's socket at once.
const PASST_READ_CHUNK: usize = 64 * 1024;
/// The send buffer asked for on passt's end of the socket (the kernel caps it at
/// `net.core.wmem_max`): slack for the moments the I/O thread is not scheduled.
const PASST_SOCKET_BUFFER: usize = 4 * 1024 * 1024;

impl Passt {
    /// Starts passt with `forwards`, for a guest whose MAC address is `guest_mac`.
    pub fn start(forwards: &[PortForward], guest_mac: [u8; 6]) -> Result<Passt, HostLinkError> {
        // Try each host port first: passt's own complaint about a busy port is a line
        // in its log, ours names the port and what to do.
        for f in forwards {
            if let Err(e) = std::net::TcpListener::bind((f.host_addr, f.host_port)) {
                let reason = match e.kind() {
                    ErrorKind::AddrInUse => {
                        "the port is in use by another program; pick another with -p HOST:GUEST"
                            .to_string()
                    }
                    ErrorKind::PermissionDenied => {
                        "ports below 1024 need root; pick a higher host port".to_string()
                    }
                    _ => e.to_string(),
                };
                return Err(HostLinkError::PortUnavailable {
                    addr: f.host_addr,
                    port: f.host_port,
                    reason,
                });
            }
        }
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| HostLinkError::Passt(format!("socketpair: {e}")))?;
        let fd = theirs.as_raw_fd();
        // passt (this version, 2023) drops a frame it cannot write at once (the socket to
        // us is full) and still counts it as sent; a pure ACK lost that way is never sent
        // again, and passt answers the guest's retransmissions of the data it covers with
        // silence: the connection stalls for good. So its socket must never fill: a large
        // send buffer on its end, and `drain` reads it every round (see `HostLink::drain`).
        if let Err(e) =
            rustix::net::sockopt::set_socket_send_buffer_size(&theirs, PASST_SOCKET_BUFFER)
        {
            log::warn!("--net user: cannot enlarge passt's socket buffer: {e}");
        }
        let mut cmd = Command::new("passt");
        // passt, and only passt, inherits `theirs`.
        crate::sys::pass_descriptor(&mut cmd, theirs.as_fd());
        cmd.args(["-f", "-q", "-1", "--fd", &fd.to_string()])
            .args(["-a", USER_GUEST_ADDR, "-n", "24", "-g", USER_GATEWAY])
            // No DNS list: the guest resolves nothing. (passt forwards no ports unless
            // told: only the `-t` below.)
            .arg("--no-dhcp-dns")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for f in forwards {
            cmd.arg("-t")
                .arg(format!("{}/{}:{}", f.host_addr, f.host_port, f.guest_port));
        }
        // A capture of every frame between passt and the guest, for debugging.
        let pcap = std::env::var_os(PASST_PCAP_ENV);
        if let Some(file) = &pcap {
            cmd.arg("--pcap").arg(file);
        }
        // Started by root, passt switches itself to `nobody`, and a change of user
        // clears the death signal armed below: such a passt outlived a killed monitor
        // (seen as a test that failed 2 runs in 25 under load). So root starts it as
        // `nobody` itself, before the signal is armed (std switches users before the
        // `pre_exec` steps run), and passt has nothing left to switch. Not when passt
        // must bind a port below 1024 or write a capture file as root first: then it
        // switches itself, and dies with the monitor only if the monitor dies before.
        let low_port = forwards.iter().any(|f| f.host_port < 1024);
        if rustix::process::geteuid().is_root() && !low_port && pcap.is_none() {
            let (uid, gid) = nobody();
            cmd.uid(uid).gid(gid);
        }
        // Killed with the monitor: `Drop` does not run when it is killed, and passt
        // (this version) does not always exit when our end of the socket goes away.
        crate::sys::die_with_the_monitor(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            ErrorKind::NotFound => HostLinkError::PasstMissing,
            _ => HostLinkError::Passt(e.to_string()),
        })?;
        drop(theirs);
        // passt learns the guest's MAC address from the first frame it reads from us
        // (and with --fd does not even default to broadcast): a connection to a forwarded
        // port that came before gets its SYN sent to 00:00:00:00:00:00, which the guest
        // rightly drops, and passt (this version) never sends that SYN again — the host
        // sees a reset after 10 s. It happened when passt was slow to read the guest's
        // first frames (a loaded host): 1 run in about 10 of the 2-vCPU test. So passt
        // hears the address first, before it serves anything, from a frame it ignores
        // otherwise (an IEEE local experimental EtherType).
        let mut hello = [0u8; 4 + ANNOUNCE_LEN];
        hello[..4].copy_from_slice(&(ANNOUNCE_LEN as u32).to_be_bytes());
        hello[4..10].copy_from_slice(&[0xff; 6]);
        hello[10..16].copy_from_slice(&guest_mac);
        hello[16..18].copy_from_slice(&ANNOUNCE_ETHERTYPE.to_be_bytes());
        (&ours)
            .write_all(&hello)
            .map_err(|e| HostLinkError::Passt(format!("announcing the guest's MAC: {e}")))?;
        // passt binds its forwards before it serves the socket; give it a moment to fail
        // (a busy port) so the error names the cause instead of a dead link.
        for _ in 0..50 {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = stderr.read_to_string(&mut err);
                }
                return Err(HostLinkError::Passt(format!(
                    "exited with {status}: {} (is a forwarded port busy?)",
                    err.trim()
                )));
            }
            if forwards.iter().all(port_bound) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        ours.set_nonblocking(true)
            .map_err(|e| HostLinkError::Passt(format!("nonblocking socket: {e}")))?;
        Ok(Passt {
            sock: ours,
            child,
            read_buf: Vec::with_capacity(256 * 1024),
            read_chunk: vec![0; PASST_READ_CHUNK].into_boxed_slice(),
            write_buf: Vec::with_capacity(PASST_WRITE_LIMIT),
            counters: DeviceCounters::default(),
            on_readiness: false,
            socket_may_have_input: true,
            gone: false,
        })
    }

    /// Reads everything passt has written (up to [`PASST_READ_LIMIT`] held). Reading
    /// on readiness, the socket counts as empty once a read finds nothing (or passt
    /// closed it); stopped by the limit, it may still hold input, and is read again.
    fn read_socket(&mut self) {
        if self.on_readiness && !self.socket_may_have_input {
            return;
        }
        while self.read_buf.len() < PASST_READ_LIMIT {
            match self.sock.read(&mut self.read_chunk) {
                Ok(0) => {
                    // End of stream: passt closed its end (it exited or was killed).
                    self.socket_may_have_input = false;
                    self.mark_gone("closed its socket");
                    break;
                }
                Ok(n) => self.read_buf.extend_from_slice(&self.read_chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.socket_may_have_input = false;
                    break;
                }
                Err(e) => {
                    // A reset (passt killed with our frames unread), or worse: no edge
                    // may follow.
                    self.socket_may_have_input = false;
                    self.mark_gone(&format!("cannot be read from ({e})"));
                    break;
                }
            }
        }
    }

    fn flush(&mut self) {
        while !self.write_buf.is_empty() {
            // MSG_NOSIGNAL: a passt that died gives EPIPE, never SIGPIPE, whatever the
            // embedding program does with signals.
            match rustix::net::send(
                &self.sock,
                &self.write_buf,
                rustix::net::SendFlags::NOSIGNAL,
            ) {
                Ok(0) => break,
                Ok(n) => {
                    self.write_buf.drain(..n);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => {
                    self.mark_gone(&format!("cannot be written to ({e})"));
                    break;
                }
            }
        }
    }

    /// passt is gone: says so once, and drops what waits for it (counted).
    fn mark_gone(&mut self, why: &str) {
        if !self.gone {
            log::warn!(
                "passt {why}: the guest's traffic other than the forwards is dropped from now on"
            );
            self.gone = true;
        }
        self.write_buf.clear();
    }
}

/// The user `nobody`'s uid and gid, from `/etc/passwd` (passt's own choice when started
/// by root; 65534, Debian's, when the file does not name it).
fn nobody() -> (u32, u32) {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| nobody_in(&passwd))
        .unwrap_or((65534, 65534))
}

/// `nobody`'s uid and gid in a passwd file's text, if a well-formed line names it.
fn nobody_in(passwd: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some("nobody")).then_some(())?;
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

/// Whether something listens on the forward's host port (passt bound it).
fn port_bound(f: &PortForward) -> bool {
    std::net::TcpListener::bind((f.host_addr, f.host_port)).is_err()
}

impl Drop for Passt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NetDevice for Passt {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::ETHERNET
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.read_socket();
        let mut taken = 0;
        let mut at = 0;
        while taken < max && self.read_buf.len() >= at + 4 {
            let len = u32::from_be_bytes([
                self.read_buf[at],
                self.read_buf[at + 1],
                self.read_buf[at + 2],
                self.read_buf[at + 3],
            ]) as usize;
            if self.read_buf.len() < at + 4 + len {
                break;
            }
            let frame = &self.read_buf[at + 4..at + 4 + len];
            self.counters.record_rx(len);
            out.push(RxFrame::new(IOBuf::copy_from_slice(frame)));
            at += 4 + len;
            taken += 1;
        }
        self.read_buf.drain(..at);
        taken
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.flush();
        let mut taken = 0;
        if self.gone {
            // As a NIC with its cable pulled: every frame taken and dropped.
            for _ in frames.drain(..) {
                self.counters.tx_dropped.record(DropReason::QueueFull);
                taken += 1;
            }
            return taken;
        }
        while self.write_buf.len() < PASST_WRITE_LIMIT {
            let Some(frame) = frames.pop_front() else {
                break;
            };
            // No offload: a partial checksum is completed here.
            let frame = frame.into_complete();
            self.write_buf
                .extend_from_slice(&(frame.len() as u32).to_be_bytes());
            for segment in frame.segments() {
                self.write_buf.extend_from_slice(segment);
            }
            self.counters.record_tx(frame.len());
            taken += 1;
        }
        self.flush();
        taken
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

impl HostLink for Passt {
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn drain(&mut self) {
        self.read_socket();
    }
    fn has_pending_output(&self) -> bool {
        !self.write_buf.is_empty()
    }
    fn read_on_readiness(&mut self) -> bool {
        self.on_readiness = true;
        true
    }
    fn readable(&mut self) {
        self.socket_may_have_input = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// passt goes with the monitor (here: the thread that started it ends, as a killed
    /// monitor's threads all do), even when nobody drops it.
    #[test]
    fn passt_is_killed_when_the_thread_that_started_it_ends() {
        use std::os::unix::process::ExitStatusExt;
        let test = "passt_is_killed_when_the_thread_that_started_it_ends";
        if ebb_testkit::need_tools(test, &["passt"]).is_none() {
            return;
        }
        // The thread ends a while after passt started, once passt has set itself up (as
        // root it used to switch to `nobody` then, which cleared its death signal).
        let mut passt = std::thread::spawn(|| {
            let passt = Passt::start(&[], [0x52, 0x54, 0, 0x12, 0x34, 0x57]).expect("passt starts");
            std::thread::sleep(std::time::Duration::from_millis(300));
            passt
        })
        .join()
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let status = loop {
            if let Some(status) = passt.child.try_wait().expect("passt's status") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = passt.child.kill();
                panic!("passt outlived the thread that started it by 5 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }

    #[test]
    fn nobody_is_read_from_a_passwd_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobodyelse:x:1:1::/:/bin/false\n\
                      nobody:x:65534:65533:nobody:/nonexistent:/usr/sbin/nologin\n";
        assert_eq!(nobody_in(passwd), Some((65534, 65533)));
        assert_eq!(nobody_in("root:x:0:0::/:\n"), None);
        assert_eq!(nobody_in("nobody:x:abc:1::/:\n"), None, "a malformed uid");
        assert_eq!(nobody_in("nobody:x:1\n"), None, "a cut line");
    }

    /// passt dies under a running guest: the frames for it are taken and dropped
    /// (counted), none waits, and nothing keeps the device thread polling for it.
    #[test]
    fn a_gone_passt_drops_its_frames_instead_of_holding_them() {
        let test = "a_gone_passt_drops_its_frames_instead_of_holding_them";
        if ebb_testkit::need_tools(test, &["passt"]).is_none() {
            return;
        }
        // Other threads spawn processes meanwhile (as the other tests do): none of them
        // may inherit passt's end of the socket, or it outlives passt.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut children = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    children.extend(Command::new("sleep").arg("5").spawn().ok());
                }
                children
            })
        };
        let started = Passt::start(&[], [0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut bystanders = spawner.join().expect("the spawner ends");
        let mut passt = started.expect("passt starts");
        let _ = passt.child.kill();
        let _ = passt.child.wait();
        let frame = || {
            TxFrame::new(ebb_core::IOBufChain::from(IOBuf::from_vec(vec![
                0xab;
                1000
            ])))
        };
        let now = Instant::from_nanos(1);
        // Its end is closed now: a read sees the end of the stream, a write fails.
        passt.drain();
        let mut frames: VecDeque<TxFrame> = (0..2000).map(|_| frame()).collect();
        let mut taken = 0;
        for _ in 0..10 {
            taken += passt.transmit(now, &mut frames);
        }
        assert_eq!(taken, 2000, "every frame is taken, none waits");
        assert!(passt.gone);
        assert!(!passt.has_pending_output());
        assert!(passt.counters().tx_dropped.queue_full > 0);
        for child in &mut bystanders {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
