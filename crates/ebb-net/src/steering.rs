//! Multi-core: which core handles each received frame.
//!
//! A multi-core stack runs one [`Stack`](crate::stack::Stack) per core, each with its own
//! device queue, interface and [`TcpLayer`](crate::tcp::TcpLayer). The device spreads
//! received frames over the queues as it likes (Linux's multi-queue TAP steers a flow to
//! the queue that last transmitted it; a NIC hashes), so a frame may arrive on a core that
//! does not own its connection. Before the interface sees a frame, the receiving core asks
//! the shared [`FlowDirectory`] where it belongs ([`FlowDirectory::steer`]) and forwards
//! it, unchanged and zero copy, to that core, which processes it as if its own queue had
//! received it.
//!
//! # Ownership
//!
//! Every connection is owned by one core for its whole life: the core whose layer created
//! it. The directory maps [`FourTuple`] → [`CoreId`] in an
//! [`ebb_core::rcu::RcuHashMap`]: lookups on the receive path take no lock,
//! writes happen twice per connection. Entries are written by the layers themselves
//! through [`CoreClaims`] (their [`ConnectionDirectory`]): a layer *claims* a four-tuple
//! before the connection's first segment leaves — so the peer's answer, whichever core it
//! reaches, finds the owner — and *releases* it when the connection leaves its table
//! (after TIME-WAIT, a reset, an abort). A claim is atomic: of two cores that see the
//! same SYN (a retransmission steered elsewhere), exactly one creates the connection; the
//! other drops its copy.
//!
//! # Placement of new connections
//!
//! A SYN whose four-tuple has no owner is placed by the policy registered for its
//! destination port ([`FlowDirectory::set_placement`], done when the application listens
//! on every core): the core it arrived on ([`Placement::AcceptingCore`], the default), a
//! fixed core, a hash of the four-tuple over the cores, or the application's own function.
//! The policy must give the same answer for retransmissions of the same SYN (the built-in
//! ones do; `AcceptingCore` relies on the device steering a flow consistently, and the
//! atomic claim covers the rest). Active opens are owned by the core that calls `connect`.
//!
//! # Everything else
//!
//! * ARP replies go to every core (each interface keeps its own ARP cache and may be
//!   waiting for the answer); ARP requests are answered where they arrive.
//! * UDP (sockets, DHCP) goes to the home core, where UDP sockets live.
//! * An ICMP Destination Unreachable quoting one of our TCP segments goes to the owner
//!   of that connection.
//! * Other ICMP, malformed and foreign frames are handled where they arrive (and
//!   counted there).
//!
//! Steering only reads headers; it checks lengths but not checksums — the owning core's
//! interface verifies everything, exactly as for frames from its own queue.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::net::SocketAddrV4;

use ebb_core::CoreId;
use ebb_core::rcu::{RcuDomain, RcuHashMap};

use crate::tcp::{ConnectionDirectory, FourTuple};
use crate::transport::{IcmpErrorKind, TcpIcmpError};
use crate::wire::{ArpOperation, ArpPacket, EtherType, EthernetFrame, IpProtocol, Ipv4Packet};
use crate::wire::{Icmpv4Message, Icmpv4Packet, TcpPacket, UdpPacket};

/// Which core a new connection to a listening port is owned by.
#[derive(Clone, Copy)]
pub enum Placement {
    /// The core whose queue received the SYN (the default; with a device that steers
    /// flows to queues, no frame of the connection needs forwarding).
    AcceptingCore,
    /// Always this core.
    Core(CoreId),
    /// Spread over the stack's cores by a hash of the four-tuple.
    Hashed,
    /// The application's choice: gets the four-tuple and the number of cores, returns an
    /// index into the stack's cores (taken modulo their number).
    Chosen(fn(&FourTuple, usize) -> usize),
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::AcceptingCore => f.write_str("AcceptingCore"),
            Placement::Core(core) => write!(f, "Core({})", core.0),
            Placement::Hashed => f.write_str("Hashed"),
            Placement::Chosen(_) => f.write_str("Chosen(fn)"),
        }
    }
}

