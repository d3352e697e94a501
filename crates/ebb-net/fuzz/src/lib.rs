//! The whole-stack fuzz harness: a [`Stack`] (interface + [`TcpLayer`]) on a device that
//! replays the fuzz input's frames, shared by the `stack` fuzz target and the seed
//! generator (`tests/stack_seeds.rs`), so the seeds are built against exactly the state
//! the target starts from.
//!
//! # Input format
//!
//! ```text
//! input   = flags record*
//! flags   = u8      bit 0: DHCP variant (else static); bit 1: the device takes at most
//!                   one frame per transmit call (back-pressure on the transmit queue)
//! record  = step u8, len u16 (little endian), frame [len bytes, clamped to what is left]
//! step    = bits 0-5: how far the clock moves before the frame is delivered
//!                     (0-31 ms; then 100 ms steps; then 10 s steps up to 160 s)
//!           bits 6-7: what the application does first on every live connection:
//!                     0 nothing, 1 send 1 KiB, 2 toggle the receive window, 3 close
//! ```
//!
//! A record with an empty frame only moves time. After each record the harness polls the
//! stack (more than once when it asks to be called again at once), drains every UDP,
//! echo-reply and DHCP event, and checks the invariants in [`Harness::check`]:
//! counters only grow, the transmit queue and ARP tables stay within their limits, and
//! the connection table stays within `max_connections`. A panic anywhere is a finding.
//!
//! # The state the harness starts from
//!
//! Static variant: 10.0.0.1/24 with a listener on port 80 (backlog 2), a UDP socket on
//! port 7, one connection to port 80 from the peer 10.0.0.2:40000 already established by
//! a scripted handshake (the peer's ISS is [`PEER_ISS`]), and one connection of ours to
//! 10.0.0.2:9000 in SYN-SENT. DHCP variant: no address, the DISCOVER sent, the same
//! listener and UDP socket. Everything is deterministic (fixed ISN and interface seeds),
//! so [`Harness::script`] tells the seed generator the sequence numbers to use.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use ebb_core::Instant;
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr, Limits};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpConn, TcpLayer};
use ebb_net::wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCapabilities, DhcpMessageType, DhcpPacket, DhcpRepr,
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};
use ebb_net_driver::{DeviceCapabilities, DeviceCounters, NetDevice, RxFrame, TxFrame};

/// Our link address.
pub const OUR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// The peer's link address.
pub const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
/// Our address (static variant).
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The peer's address.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The DHCP server's address, and the address it offers.
pub const DHCP_SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
/// The listener's port.
pub const LISTEN_PORT: u16 = 80;
/// The bound UDP socket's port.
pub const UDP_PORT: u16 = 7;
/// The peer's port of the established connection.
pub const PEER_PORT: u16 = 40000;
/// The peer's port our connecting connection goes to.
pub const CONNECT_PORT: u16 = 9000;
/// The peer's initial sequence number in the scripted handshake.
pub const PEER_ISS: u32 = 1000;

/// Connections the layer may hold: small, so the fuzzer reaches the bound.
pub const MAX_CONNECTIONS: usize = 8;
/// Frames the interface may queue for the device: small, for the same reason.
pub const TX_QUEUE_FRAMES: usize = 64;
/// Bytes the application keeps queued on one connection at most (it sends no more).
const APP_QUEUE_LIMIT: usize = 64 * 1024;
/// Polls per record at most when the stack keeps asking to be called again at once.
const POLLS_PER_STEP: usize = 8;
/// The largest frame a record carries (longer ones are cut).
const MAX_FRAME: usize = 2048;

/// Input flag: run the DHCP variant.
pub const FLAG_DHCP: u8 = 1;
/// Input flag: the device takes one frame per transmit call.
pub const FLAG_SLOW_DEVICE: u8 = 2;

/// What the application does before a record's frame is delivered (step bits 6-7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppAction {
    /// Nothing.
    None = 0,
    /// `send` 1 KiB on every live connection (unless much is queued already).
    Send = 1,
    /// Close or reopen the receive window.
    ToggleWindow = 2,
    /// Close every live connection gracefully.
    Close = 3,
}

