//! The direct path: frames between a TAP descriptor and the guest's descriptor chains
//! with one `readv` or `writev` over guest memory, no copy in the monitor (see the parent
//! module's "Moving frames").

use super::NetStats;
use super::chain::{chain_header, chain_spans, read_at, write_at};
use super::offload::{TxOffload, backend_header, tx_request};
use super::turn::{ANSWER_HEADERS, asks_for_answer};
use crate::guest::GuestMem;
use crate::sys::IoVecs;
use crate::virtio::host_link::Direct;
use crate::virtio::queue::{Buf, Chain, DeviceQueue, QueueError};
use ebb_abi::virtio::{
    NET_HDR_F_DATA_VALID, NET_HDR_F_NEEDS_CSUM, NET_HDR_GSO_NONE, NET_HDR_GSO_TCPV4, NET_HDR_LEN,
    NetHdr,
};
use ebb_net_driver::FrameChecksum;
use rustix::io::Errno;
use std::sync::atomic::Ordering;

/// Adds the chain made of `bufs`, from byte `skip` on, to `iov`.
fn push_chain<'a>(
    iov: &mut IoVecs<'a>,
    mem: &'a GuestMem,
    bufs: &[Buf],
    skip: usize,
    what: &'static str,
) -> Result<(), QueueError> {
    for (addr, range) in chain_spans(bufs, skip, usize::MAX) {
        iov.push_guest(mem, addr, range.len())
            .ok_or(QueueError::Access(what))?;
    }
    Ok(())
}

/// Most chains one round moves each way per pair on the direct path.
const DIRECT_BATCH: usize = 64;

/// Transmit on a direct backend: each chain goes to the backend with one `writev` of the
/// device's own header (validated, see `backend_header`) and the guest's frame
/// buffers, no copy in between. A chain the backend refuses (full) is kept in `held` and
/// written first next round. `negotiated`: what the driver's headers may ask for. Returns
/// whether a chain moved and the used index before the first one returned (for
/// [`DeviceQueue::needs_notification`]).
pub(super) fn transmit_direct(
    mem: &GuestMem,
    tx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    direct: Direct<'_>,
    negotiated: TxOffload,
    stats: &NetStats,
) -> Result<(bool, Option<u16>), QueueError> {
    // A GSO request reaches the backend only in its header (HOST_TSO4 is offered only
    // for a backend with one; this keeps a backend without one from ever being handed
    // a frame to segment).
    let offload = TxOffload {
        tso4: negotiated.tso4 && direct.vnet_hdr,
        ..negotiated
    };
    let (mut worked, mut returned) = (false, None);
    for _ in 0..DIRECT_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match tx.pop(mem)? {
                Some(chain) => chain,
                None => break,
            },
        };
        let (header, len) = chain_header(mem, &chain, offload)?;
        let request = tx_request(&header, chain.head, len, offload)?;
        // CSUM is offered only with a backend that has a header to carry NEEDS_CSUM.
        debug_assert!(direct.vnet_hdr || request.checksum == FrameChecksum::Complete);
        let header = backend_header(request).to_bytes();
        let mut iov = IoVecs::with_capacity(chain.readable.len() + 1);
        if direct.vnet_hdr {
            iov.push_host(&header);
        }
        push_chain(
            &mut iov,
            mem,
            &chain.readable,
            NET_HDR_LEN,
            "a transmit buffer",
        )?;
        match iov.write_to(direct.fd) {
            Ok(_) => {
                stats.tx_frames.fetch_add(1, Ordering::Relaxed);
                request.count(stats);
            }
            Err(Errno::AGAIN | Errno::INTR) => {
                *held = Some(chain);
                break;
            }
            // The interface is down or gone, or the kernel refused the frame (shorter
            // than an Ethernet header, say): nobody will take it.
            Err(e) => {
                log::debug!("virtio-net: the backend refused a {len}-byte frame: {e}");
                stats.tx_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        let old = tx.push_used(mem, chain.head, 0)?;
        returned.get_or_insert(old);
        worked = true;
    }
    Ok((worked, returned))
}

