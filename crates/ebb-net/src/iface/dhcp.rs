//! The DHCPv4 client (RFC 2131), as a sans-IO state machine: the interface feeds it
//! received DHCP messages and the time, and sends the messages it returns.
//!
//! ```text
//!  Init ──DISCOVER──▶ Selecting ──OFFER/REQUEST──▶ Requesting ──ACK──▶ Bound
//!   ▲                  (backoff 4,8,..64 s)         │ NAK, or 4 sends   │ T1
//!   │                                               ▼ unanswered        ▼
//!   ├──────────────────────────────────────────── Init        Renewing (unicast REQUEST)
//!   │  lease expiry, or NAK (address dropped)                           │ T2
//!   └───────────────────────────────────────────────────────── Rebinding (broadcast)
//! ```
//!
//! Retransmissions: DISCOVER and REQUEST while selecting/requesting after 4 s, doubling
//! up to 64 s (RFC 2131 §4.1, without the random ±1 s); a REQUEST unanswered four times
//! restarts discovery. While renewing or rebinding, the REQUEST is repeated after half
//! the time left until T2 (resp. lease expiry), but at least 60 s apart (§4.4.5).
//!
//! What the client learns is reported twice: as a change the interface applies at once
//! (address, prefix, router; a gratuitous ARP after binding) and as a [`DhcpEvent`] the
//! application reads. Not implemented: probing the offered address with ARP before
//! using it (and DECLINE), RELEASE, INIT-REBOOT, option overload.

use alloc::collections::VecDeque;
use core::net::Ipv4Addr;
use core::time::Duration;

use ebb_core::Instant;

use super::config::Ipv4Cidr;
use crate::wire::{DhcpMessageType, DhcpRepr, EthernetAddress, dhcpv4};

/// The client port.
pub(super) const CLIENT_PORT: u16 = 68;
/// The server port.
pub(super) const SERVER_PORT: u16 = 67;

const FIRST_BACKOFF: Duration = Duration::from_secs(4);
const MAX_BACKOFF: Duration = Duration::from_secs(64);
/// REQUESTs sent while requesting before discovery starts over.
const MAX_REQUESTS: u32 = 4;
/// The shortest wait between REQUESTs while renewing or rebinding.
const MIN_RENEW_RETRY: Duration = Duration::from_secs(60);
/// Events kept for the application; older ones are dropped.
const MAX_EVENTS: usize = 16;
/// Options we ask for: subnet mask, router, DNS, lease time, T1, T2.
const PARAMETERS: &[u8] = &[
    dhcpv4::option::SUBNET_MASK,
    dhcpv4::option::ROUTER,
    dhcpv4::option::DNS_SERVER,
    dhcpv4::option::LEASE_TIME,
    dhcpv4::option::RENEWAL_TIME,
    dhcpv4::option::REBINDING_TIME,
];

/// Where the client stands (RFC 2131 figure 5, without the reboot states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DhcpState {
    /// About to (re)start discovery.
    Init,
    /// DISCOVER sent, waiting for an OFFER.
    Selecting,
    /// REQUEST sent for an offer, waiting for the ACK.
    Requesting,
    /// Holding a lease.
    Bound,
    /// Past T1: asking the leasing server to extend the lease.
    Renewing,
    /// Past T2: asking any server to extend the lease.
    Rebinding,
}

/// A lease and what came with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DhcpLease {
    /// Our address and subnet.
    pub cidr: Ipv4Cidr,
    /// The default gateway.
    pub router: Option<Ipv4Addr>,
    /// DNS servers, in preference order.
    pub dns_servers: [Option<Ipv4Addr>; dhcpv4::MAX_DNS_SERVERS],
    /// The server that granted the lease.
    pub server: Ipv4Addr,
    /// When the lease was granted (or last extended).
    pub acquired_at: Instant,
    /// T1: when renewing starts.
    pub renew_at: Instant,
    /// T2: when rebinding starts.
    pub rebind_at: Instant,
    /// When the address must no longer be used.
    pub expires_at: Instant,
}

