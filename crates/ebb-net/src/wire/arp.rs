//! ARP (RFC 826). The view reads any hardware/protocol address lengths; the [`Repr`]
//! covers the only pair the stack speaks, Ethernet hardware and IPv4 protocol addresses.

use core::net::Ipv4Addr;

use super::bytes::{get_u16, set_u16};
use super::ethernet::{EtherType, EthernetAddress};
use super::{Result, WireError, wire_enum};

wire_enum! {
    /// The ARP operation.
    pub enum Operation(u16) {
        /// Who has this protocol address?
        Request = 1,
        /// This protocol address is at this hardware address.
        Reply = 2,
    }
}

/// The hardware type for Ethernet.
pub const HARDWARE_ETHERNET: u16 = 1;

/// Length of the fixed part (before the addresses).
const FIXED_LEN: usize = 8;
/// Length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = FIXED_LEN + 2 * (6 + 4);

/// A zero-copy view of an ARP packet.
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

    /// Checks that the buffer holds the fixed part and all four addresses at the lengths
    /// the header declares, so no accessor can panic.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < FIXED_LEN || len < self.addresses_end() {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn addresses_end(&self) -> usize {
        FIXED_LEN + 2 * (usize::from(self.hardware_len()) + usize::from(self.protocol_len()))
    }

    /// The hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }

    /// The protocol type, an EtherType.
    pub fn protocol_type(&self) -> EtherType {
        EtherType::from(get_u16(self.buffer.as_ref(), 2))
    }

    /// The length of a hardware address.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    /// The length of a protocol address.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    /// The operation.
    pub fn operation(&self) -> Operation {
        Operation::from(get_u16(self.buffer.as_ref(), 6))
    }

    fn sha_at(&self) -> usize {
        FIXED_LEN
    }
    fn spa_at(&self) -> usize {
        self.sha_at() + usize::from(self.hardware_len())
    }
    fn tha_at(&self) -> usize {
        self.spa_at() + usize::from(self.protocol_len())
    }
    fn tpa_at(&self) -> usize {
        self.tha_at() + usize::from(self.hardware_len())
    }

    /// The sender hardware address.
    pub fn source_hardware_addr(&self) -> &[u8] {
        let at = self.sha_at();
        &self.buffer.as_ref()[at..at + usize::from(self.hardware_len())]
    }

    /// The sender protocol address.
    pub fn source_protocol_addr(&self) -> &[u8] {
        let at = self.spa_at();
        &self.buffer.as_ref()[at..at + usize::from(self.protocol_len())]
    }

    /// The target hardware address.
    pub fn target_hardware_addr(&self) -> &[u8] {
        let at = self.tha_at();
        &self.buffer.as_ref()[at..at + usize::from(self.hardware_len())]
    }

    /// The target protocol address.
    pub fn target_protocol_addr(&self) -> &[u8] {
        let at = self.tpa_at();
        &self.buffer.as_ref()[at..at + usize::from(self.protocol_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 0, value);
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, value: EtherType) {
        set_u16(self.buffer.as_mut(), 2, value.into());
    }

    /// Sets the hardware address length; the address accessors move accordingly.
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[4] = value;
    }

    /// Sets the protocol address length; the address accessors move accordingly.
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[5] = value;
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, value: Operation) {
        set_u16(self.buffer.as_mut(), 6, value.into());
    }

    /// Sets the sender hardware address (`value` must have the declared length).
    pub fn set_source_hardware_addr(&mut self, value: &[u8]) {
        let at = self.sha_at();
        self.buffer.as_mut()[at..at + value.len()].copy_from_slice(value);
    }

    /// Sets the sender protocol address (`value` must have the declared length).
    pub fn set_source_protocol_addr(&mut self, value: &[u8]) {
        let at = self.spa_at();
        self.buffer.as_mut()[at..at + value.len()].copy_from_slice(value);
    }

    /// Sets the target hardware address (`value` must have the declared length).
    pub fn set_target_hardware_addr(&mut self, value: &[u8]) {
        let at = self.tha_at();
        self.buffer.as_mut()[at..at + value.len()].copy_from_slice(value);
    }

    /// Sets the target protocol address (`value` must have the declared length).
    pub fn set_target_protocol_addr(&mut self, value: &[u8]) {
        let at = self.tpa_at();
        self.buffer.as_mut()[at..at + value.len()].copy_from_slice(value);
    }
}

/// The meaning of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request, reply or another operation.
    pub operation: Operation,
    /// Sender hardware address.
    pub source_hardware_addr: EthernetAddress,
    /// Sender IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target hardware address (ignored, usually zero, in requests).
    pub target_hardware_addr: EthernetAddress,
    /// Target IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

