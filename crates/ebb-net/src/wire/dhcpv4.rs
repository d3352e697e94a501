//! DHCPv4 (RFC 2131, options RFC 2132): the BOOTP header, the magic cookie and the
//! options a client needs to discover, request, renew and rebind a lease over Ethernet.
//!
//! The `sname` and `file` fields are readable raw but never searched for options (the
//! "option overload" of RFC 2132 §9.3 is not supported).

use core::net::Ipv4Addr;

use super::bytes::{get_ipv4, get_u16, get_u32, set_ipv4, set_u16, set_u32};
use super::ethernet::EthernetAddress;
use super::{Result, WireError, wire_enum};

wire_enum! {
    /// The DHCP message type (option 53).
    pub enum MessageType(u8) {
        /// Client looks for servers.
        Discover = 1,
        /// Server offers an address.
        Offer = 2,
        /// Client requests (or renews) an address.
        Request = 3,
        /// Client declines an address already in use.
        Decline = 4,
        /// Server acknowledges: the lease is granted.
        Ack = 5,
        /// Server refuses.
        Nak = 6,
        /// Client gives the address back.
        Release = 7,
        /// Client asks for configuration only.
        Inform = 8,
    }
}

impl MessageType {
    /// The BOOTP operation of messages of this type: 1 (request) from clients, 2 (reply)
    /// from servers.
    pub fn opcode(self) -> u8 {
        match self {
            MessageType::Offer | MessageType::Ack | MessageType::Nak => OP_REPLY,
            _ => OP_REQUEST,
        }
    }
}

const OP_REQUEST: u8 = 1;
const OP_REPLY: u8 = 2;
const HARDWARE_ETHERNET: u8 = 1;
const FLAG_BROADCAST: u16 = 0x8000;

/// The magic cookie that starts the options.
pub const MAGIC_COOKIE: u32 = 0x6382_5363;
/// Length of the BOOTP header including the magic cookie.
pub const HEADER_LEN: usize = 240;
/// The smallest BOOTP message relays must accept (RFC 1542); `emit` pads to it.
pub const MIN_MESSAGE_LEN: usize = 300;
/// Most DNS servers a [`Repr`] holds.
pub const MAX_DNS_SERVERS: usize = 3;

/// Option codes.
pub mod option {
    /// Padding.
    pub const PAD: u8 = 0;
    /// Subnet mask.
    pub const SUBNET_MASK: u8 = 1;
    /// Routers, in order of preference.
    pub const ROUTER: u8 = 3;
    /// DNS servers.
    pub const DNS_SERVER: u8 = 6;
    /// Requested IP address.
    pub const REQUESTED_IP: u8 = 50;
    /// Lease time, seconds.
    pub const LEASE_TIME: u8 = 51;
    /// DHCP message type.
    pub const MESSAGE_TYPE: u8 = 53;
    /// Server identifier.
    pub const SERVER_IDENTIFIER: u8 = 54;
    /// Parameter request list.
    pub const PARAMETER_REQUEST_LIST: u8 = 55;
    /// Maximum DHCP message size.
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    /// Renewal (T1) time, seconds.
    pub const RENEWAL_TIME: u8 = 58;
    /// Rebinding (T2) time, seconds.
    pub const REBINDING_TIME: u8 = 59;
    /// Client identifier.
    pub const CLIENT_IDENTIFIER: u8 = 61;
    /// End of options.
    pub const END: u8 = 255;
}

