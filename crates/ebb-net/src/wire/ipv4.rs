//! IPv4 (RFC 791). Options are bounded by the header length (at most 40 bytes) and
//! skipped; fragments are recognisable ([`Packet::is_fragment`]) and refused by
//! [`Repr::parse`], so the stack can drop and count them.

use core::net::Ipv4Addr;

use super::bytes::{get_ipv4, get_u16, set_ipv4, set_u16};
use super::checksum::{self, ChecksumCapabilities};
use super::{Result, WireError, wire_enum};

wire_enum! {
    /// The IP protocol number of the payload.
    pub enum Protocol(u8) {
        /// ICMP.
        Icmp = 1,
        /// TCP.
        Tcp = 6,
        /// UDP.
        Udp = 17,
    }
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A zero-copy view of an IPv4 packet.
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

    /// Checks that the buffer holds the fixed header, that the header length is at least
    /// 20 and within the buffer, and that the total length covers the header and is
    /// within the buffer; then no accessor can panic. Bytes past the total length (link
    /// padding) are allowed and ignored by [`payload`](Self::payload).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let header_len = usize::from(self.header_len());
        super::check_declared_len(header_len, HEADER_LEN, len)?;
        let total_len = usize::from(self.total_len());
        super::check_declared_len(total_len, header_len, len)?;
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The header length in bytes (IHL × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// The differentiated services code point.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[1] >> 2
    }

    /// The explicit congestion notification bits.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x03
    }

    /// The total length: header plus payload.
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    /// The identification field.
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        get_u16(self.buffer.as_ref(), 6) & FLAG_DF != 0
    }

    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), 6) & FLAG_MF != 0
    }

    /// The fragment offset, in bytes.
    pub fn frag_offset(&self) -> u16 {
        (get_u16(self.buffer.as_ref(), 6) & OFFSET_MASK) << 3
    }

    /// Whether this packet is a fragment (more to come, or not the first piece).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// The time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    /// The protocol of the payload.
    pub fn protocol(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[9])
    }

    /// The header checksum as stored.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 10)
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 12)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        get_ipv4(self.buffer.as_ref(), 16)
    }

    /// The options area (0–40 bytes), uninterpreted.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }

    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..usize::from(self.header_len())]) == 0xffff
    }

    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        &self.buffer.as_ref()[range]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version field.
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Sets the header length in bytes (rounded down to a multiple of 4, at most 60).
    pub fn set_header_len(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0xf0) | ((value / 4) & 0x0f);
    }

    /// Sets the differentiated services code point.
    pub fn set_dscp(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & 0x03) | (value << 2);
    }

    /// Sets the explicit congestion notification bits.
    pub fn set_ecn(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & 0xfc) | (value & 0x03);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 2, value);
    }

    /// Sets the identification field.
    pub fn set_ident(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 4, value);
    }

    fn update_flags(&mut self, mask: u16, value: u16) {
        let old = get_u16(self.buffer.as_ref(), 6);
        set_u16(self.buffer.as_mut(), 6, (old & !mask) | (value & mask));
    }

    /// Clears the flags and the fragment offset.
    pub fn clear_flags(&mut self) {
        set_u16(self.buffer.as_mut(), 6, 0);
    }

    /// Sets or clears the don't-fragment flag.
    pub fn set_dont_frag(&mut self, value: bool) {
        self.update_flags(FLAG_DF, if value { FLAG_DF } else { 0 });
    }

    /// Sets or clears the more-fragments flag.
    pub fn set_more_frags(&mut self, value: bool) {
        self.update_flags(FLAG_MF, if value { FLAG_MF } else { 0 });
    }

    /// Sets the fragment offset in bytes (rounded down to a multiple of 8).
    pub fn set_frag_offset(&mut self, value: u16) {
        self.update_flags(OFFSET_MASK, value >> 3);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[8] = value;
    }

    /// Sets the payload protocol.
    pub fn set_protocol(&mut self, value: Protocol) {
        self.buffer.as_mut()[9] = value.into();
    }

    /// Sets the stored header checksum.
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 10, value);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 12, value);
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, value: Ipv4Addr) {
        set_ipv4(self.buffer.as_mut(), 16, value);
    }

    /// Computes and stores the header checksum (the header length must be set).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(&self.buffer.as_ref()[..usize::from(self.header_len())]);
        self.set_checksum(!sum);
    }

    /// The payload, writable (header length and total length must be set).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = usize::from(self.header_len())..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// The meaning of an IPv4 header. Emitted headers carry no options and DSCP/ECN zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: Protocol,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// Identification (only meaningful for fragmentation; any value otherwise).
    pub ident: u16,
    /// Don't fragment.
    pub dont_frag: bool,
}