fn ipv4_from(bytes: &[u8]) -> Result<Ipv4Addr> {
    let octets: [u8; 4] = bytes.try_into().map_err(|_| WireError::Malformed)?;
    Ok(Ipv4Addr::from(octets))
}

impl Repr {
    /// Reads a checked packet. Anything but Ethernet hardware addresses with IPv4
    /// protocol addresses is [`WireError::Unsupported`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != EtherType::Ipv4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(WireError::Unsupported);
        }
        let mac = |b: &[u8]| EthernetAddress::from_bytes(b).ok_or(WireError::Malformed);
        Ok(Repr {
            operation: packet.operation(),
            source_hardware_addr: mac(packet.source_hardware_addr())?,
            source_protocol_addr: ipv4_from(packet.source_protocol_addr())?,
            target_hardware_addr: mac(packet.target_hardware_addr())?,
            target_protocol_addr: ipv4_from(packet.target_protocol_addr())?,
        })
    }

    /// The packet length `emit` writes (28).
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Same as [`buffer_len`](Self::buffer_len): ARP has no payload.
    pub const fn header_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Writes the packet into `packet` (at least [`buffer_len`](Self::buffer_len) bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_hardware_type(HARDWARE_ETHERNET);
        packet.set_protocol_type(EtherType::Ipv4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(&self.source_hardware_addr.0);
        packet.set_source_protocol_addr(&self.source_protocol_addr.octets());
        packet.set_target_hardware_addr(&self.target_hardware_addr.0);
        packet.set_target_protocol_addr(&self.target_protocol_addr.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;

    /// Who has 10.0.2.2? Tell 10.0.2.15 (52:54:00:12:34:56).
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // fixed
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 10, 0, 2, 15, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 2, 2, // target
    ];

    fn request_repr() -> Repr {
        Repr {
            operation: Operation::Request,
            source_hardware_addr: EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            source_protocol_addr: Ipv4Addr::new(10, 0, 2, 15),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Addr::new(10, 0, 2, 2),
        }
    }

    #[test]
    fn view_fields() {
        let p = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), EtherType::Ipv4);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), Operation::Request);
        assert_eq!(p.source_protocol_addr(), &[10, 0, 2, 15]);
        assert_eq!(p.target_protocol_addr(), &[10, 0, 2, 2]);
        assert_eq!(p.target_hardware_addr(), &[0; 6]);
    }

    #[test]
    fn parse_and_emit() {
        let p = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(request_repr()));
        let mut out = [0u8; 28];
        request_repr().emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn truncated_at_every_length() {
        for len in 0..REQUEST.len() {
            assert_eq!(
                Packet::new_checked(&REQUEST[..len]).err(),
                Some(WireError::Truncated),
                "len {len}"
            );
        }
    }

    #[test]
    fn declared_lengths_bound_the_addresses() {
        // Claim 255-byte hardware addresses: must be truncated, not a panic.
        let mut bytes = REQUEST;
        bytes[4] = 255;
        assert_eq!(
            Packet::new_checked(&bytes[..]).err(),
            Some(WireError::Truncated)
        );
        // Zero-length addresses are a valid (if odd) ARP packet, but not ours.
        bytes[4] = 0;
        bytes[5] = 0;
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.source_hardware_addr(), &[] as &[u8]);
        assert_eq!(Repr::parse(&p), Err(WireError::Unsupported));
    }

    #[test]
    fn other_hardware_is_unsupported() {
        for (at, value) in [(1, 6u8), (2, 0x86), (4, 8), (5, 16)] {
            let mut bytes = [0u8; 64];
            bytes[..28].copy_from_slice(&REQUEST);
            bytes[at] = value;
            let p = Packet::new_checked(&bytes[..]).unwrap();
            assert_eq!(Repr::parse(&p), Err(WireError::Unsupported), "byte {at}");
        }
    }

    fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<u16>(),
            any::<[u8; 6]>(),
            any::<u32>(),
            any::<[u8; 6]>(),
            any::<u32>(),
        )
            .prop_map(|(op, sha, spa, tha, tpa)| Repr {
                operation: Operation::from(op),
                source_hardware_addr: EthernetAddress(sha),
                source_protocol_addr: Ipv4Addr::from(spa),
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: Ipv4Addr::from(tpa),
            })
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in arb_repr()) {
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p), Ok(repr));
        }

        #[test]
        fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Small address lengths, so the checks pass often.
            let mut bytes = bytes;
            if bytes.len() >= 6 {
                bytes[4] %= 9;
                bytes[5] %= 9;
            }
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.hardware_type(), p.protocol_type(), p.operation());
                let _ = (p.source_hardware_addr(), p.source_protocol_addr());
                let _ = (p.target_hardware_addr(), p.target_protocol_addr());
                let _ = Repr::parse(&p);
            }
        }
    }
}