/// Where a received frame is to be processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steer {
    /// On the core that received it.
    Here,
    /// On this other core.
    To(CoreId),
    /// Here and, as a copy, on every other core (ARP replies).
    Everywhere,
}

/// The state every core of a multi-core stack shares: connection owners and listening
/// ports' placement policies. See the module docs.
pub struct FlowDirectory {
    owners: RcuHashMap<FourTuple, CoreId>,
    placements: RcuHashMap<u16, Placement>,
    /// The cores running a queue, in queue order; `cores[0]` is the home core.
    cores: Vec<CoreId>,
}

impl fmt::Debug for FlowDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowDirectory")
            .field("cores", &self.cores)
            .field("connections", &self.owners.len())
            .field("listening_ports", &self.placements.len())
            .finish()
    }
}

impl FlowDirectory {
    /// A directory for a stack on `cores` (non-empty; the first is the home core, where
    /// UDP and DHCP run), retiring entries through `domain`'s grace periods.
    ///
    /// # Panics
    ///
    /// If `cores` is empty (a stack runs on at least one core).
    pub fn new(domain: Arc<RcuDomain>, cores: Vec<CoreId>) -> FlowDirectory {
        assert!(
            !cores.is_empty(),
            "a multi-core stack needs at least one core"
        );
        FlowDirectory {
            owners: RcuHashMap::with_capacity(domain.clone(), 1024),
            placements: RcuHashMap::new(domain),
            cores,
        }
    }

    /// The cores running a queue; the first is the home core.
    pub fn cores(&self) -> &[CoreId] {
        &self.cores
    }

    /// The home core (UDP, DHCP).
    pub fn home(&self) -> CoreId {
        self.cores[0]
    }

    /// New connections to `port` are placed by `placement` (replacing any earlier
    /// policy). Register it before listening, so no SYN finds the port without one.
    pub fn set_placement(&self, port: u16, placement: Placement) {
        self.placements.insert(port, placement);
    }

    /// Forgets `port`'s policy (its SYNs are then handled where they arrive).
    pub fn clear_placement(&self, port: u16) {
        self.placements.remove(&port);
    }

    /// The core owning `tuple`, if any core holds it.
    pub fn owner(&self, tuple: &FourTuple) -> Option<CoreId> {
        self.owners.get_cloned(tuple)
    }

    /// Connections currently claimed, over every core.
    pub fn connection_count(&self) -> usize {
        self.owners.len()
    }

    /// The handle `core`'s TCP layer records its connections through.
    pub fn claims_for(self: &Arc<Self>, core: CoreId) -> CoreClaims {
        CoreClaims {
            directory: self.clone(),
            core,
        }
    }

    /// Where the frame `frame`, received on core `here`, is processed. Reads headers
    /// only (see the module docs for the rules).
    pub fn steer(&self, here: CoreId, frame: &[u8]) -> Steer {
        let Ok(ethernet) = EthernetFrame::new_checked(frame) else {
            return Steer::Here;
        };
        match ethernet.ethertype() {
            EtherType::Arp => match ArpPacket::new_checked(ethernet.payload()) {
                Ok(arp) if arp.operation() == ArpOperation::Reply => Steer::Everywhere,
                _ => Steer::Here,
            },
            EtherType::Ipv4 => self.steer_ipv4(here, ethernet.payload()),
            _ => Steer::Here,
        }
    }