/// A device whose receive side replays the frames it is given, and whose transmit side
/// takes frames (all, or one per call when slow), keeping copies only while `capture` is
/// on (for the scripted set-up and the seed generator).
#[derive(Debug, Default)]
pub struct ReplayDevice {
    rx: VecDeque<IOBuf>,
    slow: bool,
    capture: bool,
    captured: Vec<Vec<u8>>,
    counters: DeviceCounters,
}

impl NetDevice for ReplayDevice {
    fn capabilities(&self) -> DeviceCapabilities {
        DeviceCapabilities::ETHERNET
    }

    fn receive(&mut self, _now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        let n = max.min(self.rx.len());
        for frame in self.rx.drain(..n) {
            self.counters.record_rx(frame.len());
            out.push(RxFrame::new(frame));
        }
        n
    }

    fn transmit(&mut self, _now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
        let n = if self.slow {
            frames.len().min(1)
        } else {
            frames.len()
        };
        for frame in frames.drain(..n) {
            self.counters.record_tx(frame.len());
            if self.capture {
                self.captured.push(frame.chain.to_vec());
            }
        }
        n
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

/// The application on every connection: echoes what it receives (bounded by
/// [`APP_QUEUE_LIMIT`]) and acts on the fuzz input's [`AppAction`]s.
struct EchoApp;

impl TcpHandler for EchoApp {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if conn.queued_bytes() < APP_QUEUE_LIMIT {
            // Alternate the two send calls so both paths are fuzzed.
            if data.len().is_multiple_of(2) {
                let _ = conn.send(IOBufChain::from(data));
            } else {
                let _ = conn.try_send(IOBufChain::from(data));
            }
        }
    }

    fn closed(&mut self, _reason: CloseReason) {}
}

/// Sequence numbers of the scripted set-up, for building seeds that go deep.
#[derive(Clone, Copy, Debug, Default)]
pub struct Script {
    /// Our ISS on the established connection (its SYN-ACK's sequence number).
    pub established_iss: u32,
    /// Our ISS on the connecting connection (its SYN's sequence number).
    pub connect_iss: u32,
    /// Our port on the connecting connection.
    pub connect_port: u16,
    /// The DHCP DISCOVER's transaction id (DHCP variant).
    pub dhcp_xid: u32,
}

/// Flattened counters from the last check.
type Snapshot = Vec<u64>;

/// The stack under test, its live connections and what the last check saw.
pub struct Harness {
    stack: Stack<ReplayDevice, TcpLayer>,
    conns: Rc<RefCell<Vec<TcpConn>>>,
    now: Instant,
    window_open: bool,
    script: Script,
    last: Snapshot,
    udp: Option<ebb_net::iface::UdpHandle>,
}

impl Harness {
    /// The stack in its starting state (see the module docs), for the input `flags`.
    pub fn new(flags: u8) -> Harness {
        let dhcp = flags & FLAG_DHCP != 0;
        let mut limits = Limits::default();
        limits.tx_queue_frames = TX_QUEUE_FRAMES;
        let config = if dhcp {
            InterfaceConfig::new_dhcp(OUR_MAC)
        } else {
            let cidr = Ipv4Cidr::new(OUR_IP, 24).expect("a /24 is a valid prefix");
            InterfaceConfig::new_static(OUR_MAC, cidr, None)
        }
        .with_limits(limits)
        .with_seed(0x5eed);
        let tcp = TcpLayer::new(TcpConfig {
            max_connections: MAX_CONNECTIONS,
            max_half_open_per_listener: 4,
            // Short enough for the harness's time steps to reach probes and give-ups.
            keepalive: Some(ebb_net::tcp::Keepalive {
                idle: Duration::from_secs(30),
                interval: Duration::from_secs(5),
                probes: 3,
            }),
            ..TcpConfig::default()
        });
        let device = ReplayDevice {
            capture: true,
            ..ReplayDevice::default()
        };
        let conns: Rc<RefCell<Vec<TcpConn>>> = Rc::default();
        let accepted = conns.clone();
        tcp.listen(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, LISTEN_PORT),
            2,
            move |conn: TcpConn| {
                conn.set_handler(EchoApp);
                accepted.borrow_mut().push(conn);
            },
        )
        .expect("the listener's port is free");
        let mut harness = Harness {
            stack: Stack::new(device, config, tcp),
            conns,
            now: Instant::ZERO,
            window_open: true,
            script: Script::default(),
            last: Vec::new(),
            udp: None,
        };
        harness.udp = harness.stack.iface_mut().udp_bind(UDP_PORT).ok();
        harness.stack.poll(harness.now);
        if dhcp {
            harness.script.dhcp_xid = harness
                .take_captured()
                .iter()
                .find_map(|f| dhcp_xid(f))
                .unwrap_or(0);
        } else {
            harness.scripted_connections();
        }
        harness.stack.device_mut().slow = flags & FLAG_SLOW_DEVICE != 0;
        harness.stack.device_mut().capture = false;
        harness.take_captured();
        harness.last = harness.snapshot();
        harness
    }

