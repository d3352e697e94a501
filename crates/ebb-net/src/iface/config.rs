//! How an [`Interface`](super::Interface) is configured: its link address, how it gets
//! an IPv4 address (static or DHCP), and the bounds on every queue and table it keeps.

use core::net::Ipv4Addr;
use core::time::Duration;

use crate::wire::EthernetAddress;

/// An IPv4 address with the length of its subnet prefix, e.g. `10.0.2.15/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    address: Ipv4Addr,
    prefix_len: u8,
}

impl Ipv4Cidr {
    /// `address/prefix_len`; `None` if `prefix_len > 32`.
    pub const fn new(address: Ipv4Addr, prefix_len: u8) -> Option<Self> {
        if prefix_len > 32 {
            None
        } else {
            Some(Self {
                address,
                prefix_len,
            })
        }
    }

    /// The address with the prefix length of `netmask`; `None` if the mask is not a
    /// contiguous run of ones followed by zeros.
    pub fn from_netmask(address: Ipv4Addr, netmask: Ipv4Addr) -> Option<Self> {
        let mask = u32::from(netmask);
        let prefix_len = mask.leading_ones();
        if mask.checked_shl(prefix_len).unwrap_or(0) != 0 {
            return None;
        }
        Self::new(address, prefix_len as u8)
    }

    /// The address.
    pub const fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// The prefix length (0..=32).
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The subnet mask as a number.
    fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32 - u32::from(self.prefix_len))
            .unwrap_or(0)
    }

    /// The subnet mask, e.g. `255.255.255.0` for `/24`.
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.mask())
    }

    /// Whether `addr` is on this subnet.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        (u32::from(addr) ^ u32::from(self.address)) & self.mask() == 0
    }

    /// The subnet's directed broadcast address (`None` for /31 and /32, which have none).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix_len <= 30).then(|| Ipv4Addr::from(u32::from(self.address) | !self.mask()))
    }
}

impl core::fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// How the interface gets its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv4Config {
    /// A fixed address and subnet, and the router for everything off the subnet.
    Static {
        /// Our address and subnet.
        cidr: Ipv4Cidr,
        /// The default gateway (`None`: only the subnet is reachable).
        gateway: Option<Ipv4Addr>,
    },
    /// A DHCPv4 client obtains (and renews) the address, subnet and router; until it
    /// has a lease the interface has no address and sends only DHCP.
    Dhcp,
    /// Set from outside with [`Interface::set_address`](super::Interface::set_address):
    /// a multi-core stack's other cores, whose address follows the home core's DHCP
    /// lease. No address until then.
    Managed,
}

/// ARP timing. Defaults: entries live 60 s, unanswered requests are repeated every
/// second and given up after 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArpConfig {
    /// How long a learned entry is used before it must be resolved again.
    pub entry_lifetime: Duration,
    /// How long to wait for a reply before asking again.
    pub retry_interval: Duration,
    /// Requests sent for one address before giving up (and dropping what waits on it).
    pub max_requests: u32,
}

impl Default for ArpConfig {
    fn default() -> Self {
        Self {
            entry_lifetime: Duration::from_secs(60),
            retry_interval: Duration::from_secs(1),
            max_requests: 3,
        }
    }
}

/// The bounds on everything the interface queues or remembers. Whatever would exceed
/// one is dropped and counted, never allowed to grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// ARP cache entries (resolved and pending together).
    pub arp_cache_entries: usize,
    /// Packets waiting for one next hop's link address.
    pub arp_pending_per_destination: usize,
    /// Packets waiting for link addresses, all next hops together.
    pub arp_pending_total: usize,
    /// Frames queued for the device; beyond it output fails with `Busy`.
    pub tx_queue_frames: usize,
    /// Datagrams each UDP socket holds until the application takes them.
    pub udp_receive_queue: usize,
    /// ICMP error messages (port unreachable) sent per second at most.
    pub icmp_errors_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            arp_cache_entries: 256,
            arp_pending_per_destination: 8,
            arp_pending_total: 64,
            tx_queue_frames: 1024,
            udp_receive_queue: 64,
            icmp_errors_per_second: 10,
        }
    }
}