    fn steer_ipv4(&self, here: CoreId, packet: &[u8]) -> Steer {
        let Ok(ip) = Ipv4Packet::new_checked(packet) else {
            return Steer::Here;
        };
        if ip.is_fragment() {
            return Steer::Here;
        }
        match ip.protocol() {
            IpProtocol::Udp if UdpPacket::new_checked(ip.payload()).is_ok() => {
                self.relative_to(here, self.home())
            }
            IpProtocol::Icmp => self.steer_icmp(here, ip.payload()),
            IpProtocol::Tcp => {
                let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
                    return Steer::Here;
                };
                let tuple = FourTuple {
                    local: SocketAddrV4::new(ip.dst_addr(), tcp.dst_port()),
                    remote: SocketAddrV4::new(ip.src_addr(), tcp.src_port()),
                };
                if let Some(owner) = self.owners.get_cloned(&tuple) {
                    return self.relative_to(here, owner);
                }
                if !(tcp.syn() && !tcp.ack() && !tcp.rst()) {
                    // No owner and not an opening SYN: the layer here answers it (a RST)
                    // exactly as a single-core stack would.
                    return Steer::Here;
                }
                match self.placements.get_cloned(&tuple.local.port()) {
                    None => Steer::Here,
                    Some(placement) => self.relative_to(here, self.place(here, &tuple, placement)),
                }
            }
            _ => Steer::Here,
        }
    }

    /// An ICMP Destination Unreachable quoting one of our TCP segments goes to the core
    /// owning that connection (its TCP acts on it); every other ICMP message stays here.
    fn steer_icmp(&self, here: CoreId, message: &[u8]) -> Steer {
        let Ok(icmp) = Icmpv4Packet::new_checked(message) else {
            return Steer::Here;
        };
        if icmp.msg_type() != Icmpv4Message::DstUnreachable {
            return Steer::Here;
        }
        // The kind does not matter for finding the owner.
        match TcpIcmpError::from_quoted(IcmpErrorKind::PortUnreachable, icmp.data()) {
            Some(quoted) => {
                let tuple = FourTuple {
                    local: quoted.local,
                    remote: quoted.remote,
                };
                match self.owners.get_cloned(&tuple) {
                    Some(owner) => self.relative_to(here, owner),
                    None => Steer::Here,
                }
            }
            None => Steer::Here,
        }
    }

    /// The core `placement` picks for a new connection `tuple` whose SYN reached `here`.
    pub fn place(&self, here: CoreId, tuple: &FourTuple, placement: Placement) -> CoreId {
        let n = self.cores.len();
        match placement {
            Placement::AcceptingCore => here,
            Placement::Core(core) if self.cores.contains(&core) => core,
            // A core outside the stack cannot own anything: keep the SYN here.
            Placement::Core(_) => here,
            Placement::Hashed => self.cores[(tuple_hash(tuple) % n as u64) as usize],
            Placement::Chosen(choose) => self.cores[choose(tuple, n) % n],
        }
    }

    fn relative_to(&self, here: CoreId, core: CoreId) -> Steer {
        if core == here {
            Steer::Here
        } else {
            Steer::To(core)
        }
    }
}

