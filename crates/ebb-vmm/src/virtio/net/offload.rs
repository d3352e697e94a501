//! Offload validation: what the device offers ([`Offload`]) and what a transmit header
//! may ask of it — checked before anything is written — and the headers the device
//! writes toward the backend and the guest (see the parent module's "Checksum offload"
//! and "Segmentation offload").

use super::NetStats;
use crate::virtio::queue::{GsoFault, QueueError};
use ebb_abi::virtio::{
    NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM, NET_HDR_GSO_NONE, NET_HDR_GSO_TCPV4, NET_HDR_LEN,
    NetHdr,
};
use ebb_net_driver::{FrameChecksum, Segmentation};
use std::sync::atomic::Ordering;

/// The offloads a device offers, as far as its backend can honour them (see the module
/// docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offload {
    /// CSUM and GUEST_CSUM: the backend takes and gives per-frame checksum state (a TAP
    /// with a virtio-net header).
    pub checksum: bool,
    /// HOST_TSO4 (segmentation on transmit): the backend cuts TCPv4 frames of up to
    /// 64 KiB into segments itself — only a direct backend with a virtio-net header,
    /// which hands the request on (a TAP without `--net-faults`). Offered only together
    /// with `checksum`, which the spec makes it depend on.
    pub tso4: bool,
    /// GUEST_TSO4 (large receive): the backend can hand over TCPv4 frames of up to 64 KiB
    /// behind a GSO header ([`HostLink::set_large_receive`](crate::virtio::HostLink::set_large_receive)), which the direct path passes
    /// to the guest as it is — again only a TAP without `--net-faults`. Offered only
    /// together with `checksum` (GUEST_TSO4 depends on GUEST_CSUM).
    pub guest_tso4: bool,
}

impl Offload {
    /// No offload: every frame complete and at most an MTU long.
    pub const NONE: Offload = Offload {
        checksum: false,
        tso4: false,
        guest_tso4: false,
    };
    /// Checksum offload only.
    pub const CHECKSUM: Offload = Offload {
        checksum: true,
        tso4: false,
        guest_tso4: false,
    };
    /// Checksum offload and TCPv4 segmentation both ways: what a direct TAP backend with
    /// a virtio-net header gets.
    pub const CHECKSUM_AND_TSO4: Offload = Offload {
        checksum: true,
        tso4: true,
        guest_tso4: true,
    };
}

/// Largest transmit chain, header included, without segmentation offload: a frame is
/// then at most the MTU and an Ethernet header; this is generous.
const TX_CHAIN_MAX: u64 = 65_536;
/// Largest transmit chain with HOST_TSO4: the header, an Ethernet header and the largest
/// IPv4 packet (its 16-bit total length), which the backend cuts into segments.
const TX_CHAIN_MAX_TSO4: u64 = (NET_HDR_LEN + 14 + 65_535) as u64;

/// What the driver negotiated that bears on one transmit path: what its headers may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TxOffload {
    /// CSUM: `NEEDS_CSUM` is allowed.
    pub(super) csum: bool,
    /// HOST_TSO4, on a path whose backend is handed the request: TCPv4 GSO requests and
    /// frames up to [`TX_CHAIN_MAX_TSO4`] are allowed.
    pub(super) tso4: bool,
}

impl TxOffload {
    /// The most bytes a transmit chain may hold.
    pub(super) fn chain_max(self) -> u64 {
        if self.tso4 {
            TX_CHAIN_MAX_TSO4
        } else {
            TX_CHAIN_MAX
        }
    }
}

/// The virtio-net header a backend is handed with a frame the guest sent with
/// `request` (validated by [`tx_request`]): `NEEDS_CSUM` and its two offsets, the GSO
/// type and sizes — nothing else of the guest's header goes through.
pub(super) fn backend_header(request: TxRequest) -> NetHdr {
    let header = match request.checksum {
        FrameChecksum::Partial { start, offset } => NetHdr::needs_csum(start, offset),
        FrameChecksum::Complete | FrameChecksum::Verified => NetHdr::PLAIN,
    };
    match request.gso {
        Some(Tcpv4Gso { hdr_len, gso_size }) => header.with_tcpv4_gso(hdr_len, gso_size),
        None => header,
    }
}

/// The virtio-net header in front of a frame to the guest in `checksum` state (one
/// buffer per frame: no MRG_RXBUF), with `GSO_TCPV4` and `gso`'s sizes for a frame
/// longer than the MTU (large receive).
pub(super) fn guest_header(checksum: FrameChecksum, gso: Option<Segmentation>) -> NetHdr {
    let header = match checksum {
        FrameChecksum::Partial { start, offset } => NetHdr::needs_csum(start, offset),
        FrameChecksum::Verified => NetHdr {
            flags: NET_HDR_F_DATA_VALID,
            ..NetHdr::PLAIN
        },
        FrameChecksum::Complete => NetHdr::PLAIN,
    };
    let header = match gso {
        Some(cut) => header.with_tcpv4_gso(cut.header_len, cut.segment_payload),
        None => header,
    };
    NetHdr {
        num_buffers: 1,
        ..header
    }
}