    /// Static variant: the peer ARPs for us, connects to the listener (SYN, our SYN-ACK,
    /// ACK), and we connect to the peer's port 9000 (SYN sent, no answer yet).
    fn scripted_connections(&mut self) {
        self.take_captured();
        self.deliver(arp_request(PEER_MAC, PEER_IP, OUR_IP));
        let syn = tcp_frame(PEER_PORT, LISTEN_PORT, PEER_ISS, None, TcpControl::Syn, b"");
        self.deliver(syn);
        let syn_ack = self
            .take_captured()
            .iter()
            .find_map(|f| tcp_seq(f, LISTEN_PORT));
        self.script.established_iss = syn_ack.unwrap_or(0);
        let ack = tcp_frame(
            PEER_PORT,
            LISTEN_PORT,
            PEER_ISS.wrapping_add(1),
            Some(self.script.established_iss.wrapping_add(1)),
            TcpControl::None,
            b"",
        );
        self.deliver(ack);

        let connected = self.conns.clone();
        let _ = self.stack.tcp().connect(
            SocketAddrV4::new(OUR_IP, 0),
            SocketAddrV4::new(PEER_IP, CONNECT_PORT),
            move |result| {
                if let Ok(conn) = result {
                    conn.set_handler(EchoApp);
                    connected.borrow_mut().push(conn);
                }
            },
        );
        self.advance(Duration::from_millis(1));
        self.stack.poll(self.now);
        for frame in self.take_captured() {
            if let Some((src_port, seq)) = tcp_syn_from_us(&frame, CONNECT_PORT) {
                self.script.connect_port = src_port;
                self.script.connect_iss = seq;
            }
        }
    }

    /// The sequence numbers of the scripted set-up.
    pub fn script(&self) -> Script {
        self.script
    }

    /// The stack (for tests that look deeper than [`check`](Self::check)).
    pub fn stack(&self) -> &Stack<ReplayDevice, TcpLayer> {
        &self.stack
    }

    fn advance(&mut self, by: Duration) {
        self.now = self.now + by;
    }

