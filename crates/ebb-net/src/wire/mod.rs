//! Wire formats: bytes to types and back, with no state and no I/O.
//!
//! Every protocol follows one pattern, in its own file:
//!
//! * A zero-copy **view**, `Packet<T: AsRef<[u8]>>` (`Frame` for Ethernet), over a buffer
//!   owned by someone else. [`new_unchecked`](ethernet::Frame::new_unchecked) wraps any
//!   buffer; `new_checked` (or `check_len` on an existing view) validates the buffer's
//!   length against the header and against every length field the header carries (IPv4
//!   IHL and total length, TCP data offset, UDP length, ARP address lengths). Getters read
//!   fields in network byte order; setters exist when `T: AsMut<[u8]>`; `payload()` and
//!   `payload_mut()` give the bytes after the header.
//! * A **`Repr`**, the high-level meaning of a header: `Repr::parse(&Packet<&T>, …)`
//!   validates semantics (versions, checksums, option encodings) and returns a value;
//!   `Repr::emit(&self, &mut Packet<&mut T>, …)` writes it back. `header_len()` and
//!   `buffer_len()` say how many bytes `emit` needs.
//!
//! ## The no-panic guarantee
//!
//! Once `new_checked`/`check_len` has returned `Ok`, **no getter, `payload()` or
//! `Repr::parse` panics**, whatever the bytes are; every malformed input is a [`WireError`]
//! value. This is tested with property tests over arbitrary bytes and with the fuzz
//! targets in `crates/ebb-net/fuzz`. Views built with `new_unchecked` over a short buffer
//! may panic on access — that constructor is for buffers the caller has sized itself,
//! typically just before `emit`. `emit` requires a buffer of at least `buffer_len()`
//! bytes (it panics otherwise, like slice indexing: a programming error, not input).
//!
//! Checksums are the internet checksum of [`checksum`]; [`ChecksumCapabilities`] says, per
//! protocol, whether software verifies on receive and fills on transmit, or the device
//! offloads it.
//!
//! There is no `unsafe` code in this module.

use core::fmt;

pub mod arp;
pub mod checksum;
pub mod dhcpv4;
pub mod ethernet;
pub mod icmpv4;
pub mod ipv4;
pub mod tcp;
pub mod udp;

pub use arp::{Operation as ArpOperation, Packet as ArpPacket, Repr as ArpRepr};
pub use checksum::{ChecksumCapabilities, ChecksumOffload};
pub use dhcpv4::{MessageType as DhcpMessageType, Packet as DhcpPacket, Repr as DhcpRepr};
pub use ethernet::{EtherType, EthernetAddress, Frame as EthernetFrame, Repr as EthernetRepr};
pub use icmpv4::{Message as Icmpv4Message, Packet as Icmpv4Packet, Repr as Icmpv4Repr};
pub use ipv4::{Packet as Ipv4Packet, Protocol as IpProtocol, Repr as Ipv4Repr};
pub use tcp::{Control as TcpControl, Packet as TcpPacket, Repr as TcpRepr};
pub use tcp::{SeqNumber as TcpSeqNumber, TcpOption};
pub use udp::{Packet as UdpPacket, Repr as UdpRepr};

/// A whole Ethernet frame carrying `tcp` from `src` to `dst` over IPv4 (TTL 64, DF),
/// checksums computed as `caps` says: for frames built by hand (tests, injected
/// segments).
pub fn emit_tcp_frame(
    eth: EthernetRepr,
    src: core::net::Ipv4Addr,
    dst: core::net::Ipv4Addr,
    tcp: &TcpRepr<'_>,
    caps: &ChecksumCapabilities,
) -> alloc::vec::Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        ttl: 64,
        ident: 1,
        dont_frag: true,
    };
    let eth = EthernetRepr {
        ethertype: EtherType::Ipv4,
        ..eth
    };
    let mut frame = alloc::vec![0u8; ethernet::HEADER_LEN + ip.buffer_len()];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    let mut packet = Ipv4Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]);
    ip.emit(&mut packet, caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(packet.payload_mut()),
        src,
        dst,
        caps,
    );
    frame
}

/// Why a buffer could not be read as a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer is shorter than the header, or than a length field says it is.
    Truncated,
    /// A field has a value the format forbids (a header length below the minimum, an
    /// option whose length is zero or runs past its area, a wrong version or cookie).
    Malformed,
    /// The checksum does not match the contents.
    BadChecksum,
    /// Well formed, but not something this stack handles (an ARP for another hardware
    /// type, an IPv4 fragment, an unknown ICMP message).
    Unsupported,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "packet truncated",
            WireError::Malformed => "packet malformed",
            WireError::BadChecksum => "checksum mismatch",
            WireError::Unsupported => "packet not supported",
        })
    }
}

impl core::error::Error for WireError {}

/// Result of parsing wire data.
pub type Result<T> = core::result::Result<T, WireError>;

/// Checks a length that a header declares (a header length, a datagram length): below
/// `min` the header is malformed, beyond the `available` bytes the packet is truncated.
pub(crate) fn check_declared_len(declared: usize, min: usize, available: usize) -> Result<()> {
    if declared < min {
        Err(WireError::Malformed)
    } else if declared > available {
        Err(WireError::Truncated)
    } else {
        Ok(())
    }
}

/// Defines a protocol number enum with named values and an `Unknown(raw)` catch-all,
/// convertible both ways without loss.
macro_rules! wire_enum {
    (
        $(#[$attr:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vattr:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vattr])* $variant, )+
            /// A value with no name here, kept as read.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( v if v == $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// Big-endian field access on slices; callers index only within checked bounds.
pub(crate) mod bytes {
    pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn get_ipv4(b: &[u8], at: usize) -> core::net::Ipv4Addr {
        core::net::Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
    }
    pub(crate) fn set_ipv4(b: &mut [u8], at: usize, a: core::net::Ipv4Addr) {
        b[at..at + 4].copy_from_slice(&a.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn error_display() {
        assert_eq!(WireError::Truncated.to_string(), "packet truncated");
        assert_eq!(WireError::BadChecksum.to_string(), "checksum mismatch");
        let e: &dyn core::error::Error = &WireError::Malformed;
        assert_eq!(e.to_string(), "packet malformed");
        assert_eq!(WireError::Unsupported.to_string(), "packet not supported");
    }
}