impl Repr {
    /// Reads a checked packet: version must be 4 ([`WireError::Malformed`]), the
    /// checksum must match if `caps.ipv4` says to verify ([`WireError::BadChecksum`]),
    /// and fragments are [`WireError::Unsupported`]. Options are skipped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        caps: &ChecksumCapabilities,
    ) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(WireError::Malformed);
        }
        if caps.ipv4.software_verifies() && !packet.verify_checksum() {
            return Err(WireError::BadChecksum);
        }
        if packet.is_fragment() {
            return Err(WireError::Unsupported);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - usize::from(packet.header_len()),
            ttl: packet.ttl(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// The header length `emit` writes (20).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload. `payload_len` must not exceed `65535 - 20`.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header into `packet` (at least [`header_len`](Self::header_len) bytes;
    /// the payload goes in `payload_mut()` afterwards, which needs
    /// [`buffer_len`](Self::buffer_len)). Fills the checksum if `caps.ipv4` says to, and
    /// writes zero otherwise.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        caps: &ChecksumCapabilities,
    ) {
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN as u8);
        packet.set_dscp(0);
        packet.set_ecn(0);
        let total = u16::try_from(self.buffer_len()).unwrap_or(u16::MAX);
        packet.set_total_len(total);
        packet.set_ident(self.ident);
        packet.clear_flags();
        packet.set_dont_frag(self.dont_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        if caps.ipv4.software_fills() {
            packet.fill_checksum();
        } else {
            packet.set_checksum(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// UDP datagram from 10.0.2.15 to 10.0.2.3 (DNS), DF set, 4-byte payload.
    const PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x00,
        0x00, // checksum filled below
        10, 0, 2, 15, 10, 0, 2, 3, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn packet_bytes() -> [u8; 24] {
        let mut b = PACKET;
        let c = !checksum::data(&b[..20]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        b
    }

    fn packet_repr() -> Repr {
        Repr {
            src_addr: Ipv4Addr::new(10, 0, 2, 15),
            dst_addr: Ipv4Addr::new(10, 0, 2, 3),
            protocol: Protocol::Udp,
            payload_len: 4,
            ttl: 64,
            ident: 0x1c46,
            dont_frag: true,
        }
    }

    #[test]
    fn known_checksum() {
        // A captured header: 172.16.10.99 -> 172.16.10.12, checksum 0xb1e6.
        let header = [
            0x45, 0x00, 0x00, 0x3c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x06, 0xb1, 0xe6, 0xac, 0x10,
            0x0a, 0x63, 0xac, 0x10, 0x0a, 0x0c,
        ];
        let mut bytes = vec![0u8; 0x3c];
        bytes[..20].copy_from_slice(&header);
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert!(p.verify_checksum());
        let mut copy = bytes.clone();
        let mut q = Packet::new_unchecked(&mut copy[..]);
        q.fill_checksum();
        assert_eq!(q.checksum(), 0xb1e6);
    }

    #[test]
    fn view_fields() {
        let bytes = packet_bytes();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.dscp(), p.ecn()), (0, 0));
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), Protocol::Udp);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 2, 15));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 2, 3));
        assert!(p.options().is_empty());
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn parse_emit_round_trip() {
        let bytes = packet_bytes();
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let caps = ChecksumCapabilities::default();
        assert_eq!(Repr::parse(&p, &caps), Ok(packet_repr()));
        let mut out = [0u8; 24];
        let mut q = Packet::new_unchecked(&mut out[..]);
        packet_repr().emit(&mut q, &caps);
        q.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(out, bytes);
    }

    #[test]
    fn options_are_skipped() {
        // IHL 6: one 4-byte option (router alert), payload still found.
        let mut bytes = vec![0x46, 0, 0, 28, 0, 0, 0, 0, 64, 6, 0, 0];
        bytes.extend_from_slice(&[1, 1, 1, 1, 2, 2, 2, 2]);
        bytes.extend_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        bytes.extend_from_slice(&[9, 8, 7, 6]);
        let c = !checksum::data(&bytes[..24]);
        bytes[10..12].copy_from_slice(&c.to_be_bytes());
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.options(), &[0x94, 0x04, 0, 0]);
        assert_eq!(p.payload(), &[9, 8, 7, 6]);
        let repr = Repr::parse(&p, &ChecksumCapabilities::default()).unwrap();
        assert_eq!(repr.payload_len, 4);
        assert_eq!(repr.protocol, Protocol::Tcp);
    }

    #[test]
    fn link_padding_is_ignored() {
        let mut bytes = Vec::from(packet_bytes());
        bytes.extend_from_slice(&[0; 22]); // padded to the Ethernet minimum
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn length_errors() {
        let bytes = packet_bytes();
        for len in 0..bytes.len() {
            assert_eq!(
                Packet::new_checked(&bytes[..len]).err(),
                Some(WireError::Truncated),
                "len {len}"
            );
        }
        // Header length below 20.
        for ihl in 0..5 {
            let mut b = bytes;
            b[0] = 0x40 | ihl;
            assert_eq!(
                Packet::new_checked(&b[..]).err(),
                Some(WireError::Malformed)
            );
        }
        // Header length past the buffer.
        let mut b = bytes;
        b[0] = 0x4f;
        assert_eq!(
            Packet::new_checked(&b[..]).err(),
            Some(WireError::Truncated)
        );
        // Total length below the header length.
        let mut b = bytes;
        b[3] = 19;
        assert_eq!(
            Packet::new_checked(&b[..]).err(),
            Some(WireError::Malformed)
        );
        // Total length past the buffer.
        let mut b = bytes;
        b[3] = 25;
        assert_eq!(
            Packet::new_checked(&b[..]).err(),
            Some(WireError::Truncated)
        );
    }

    #[test]
    fn semantic_errors() {
        let caps = ChecksumCapabilities::default();
        let mut b = packet_bytes();
        b[0] = 0x65; // version 6
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p, &caps), Err(WireError::Malformed));

        let mut b = packet_bytes();
        b[8] = 1; // ttl changed, checksum stale
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p, &caps), Err(WireError::BadChecksum));
        // Offloaded receive checksum: accepted.
        assert!(Repr::parse(&p, &ChecksumCapabilities::ALL).is_ok());
    }

    #[test]
    fn fragments_are_identified_and_refused() {
        let caps = ChecksumCapabilities::default();
        let mut b = packet_bytes();
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_more_frags(true);
        p.fill_checksum();
        assert!(p.is_fragment() && p.dont_frag());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap(), &caps),
            Err(WireError::Unsupported)
        );

        let mut b = packet_bytes();
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_dont_frag(false);
        p.set_frag_offset(1480);
        p.fill_checksum();
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment() && !p.more_frags() && !p.dont_frag());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap(), &caps),
            Err(WireError::Unsupported)
        );
    }

    #[test]
    fn setters() {
        let mut b = packet_bytes();
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_dscp(46);
        p.set_ecn(1);
        assert_eq!((p.dscp(), p.ecn()), (46, 1));
        p.set_ecn(2);
        assert_eq!((p.dscp(), p.ecn()), (46, 2));
        p.set_ttl(3);
        p.set_protocol(Protocol::Unknown(99));
        assert_eq!(p.protocol(), Protocol::Unknown(99));
        p.set_ident(7);
        assert_eq!(p.ident(), 7);
        p.set_dont_frag(true);
        p.set_dont_frag(false);
        assert!(!p.dont_frag());
        assert_eq!(p.version(), 4);
        assert_eq!(p.into_inner().len(), 24);
    }

    fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
            0usize..200,
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
        )
            .prop_map(|(s, d, proto, len, ttl, ident, df)| Repr {
                src_addr: Ipv4Addr::from(s),
                dst_addr: Ipv4Addr::from(d),
                protocol: Protocol::from(proto),
                payload_len: len,
                ttl,
                ident,
                dont_frag: df,
            })
    }

    proptest! {
        #[test]
        fn repr_round_trip(repr in arb_repr()) {
            let caps = ChecksumCapabilities::default();
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &caps);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, &caps), Ok(repr));
            prop_assert_eq!(p.payload().len(), repr.payload_len);
        }

        #[test]
        fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            // Bias towards plausible headers so the checks pass often.
            let mut bytes = bytes;
            if bytes.len() >= 4 {
                bytes[0] = 0x40 | (bytes[0] & 0x0f);
                let len = bytes.len() as u16;
                let total = bytes[3] as u16 % (len + 1);
                bytes[2..4].copy_from_slice(&total.to_be_bytes());
            }
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.version(), p.header_len(), p.dscp(), p.ecn(), p.total_len());
                let _ = (p.ident(), p.dont_frag(), p.more_frags(), p.frag_offset());
                let _ = (p.ttl(), p.protocol(), p.checksum(), p.src_addr(), p.dst_addr());
                let _ = (p.options(), p.payload(), p.verify_checksum(), p.is_fragment());
                let _ = Repr::parse(&p, &ChecksumCapabilities::default());
                let _ = Repr::parse(&p, &ChecksumCapabilities::ALL);
            }
        }
    }
}