/// Everything an [`Interface`](super::Interface) needs besides the device's
/// capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InterfaceConfig {
    /// Our link-layer address.
    pub mac: EthernetAddress,
    /// Static address or DHCP.
    pub ipv4: Ipv4Config,
    /// ARP timing.
    pub arp: ArpConfig,
    /// Queue and table bounds.
    pub limits: Limits,
    /// Seeds the DHCP transaction ids and the first ephemeral port, so a run can be
    /// replayed; give each interface a different one (the default mixes the MAC in).
    pub seed: u64,
}

impl InterfaceConfig {
    /// A statically addressed interface.
    pub fn new_static(mac: EthernetAddress, cidr: Ipv4Cidr, gateway: Option<Ipv4Addr>) -> Self {
        Self::new(mac, Ipv4Config::Static { cidr, gateway })
    }

    /// An interface configured by DHCP.
    pub fn new_dhcp(mac: EthernetAddress) -> Self {
        Self::new(mac, Ipv4Config::Dhcp)
    }

    /// An interface whose address is set from outside ([`Ipv4Config::Managed`]).
    pub fn new_managed(mac: EthernetAddress) -> Self {
        Self::new(mac, Ipv4Config::Managed)
    }

    fn new(mac: EthernetAddress, ipv4: Ipv4Config) -> Self {
        let mut mac64 = [0u8; 8];
        mac64[2..].copy_from_slice(&mac.0);
        Self {
            mac,
            ipv4,
            arp: ArpConfig::default(),
            limits: Limits::default(),
            seed: u64::from_be_bytes(mac64) ^ 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The same configuration with these limits.
    pub fn with_limits(self, limits: Limits) -> Self {
        Self { limits, ..self }
    }

    /// The same configuration with this ARP timing.
    pub fn with_arp(self, arp: ArpConfig) -> Self {
        Self { arp, ..self }
    }

    /// The same configuration with this seed.
    pub fn with_seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn cidr_arithmetic() {
        let c = Ipv4Cidr::new(Ipv4Addr::new(192, 168, 7, 130), 25).unwrap();
        assert_eq!(c.netmask(), Ipv4Addr::new(255, 255, 255, 128));
        assert_eq!(c.broadcast(), Some(Ipv4Addr::new(192, 168, 7, 255)));
        assert!(c.contains(Ipv4Addr::new(192, 168, 7, 129)));
        assert!(!c.contains(Ipv4Addr::new(192, 168, 7, 127)));
        assert_eq!(c.to_string(), "192.168.7.130/25");
        assert_eq!(Ipv4Cidr::new(Ipv4Addr::LOCALHOST, 33), None);
        let all = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 0).unwrap();
        assert!(all.contains(Ipv4Addr::new(8, 8, 8, 8)));
        assert_eq!(all.netmask(), Ipv4Addr::UNSPECIFIED);
        let host = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 32).unwrap();
        assert_eq!(host.broadcast(), None);
        assert!(!host.contains(Ipv4Addr::new(10, 0, 0, 2)));
    }

    #[test]
    fn netmask_to_prefix() {
        let a = Ipv4Addr::new(10, 1, 2, 3);
        let p = |m: [u8; 4]| Ipv4Cidr::from_netmask(a, Ipv4Addr::from(m)).map(|c| c.prefix_len());
        assert_eq!(p([255, 255, 255, 0]), Some(24));
        assert_eq!(p([255, 255, 255, 255]), Some(32));
        assert_eq!(p([0, 0, 0, 0]), Some(0));
        assert_eq!(p([255, 255, 240, 0]), Some(20));
        assert_eq!(p([255, 0, 255, 0]), None, "not contiguous");
    }
}