/// What a validated transmit header asks the backend to do with its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TxRequest {
    /// `Partial` for `NEEDS_CSUM`.
    pub(super) checksum: FrameChecksum,
    /// Cut the frame into TCPv4 segments (HOST_TSO4); `None`: send it as it is.
    gso: Option<Tcpv4Gso>,
}

/// A TCPv4 segmentation request, as the backend's header carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tcpv4Gso {
    /// Bytes of the Ethernet, IPv4 and TCP headers, repeated in front of each segment.
    hdr_len: u16,
    /// TCP payload bytes per segment (the last may have fewer).
    gso_size: u16,
}

impl TxRequest {
    /// Counts a frame sent with this request.
    pub(super) fn count(self, stats: &NetStats) {
        if self.checksum != FrameChecksum::Complete {
            stats.tx_csum_partial.fetch_add(1, Ordering::Relaxed);
        }
        if self.gso.is_some() {
            stats.tx_gso.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The ECN bit of `gso_type` (`VIRTIO_NET_HDR_GSO_ECN`; HOST_ECN is not offered).
const GSO_ECN: u8 = 0x80;

/// What a transmit header asks of a frame of `len` bytes, given what the driver may ask
/// for (`offload`). A hostile or broken driver's request is refused, never acted on:
/// see [`tx_checksum`] and [`tx_gso`]. `DATA_VALID`, and `hdr_len` and `gso_size`
/// without GSO, mean nothing on transmit and are ignored.
pub(super) fn tx_request(
    header: &NetHdr,
    head: u16,
    len: usize,
    offload: TxOffload,
) -> Result<TxRequest, QueueError> {
    let checksum = tx_checksum(header, head, len, offload.csum)?;
    let gso = tx_gso(header, checksum, head, len, offload.tso4)?;
    Ok(TxRequest { checksum, gso })
}

/// `Partial` for `NEEDS_CSUM`, which must have been negotiated (`csum`) and must put the
/// two-byte checksum field inside the frame of `len` bytes.
fn tx_checksum(
    header: &NetHdr,
    head: u16,
    len: usize,
    csum: bool,
) -> Result<FrameChecksum, QueueError> {
    if header.flags & NET_HDR_F_NEEDS_CSUM == 0 {
        return Ok(FrameChecksum::Complete);
    }
    let (start, offset) = (header.csum_start, header.csum_offset);
    if !csum || usize::from(start) + usize::from(offset) + 2 > len {
        return Err(QueueError::BadChecksumRequest {
            head,
            start,
            offset,
            len,
            negotiated: csum,
        });
    }
    Ok(FrameChecksum::Partial { start, offset })
}

/// The segmentation a header asks for, if any: only TCPv4 (`tso4`: HOST_TSO4 negotiated
/// on a path that hands the request on), only with a partial checksum to complete in
/// each segment, segments of at least one byte and headers inside the frame of `len`
/// bytes. Everything else — UDP, TCPv6, undefined types, the ECN bit — was not offered.
/// Linux checks the headers themselves when it segments; these are the checks it cannot
/// make for us: what was negotiated.
fn tx_gso(
    header: &NetHdr,
    checksum: FrameChecksum,
    head: u16,
    len: usize,
    tso4: bool,
) -> Result<Option<Tcpv4Gso>, QueueError> {
    let fault = match header.gso_type {
        NET_HDR_GSO_NONE => return Ok(None),
        NET_HDR_GSO_TCPV4 if !tso4 => GsoFault::Tso4NotNegotiated,
        NET_HDR_GSO_TCPV4 if checksum == FrameChecksum::Complete => GsoFault::WithoutNeedsCsum,
        NET_HDR_GSO_TCPV4 if header.gso_size == 0 => GsoFault::ZeroSegmentSize,
        NET_HDR_GSO_TCPV4 if usize::from(header.hdr_len) > len => GsoFault::HeadersPastTheFrame,
        NET_HDR_GSO_TCPV4 => {
            return Ok(Some(Tcpv4Gso {
                hdr_len: header.hdr_len,
                gso_size: header.gso_size,
            }));
        }
        t if t & GSO_ECN != 0 => GsoFault::Ecn,
        _ => GsoFault::UnknownType,
    };
    Err(QueueError::BadGsoRequest {
        head,
        gso_type: header.gso_type,
        hdr_len: header.hdr_len,
        gso_size: header.gso_size,
        len,
        fault,
    })
}
