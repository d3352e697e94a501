//! Checksum duties: per protocol, what software does with a checksum (verify on receive,
//! fill on transmit, or leave a partial one for the device).
//!
//! The internet checksum itself (RFC 1071) is the device layer's
//! ([`ebb_net_driver::checksum`]), re-exported here for the parsers: [`data`] computes the
//! folded sum (not yet complemented) of a slice; sums of pieces [`combine`] into the sum
//! of their concatenation (each piece but the last must have even length);
//! [`pseudo_header`] is the IPv4 pseudo-header sum that TCP and UDP include. The value
//! written into a header is `!sum`. A buffer whose stored checksum is correct sums to
//! `0xffff`.

pub use ebb_net_driver::checksum::{combine, data, pseudo_header};

/// Who handles a protocol's checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Checksum {
    /// Software verifies it on receive and fills it on transmit.
    #[default]
    Both,
    /// Software verifies on receive only; the device fills it on transmit.
    Rx,
    /// Software fills on transmit only; the device has verified it on receive.
    Tx,
    /// The device does both (full offload); software neither verifies nor fills.
    None,
    /// Software verifies on receive (unless the device marked the frame verified, see
    /// [`ebb_net_driver::FrameChecksum`]); on transmit it writes only the pseudo-header sum
    /// into the checksum field and the device completes the checksum over the segment
    /// (virtio's `NEEDS_CSUM`, Linux's `CHECKSUM_PARTIAL`). TCP and UDP only.
    Partial,
}

impl Checksum {
    /// Whether software must verify received checksums.
    pub fn rx(self) -> bool {
        matches!(self, Checksum::Both | Checksum::Rx | Checksum::Partial)
    }

    /// Whether software must fill transmitted checksums.
    pub fn tx(self) -> bool {
        matches!(self, Checksum::Both | Checksum::Tx)
    }

    /// Whether software writes only the pseudo-header sum, for the device to complete.
    pub fn partial(self) -> bool {
        matches!(self, Checksum::Partial)
    }
}

/// Per-protocol checksum duties, usually from the device's offload features. The default
/// is software for everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ChecksumCapabilities {
    /// The IPv4 header checksum.
    pub ipv4: Checksum,
    /// ICMPv4 message checksums.
    pub icmpv4: Checksum,
    /// UDP checksums.
    pub udp: Checksum,
    /// TCP checksums.
    pub tcp: Checksum,
}

impl ChecksumCapabilities {
    /// Software neither verifies nor fills any checksum: a device that offloads them all,
    /// or a test or fuzzer that wants to reach past checksums.
    pub fn ignored() -> Self {
        ChecksumCapabilities {
            ipv4: Checksum::None,
            icmpv4: Checksum::None,
            udp: Checksum::None,
            tcp: Checksum::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities() {
        assert!(Checksum::Both.rx() && Checksum::Both.tx());
        assert!(Checksum::Rx.rx() && !Checksum::Rx.tx());
        assert!(!Checksum::Tx.rx() && Checksum::Tx.tx());
        assert!(!Checksum::None.rx() && !Checksum::None.tx());
        assert!(Checksum::Partial.rx() && !Checksum::Partial.tx() && Checksum::Partial.partial());
        assert_eq!(ChecksumCapabilities::default().tcp, Checksum::Both);
        assert_eq!(ChecksumCapabilities::ignored().udp, Checksum::None);
    }
}
