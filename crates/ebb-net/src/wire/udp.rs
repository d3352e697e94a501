//! UDP (RFC 768) over IPv4, with the pseudo-header checksum. A zero checksum means
//! "none" over IPv4 and is accepted; a computed checksum of zero is sent as `0xffff`.

use core::net::Ipv4Addr;

use super::bytes::{get_u16, set_u16};
use super::checksum::{self, ChecksumCapabilities};
use super::ipv4::Protocol;
use super::{Result, WireError};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A zero-copy view of a UDP datagram (the IP payload).
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

    /// Checks that the buffer holds the header, that the length field is at least 8 and
    /// within the buffer; then no accessor can panic.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let field = usize::from(self.len());
        super::check_declared_len(field, HEADER_LEN, len)?;
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    /// The length field: header plus payload.
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum as stored.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// Whether the checksum is correct for the given addresses (or absent: zero).
    pub fn verify_checksum(&self, src_addr: Ipv4Addr, dst_addr: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let sum = checksum::combine(&[
            checksum::pseudo_header(src_addr, dst_addr, Protocol::Udp.into(), len),
            checksum::data(data),
        ]);
        sum == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 0, value);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 2, value);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 4, value);
    }

    /// Sets the stored checksum.
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 6, value);
    }

    /// Computes and stores the checksum over the header and the payload up to the length
    /// field (which must be set).
    pub fn fill_checksum(&mut self, src_addr: Ipv4Addr, dst_addr: Ipv4Addr) {
        self.set_checksum(0);
        let len = self.len();
        let sum = checksum::combine(&[
            checksum::pseudo_header(src_addr, dst_addr, Protocol::Udp.into(), len),
            checksum::data(&self.buffer.as_ref()[..usize::from(len)]),
        ]);
        // Zero on the wire means "no checksum"; its one's-complement twin is 0xffff.
        let value = match !sum {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(value);
    }

    /// The payload up to the length field, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// The payload.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Reads a checked datagram sent from `src_addr` to `dst_addr`, verifying a non-zero
    /// checksum if `caps.udp` says to. Port zero as destination is
    /// [`WireError::Malformed`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        caps: &ChecksumCapabilities,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if packet.dst_port() == 0 {
            return Err(WireError::Malformed);
        }
        if caps.udp.software_verifies() && !packet.verify_checksum(src_addr, dst_addr) {
            return Err(WireError::BadChecksum);
        }
        let end = usize::from(packet.len());
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload: &packet.buffer.as_ref()[HEADER_LEN..end],
        })
    }

    /// The header length `emit` writes (8).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload (must not exceed 65535).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Writes the datagram into `packet` (at least [`buffer_len`](Self::buffer_len)
    /// bytes). Fills the checksum if `caps.udp` says to, and writes zero otherwise.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        caps: &ChecksumCapabilities,
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(self.buffer_len()).unwrap_or(u16::MAX));
        packet.payload_mut().copy_from_slice(self.payload);
        if caps.udp.software_fills() {
            packet.fill_checksum(src_addr, dst_addr);
        } else if caps.udp.software_leaves_partial() {
            let len = u16::try_from(self.buffer_len()).unwrap_or(u16::MAX);
            packet.set_checksum(super::checksum::pseudo_header(
                src_addr,
                dst_addr,
                super::IpProtocol::Udp.into(),
                len,
            ));
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

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);

    /// The start of a DNS query from 192.168.1.10:53000 to 192.168.1.1:53, with its
    /// checksum (0x006f, computed independently by hand).
    const DATAGRAM: [u8; 12] = [
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x6f, 0xab, 0xcd, 0x01, 0x00,
    ];

    #[test]
    fn known_checksum() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert!(p.verify_checksum(SRC, DST));
        let mut b = DATAGRAM;
        let mut q = Packet::new_unchecked(&mut b[..]);
        q.fill_checksum(SRC, DST);
        assert_eq!(q.checksum(), 0x006f);
    }

    #[test]
    fn view_parse_emit() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53000, 53, 12));
        assert!(!p.is_empty());
        assert_eq!(p.payload(), &[0xab, 0xcd, 0x01, 0x00]);
        let caps = ChecksumCapabilities::default();
        let repr = Repr::parse(&p, SRC, DST, &caps).unwrap();
        assert_eq!(
            repr,
            Repr {
                src_port: 53000,
                dst_port: 53,
                payload: &[0xab, 0xcd, 0x01, 0x00]
            }
        );
        let mut out = [0u8; 12];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), SRC, DST, &caps);
        assert_eq!(out, DATAGRAM);
    }

    #[test]
    fn errors() {
        let caps = ChecksumCapabilities::default();
        for len in 0..DATAGRAM.len() {
            assert_eq!(
                Packet::new_checked(&DATAGRAM[..len]).err(),
                Some(WireError::Truncated)
            );
        }
        for field in 0..8u8 {
            let mut b = DATAGRAM;
            b[5] = field;
            assert_eq!(
                Packet::new_checked(&b[..]).err(),
                Some(WireError::Malformed)
            );
        }
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, SRC, Ipv4Addr::new(192, 168, 1, 2), &caps),
            Err(WireError::BadChecksum)
        );
        let mut b = DATAGRAM;
        b[2] = 0;
        b[3] = 0;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, SRC, DST, &ChecksumCapabilities::ALL),
            Err(WireError::Malformed)
        );
    }

    #[test]
    fn zero_checksum_and_padding() {
        let caps = ChecksumCapabilities::default();
        let mut b = [0u8; 20];
        b[..12].copy_from_slice(&DATAGRAM);
        b[6] = 0;
        b[7] = 0; // no checksum
        let p = Packet::new_checked(&b[..]).unwrap();
        let repr = Repr::parse(&p, SRC, DST, &caps).unwrap();
        assert_eq!(repr.payload.len(), 4); // bytes past the length field are ignored
        // Emitting without software checksums writes zero.
        let mut out = [0xffu8; 12];
        repr.emit(
            &mut Packet::new_unchecked(&mut out[..]),
            SRC,
            DST,
            &ChecksumCapabilities::ALL,
        );
        assert_eq!(&out[6..8], &[0, 0]);
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose a payload word that makes the sum 0xffff, i.e. checksum zero.
        let mut b = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_len(10);
        let partial = checksum::combine(&[
            checksum::pseudo_header(SRC, DST, 17, 10),
            checksum::data(&b[..8]),
        ]);
        b[8..10].copy_from_slice(&(!partial).to_be_bytes());
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum(SRC, DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(SRC, DST));
    }

    proptest! {
        #[test]
        fn repr_round_trip(
            src_port in any::<u16>(),
            dst_port in 1u16..,
            payload in proptest::collection::vec(any::<u8>(), 0..100),
            src in any::<u32>(),
            dst in any::<u32>(),
        ) {
            let (src, dst) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            let caps = ChecksumCapabilities::default();
            let repr = Repr { src_port, dst_port, payload: &payload };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &caps);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, src, dst, &caps), Ok(repr));
        }

        #[test]
        fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut bytes = bytes;
            if bytes.len() >= 8 {
                bytes[4] = 0;
                bytes[5] %= bytes.len() as u8 + 1;
            }
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.src_port(), p.dst_port(), p.len(), p.is_empty(), p.checksum());
                let _ = (p.payload(), p.verify_checksum(SRC, DST));
                let _ = Repr::parse(&p, SRC, DST, &ChecksumCapabilities::default());
            }
        }
    }
}
