//! ICMPv4 (RFC 792): echo request/reply, destination unreachable and time exceeded.
//!
//! Error messages carry the invoking datagram's IP header and at least its first eight
//! payload bytes; the [`Repr`] keeps those bytes as a slice, which the stack can read
//! with an [`ipv4::Packet`](super::ipv4::Packet) view.

use super::bytes::{get_u16, set_u16};
use super::checksum::{self, ChecksumCapabilities};
use super::{Result, WireError, wire_enum};

wire_enum! {
    /// The ICMP message type.
    pub enum Message(u8) {
        /// Echo reply.
        EchoReply = 0,
        /// Destination unreachable.
        DstUnreachable = 3,
        /// Redirect.
        Redirect = 5,
        /// Echo request.
        EchoRequest = 8,
        /// Router advertisement.
        RouterAdvert = 9,
        /// Router solicitation.
        RouterSolicit = 10,
        /// Time exceeded.
        TimeExceeded = 11,
        /// Parameter problem.
        ParamProblem = 12,
    }
}

wire_enum! {
    /// Codes of a destination-unreachable message.
    pub enum DstUnreachable(u8) {
        /// Network unreachable.
        NetUnreachable = 0,
        /// Host unreachable.
        HostUnreachable = 1,
        /// Protocol unreachable.
        ProtoUnreachable = 2,
        /// Port unreachable.
        PortUnreachable = 3,
        /// Fragmentation needed and DF set; the message carries the next-hop MTU.
        FragRequired = 4,
        /// Source route failed.
        SrcRouteFailed = 5,
        /// Communication administratively prohibited.
        AdminProhibited = 13,
    }
}

wire_enum! {
    /// Codes of a time-exceeded message.
    pub enum TimeExceeded(u8) {
        /// TTL reached zero in transit.
        TtlExpired = 0,
        /// Fragment reassembly timed out.
        FragExpired = 1,
    }
}

/// Length of the ICMP header (type, code, checksum and the 4-byte rest-of-header).
pub const HEADER_LEN: usize = 8;

