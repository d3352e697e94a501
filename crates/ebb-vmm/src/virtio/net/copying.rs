//! The copying path: frames between a [`CopyingLink`] backend's own buffers (AF_XDP's
//! UMEM chunks) and the guest's descriptor chains, copied once each way straight from or
//! into guest memory — no IOBuf, no intermediate buffer (see the parent module's "Moving
//! frames"). The backend is told about transmitted frames once per round
//! ([`CopyingLink::flush`], called by the engine), not per frame.

use super::NetStats;
use super::chain::{chain_header, read_at, scatter};
use super::offload::{TxOffload, tx_request};
use super::turn::asks_for_answer;
use crate::guest::GuestMem;
use crate::virtio::host_link::CopyingLink;
use crate::virtio::queue::{Chain, DeviceQueue, QueueError};
use ebb_abi::virtio::NET_HDR_LEN;
use ebb_net_driver::FrameChecksum;
use std::sync::atomic::Ordering;

/// Most chains one round moves each way per pair on the copying path.
const COPYING_BATCH: usize = 64;

/// The shortest frame handed to the guest: an Ethernet header.
const ETHERNET_HEADER: usize = 14;

/// Transmit on a copying backend: each chain's frame (after its virtio-net header,
/// validated like every path's) is read from guest memory straight into a buffer of the
/// backend's. A chain the backend has no buffer for is kept in `held` and sent first next
/// round. No offload reaches such a backend: `negotiated` is asked of the header with
/// segmentation off, and checksum offload is never offered with it (so a `NEEDS_CSUM`
/// header is the driver's error, refused by `tx_request`). Returns whether a chain moved
/// and the used index before the first one returned.
pub(super) fn transmit_copying(
    mem: &GuestMem,
    tx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    link: &mut dyn CopyingLink,
    negotiated: TxOffload,
    stats: &NetStats,
) -> Result<(bool, Option<u16>), QueueError> {
    let offload = TxOffload {
        tso4: false,
        ..negotiated
    };
    let (mut worked, mut returned) = (false, None);
    for _ in 0..COPYING_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match tx.pop(mem)? {
                Some(chain) => chain,
                None => break,
            },
        };
        let (header, len) = chain_header(mem, &chain, offload)?;
        let request = tx_request(&header, chain.head, len, offload)?;
        // CSUM is never offered with a copying backend, so `tx_request` refused any
        // NEEDS_CSUM: the backend, which computes no checksum, gets complete frames only.
        debug_assert_eq!(request.checksum, FrameChecksum::Complete);
        let mut unreadable = false;
        let sent = link.transmit_with(len, &mut |buf| {
            unreadable = read_at(mem, &chain.readable, NET_HDR_LEN, buf).is_none();
            !unreadable
        });
        if unreadable {
            // `chain_header` checked the length; a range outside guest memory is caught
            // by `tx.pop` — this is a backstop, as for the other paths.
            return Err(QueueError::Access("a transmit buffer"));
        }
        match sent {
            Ok(true) => {
                stats.tx_frames.fetch_add(1, Ordering::Relaxed);
                request.count(stats);
            }
            Ok(false) => {
                *held = Some(chain);
                break;
            }
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

/// Receive on a copying backend: each frame is copied from the backend's buffer straight
/// into a receive chain behind the device's own header (complete checksum: no flags). A
/// frame longer than the chain, or shorter than an Ethernet header, is dropped and
/// counted, its buffer returned empty, as on the other paths. A chain taken when the
/// backend had nothing is kept in `held`; an empty ring with a frame waiting in the
/// backend sets `starved` (the device then asks for a kick on new buffers). `asks` is
/// set when a frame handed over asks the guest for an answer ([`asks_for_answer`]).
pub(super) fn receive_copying(
    mem: &GuestMem,
    rx: &mut DeviceQueue,
    held: &mut Option<Chain>,
    starved: &mut bool,
    link: &mut dyn CopyingLink,
    stats: &NetStats,
    asks: &mut bool,
) -> Result<(bool, Option<u16>), QueueError> {
    let (mut worked, mut returned) = (false, None);
    for _ in 0..COPYING_BATCH {
        let chain = match held.take() {
            Some(chain) => chain,
            None => match rx.pop(mem)? {
                Some(chain) => chain,
                None => {
                    *starved = link.has_received();
                    break;
                }
            },
        };
        *starved = false;
        let mut written: Option<Result<Option<u32>, QueueError>> = None;
        let taken = link.receive_with(1, &mut |frame| {
            written = Some(if frame.len() < ETHERNET_HEADER {
                Ok(None)
            } else {
                *asks |= asks_for_answer(frame);
                scatter(mem, &chain, frame, FrameChecksum::Complete, None)
            });
        });
        let Some(written) = written.filter(|_| taken > 0) else {
            *held = Some(chain);
            break;
        };
        let written = match written? {
            Some(n) => {
                stats.rx_frames.fetch_add(1, Ordering::Relaxed);
                n
            }
            None => {
                stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                0
            }
        };
        let old = rx.push_used(mem, chain.head, written)?;
        returned.get_or_insert(old);
        worked = true;
    }
    Ok((worked, returned))
}
