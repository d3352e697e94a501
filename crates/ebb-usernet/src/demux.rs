//! Which side of the forwarder a frame from the guest is for: the in-monitor endpoint
//! (ARP about its address, IPv4 to its address) or the rest of the network (passt).
//!
//! Only the fields needed to decide are read, each after a length check: the frame is
//! the guest's, untrusted. Whatever the endpoint is given is parsed again, fully, by
//! ebb-net's checked views; this module only must not be fooled into indexing out of
//! bounds or into routing the endpoint's traffic elsewhere.

use core::net::Ipv4Addr;

use ebb_core::IOBufChain;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethernet header: destination, source, EtherType.
const ETH_LEN: usize = 14;
/// Where an IPv4 header keeps its destination address.
const IPV4_DST: usize = ETH_LEN + 16;
/// Where an ARP packet (Ethernet/IPv4) keeps its target protocol address.
const ARP_TPA: usize = ETH_LEN + 24;

/// The bytes of a frame the demux reads at most (Ethernet, and an IPv4 header's or an
/// ARP message's target address within them).
pub(crate) const HEADERS: usize = 64;

/// Where a frame from the guest goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// To the in-monitor endpoint.
    Endpoint,
    /// To the rest of the network (passt), or dropped when there is none.
    Rest,
    /// Shorter than the headers its EtherType promises: dropped and counted.
    Malformed,
}

/// [`route`] for a frame in segments: its headers gathered on the stack when its first
/// segment does not hold them all (no allocation for a guest's frame).
pub(crate) fn route_chain(frame: &IOBufChain, endpoint: Ipv4Addr) -> Route {
    match frame.front() {
        Some(first) if first.len() >= HEADERS || frame.segment_count() == 1 => {
            route(first.as_slice(), endpoint)
        }
        _ => {
            let mut head = [0u8; HEADERS];
            let n = frame.len().min(HEADERS);
            // Cannot fail: `n` is at most the chain's length.
            let _ = frame.copy_to_slice(&mut head[..n]);
            route(&head[..n], endpoint)
        }
    }
}

/// Decides where `frame` goes, for an endpoint at `endpoint`.
pub(crate) fn route(frame: &[u8], endpoint: Ipv4Addr) -> Route {
    let Some(ethertype) = frame.get(12..14) else {
        return Route::Malformed;
    };
    let ethertype = u16::from_be_bytes([ethertype[0], ethertype[1]]);
    let field = match ethertype {
        ETHERTYPE_IPV4 => IPV4_DST,
        ETHERTYPE_ARP => ARP_TPA,
        _ => return Route::Rest,
    };
    match frame.get(field..field + 4) {
        Some(addr) if addr == endpoint.octets() => Route::Endpoint,
        Some(_) => Route::Rest,
        None => Route::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebb_core::IOBuf;

    const EP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

    fn frame(ethertype: u16, len: usize, at: usize, addr: Ipv4Addr) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        if at + 4 <= len {
            f[at..at + 4].copy_from_slice(&addr.octets());
        }
        f
    }

    #[test]
    fn endpoint_traffic_is_recognised_and_the_rest_is_not() {
        let other = Ipv4Addr::new(10, 0, 2, 2);
        assert_eq!(route(&frame(0x0800, 60, IPV4_DST, EP), EP), Route::Endpoint);
        assert_eq!(route(&frame(0x0806, 42, ARP_TPA, EP), EP), Route::Endpoint);
        assert_eq!(route(&frame(0x0800, 60, IPV4_DST, other), EP), Route::Rest);
        assert_eq!(route(&frame(0x0806, 42, ARP_TPA, other), EP), Route::Rest);
        assert_eq!(route(&frame(0x86dd, 60, 0, EP), EP), Route::Rest, "IPv6");
    }

    #[test]
    fn a_frame_in_segments_routes_as_the_same_bytes_in_one() {
        let other = Ipv4Addr::new(10, 0, 2, 2);
        for (ethertype, len, at) in [(0x0800, 60, IPV4_DST), (0x0806, 42, ARP_TPA)] {
            for to in [EP, other] {
                let whole = frame(ethertype, len, at, to);
                for cut in [1, 13, 14, at, at + 2, len - 1] {
                    let mut chain = IOBufChain::from(IOBuf::copy_from_slice(&whole[..cut]));
                    chain.push_back(IOBuf::copy_from_slice(&whole[cut..]));
                    assert_eq!(route_chain(&chain, EP), route(&whole, EP), "cut at {cut}");
                }
                // Cut short inside the address: malformed, as in one piece.
                let mut short = IOBufChain::from(IOBuf::copy_from_slice(&whole[..5]));
                short.push_back(IOBuf::copy_from_slice(&whole[5..at + 3]));
                assert_eq!(route_chain(&short, EP), Route::Malformed);
            }
        }
    }

    #[test]
    fn short_frames_are_malformed_never_out_of_bounds() {
        for len in 0..ARP_TPA + 4 {
            let f = frame(0x0806, len.max(14), ARP_TPA, EP);
            let f = &f[..len];
            let r = route(f, EP);
            if len < ARP_TPA + 4 {
                assert_eq!(r, Route::Malformed, "{len}");
            }
        }
        let mut ipv4 = [0u8; 40];
        ipv4[12] = 0x08;
        assert_eq!(route(&ipv4[..IPV4_DST + 3], EP), Route::Malformed);
        assert_eq!(route(&ipv4[..IPV4_DST + 4], EP), Route::Rest);
    }
}
