//! TCP segmentation in software: what a device that takes frames longer than its MTU
//! ([`DeviceCapabilities::tso_max_len`](super::DeviceCapabilities::tso_max_len)) does
//! with one, for devices and test wires that offer the offload without hardware (Linux
//! calls this GSO).

use alloc::vec::Vec;
use core::net::Ipv4Addr;

use ebb_core::{IOBuf, IOBufChain};

use super::{ETHERNET_HEADER_LEN, Segmentation};
use crate::checksum;

/// TCP flags cleared on every segment but the last (FIN, PSH) and but the first (CWR).
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// Cuts `frame` as [`Segmentation`] describes: each segment a fresh buffer with the
/// frame's headers, its share of the payload, and every length, identification,
/// sequence number and checksum (IPv4 and TCP, complete) fixed up. `None` if the frame
/// is not what `segmentation` says (headers past its end, not TCP over IPv4), or if
/// there is no memory for the segments.
pub fn segment_tcp_frame(frame: &IOBufChain, segmentation: Segmentation) -> Option<Vec<IOBuf>> {
    // Fallible: a guest's frame must never abort the monitor for want of memory.
    let bytes = frame.try_to_vec()?;
    let header_len = usize::from(segmentation.header_len);
    let step = usize::from(segmentation.segment_payload);
    let headers = bytes.get(..header_len)?;
    let ip = headers.get(ETHERNET_HEADER_LEN..)?;
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    let tcp_at = ETHERNET_HEADER_LEN + ihl;
    if step == 0 || ihl < 20 || tcp_at + 20 > header_len || ip[9] != 6 {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let ident = u16::from_be_bytes([ip[4], ip[5]]);
    let first_seq = u32::from_be_bytes(headers[tcp_at + 4..tcp_at + 8].try_into().ok()?);
    let payload = &bytes[header_len..];
    let count = payload.len().div_ceil(step).max(1);
    let mut segments = Vec::new();
    segments.try_reserve_exact(count).ok()?;
    for i in 0..count {
        let chunk = &payload[(i * step).min(payload.len())..((i + 1) * step).min(payload.len())];
        let mut out = Vec::new();
        out.try_reserve_exact(header_len + chunk.len()).ok()?;
        out.extend_from_slice(headers);
        out.extend_from_slice(chunk);
        let ip_len = (out.len() - ETHERNET_HEADER_LEN) as u16;
        let ip_hdr = ETHERNET_HEADER_LEN..tcp_at;
        out[16..18].copy_from_slice(&ip_len.to_be_bytes());
        out[18..20].copy_from_slice(&ident.wrapping_add(i as u16).to_be_bytes());
        out[24..26].fill(0);
        let ip_sum = !checksum::data(&out[ip_hdr]);
        out[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let seq = first_seq.wrapping_add((i * step) as u32);
        out[tcp_at + 4..tcp_at + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 < count {
            out[tcp_at + 13] &= !(FIN | PSH);
        }
        if i > 0 {
            out[tcp_at + 13] &= !CWR;
        }
        out[tcp_at + 16..tcp_at + 18].fill(0);
        let tcp_len = (out.len() - tcp_at) as u16;
        let sum = checksum::combine(&[
            checksum::pseudo_header(src, dst, 6, tcp_len),
            checksum::data(&out[tcp_at..]),
        ]);
        out[tcp_at + 16..tcp_at + 18].copy_from_slice(&(!sum).to_be_bytes());
        segments.push(IOBuf::from_vec(out));
    }
    Some(segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    /// An Ethernet + IPv4 + TCP frame with `options` bytes of TCP options (zeros, a
    /// multiple of 4), flags FIN|PSH|ACK|CWR, sequence 1000, IP identification 7, and
    /// `payload` bytes; its checksums are left as they are (the device fixes them).
    fn frame(options: usize, payload: usize) -> Vec<u8> {
        let tcp_len = 20 + options;
        let mut f = vec![0u8; 14 + 20 + tcp_len];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((20 + tcp_len + payload) as u16).to_be_bytes());
        f[18..20].copy_from_slice(&7u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&SRC.octets());
        f[30..34].copy_from_slice(&DST.octets());
        f[38..42].copy_from_slice(&1000u32.to_be_bytes());
        f[46] = ((tcp_len / 4) as u8) << 4;
        f[47] = FIN | PSH | 0x10 | CWR;
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    fn be16(bytes: &[u8]) -> u16 {
        u16::from_be_bytes([bytes[0], bytes[1]])
    }

    #[test]
    fn segmentation_follows_from_the_mtu_and_the_frames_headers() {
        let cut = Segmentation::of(&frame(12, 5000), 1500).expect("longer than the MTU");
        assert_eq!(cut.header_len, 14 + 20 + 32);
        assert_eq!(cut.segment_payload, 1500 - 20 - 32);
        // Fits the MTU, or is not TCP over IPv4: nothing to cut.
        assert_eq!(Segmentation::of(&frame(0, 1460), 1500), None);
        let mut udp = frame(0, 5000);
        udp[23] = 17;
        assert_eq!(Segmentation::of(&udp, 1500), None);
        let mut arp = frame(0, 5000);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(Segmentation::of(&arp, 1500), None);
        assert_eq!(Segmentation::of(&frame(0, 5000)[..40], 1500), None);
    }

    #[test]
    fn every_segment_is_a_valid_frame_and_together_they_carry_the_payload() {
        let original = frame(12, 5000);
        let cut = Segmentation::of(&original, 1500).expect("longer than the MTU");
        let chain = IOBufChain::from(IOBuf::from_vec(original.clone()));
        let segments = segment_tcp_frame(&chain, cut).expect("well-formed");
        assert_eq!(segments.len(), 4); // 1448 * 3 + 656
        let mut payload = Vec::new();
        for (i, segment) in segments.iter().enumerate() {
            let bytes = segment.as_slice();
            assert!(bytes.len() <= 1514, "segment {i} is {} bytes", bytes.len());
            // Read field by field: the stack's `wire` views live above this crate.
            let (ip, tcp) = (&bytes[14..34], &bytes[34..]);
            assert_eq!(checksum::data(ip), 0xffff, "segment {i}: IPv4 checksum");
            assert_eq!(usize::from(be16(&ip[2..4])), bytes.len() - 14);
            assert_eq!(be16(&ip[4..6]), 7 + i as u16);
            let pseudo = checksum::pseudo_header(SRC, DST, 6, tcp.len() as u16);
            let tcp_sum = checksum::combine(&[pseudo, checksum::data(tcp)]);
            assert_eq!(tcp_sum, 0xffff, "segment {i}: TCP checksum");
            let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
            assert_eq!(seq, 1000 + (i * 1448) as u32);
            let (flags, last) = (tcp[13], i == segments.len() - 1);
            assert_eq!(flags & FIN != 0, last);
            assert_eq!(flags & PSH != 0, last);
            assert_eq!(flags & CWR != 0, i == 0);
            assert!(flags & 0x10 != 0, "ACK");
            payload.extend_from_slice(&bytes[66..]);
        }
        assert_eq!(payload, original[66..]);
    }

    #[test]
    fn a_frame_that_is_not_what_its_segmentation_says_is_refused() {
        let original = frame(0, 3000);
        let chain = IOBufChain::from(IOBuf::from_vec(original[..40].to_vec()));
        let cut = Segmentation {
            header_len: 54,
            segment_payload: 1460,
        };
        assert_eq!(segment_tcp_frame(&chain, cut), None);
        let zero = Segmentation {
            segment_payload: 0,
            ..cut
        };
        let whole = IOBufChain::from(IOBuf::from_vec(original));
        assert_eq!(segment_tcp_frame(&whole, zero), None);
    }

    proptest::proptest! {
        /// What a hostile guest's TSO frame can be: any bytes behind a plausible Ethernet
        /// and IPv4 start (the monitor cuts what its guest sends for passt). Cutting
        /// never panics, and every segment fits the MTU.
        #[test]
        fn any_frame_is_cut_without_panicking_into_segments_that_fit(
            ihl in 0u8..16,
            data_offset in 0u8..16,
            total in 0u16..=u16::MAX,
            len in 54usize..20_000,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut x = seed;
            let mut f: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect();
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x40 | ihl;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[23] = 6;
            let tcp_at = 14 + usize::from(ihl) * 4;
            if tcp_at + 12 < f.len() {
                f[tcp_at + 12] = data_offset << 4;
            }
            let Some(cut) = Segmentation::of(&f, 1500) else {
                return Ok(());
            };
            let chain = IOBufChain::from(IOBuf::from_vec(f));
            if let Some(segments) = segment_tcp_frame(&chain, cut) {
                for s in &segments {
                    proptest::prop_assert!(s.len() <= 1500 + ETHERNET_HEADER_LEN);
                }
            }
        }
    }
}