/// A zero-copy view of an ICMPv4 message (the whole IP payload).
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

    /// Checks that the buffer holds the 8-byte header, so no accessor can panic.
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

    /// The message type.
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[0])
    }

    /// The message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The checksum as stored.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    /// The echo identifier (bytes 4–5 of an echo message).
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// The echo sequence number (bytes 6–7 of an echo message).
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    /// The next-hop MTU of a fragmentation-needed message (bytes 6–7).
    pub fn next_hop_mtu(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 6)
    }

    /// The bytes after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[0] = value.into();
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[1] = value;
    }

    /// Sets the stored checksum.
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 2, value);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 4, value);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 6, value);
    }

    /// Sets the 4-byte rest-of-header to zero and then the next-hop MTU.
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 4, 0);
        set_u16(self.buffer.as_mut(), 6, value);
    }

    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(!sum);
    }

    /// The bytes after the header, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The meaning of an ICMPv4 message this stack handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Repr<'a> {
    /// Echo request (ping).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed back.
        data: &'a [u8],
    },
    /// Echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// The echoed data.
        data: &'a [u8],
    },
    /// Destination unreachable.
    DstUnreachable {
        /// Why.
        reason: DstUnreachable,
        /// Next-hop MTU, for [`DstUnreachable::FragRequired`]; zero otherwise.
        next_hop_mtu: u16,
        /// The invoking datagram's header and first payload bytes.
        data: &'a [u8],
    },
    /// Time exceeded.
    TimeExceeded {
        /// Why.
        reason: TimeExceeded,
        /// The invoking datagram's header and first payload bytes.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Reads a checked message, verifying the checksum if `caps.icmpv4` says to. Echo
    /// messages must have code 0 ([`WireError::Malformed`]); other types are
    /// [`WireError::Unsupported`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        caps: &ChecksumCapabilities,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if caps.icmpv4.software_verifies() && !packet.verify_checksum() {
            return Err(WireError::BadChecksum);
        }
        // Borrow the data for 'a, not for the borrow of `packet`.
        let data = &packet.buffer.as_ref()[HEADER_LEN..];
        let code = packet.msg_code();
        match packet.msg_type() {
            Message::EchoRequest | Message::EchoReply if code != 0 => Err(WireError::Malformed),
            Message::EchoRequest => Ok(Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::EchoReply => Ok(Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::DstUnreachable => {
                let reason = DstUnreachable::from(code);
                Ok(Repr::DstUnreachable {
                    reason,
                    next_hop_mtu: if reason == DstUnreachable::FragRequired {
                        packet.next_hop_mtu()
                    } else {
                        0
                    },
                    data,
                })
            }
            Message::TimeExceeded => Ok(Repr::TimeExceeded {
                reason: TimeExceeded::from(code),
                data,
            }),
            _ => Err(WireError::Unsupported),
        }
    }

    /// The header length `emit` writes (8).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus data.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    fn data(&self) -> &'a [u8] {
        match *self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::TimeExceeded { data, .. } => data,
        }
    }

    /// Writes the message into `packet`, which must be exactly
    /// [`buffer_len`](Self::buffer_len) bytes long since the checksum covers all of it.
    /// Fills the checksum if `caps.icmpv4` says to, and writes zero otherwise.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        caps: &ChecksumCapabilities,
    ) {
        match *self {
            Repr::EchoRequest { ident, seq_no, .. } | Repr::EchoReply { ident, seq_no, .. } => {
                let msg = if matches!(self, Repr::EchoRequest { .. }) {
                    Message::EchoRequest
                } else {
                    Message::EchoReply
                };
                packet.set_msg_type(msg);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
            }
            Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                ..
            } => {
                packet.set_msg_type(Message::DstUnreachable);
                packet.set_msg_code(reason.into());
                packet.set_next_hop_mtu(next_hop_mtu);
            }
            Repr::TimeExceeded { reason, .. } => {
                packet.set_msg_type(Message::TimeExceeded);
                packet.set_msg_code(reason.into());
                packet.set_next_hop_mtu(0);
            }
        }
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        if caps.icmpv4.software_fills() {
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

    /// A Linux ping: echo request, id 0x1234, seq 1, 8 data bytes.
    const ECHO: [u8; 16] = [
        0x08, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, // header (checksum filled below)
        0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    ];

    fn echo_bytes() -> [u8; 16] {
        let mut b = ECHO;
        let c = !checksum::data(&b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
        b
    }

    #[test]
    fn view_and_parse_echo() {
        let b = echo_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 1));
        assert!(p.verify_checksum());
        let repr = Repr::parse(&p, &ChecksumCapabilities::default()).unwrap();
        assert_eq!(
            repr,
            Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcdefgh"
            }
        );
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut Packet::new_unchecked(&mut out[..]),
            &ChecksumCapabilities::default(),
        );
        assert_eq!(out, b);
    }

    #[test]
    fn reply_to_request() {
        let b = echo_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        let Ok(Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }) = Repr::parse(&p, &ChecksumCapabilities::default())
        else {
            panic!("not an echo request")
        };
        let reply = Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let mut out = vec![0u8; reply.buffer_len()];
        reply.emit(
            &mut Packet::new_unchecked(&mut out[..]),
            &ChecksumCapabilities::default(),
        );
        assert_eq!(out[0], 0);
        assert!(Packet::new_checked(&out[..]).unwrap().verify_checksum());
    }

    #[test]
    fn errors() {
        let caps = ChecksumCapabilities::default();
        let b = echo_bytes();
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&b[..len]).err(),
                Some(WireError::Truncated)
            );
        }
        let mut bad = b;
        bad[15] ^= 1;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p, &caps), Err(WireError::BadChecksum));
        assert!(Repr::parse(&p, &ChecksumCapabilities::ALL).is_ok());

        let mut code = ECHO;
        code[1] = 1;
        let p = Packet::new_checked(&code[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, &ChecksumCapabilities::ALL),
            Err(WireError::Malformed)
        );

        let mut redirect = ECHO;
        redirect[0] = 5;
        let p = Packet::new_checked(&redirect[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, &ChecksumCapabilities::ALL),
            Err(WireError::Unsupported)
        );
    }

    #[test]
    fn error_messages() {
        let caps = ChecksumCapabilities::default();
        let invoking = [0x45u8; 28];
        let repr = Repr::DstUnreachable {
            reason: DstUnreachable::FragRequired,
            next_hop_mtu: 1400,
            data: &invoking,
        };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), &caps);
        assert_eq!(&out[..2], &[3, 4]);
        assert_eq!(&out[4..8], &[0, 0, 0x05, 0x78]);
        let p = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Repr::parse(&p, &caps), Ok(repr));

        let repr = Repr::TimeExceeded {
            reason: TimeExceeded::TtlExpired,
            data: &invoking,
        };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), &caps);
        let p = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Repr::parse(&p, &caps), Ok(repr));
        assert_eq!(p.data(), &invoking);
    }

    fn arb_repr(data: &[u8]) -> impl Strategy<Value = Repr<'_>> {
        (
            0u8..4,
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            0..=data.len(),
        )
            .prop_map(move |(kind, a, b, code, len)| {
                let data = &data[..len];
                match kind {
                    0 => Repr::EchoRequest {
                        ident: a,
                        seq_no: b,
                        data,
                    },
                    1 => Repr::EchoReply {
                        ident: a,
                        seq_no: b,
                        data,
                    },
                    2 => {
                        let reason = DstUnreachable::from(code);
                        let mtu = if reason == DstUnreachable::FragRequired {
                            a
                        } else {
                            0
                        };
                        Repr::DstUnreachable {
                            reason,
                            next_hop_mtu: mtu,
                            data,
                        }
                    }
                    _ => Repr::TimeExceeded {
                        reason: TimeExceeded::from(code),
                        data,
                    },
                }
            })
    }

    const DATA: [u8; 40] = [0x5a; 40];

    proptest! {
        #[test]
        fn repr_round_trip(repr in arb_repr(&DATA)) {
            let caps = ChecksumCapabilities::default();
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &caps);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, &caps), Ok(repr));
        }

        #[test]
        fn checked_view_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident());
                let _ = (p.echo_seq_no(), p.next_hop_mtu(), p.data(), p.verify_checksum());
                let _ = Repr::parse(&p, &ChecksumCapabilities::default());
                let _ = Repr::parse(&p, &ChecksumCapabilities::ALL);
            }
        }
    }
}