    fn take_captured(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.stack.device_mut().captured)
    }

    /// Delivers one frame after 1 ms and polls (set-up only: no checks).
    fn deliver(&mut self, frame: Vec<u8>) {
        self.advance(Duration::from_millis(1));
        self.stack.device_mut().rx.push_back(IOBuf::from_vec(frame));
        self.stack.poll(self.now);
    }

    /// Runs a whole fuzz input: the flags byte, then records (see the module docs).
    pub fn run(input: &[u8]) {
        let Some((&flags, mut rest)) = input.split_first() else {
            return;
        };
        let mut harness = Harness::new(flags);
        while let Some((&step, tail)) = rest.split_first() {
            let Some((len, tail)) = tail.split_first_chunk::<2>() else {
                break;
            };
            let len = usize::from(u16::from_le_bytes(*len))
                .min(tail.len())
                .min(MAX_FRAME);
            let (frame, tail) = tail.split_at(len);
            rest = tail;
            harness.step(step, frame);
        }
    }

    /// One record: move the clock, let the application act, deliver `frame` (if any),
    /// poll, drain the event queues and check the invariants.
    pub fn step(&mut self, step: u8, frame: &[u8]) {
        self.advance(step_duration(step));
        self.app_act(match step >> 6 {
            1 => AppAction::Send,
            2 => AppAction::ToggleWindow,
            3 => AppAction::Close,
            _ => AppAction::None,
        });
        if !frame.is_empty() {
            self.stack
                .device_mut()
                .rx
                .push_back(IOBuf::copy_from_slice(frame));
        }
        for _ in 0..POLLS_PER_STEP {
            match self.stack.poll(self.now) {
                Some(at) if at <= self.now => continue,
                _ => break,
            }
        }
        self.drain_events();
        self.check();
    }

    fn app_act(&mut self, action: AppAction) {
        if action == AppAction::None {
            return;
        }
        if action == AppAction::ToggleWindow {
            self.window_open = !self.window_open;
        }
        // Callbacks may push new connections: act on a copy of the list.
        let conns: Vec<TcpConn> = self.conns.borrow().clone();
        for conn in &conns {
            match action {
                AppAction::Send if conn.queued_bytes() < APP_QUEUE_LIMIT => {
                    let _ = conn.send(IOBufChain::from(IOBuf::from_vec(vec![0x5a; 1024])));
                }
                AppAction::ToggleWindow => conn.set_receive_window_open(self.window_open),
                AppAction::Close => conn.close(),
                _ => {}
            }
        }
    }

    /// Takes every queued UDP datagram, echo reply and DHCP event, checking the UDP queue
    /// held no more than its bound.
    fn drain_events(&mut self) {
        let iface = self.stack.iface_mut();
        if let Some(udp) = self.udp {
            let mut datagrams = 0;
            while let Ok(Some(_)) = iface.udp_recv(udp) {
                datagrams += 1;
            }
            assert!(datagrams <= Limits::default().udp_receive_queue);
        }
        while iface.next_echo_reply().is_some() {}
        while iface.next_dhcp_event().is_some() {}
        self.conns.borrow_mut().retain(|c| !c.is_closed());
    }

    /// Every counter of the interface, the TCP layer and the device, in a fixed order.
    fn snapshot(&self) -> Snapshot {
        let i = self.stack.iface().counters();
        let r = i.rx_dropped;
        let t = i.tx_dropped;
        let c = self.stack.tcp().counters();
        let d = self.stack.device().counters;
        vec![
            i.rx_frames,
            i.rx_arp,
            i.rx_tcp,
            i.rx_udp,
            i.rx_dhcp,
            i.rx_icmp_echo_requests,
            i.rx_icmp_echo_replies,
            i.rx_icmp_unreachable,
            i.rx_icmp_other,
            r.ethernet_malformed,
            r.ethernet_not_for_us,
            r.ethernet_unknown_type,
            r.arp_malformed,
            r.arp_unsupported,
            r.ipv4_malformed,
            r.ipv4_bad_checksum,
            r.ipv4_fragment,
            r.ipv4_not_for_us,
            r.ipv4_bad_source,
            r.ipv4_unknown_protocol,
            r.icmp_malformed,
            r.icmp_bad_checksum,
            r.udp_malformed,
            r.udp_bad_checksum,
            r.udp_no_socket,
            r.udp_queue_full,
            r.tcp_malformed,
            r.tcp_bad_checksum,
            r.dhcp_ignored,
            i.tx_frames,
            i.tx_arp_requests,
            i.tx_arp_replies,
            i.tx_arp_gratuitous,
            i.tx_icmp_echo_requests,
            i.tx_icmp_echo_replies,
            i.tx_icmp_port_unreachable,
            i.icmp_errors_rate_limited,
            t.unreachable,
            t.arp_queue_full,
            t.arp_failed,
            t.tx_queue_full,
            t.too_large,
            i.arp_expired,
            i.arp_resolution_failures,
            c.segments_in,
            c.segments_out,
            c.retransmissions,
            c.fast_retransmits,
            c.timeouts,
            c.window_probes,
            c.tail_loss_probes,
            c.keepalive_probes,
            c.windows_grown,
            c.icmp_errors,
            c.icmp_errors_ignored,
            c.resets_sent,
            c.challenge_acks,
            c.acks_rate_limited,
            c.output_errors,
            c.transmit_blocked,
            c.dropped_no_listener,
            c.dropped_out_of_window,
            c.dropped_syn_queue_full,
            c.dropped_backlog_full,
            c.dropped_table_full,
            c.dropped_out_of_order_bound,
            c.dropped_bad_options,
            c.dropped_owned_elsewhere,
            c.connections_opened,
            c.connections_closed,
            c.connections_reset,
            c.connections_timed_out,
            c.connections_aborted,
            d.rx_frames,
            d.rx_bytes,
            d.tx_frames,
            d.tx_bytes,
        ]
    }

    /// The invariants after every step; panics (a fuzzer finding) when one fails.
    pub fn check(&mut self) {
        let now = self.snapshot();
        for (i, (before, after)) in self.last.iter().zip(&now).enumerate() {
            assert!(
                after >= before,
                "counter #{i} went down: {before} -> {after}"
            );
        }
        self.last = now;
        let limits = Limits::default();
        let queued = self.stack.iface_mut().transmit_queue().len();
        assert!(queued <= TX_QUEUE_FRAMES, "transmit queue {queued} frames");
        let (arp_entries, arp_waiting) = self.stack.iface().arp_usage();
        assert!(
            arp_entries <= limits.arp_cache_entries,
            "{arp_entries} ARP entries"
        );
        assert!(
            arp_waiting <= limits.arp_pending_total,
            "{arp_waiting} waiting on ARP"
        );
        let conns = self.stack.tcp().connection_count();
        assert!(conns <= MAX_CONNECTIONS, "{conns} connections");
    }
}