/// What the DHCP client did, for the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DhcpEvent {
    /// A lease was obtained and applied.
    Bound(DhcpLease),
    /// The lease was extended (the address may be unchanged).
    Renewed(DhcpLease),
    /// The lease ended (expired or refused): the interface has no address.
    Deconfigured,
}

/// What the interface must change after a call into the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// Use this lease's address, subnet and router.
    Configure(DhcpLease),
    /// Drop the address.
    Deconfigure,
}

/// How a client message is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Destination {
    /// Link and IP broadcast, from `src` (0.0.0.0 until we have an address).
    Broadcast {
        /// IP source address.
        src: Ipv4Addr,
    },
    /// To the leasing server, routed normally from our address.
    Unicast(Ipv4Addr),
}

/// One message for the interface to send.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outgoing {
    pub repr: DhcpRepr<'static>,
    pub destination: Destination,
}

/// Why a received message was ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ignored;

/// The client (see the module docs).
#[derive(Debug)]
pub(super) struct DhcpClient {
    mac: EthernetAddress,
    state: DhcpState,
    xid: u32,
    rng: u64,
    /// Next (re)transmission, or the restart time in `Init`.
    next_at: Instant,
    backoff: Duration,
    requests_sent: u32,
    /// The offered address and the offering server, while requesting.
    offer: Option<(Ipv4Addr, Ipv4Addr)>,
    lease: Option<DhcpLease>,
    events: VecDeque<DhcpEvent>,
    change: Option<Change>,
}

impl DhcpClient {
    pub(super) fn new(mac: EthernetAddress, seed: u64) -> Self {
        Self {
            mac,
            state: DhcpState::Init,
            xid: 0,
            rng: seed,
            next_at: Instant::ZERO,
            backoff: FIRST_BACKOFF,
            requests_sent: 0,
            offer: None,
            lease: None,
            events: VecDeque::new(),
            change: None,
        }
    }

    pub(super) fn state(&self) -> DhcpState {
        self.state
    }

    pub(super) fn lease(&self) -> Option<&DhcpLease> {
        self.lease.as_ref()
    }

    pub(super) fn next_event(&mut self) -> Option<DhcpEvent> {
        self.events.pop_front()
    }

    /// The current transaction id.
    #[cfg(test)]
    pub(super) fn xid_for_tests(&self) -> u32 {
        self.xid
    }

    pub(super) fn take_change(&mut self) -> Option<Change> {
        self.change.take()
    }

    fn push_event(&mut self, event: DhcpEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// SplitMix64: transaction ids need only be unpredictable enough not to collide.
    fn next_xid(&mut self) -> u32 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }

    /// When `poll` next has something to do.
    pub(super) fn poll_at(&self) -> Option<Instant> {
        Some(match (self.state, &self.lease) {
            (DhcpState::Bound, Some(lease)) => lease.renew_at,
            (DhcpState::Renewing, Some(lease)) => self.next_at.min(lease.rebind_at),
            (DhcpState::Rebinding, Some(lease)) => self.next_at.min(lease.expires_at),
            _ => self.next_at,
        })
    }

