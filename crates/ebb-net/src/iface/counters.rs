//! [`InterfaceCounters`]: what the interface did with every frame, for the application
//! to read. Every frame received is delivered somewhere or counted under one drop
//! reason; every packet the interface could not send is counted under one reason.
//! Counters only grow (and saturate).

/// Why a received frame was not delivered. One counter each in [`RxDrops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RxDropReason {
    /// Shorter than an Ethernet header, or an 802.3 length instead of an EtherType.
    EthernetMalformed,
    /// Addressed to another station's MAC, or to a multicast group.
    EthernetNotForUs,
    /// An EtherType other than ARP and IPv4 (IPv6 included).
    EthernetUnknownType,
    /// An ARP packet too short or with inconsistent lengths.
    ArpMalformed,
    /// ARP for something other than Ethernet/IPv4.
    ArpUnsupported,
    /// Truncated IPv4, a header length or total length that does not fit, or version ≠ 4.
    Ipv4Malformed,
    /// The IPv4 header checksum does not match.
    Ipv4BadChecksum,
    /// A fragment (more-fragments set or non-zero offset): this stack does not
    /// reassemble.
    Ipv4Fragment,
    /// Addressed to an IPv4 address that is not ours (nor a broadcast we accept).
    Ipv4NotForUs,
    /// A source address no host may use (broadcast, multicast).
    Ipv4BadSource,
    /// An IP protocol other than ICMP, UDP and TCP.
    Ipv4UnknownProtocol,
    /// A malformed ICMP message (too short, bad echo code).
    IcmpMalformed,
    /// The ICMP checksum does not match.
    IcmpBadChecksum,
    /// A malformed UDP datagram (length field inconsistent, port 0).
    UdpMalformed,
    /// The UDP checksum does not match.
    UdpBadChecksum,
    /// No socket is bound to the destination port.
    UdpNoSocket,
    /// The socket's receive queue was full.
    UdpQueueFull,
    /// A malformed TCP segment (too short, bad data offset), or one sent to a broadcast.
    TcpMalformed,
    /// The TCP checksum does not match.
    TcpBadChecksum,
    /// A DHCP message that does not parse, or that our client did not expect.
    DhcpIgnored,
}

/// Received frames dropped, by reason (see [`RxDropReason`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each field is the RxDropReason of the same name
pub struct RxDrops {
    pub ethernet_malformed: u64,
    pub ethernet_not_for_us: u64,
    pub ethernet_unknown_type: u64,
    pub arp_malformed: u64,
    pub arp_unsupported: u64,
    pub ipv4_malformed: u64,
    pub ipv4_bad_checksum: u64,
    pub ipv4_fragment: u64,
    pub ipv4_not_for_us: u64,
    pub ipv4_bad_source: u64,
    pub ipv4_unknown_protocol: u64,
    pub icmp_malformed: u64,
    pub icmp_bad_checksum: u64,
    pub udp_malformed: u64,
    pub udp_bad_checksum: u64,
    pub udp_no_socket: u64,
    pub udp_queue_full: u64,
    pub tcp_malformed: u64,
    pub tcp_bad_checksum: u64,
    pub dhcp_ignored: u64,
}

impl RxDrops {
    fn slot(&mut self, reason: RxDropReason) -> &mut u64 {
        use RxDropReason::*;
        match reason {
            EthernetMalformed => &mut self.ethernet_malformed,
            EthernetNotForUs => &mut self.ethernet_not_for_us,
            EthernetUnknownType => &mut self.ethernet_unknown_type,
            ArpMalformed => &mut self.arp_malformed,
            ArpUnsupported => &mut self.arp_unsupported,
            Ipv4Malformed => &mut self.ipv4_malformed,
            Ipv4BadChecksum => &mut self.ipv4_bad_checksum,
            Ipv4Fragment => &mut self.ipv4_fragment,
            Ipv4NotForUs => &mut self.ipv4_not_for_us,
            Ipv4BadSource => &mut self.ipv4_bad_source,
            Ipv4UnknownProtocol => &mut self.ipv4_unknown_protocol,
            IcmpMalformed => &mut self.icmp_malformed,
            IcmpBadChecksum => &mut self.icmp_bad_checksum,
            UdpMalformed => &mut self.udp_malformed,
            UdpBadChecksum => &mut self.udp_bad_checksum,
            UdpNoSocket => &mut self.udp_no_socket,
            UdpQueueFull => &mut self.udp_queue_full,
            TcpMalformed => &mut self.tcp_malformed,
            TcpBadChecksum => &mut self.tcp_bad_checksum,
            DhcpIgnored => &mut self.dhcp_ignored,
        }
    }

    /// Drops for `reason`.
    pub fn get(&self, reason: RxDropReason) -> u64 {
        let mut copy = *self;
        *copy.slot(reason)
    }

    /// Counts one drop for `reason`.
    pub fn record(&mut self, reason: RxDropReason) {
        let c = self.slot(reason);
        *c = c.saturating_add(1);
    }