/// A stable hash of a four-tuple (the same on every core and every run), for
/// [`Placement::Hashed`]: the 64-bit finalizer of MurmurHash3 over the four fields.
fn tuple_hash(tuple: &FourTuple) -> u64 {
    let addresses =
        u64::from(u32::from(*tuple.local.ip())) << 32 | u64::from(u32::from(*tuple.remote.ip()));
    let ports = u64::from(tuple.local.port()) << 16 | u64::from(tuple.remote.port());
    let mut x = addresses ^ ports.rotate_left(40);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// One core's view of the directory: what its [`TcpLayer`](crate::tcp::TcpLayer) claims
/// and releases connections through.
#[derive(Clone, Debug)]
pub struct CoreClaims {
    directory: Arc<FlowDirectory>,
    core: CoreId,
}

impl CoreClaims {
    /// The core these claims are made for.
    pub fn core(&self) -> CoreId {
        self.core
    }
}

impl ConnectionDirectory for CoreClaims {
    fn claim(&self, tuple: &FourTuple) -> bool {
        self.directory.owners.try_insert(*tuple, self.core)
            || self.directory.owners.get_cloned(tuple) == Some(self.core)
    }

    fn release(&self, tuple: &FourTuple) {
        self.directory
            .owners
            .remove_if(tuple, |&owner| owner == self.core);
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use core::net::Ipv4Addr;

    use super::*;
    use crate::wire::tcp::{Control, Repr as TcpRepr, SeqNumber};
    use crate::wire::{ArpRepr, ChecksumCapabilities, EthernetAddress, EthernetRepr, Ipv4Repr};

    const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const MAC_US: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const MAC_PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn directory(cores: u32) -> Arc<FlowDirectory> {
        let domain = Arc::new(RcuDomain::new(cores as usize));
        Arc::new(FlowDirectory::new(domain, (0..cores).map(CoreId).collect()))
    }

    fn tuple(remote_port: u16) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(US, 80),
            remote: SocketAddrV4::new(PEER, remote_port),
        }
    }

    /// An Ethernet + IPv4 + TCP frame from the peer to us with `control` (and an ACK
    /// number when `ack`).
    fn tcp_frame(remote_port: u16, control: Control, ack: bool) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: remote_port,
            dst_port: 80,
            control,
            push: false,
            seq_number: SeqNumber(0),
            ack_number: ack.then_some(SeqNumber(1)),
            window_len: 1024,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; crate::wire::tcp::MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &[],
        };
        let mut segment = vec![0u8; tcp.buffer_len()];
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut segment[..]),
            PEER,
            US,
            &ChecksumCapabilities::default(),
        );
        ip_frame(IpProtocol::Tcp, &segment)
    }

    fn ip_frame(protocol: IpProtocol, payload: &[u8]) -> Vec<u8> {
        let ip = Ipv4Repr {
            src_addr: PEER,
            dst_addr: US,
            protocol,
            payload_len: payload.len(),
            ttl: 64,
            ident: 0,
            dont_frag: true,
        };
        let mut frame = vec![0u8; 14 + ip.buffer_len()];
        EthernetRepr {
            src_addr: MAC_PEER,
            dst_addr: MAC_US,
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        let mut packet = Ipv4Packet::new_unchecked(&mut frame[14..]);
        ip.emit(&mut packet, &ChecksumCapabilities::default());
        packet.payload_mut()[..payload.len()].copy_from_slice(payload);
        frame
    }

    #[test]
    fn owned_connections_go_to_their_owner() {
        let dir = directory(2);
        let on_1 = dir.claims_for(CoreId(1));
        assert!(on_1.claim(&tuple(1000)));
        let ack = tcp_frame(1000, Control::None, true);
        assert_eq!(dir.steer(CoreId(0), &ack), Steer::To(CoreId(1)));
        assert_eq!(dir.steer(CoreId(1), &ack), Steer::Here);
        on_1.release(&tuple(1000));
        assert_eq!(dir.owner(&tuple(1000)), None);
        assert_eq!(dir.steer(CoreId(0), &ack), Steer::Here, "unknown: RST here");
    }

    #[test]
    fn a_claim_is_exclusive_and_only_the_owner_releases() {
        let dir = directory(2);
        let (c0, c1) = (dir.claims_for(CoreId(0)), dir.claims_for(CoreId(1)));
        assert!(c0.claim(&tuple(7)));
        assert!(c0.claim(&tuple(7)), "idempotent for the owner");
        assert!(!c1.claim(&tuple(7)));
        c1.release(&tuple(7));
        assert_eq!(
            dir.owner(&tuple(7)),
            Some(CoreId(0)),
            "not core 1's to release"
        );
        c0.release(&tuple(7));
        assert!(c1.claim(&tuple(7)));
    }

    #[test]
    fn new_syns_follow_the_ports_placement() {
        let dir = directory(2);
        let syn = |port| tcp_frame(port, Control::Syn, false);
        assert_eq!(dir.steer(CoreId(1), &syn(5)), Steer::Here, "no policy");
        dir.set_placement(80, Placement::Core(CoreId(0)));
        assert_eq!(dir.steer(CoreId(1), &syn(5)), Steer::To(CoreId(0)));
        dir.set_placement(80, Placement::Core(CoreId(9)));
        assert_eq!(
            dir.steer(CoreId(1), &syn(5)),
            Steer::Here,
            "not a core of ours"
        );
        dir.set_placement(80, Placement::AcceptingCore);
        assert_eq!(dir.steer(CoreId(1), &syn(5)), Steer::Here);
        dir.set_placement(
            80,
            Placement::Chosen(|t, _| usize::from(t.remote.port() % 2)),
        );
        assert_eq!(dir.steer(CoreId(0), &syn(5)), Steer::To(CoreId(1)));
        assert_eq!(dir.steer(CoreId(0), &syn(6)), Steer::Here);
        dir.set_placement(80, Placement::Hashed);
        let spread: Vec<_> = (1000..1064)
            .map(|p| dir.place(CoreId(0), &tuple(p), Placement::Hashed))
            .collect();
        assert!(spread.contains(&CoreId(0)) && spread.contains(&CoreId(1)));
        for p in 1000..1064 {
            assert_eq!(
                dir.place(CoreId(1), &tuple(p), Placement::Hashed),
                dir.place(CoreId(0), &tuple(p), Placement::Hashed),
                "the same answer wherever the SYN lands"
            );
        }
        // A SYN-ACK, an ACK or a RST without an owner is not placed.
        dir.set_placement(80, Placement::Core(CoreId(0)));
        for frame in [
            tcp_frame(5, Control::Syn, true),
            tcp_frame(5, Control::None, true),
            tcp_frame(5, Control::Rst, false),
        ] {
            assert_eq!(dir.steer(CoreId(1), &frame), Steer::Here);
        }
        dir.clear_placement(80);
        assert_eq!(dir.steer(CoreId(1), &syn(5)), Steer::Here);
    }

    #[test]
    fn arp_replies_everywhere_udp_home_the_rest_here() {
        let dir = directory(2);
        let arp = |operation| {
            let repr = ArpRepr {
                operation,
                source_hardware_addr: MAC_PEER,
                source_protocol_addr: PEER,
                target_hardware_addr: MAC_US,
                target_protocol_addr: US,
            };
            let mut frame = vec![0u8; 14 + crate::wire::arp::ETHERNET_IPV4_LEN];
            EthernetRepr {
                src_addr: MAC_PEER,
                dst_addr: MAC_US,
                ethertype: EtherType::Arp,
            }
            .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
            repr.emit(&mut ArpPacket::new_unchecked(&mut frame[14..]));
            frame
        };
        assert_eq!(
            dir.steer(CoreId(1), &arp(ArpOperation::Reply)),
            Steer::Everywhere
        );
        assert_eq!(
            dir.steer(CoreId(1), &arp(ArpOperation::Request)),
            Steer::Here
        );
        let udp = ip_frame(IpProtocol::Udp, &[0, 68, 0, 67, 0, 8, 0, 0]);
        assert_eq!(dir.steer(CoreId(1), &udp), Steer::To(CoreId(0)));
        assert_eq!(dir.steer(CoreId(0), &udp), Steer::Here);
        let icmp = ip_frame(IpProtocol::Icmp, &[8, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(dir.steer(CoreId(1), &icmp), Steer::Here);
        // Destination unreachable quoting our segment from port 80 to the peer's 1000:
        // to the connection's owner.
        let mut quoted = [0u8; 28];
        quoted[0] = 0x45;
        quoted[9] = 6;
        quoted[12..16].copy_from_slice(&US.octets());
        quoted[16..20].copy_from_slice(&PEER.octets());
        quoted[20..22].copy_from_slice(&80u16.to_be_bytes());
        quoted[22..24].copy_from_slice(&1000u16.to_be_bytes());
        let mut message = vec![3, 3, 0, 0, 0, 0, 0, 0];
        message.extend_from_slice(&quoted);
        let unreachable = ip_frame(IpProtocol::Icmp, &message);
        assert_eq!(dir.steer(CoreId(0), &unreachable), Steer::Here, "no owner");
        assert!(dir.claims_for(CoreId(1)).claim(&tuple(1000)));
        assert_eq!(dir.steer(CoreId(0), &unreachable), Steer::To(CoreId(1)));
        // Truncated anywhere: handled (and counted) here, even with a policy.
        dir.set_placement(80, Placement::Core(CoreId(0)));
        let frame = tcp_frame(5, Control::Syn, false);
        for len in 0..frame.len() {
            assert_eq!(dir.steer(CoreId(1), &frame[..len]), Steer::Here, "{len}");
        }
    }
}
