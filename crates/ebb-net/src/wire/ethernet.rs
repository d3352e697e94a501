//! Ethernet II frames: destination, source, EtherType, payload (no VLAN tags, no FCS —
//! devices strip and check the frame check sequence).

use core::fmt;

use super::bytes::{get_u16, set_u16};
use super::{Result, WireError, wire_enum};

/// A 48-bit Ethernet (MAC) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address, `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Reads an address from the first six bytes of `bytes`; `None` if there are fewer.
    pub fn from_bytes(bytes: &[u8]) -> Option<EthernetAddress> {
        bytes.get(..6)?.try_into().ok().map(EthernetAddress)
    }

    /// The six bytes, in transmission order.
    pub fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether this is a group address (the I/G bit, broadcast included).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is an individual (unicast) address.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Whether this address is locally administered (the U/L bit).
    pub fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

wire_enum! {
    /// The EtherType: which protocol the payload holds.
    pub enum EtherType(u16) {
        /// IPv4.
        Ipv4 = 0x0800,
        /// ARP.
        Arp = 0x0806,
        /// IPv6.
        Ipv6 = 0x86dd,
    }
}

/// The header length of an Ethernet II frame.
pub const HEADER_LEN: usize = 14;

/// Smallest EtherType value; below it the field is an IEEE 802.3 length.
const MIN_ETHERTYPE: u16 = 0x0600;

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps `buffer` after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds a whole header, so no accessor can panic.
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

    /// The header length (always [`HEADER_LEN`]).
    pub const fn header_len() -> usize {
        HEADER_LEN
    }

    /// The destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress(self.buffer.as_ref()[0..6].try_into().unwrap_or([0; 6]))
    }

    /// The source address.
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress(self.buffer.as_ref()[6..12].try_into().unwrap_or([0; 6]))
    }

    /// The EtherType field.
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(get_u16(self.buffer.as_ref(), 12))
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[0..6].copy_from_slice(&addr.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[6..12].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType field.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        set_u16(self.buffer.as_mut(), 12, ethertype.into());
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The meaning of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: EthernetAddress,
    /// Destination address.
    pub dst_addr: EthernetAddress,
    /// Payload protocol.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the header of a checked frame. An EtherType below `0x0600` is an IEEE 802.3
    /// length field, not Ethernet II: [`WireError::Unsupported`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr> {
        frame.check_len()?;
        let ethertype = frame.ethertype();
        if u16::from(ethertype) < MIN_ETHERTYPE {
            return Err(WireError::Unsupported);
        }
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype,
        })
    }

    /// The header length `emit` writes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// The frame length for a payload of `payload_len` bytes.
    pub const fn buffer_len(&self, payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// Writes the header into `frame` (at least [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut Frame<&mut T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use proptest::prelude::*;
    use std::vec;

    /// Broadcast ARP request frame header, followed by four payload bytes.
    const FRAME: [u8; 18] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
        0x08, 0x06, // ARP
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn view_fields() {
        let frame = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), EthernetAddress::BROADCAST);
        assert_eq!(
            frame.src_addr(),
            EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
        );
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert_eq!(frame.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(Frame::<&[u8]>::header_len(), 14);
    }

    #[test]
    fn parse_emit_round_trip() {
        let frame = Frame::new_checked(&FRAME[..]).unwrap();
        let repr = Repr::parse(&frame).unwrap();
        assert_eq!(repr.ethertype, EtherType::Arp);
        let mut out = vec![0u8; repr.buffer_len(4)];
        let mut f = Frame::new_unchecked(&mut out[..]);
        repr.emit(&mut f);
        f.payload_mut().copy_from_slice(&FRAME[14..]);
        assert_eq!(&out[..], &FRAME[..]);
    }

    #[test]
    fn truncated_at_every_length() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Frame::new_checked(&FRAME[..len]).err(),
                Some(WireError::Truncated)
            );
        }
        assert!(Frame::new_checked(&FRAME[..HEADER_LEN]).is_ok());
    }

    #[test]
    fn ieee_802_3_length_is_unsupported() {
        let mut bytes = FRAME;
        bytes[12] = 0x05;
        bytes[13] = 0xdc; // 1500: a length, not a type
        let frame = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(Repr::parse(&frame), Err(WireError::Unsupported));
    }

    #[test]
    fn address_properties() {
        let a = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
        assert!(a.is_unicast() && a.is_local() && !a.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        assert!(EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]).is_multicast());
        assert_eq!(a.to_string(), "02:00:00:00:00:01");
        assert_eq!(EthernetAddress::from_bytes(&[1, 2, 3, 4, 5]), None);
        assert_eq!(
            EthernetAddress::from_bytes(&[1, 2, 3, 4, 5, 6, 7]),
            Some(EthernetAddress([1, 2, 3, 4, 5, 6]))
        );
        assert_eq!(a.as_bytes(), &[0x02, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn ethertype_conversions() {
        assert_eq!(EtherType::from(0x0800), EtherType::Ipv4);
        assert_eq!(EtherType::from(0x86dd), EtherType::Ipv6);
        assert_eq!(EtherType::from(0x1234), EtherType::Unknown(0x1234));
        assert_eq!(u16::from(EtherType::Unknown(0x1234)), 0x1234);
        assert_eq!(u16::from(EtherType::Arp), 0x0806);
    }

    fn arb_repr() -> impl Strategy<Value = Repr> {
        (any::<[u8; 6]>(), any::<[u8; 6]>(), 0x0600u16..=0xffff).prop_map(|(s, d, t)| Repr {
            src_addr: EthernetAddress(s),
            dst_addr: EthernetAddress(d),
            ethertype: EtherType::from(t),
        })
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in arb_repr(), payload_len in 0usize..64) {
            let mut buf = vec![0u8; repr.buffer_len(payload_len)];
            repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
            let frame = Frame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&frame), Ok(repr));
            prop_assert_eq!(frame.payload().len(), payload_len);
        }

        #[test]
        fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(frame) = Frame::new_checked(&bytes[..]) {
                let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype(), frame.payload());
                let _ = Repr::parse(&frame);
            }
        }
    }
}
