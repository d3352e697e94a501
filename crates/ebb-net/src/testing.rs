//! Test helpers for ebb-net and for the crates above it: frames as a peer's stack would
//! send them, for tests that inject traffic by hand (ebb-net's and ebb-netstack's
//! multi-core tests build the same SYN).

use core::net::SocketAddrV4;

use ebb_core::iobuf::IOBuf;

use crate::wire::{
    ChecksumCapabilities, EtherType, EthernetAddress, EthernetRepr, TcpControl, TcpRepr,
    TcpSeqNumber, emit_tcp_frame,
};

/// A SYN from `src` (MAC `src_mac`) to `dst` (MAC `dst_mac`), as a peer's stack would send
/// it: MSS 1460, sequence number 1234, window 65535, checksums in full.
pub fn syn_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: SocketAddrV4,
    dst: SocketAddrV4,
) -> IOBuf {
    let syn = TcpRepr {
        max_seg_size: Some(1460),
        ..TcpRepr::plain(
            src.port(),
            dst.port(),
            TcpControl::Syn,
            TcpSeqNumber(1234),
            None,
            65535,
        )
    };
    let eth = EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EtherType::Ipv4,
    };
    IOBuf::from_vec(emit_tcp_frame(
        eth,
        *src.ip(),
        *dst.ip(),
        &syn,
        &ChecksumCapabilities::default(),
    ))
}