/// Receive on a direct backend: each frame is read with one `readv` straight into a
/// receive chain (behind a header the device writes when the backend has none), no copy
/// in between. A frame longer than the chain spills into a byte of the device's own and
/// is dropped and counted, its buffer returned empty, as on the copying path; so the
/// longest frame is whatever the guest's chains hold, and a large-receive frame (a
/// header, an Ethernet header and 65,535 bytes) needs no limit of its own here. The
/// backend's GSO header goes to the guest as it is if the driver negotiated GUEST_TSO4
/// (`guest_tso4`) and the request is TCPv4 (the only kind large receive asks the kernel
/// for); a frame with any other — such as a large frame the kernel queued before large
/// receive was turned off for this driver — is dropped and counted. A chain taken when
/// the backend had nothing is kept in `held`; an empty ring sets `starved` (frames then
/// wait in the backend, and the device asks for a kick on new buffers). `asks` is set
/// when a frame handed over asks the guest for an answer ([`asks_for_answer`], read back
/// from the guest's buffer: a hint for when this thread sleeps, nothing more).
#[allow(clippy::too_many_arguments)]
pub(super) fn receive_direct(
    mem: &GuestMem,
    rx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    starved: &mut bool,
    direct: Direct<'_>,
    guest_tso4: bool,
    stats: &NetStats,
    asks: &mut bool,
) -> Result<(bool, Option<u16>), QueueError> {
    let (mut worked, mut returned) = (false, None);
    // Without a backend header the device writes its own in front of the frame.
    let skip = if direct.vnet_hdr { 0 } else { NET_HDR_LEN };
    for _ in 0..DIRECT_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match rx.pop(mem)? {
                Some(chain) => chain,
                None => {
                    *starved = true;
                    break;
                }
            },
        };
        *starved = false;
        let room: usize = chain.writable.iter().map(|b| b.len as usize).sum();
        let mut spill = [0u8; 1];
        let mut iov = IoVecs::with_capacity(chain.writable.len() + 1);
        push_chain(&mut iov, mem, &chain.writable, skip, "a receive buffer")?;
        iov.push_spill(&mut spill);
        let read = iov.read_from(direct.fd);
        drop(iov);
        let n = match read {
            Ok(n) => n + skip,
            Err(Errno::AGAIN | Errno::INTR) => {
                *held = Some(chain);
                break;
            }
            Err(_) => {
                *held = Some(chain);
                break;
            }
        };
        // Too short for a header and an Ethernet header, or cut to fit: dropped.
        let fits = (NET_HDR_LEN + 14..=room).contains(&n);
        // The backend's header as it wrote it (read back from the guest's buffer: what
        // the device decides on is its own copy), or the device's own for a bare frame;
        // either way the frame fills this one chain.
        let mut header = NetHdr::PLAIN;
        if fits && direct.vnet_hdr {
            let mut bytes = [0u8; NET_HDR_LEN];
            read_at(mem, &chain.writable, 0, &mut bytes)
                .ok_or(QueueError::Access("a receive buffer"))?;
            header = NetHdr::from_bytes(&bytes);
        }
        let gso_allowed = match header.gso_type {
            NET_HDR_GSO_NONE => true,
            NET_HDR_GSO_TCPV4 => guest_tso4,
            _ => false,
        };
        let written = if !fits || !gso_allowed {
            stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
            0
        } else {
            if header.gso_type != NET_HDR_GSO_NONE {
                stats.rx_gso.fetch_add(1, Ordering::Relaxed);
            }
            if header.flags & NET_HDR_F_NEEDS_CSUM != 0 {
                stats.rx_csum_partial.fetch_add(1, Ordering::Relaxed);
            } else if header.flags & NET_HDR_F_DATA_VALID != 0 {
                stats.rx_csum_valid.fetch_add(1, Ordering::Relaxed);
            }
            header.num_buffers = 1;
            write_at(mem, &chain.writable, 0, &header.to_bytes())
                .ok_or(QueueError::Access("a receive buffer"))?;
            if !*asks {
                let mut head = [0u8; ANSWER_HEADERS];
                let len = head.len().min(n - NET_HDR_LEN);
                *asks = read_at(mem, &chain.writable, NET_HDR_LEN, &mut head[..len])
                    .is_none_or(|_| asks_for_answer(&head[..len]));
            }
            stats.rx_frames.fetch_add(1, Ordering::Relaxed);
            n as u32
        };
        let old = rx.push_used(mem, chain.head, written)?;
        returned.get_or_insert(old);
        worked = true;
    }
    Ok((worked, returned))
}