    /// Timers due at `now`: (re)transmissions and lease transitions. Returns the
    /// message to send, if any.
    pub(super) fn poll(&mut self, now: Instant) -> Option<Outgoing> {
        if let Some(lease) = self.lease
            && now >= lease.expires_at
        {
            self.restart(now);
            self.change = Some(Change::Deconfigure);
            self.push_event(DhcpEvent::Deconfigured);
        }
        match self.state {
            DhcpState::Init if now >= self.next_at => {
                self.xid = self.next_xid();
                self.state = DhcpState::Selecting;
                self.backoff = FIRST_BACKOFF;
                self.next_at = now + self.backoff;
                Some(self.discover())
            }
            DhcpState::Selecting if now >= self.next_at => {
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.next_at = now + self.backoff;
                Some(self.discover())
            }
            DhcpState::Requesting if now >= self.next_at => {
                if self.requests_sent >= MAX_REQUESTS {
                    self.restart(now);
                    return self.poll(now);
                }
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.next_at = now + self.backoff;
                self.request_offer()
            }
            DhcpState::Bound => {
                let lease = self.lease?;
                if now < lease.renew_at {
                    return None;
                }
                self.state = DhcpState::Renewing;
                self.xid = self.next_xid();
                self.next_at = now;
                self.poll(now)
            }
            DhcpState::Renewing => {
                let lease = self.lease?;
                if now >= lease.rebind_at {
                    self.state = DhcpState::Rebinding;
                    self.next_at = now;
                    return self.poll(now);
                }
                if now < self.next_at {
                    return None;
                }
                self.next_at = retry_time(now, lease.rebind_at);
                Some(self.request_extension(&lease, Destination::Unicast(lease.server)))
            }
            DhcpState::Rebinding => {
                let lease = self.lease?;
                if now < self.next_at {
                    return None;
                }
                self.next_at = retry_time(now, lease.expires_at);
                let src = lease.cidr.address();
                Some(self.request_extension(&lease, Destination::Broadcast { src }))
            }
            _ => None,
        }
    }

    /// Back to `Init`, to discover at `now`; forgets the lease.
    fn restart(&mut self, now: Instant) {
        self.state = DhcpState::Init;
        self.next_at = now;
        self.offer = None;
        self.lease = None;
        self.requests_sent = 0;
    }

    /// The fields every client message shares.
    fn message(&self, message_type: DhcpMessageType) -> DhcpRepr<'static> {
        DhcpRepr {
            message_type,
            transaction_id: self.xid,
            secs: 0,
            // Ask for broadcast replies: we cannot receive unicast before we have an
            // address (the stack does not answer ARP for an address it lacks).
            broadcast: true,
            client_hardware_address: self.mac,
            client_ip: Ipv4Addr::UNSPECIFIED,
            your_ip: Ipv4Addr::UNSPECIFIED,
            server_ip: Ipv4Addr::UNSPECIFIED,
            relay_agent_ip: Ipv4Addr::UNSPECIFIED,
            requested_ip: None,
            server_identifier: None,
            lease_duration: None,
            renew_duration: None,
            rebind_duration: None,
            subnet_mask: None,
            router: None,
            dns_servers: [None; dhcpv4::MAX_DNS_SERVERS],
            parameter_request_list: Some(PARAMETERS),
            client_identifier: None,
            max_size: Some(1500),
        }
    }

    fn discover(&self) -> Outgoing {
        Outgoing {
            repr: self.message(DhcpMessageType::Discover),
            destination: Destination::Broadcast {
                src: Ipv4Addr::UNSPECIFIED,
            },
        }
    }

    fn request_offer(&mut self) -> Option<Outgoing> {
        let (offered, server) = self.offer?;
        self.requests_sent += 1;
        let mut repr = self.message(DhcpMessageType::Request);
        repr.requested_ip = Some(offered);
        repr.server_identifier = Some(server);
        Some(Outgoing {
            repr,
            destination: Destination::Broadcast {
                src: Ipv4Addr::UNSPECIFIED,
            },
        })
    }

    /// A REQUEST to extend `lease` (RENEWING or REBINDING: `ciaddr` set, no requested
    /// address or server identifier).
    fn request_extension(&self, lease: &DhcpLease, destination: Destination) -> Outgoing {
        let mut repr = self.message(DhcpMessageType::Request);
        repr.broadcast = false;
        repr.client_ip = lease.cidr.address();
        Outgoing { repr, destination }
    }

    /// Handles a received server message. Returns a message to send in answer, if any,
    /// or [`Ignored`] when the message is not for this exchange.
    pub(super) fn receive(
        &mut self,
        now: Instant,
        msg: &DhcpRepr<'_>,
    ) -> Result<Option<Outgoing>, Ignored> {
        if msg.transaction_id != self.xid || msg.client_hardware_address != self.mac {
            return Err(Ignored);
        }
        match (self.state, msg.message_type) {
            (DhcpState::Selecting, DhcpMessageType::Offer) => {
                let server = msg.server_identifier.ok_or(Ignored)?;
                if msg.your_ip.is_unspecified() || msg.your_ip.is_broadcast() {
                    return Err(Ignored);
                }
                self.offer = Some((msg.your_ip, server));
                self.state = DhcpState::Requesting;
                self.requests_sent = 0;
                self.backoff = FIRST_BACKOFF;
                self.next_at = now + self.backoff;
                Ok(self.request_offer())
            }
            (DhcpState::Requesting, DhcpMessageType::Ack) => {
                let (offered, server) = self.offer.ok_or(Ignored)?;
                if msg.server_identifier.is_some_and(|s| s != server) || msg.your_ip != offered {
                    return Err(Ignored);
                }
                let lease = lease_from_ack(now, msg, server).ok_or(Ignored)?;
                self.bind(lease, DhcpEvent::Bound(lease));
                Ok(None)
            }
            (DhcpState::Renewing | DhcpState::Rebinding, DhcpMessageType::Ack) => {
                let old = self.lease.ok_or(Ignored)?;
                let server = msg.server_identifier.unwrap_or(old.server);
                let lease = lease_from_ack(now, msg, server).ok_or(Ignored)?;
                let event = if lease.cidr == old.cidr {
                    DhcpEvent::Renewed(lease)
                } else {
                    DhcpEvent::Bound(lease)
                };
                self.bind(lease, event);
                Ok(None)
            }
            (DhcpState::Requesting, DhcpMessageType::Nak) => {
                self.restart(now);
                Ok(None)
            }
            (DhcpState::Renewing | DhcpState::Rebinding, DhcpMessageType::Nak) => {
                self.restart(now);
                self.change = Some(Change::Deconfigure);
                self.push_event(DhcpEvent::Deconfigured);
                Ok(None)
            }
            _ => Err(Ignored),
        }
    }

    fn bind(&mut self, lease: DhcpLease, event: DhcpEvent) {
        self.state = DhcpState::Bound;
        self.offer = None;
        self.lease = Some(lease);
        self.change = Some(Change::Configure(lease));
        self.push_event(event);
    }
}