/// How far one record moves the clock (step bits 0-5).
fn step_duration(step: u8) -> Duration {
    match u64::from(step & 0x3f) {
        v @ 0..32 => Duration::from_millis(v),
        v @ 32..48 => Duration::from_millis((v - 31) * 100),
        v => Duration::from_secs((v - 47) * 10),
    }
}

/// Encodes records for seeds: `records` of (step, frame) after the `flags` byte.
pub fn encode(flags: u8, records: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![flags];
    for (step, frame) in records {
        let len = u16::try_from(frame.len()).expect("seed frames are short");
        out.push(*step);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(frame);
    }
    out
}

// --- Frame builders (seed generator and scripted set-up) ---------------------------------

/// An Ethernet frame carrying `payload`.
pub fn eth(
    dst: EthernetAddress,
    src: EthernetAddress,
    ethertype: EtherType,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = vec![0u8; 14 + payload.len()];
    EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut b[..14]));
    b[14..].copy_from_slice(payload);
    b
}

/// An IPv4 packet (checksum filled, DF, TTL 64) carrying `payload`.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + payload.len()];
    Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol,
        payload_len: payload.len(),
        ttl: 64,
        ident: 7,
        dont_frag: true,
    }
    .emit(
        &mut Ipv4Packet::new_unchecked(&mut b[..]),
        &ChecksumCapabilities::default(),
    );
    b[20..].copy_from_slice(payload);
    b
}

/// An ARP request from `mac`/`ip` for `target`, broadcast.
pub fn arp_request(mac: EthernetAddress, ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let repr = ArpRepr {
        operation: ArpOperation::Request,
        source_hardware_addr: mac,
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let mut b = vec![0u8; 28];
    repr.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
    eth(EthernetAddress::BROADCAST, mac, EtherType::Arp, &b)
}

/// An ICMP echo request from the peer to us.
pub fn ping(ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    let repr = Icmpv4Repr::EchoRequest {
        ident,
        seq_no,
        data,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut Icmpv4Packet::new_unchecked(&mut b[..]),
        &ChecksumCapabilities::default(),
    );
    eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(PEER_IP, OUR_IP, IpProtocol::Icmp, &b),
    )
}

/// A UDP datagram from the peer's `src_port` to our `dst_port`.
pub fn udp_frame(src_port: u16, dst_port: u16, data: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port,
        dst_port,
        payload: data,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        PEER_IP,
        OUR_IP,
        &ChecksumCapabilities::default(),
    );
    eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(PEER_IP, OUR_IP, IpProtocol::Udp, &b),
    )
}