/// A zero-copy view of a DHCPv4 message (the UDP payload).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the header and the magic cookie, so no accessor can
    /// panic.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The BOOTP operation: 1 request, 2 reply.
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    /// The relay hop count.
    pub fn hops(&self) -> u8 {
        self.buffer.as_ref()[3]
    }

    /// The transaction id chosen by the client.
    pub fn transaction_id(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 4)
    }

    /// Seconds since the client began acquiring or renewing.
    pub fn secs(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 8)
    }

    /// The flags field.
    pub fn flags(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 10)
    }

    /// The broadcast flag: the client cannot receive unicast before it is configured.
    pub fn broadcast(&self) -> bool {
        self.flags() & FLAG_BROADCAST != 0
    }

    /// `ciaddr`: the client's current address (renewing, rebinding).
    pub fn client_ip(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 12)
    }

    /// `yiaddr`: the address the server offers or assigns.
    pub fn your_ip(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 16)
    }

    /// `siaddr`: the next server (boot server).
    pub fn server_ip(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 20)
    }

    /// `giaddr`: the relay agent.
    pub fn relay_agent_ip(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 24)
    }

    /// `chaddr`, all 16 bytes.
    pub fn client_hardware(&self) -> &[u8] {
        &self.buffer.as_ref()[28..44]
    }

    /// The first six bytes of `chaddr`, as an Ethernet address.
    pub fn client_hardware_address(&self) -> EthernetAddress {
        EthernetAddress(self.buffer.as_ref()[28..34].try_into().unwrap_or([0; 6]))
    }

    /// The server host name field, 64 bytes, raw.
    pub fn server_name(&self) -> &[u8] {
        &self.buffer.as_ref()[44..108]
    }

    /// The boot file name field, 128 bytes, raw.
    pub fn boot_file(&self) -> &[u8] {
        &self.buffer.as_ref()[108..236]
    }

    /// The magic cookie field ([`MAGIC_COOKIE`] in DHCP messages).
    pub fn magic_number(&self) -> u32 {
        get_u32(self.buffer.as_ref(), 236)
    }

    /// The options area, raw; [`Options`] reads it.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the BOOTP operation.
    pub fn set_opcode(&mut self, value: u8) {
        self.buffer.as_mut()[0] = value;
    }

    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, value: u8) {
        self.buffer.as_mut()[1] = value;
    }

    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[2] = value;
    }

    /// Sets the hop count.
    pub fn set_hops(&mut self, value: u8) {
        self.buffer.as_mut()[3] = value;
    }

    /// Sets the transaction id.
    pub fn set_transaction_id(&mut self, value: u32) {
        set_u32(self.buffer.as_mut(), 4, value);
    }

    /// Sets the seconds field.
    pub fn set_secs(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 8, value);
    }

    /// Sets the flags field.
    pub fn set_flags(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 10, value);
    }

    /// Sets `ciaddr`.
    pub fn set_client_ip(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 12, value);
    }

    /// Sets `yiaddr`.
    pub fn set_your_ip(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 16, value);
    }

    /// Sets `siaddr`.
    pub fn set_server_ip(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 20, value);
    }

    /// Sets `giaddr`.
    pub fn set_relay_agent_ip(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 24, value);
    }

    /// Sets `chaddr` to an Ethernet address followed by ten zero bytes.
    pub fn set_client_hardware_address(&mut self, value: EthernetAddress) {
        let chaddr = &mut self.buffer.as_mut()[28..44];
        chaddr.fill(0);
        chaddr[..6].copy_from_slice(&value.0);
    }

    /// Zeroes the server name and boot file fields.
    pub fn clear_names(&mut self) {
        self.buffer.as_mut()[44..236].fill(0);
    }

    /// Sets the magic cookie field.
    pub fn set_magic_number(&mut self, value: u32) {
        set_u32(self.buffer.as_mut(), 236, value);
    }

    /// The options area, writable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// One option: its code and data. Pad and end are not options here; the iterator
/// consumes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DhcpOption<'a> {
    /// The option code (see [`option`]).
    pub kind: u8,
    /// The option data (at most 255 bytes).
    pub data: &'a [u8],
}

impl DhcpOption<'_> {
    /// How many bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        2 + self.data.len().min(255)
    }

    /// Writes the option at the front of `buffer` and returns the bytes written; data
    /// beyond 255 bytes is cut.
    pub fn emit(&self, buffer: &mut [u8]) -> usize {
        let n = self.data.len().min(255);
        buffer[0] = self.kind;
        buffer[1] = n as u8;
        buffer[2..2 + n].copy_from_slice(&self.data[..n]);
        2 + n
    }
}

/// An iterator over an options area. Pads are skipped; an end option, or the end of the
/// area, stops it; an option whose length runs past the area yields
/// [`WireError::Malformed`] once and stops it.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterates over the options in `area` (for example [`Packet::options`]).
    pub fn new(area: &'a [u8]) -> Options<'a> {
        Options { rest: area }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<DhcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&kind, after_kind) = self.rest.split_first()?;
            match kind {
                option::PAD => self.rest = after_kind,
                option::END => {
                    self.rest = &[];
                    return None;
                }
                _ => {
                    let parsed = after_kind.split_first().and_then(|(&len, data)| {
                        let len = usize::from(len);
                        (len <= data.len()).then(|| (&data[..len], &data[len..]))
                    });
                    return Some(match parsed {
                        Some((data, rest)) => {
                            self.rest = rest;
                            Ok(DhcpOption { kind, data })
                        }
                        None => {
                            self.rest = &[];
                            Err(WireError::Malformed)
                        }
                    });
                }
            }
        }
    }
}