/// The next REQUEST while renewing/rebinding: half the time left until `deadline`, at
/// least [`MIN_RENEW_RETRY`] away, but never past `deadline`.
fn retry_time(now: Instant, deadline: Instant) -> Instant {
    let half = deadline.saturating_duration_since(now) / 2;
    (now + half.max(MIN_RENEW_RETRY)).min(deadline)
}

/// The lease an ACK grants, or `None` if it lacks an address or a lease time.
fn lease_from_ack(now: Instant, msg: &DhcpRepr<'_>, server: Ipv4Addr) -> Option<DhcpLease> {
    if msg.your_ip.is_unspecified() {
        return None;
    }
    let secs = msg.lease_duration?;
    // No mask: assume a /24 (what most small networks use) rather than refuse.
    let cidr = msg
        .subnet_mask
        .and_then(|m| Ipv4Cidr::from_netmask(msg.your_ip, m))
        .or_else(|| Ipv4Cidr::new(msg.your_ip, 24))?;
    let at = |s: u64| {
        if secs == u32::MAX {
            Instant::FAR_FUTURE
        } else {
            now + Duration::from_secs(s)
        }
    };
    let lease = u64::from(secs);
    let (mut t1, mut t2) = (
        msg.renew_duration.map_or(lease / 2, u64::from),
        msg.rebind_duration.map_or(lease * 7 / 8, u64::from),
    );
    if !(t1 <= t2 && t2 <= lease) {
        (t1, t2) = (lease / 2, lease * 7 / 8);
    }
    Some(DhcpLease {
        cidr,
        router: msg.router,
        dns_servers: msg.dns_servers,
        server,
        acquired_at: now,
        renew_at: at(t1),
        rebind_at: at(t2),
        expires_at: at(lease),
    })
}