/// A TCP segment from the peer's `src_port` to our `dst_port` (SYNs offer MSS 1460,
/// window scale 7 and SACK).
pub fn tcp_frame(
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    payload: &[u8],
) -> Vec<u8> {
    let syn = control == TcpControl::Syn;
    let repr = TcpRepr {
        src_port,
        dst_port,
        control,
        push: !payload.is_empty(),
        seq_number: TcpSeqNumber(seq),
        ack_number: ack.map(TcpSeqNumber),
        window_len: 65535,
        window_scale: syn.then_some(7),
        max_seg_size: syn.then_some(1460),
        sack_permitted: syn,
        sack_ranges: [None; 4],
        timestamp: None,
        payload,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut b[..]),
        PEER_IP,
        OUR_IP,
        &ChecksumCapabilities::default(),
    );
    eth(
        OUR_MAC,
        PEER_MAC,
        EtherType::Ipv4,
        &ipv4(PEER_IP, OUR_IP, IpProtocol::Tcp, &b),
    )
}

/// A DHCP reply of `kind` from the server for transaction `xid`, offering
/// [`OUR_IP`] for `lease_secs`, broadcast.
pub fn dhcp_reply(kind: DhcpMessageType, xid: u32, lease_secs: u32) -> Vec<u8> {
    let repr = DhcpRepr {
        message_type: kind,
        transaction_id: xid,
        secs: 0,
        broadcast: true,
        client_hardware_address: OUR_MAC,
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: OUR_IP,
        server_ip: DHCP_SERVER_IP,
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        requested_ip: None,
        server_identifier: Some(DHCP_SERVER_IP),
        lease_duration: Some(lease_secs),
        renew_duration: Some(lease_secs / 2),
        rebind_duration: Some(lease_secs / 8 * 7),
        subnet_mask: Some(Ipv4Addr::new(255, 255, 255, 0)),
        router: Some(DHCP_SERVER_IP),
        dns_servers: [Some(DHCP_SERVER_IP), None, None],
        parameter_request_list: None,
        client_identifier: None,
        max_size: None,
    };
    let mut body = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DhcpPacket::new_unchecked(&mut body[..]));
    let udp = UdpRepr {
        src_port: 67,
        dst_port: 68,
        payload: &body,
    };
    let mut datagram = vec![0u8; udp.buffer_len()];
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut datagram[..]),
        DHCP_SERVER_IP,
        Ipv4Addr::BROADCAST,
        &ChecksumCapabilities::default(),
    );
    let mac = EthernetAddress([2, 0, 0, 0, 0, 0xfe]);
    eth(
        EthernetAddress::BROADCAST,
        mac,
        EtherType::Ipv4,
        &ipv4(
            DHCP_SERVER_IP,
            Ipv4Addr::BROADCAST,
            IpProtocol::Udp,
            &datagram,
        ),
    )
}

// --- Frame readers (for the scripted set-up) ---------------------------------------------

/// The TCP header of an IPv4 frame we sent, if it is one: (src port, dst port, seq, flags).
fn our_tcp_header(frame: &[u8]) -> Option<(u16, u16, u32, u8)> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [0x08, 0x00] || *ip.get(9)? != 6 {
        return None;
    }
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let tcp = ip.get(ihl..ihl + 20)?;
    let port = |i: usize| u16::from_be_bytes([tcp[i], tcp[i + 1]]);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    Some((port(0), port(2), seq, tcp[13]))
}

/// The sequence number of a segment we sent from `src_port`.
fn tcp_seq(frame: &[u8], src_port: u16) -> Option<u32> {
    our_tcp_header(frame).and_then(|(sp, _, seq, _)| (sp == src_port).then_some(seq))
}

/// Our port and ISS of a SYN (without ACK) we sent to `dst_port`.
fn tcp_syn_from_us(frame: &[u8], dst_port: u16) -> Option<(u16, u32)> {
    let (sp, dp, seq, flags) = our_tcp_header(frame)?;
    (dp == dst_port && flags & 0x12 == 0x02).then_some((sp, seq))
}

/// The transaction id of a DHCP message we broadcast.
fn dhcp_xid(frame: &[u8]) -> Option<u32> {
    // Ethernet 14 + IPv4 20 (we send no options) + UDP 8, then BOOTP: xid at offset 4.
    let udp = frame.get(34..42)?;
    if udp[2..4] != 67u16.to_be_bytes() {
        return None;
    }
    let xid = frame.get(46..50)?;
    Some(u32::from_be_bytes([xid[0], xid[1], xid[2], xid[3]]))
}