/// The meaning of a DHCP message, with the options a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The message type (option 53); also decides the BOOTP operation on emit.
    pub message_type: MessageType,
    /// Transaction id.
    pub transaction_id: u32,
    /// Seconds since the client began.
    pub secs: u16,
    /// The broadcast flag.
    pub broadcast: bool,
    /// The client's Ethernet address (`chaddr`).
    pub client_hardware_address: EthernetAddress,
    /// `ciaddr`.
    pub client_ip: Ipv4Addr,
    /// `yiaddr`.
    pub your_ip: Ipv4Addr,
    /// `siaddr`.
    pub server_ip: Ipv4Addr,
    /// `giaddr`.
    pub relay_agent_ip: Ipv4Addr,
    /// Requested IP address (option 50).
    pub requested_ip: Option<Ipv4Addr>,
    /// Server identifier (option 54).
    pub server_identifier: Option<Ipv4Addr>,
    /// Lease time in seconds (option 51).
    pub lease_duration: Option<u32>,
    /// Renewal time T1 in seconds (option 58).
    pub renew_duration: Option<u32>,
    /// Rebinding time T2 in seconds (option 59).
    pub rebind_duration: Option<u32>,
    /// Subnet mask (option 1).
    pub subnet_mask: Option<Ipv4Addr>,
    /// The first router (option 3).
    pub router: Option<Ipv4Addr>,
    /// Up to three DNS servers (option 6), filled from the front; more are dropped.
    pub dns_servers: [Option<Ipv4Addr>; MAX_DNS_SERVERS],
    /// Parameter request list (option 55), non-empty.
    pub parameter_request_list: Option<&'a [u8]>,
    /// Client identifier (option 61), non-empty.
    pub client_identifier: Option<&'a [u8]>,
    /// Maximum message size the client accepts (option 57).
    pub max_size: Option<u16>,
}

fn exact<const N: usize>(data: &[u8]) -> Result<[u8; N]> {
    data.try_into().map_err(|_| WireError::Malformed)
}

/// Addresses of a list option: a non-empty multiple of four bytes.
fn address_list(data: &[u8]) -> Result<impl Iterator<Item = Ipv4Addr> + '_> {
    if data.is_empty() || !data.len().is_multiple_of(4) {
        return Err(WireError::Malformed);
    }
    Ok(data
        .chunks_exact(4)
        .map(|a| Ipv4Addr::new(a[0], a[1], a[2], a[3])))
}

fn non_empty(data: &[u8]) -> Result<&[u8]> {
    if data.is_empty() {
        Err(WireError::Malformed)
    } else {
        Ok(data)
    }
}