    /// Drops for every reason.
    pub fn total(&self) -> u64 {
        let s = self;
        [
            s.ethernet_malformed,
            s.ethernet_not_for_us,
            s.ethernet_unknown_type,
            s.arp_malformed,
            s.arp_unsupported,
            s.ipv4_malformed,
            s.ipv4_bad_checksum,
            s.ipv4_fragment,
            s.ipv4_not_for_us,
            s.ipv4_bad_source,
            s.ipv4_unknown_protocol,
            s.icmp_malformed,
            s.icmp_bad_checksum,
            s.udp_malformed,
            s.udp_bad_checksum,
            s.udp_no_socket,
            s.udp_queue_full,
            s.tcp_malformed,
            s.tcp_bad_checksum,
            s.dhcp_ignored,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// Why an outgoing packet was not queued for the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxDropReason {
    /// No address yet, or the destination is off the subnet and there is no gateway.
    Unreachable,
    /// The next hop is being resolved and its wait queue (or the total) is full, or the
    /// ARP cache is full of unresolved entries.
    ArpQueueFull,
    /// The next hop never answered ARP; what waited for it was dropped.
    ArpFailed,
    /// The transmit queue to the device was full.
    TxQueueFull,
    /// Larger than the link MTU (the stack does not fragment).
    TooLarge,
}

/// Outgoing packets dropped, by reason (see [`TxDropReason`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // each field is the TxDropReason of the same name
pub struct TxDrops {
    pub unreachable: u64,
    pub arp_queue_full: u64,
    pub arp_failed: u64,
    pub tx_queue_full: u64,
    pub too_large: u64,
}

impl TxDrops {
    /// Counts one drop for `reason`.
    pub fn record(&mut self, reason: TxDropReason) {
        self.record_n(reason, 1);
    }

    /// Counts `n` drops for `reason`.
    pub fn record_n(&mut self, reason: TxDropReason, n: u64) {
        let c = match reason {
            TxDropReason::Unreachable => &mut self.unreachable,
            TxDropReason::ArpQueueFull => &mut self.arp_queue_full,
            TxDropReason::ArpFailed => &mut self.arp_failed,
            TxDropReason::TxQueueFull => &mut self.tx_queue_full,
            TxDropReason::TooLarge => &mut self.too_large,
        };
        *c = c.saturating_add(n);
    }

    /// Drops for every reason.
    pub fn total(&self) -> u64 {
        [
            self.unreachable,
            self.arp_queue_full,
            self.arp_failed,
            self.tx_queue_full,
            self.too_large,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }
}

/// What the interface has done since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct InterfaceCounters {
    /// Frames handed to the interface by the device.
    pub rx_frames: u64,
    /// ARP packets processed.
    pub rx_arp: u64,
    /// TCP segments handed to TCP.
    pub rx_tcp: u64,
    /// UDP datagrams queued on a socket.
    pub rx_udp: u64,
    /// DHCP messages handed to the DHCP client.
    pub rx_dhcp: u64,
    /// ICMP echo requests received (each answered, unless the reply was dropped).
    pub rx_icmp_echo_requests: u64,
    /// ICMP echo replies received (answers to [`Interface::send_ping`]).
    ///
    /// [`Interface::send_ping`]: super::Interface::send_ping
    pub rx_icmp_echo_replies: u64,
    /// ICMP Destination Unreachable messages quoting a TCP segment from our address,
    /// handed to TCP (which may still find them stale; see `TcpCounters::icmp_errors`).
    pub rx_icmp_unreachable: u64,
    /// Other ICMP messages received (other errors, unknown types): counted, not acted on.
    pub rx_icmp_other: u64,
    /// Received frames whose TCP/UDP checksum the device vouched for (verified, or a
    /// local sender's partial checksum: `ebb_net_driver::FrameChecksum`), so the stack did not
    /// verify it.
    pub rx_checksum_trusted: u64,
    /// Received frames dropped, by reason.
    pub rx_dropped: RxDrops,

    /// Frames queued for the device (every kind).
    pub tx_frames: u64,
    /// ARP requests sent (resolution and retries).
    pub tx_arp_requests: u64,
    /// ARP replies sent.
    pub tx_arp_replies: u64,
    /// Gratuitous ARP announcements sent.
    pub tx_arp_gratuitous: u64,
    /// ICMP echo requests sent.
    pub tx_icmp_echo_requests: u64,
    /// ICMP echo replies sent.
    pub tx_icmp_echo_replies: u64,
    /// ICMP port-unreachable messages sent.
    pub tx_icmp_port_unreachable: u64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_errors_rate_limited: u64,
    /// Frames handed to the device with a partial TCP/UDP checksum for it to complete
    /// (`ebb_net_driver::ChecksumOffload::tx_partial`).
    pub tx_checksum_partial: u64,
    /// TCP frames longer than the MTU queued for the device to cut into segments (TCP
    /// segmentation offload, `ebb_net_driver::DeviceCapabilities::tso_max_len`).
    pub tx_tcp_segmentation: u64,
    /// Outgoing packets dropped, by reason.
    pub tx_dropped: TxDrops,

    /// ARP entries that expired.
    pub arp_expired: u64,
    /// Next hops given up on after the last unanswered request.
    pub arp_resolution_failures: u64,
}

/// Adds one to a counter, saturating.
pub(crate) fn bump(c: &mut u64) {
    *c = c.saturating_add(1);
}