impl<'a> Repr<'a> {
    /// Reads a checked message. A bad operation code, magic cookie or option encoding,
    /// or a known option of the wrong length, is [`WireError::Malformed`]; non-Ethernet
    /// hardware, and plain BOOTP (no message type), are [`WireError::Unsupported`]. When
    /// an option appears twice, the last wins; unknown options are skipped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if !matches!(packet.opcode(), OP_REQUEST | OP_REPLY) {
            return Err(WireError::Malformed);
        }
        if packet.hardware_type() != HARDWARE_ETHERNET || packet.hardware_len() != 6 {
            return Err(WireError::Unsupported);
        }
        if packet.magic_number() != MAGIC_COOKIE {
            return Err(WireError::Malformed);
        }
        let mut message_type = None;
        let mut repr = Repr {
            message_type: MessageType::Discover,
            transaction_id: packet.transaction_id(),
            secs: packet.secs(),
            broadcast: packet.broadcast(),
            client_hardware_address: packet.client_hardware_address(),
            client_ip: packet.client_ip(),
            your_ip: packet.your_ip(),
            server_ip: packet.server_ip(),
            relay_agent_ip: packet.relay_agent_ip(),
            requested_ip: None,
            server_identifier: None,
            lease_duration: None,
            renew_duration: None,
            rebind_duration: None,
            subnet_mask: None,
            router: None,
            dns_servers: [None; MAX_DNS_SERVERS],
            parameter_request_list: None,
            client_identifier: None,
            max_size: None,
        };
        let area: &'a [u8] = &packet.buffer.as_ref()[HEADER_LEN..];
        for option in Options::new(area) {
            let DhcpOption { kind, data } = option?;
            match kind {
                option::MESSAGE_TYPE => {
                    let [t] = exact::<1>(data)?;
                    message_type = Some(MessageType::from(t));
                }
                option::REQUESTED_IP => repr.requested_ip = Some(exact::<4>(data)?.into()),
                option::SERVER_IDENTIFIER => {
                    repr.server_identifier = Some(exact::<4>(data)?.into())
                }
                option::SUBNET_MASK => repr.subnet_mask = Some(exact::<4>(data)?.into()),
                option::LEASE_TIME => repr.lease_duration = Some(u32::from_be_bytes(exact(data)?)),
                option::RENEWAL_TIME => {
                    repr.renew_duration = Some(u32::from_be_bytes(exact(data)?))
                }
                option::REBINDING_TIME => {
                    repr.rebind_duration = Some(u32::from_be_bytes(exact(data)?))
                }
                option::MAX_MESSAGE_SIZE => repr.max_size = Some(u16::from_be_bytes(exact(data)?)),
                option::ROUTER => repr.router = address_list(data)?.next(),
                option::DNS_SERVER => {
                    repr.dns_servers = [None; MAX_DNS_SERVERS];
                    for (slot, addr) in repr.dns_servers.iter_mut().zip(address_list(data)?) {
                        *slot = Some(addr);
                    }
                }
                option::PARAMETER_REQUEST_LIST => {
                    repr.parameter_request_list = Some(non_empty(data)?)
                }
                option::CLIENT_IDENTIFIER => repr.client_identifier = Some(non_empty(data)?),
                _ => {}
            }
        }
        repr.message_type = message_type.ok_or(WireError::Unsupported)?;
        Ok(repr)
    }

    /// Options in the order `emit` writes them; the closure sees each one.
    fn for_each_option(&self, mut f: impl FnMut(DhcpOption<'_>)) {
        let message_type = [u8::from(self.message_type)];
        f(DhcpOption {
            kind: option::MESSAGE_TYPE,
            data: &message_type,
        });
        if let Some(id) = self.client_identifier {
            f(DhcpOption {
                kind: option::CLIENT_IDENTIFIER,
                data: id,
            });
        }
        let addresses = [
            (option::REQUESTED_IP, self.requested_ip),
            (option::SERVER_IDENTIFIER, self.server_identifier),
            (option::SUBNET_MASK, self.subnet_mask),
            (option::ROUTER, self.router),
        ];
        for (kind, addr) in addresses {
            if let Some(addr) = addr {
                f(DhcpOption {
                    kind,
                    data: &addr.octets(),
                });
            }
        }
        let durations = [
            (option::LEASE_TIME, self.lease_duration),
            (option::RENEWAL_TIME, self.renew_duration),
            (option::REBINDING_TIME, self.rebind_duration),
        ];
        for (kind, secs) in durations {
            if let Some(secs) = secs {
                f(DhcpOption {
                    kind,
                    data: &secs.to_be_bytes(),
                });
            }
        }
        let mut dns = [0u8; 4 * MAX_DNS_SERVERS];
        let mut n = 0;
        for addr in self.dns_servers.iter().flatten() {
            dns[n..n + 4].copy_from_slice(&addr.octets());
            n += 4;
        }
        if n > 0 {
            f(DhcpOption {
                kind: option::DNS_SERVER,
                data: &dns[..n],
            });
        }
        if let Some(list) = self.parameter_request_list {
            f(DhcpOption {
                kind: option::PARAMETER_REQUEST_LIST,
                data: list,
            });
        }
        if let Some(size) = self.max_size {
            f(DhcpOption {
                kind: option::MAX_MESSAGE_SIZE,
                data: &size.to_be_bytes(),
            });
        }
    }

    /// The header length `emit` writes, magic cookie included (240).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The message length `emit` writes: header, options, end option, and padding up to
    /// [`MIN_MESSAGE_LEN`].
    pub fn buffer_len(&self) -> usize {
        let mut options = 1; // the end option
        self.for_each_option(|o| options += o.buffer_len());
        (HEADER_LEN + options).max(MIN_MESSAGE_LEN)
    }

    /// Writes the message into `packet` (at least [`buffer_len`](Self::buffer_len)
    /// bytes). Empty parameter-request and client-id slices must not be given (they
    /// would be written as zero-length options, which `parse` refuses); slices past 255
    /// bytes are cut. Bytes after the end option are zeroed (pads).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_opcode(self.message_type.opcode());
        packet.set_hardware_type(HARDWARE_ETHERNET);
        packet.set_hardware_len(6);
        packet.set_hops(0);
        packet.set_transaction_id(self.transaction_id);
        packet.set_secs(self.secs);
        packet.set_flags(if self.broadcast { FLAG_BROADCAST } else { 0 });
        packet.set_client_ip(self.client_ip);
        packet.set_your_ip(self.your_ip);
        packet.set_server_ip(self.server_ip);
        packet.set_relay_agent_ip(self.relay_agent_ip);
        packet.set_client_hardware_address(self.client_hardware_address);
        packet.clear_names();
        packet.set_magic_number(MAGIC_COOKIE);
        let area = packet.options_mut();
        let mut at = 0;
        self.for_each_option(|o| at += o.emit(&mut area[at..]));
        area[at] = option::END;
        area[at + 1..].fill(option::PAD);
    }
}

#[cfg(test)]
mod tests;
