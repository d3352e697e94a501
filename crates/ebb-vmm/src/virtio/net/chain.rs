//! Frames in descriptor chains: a transmit chain's header and frame read out of guest
//! memory (copied once, or located for the direct path's `writev`), and a frame written
//! into a receive chain behind its header.

use super::offload::{TxOffload, guest_header};
use crate::guest::GuestMem;
use crate::virtio::queue::{Buf, Chain, QueueError};
use ebb_abi::virtio::{NET_HDR_LEN, NetHdr};
use ebb_core::{IOBuf, IOBufChain};
use ebb_net_driver::{FrameChecksum, Segmentation};

/// A transmit chain's virtio-net header and the length of the frame behind it. A chain
/// with no frame in it (the header or less) or too long for one (`offload` says how long
/// one may be) is the driver's error, not a frame to drop silently.
pub(super) fn chain_header(
    mem: &GuestMem,
    chain: &Chain,
    offload: TxOffload,
) -> Result<(NetHdr, usize), QueueError> {
    let total: u64 = chain.readable.iter().map(|b| u64::from(b.len)).sum();
    let max = offload.chain_max();
    if total <= NET_HDR_LEN as u64 || total > max {
        return Err(QueueError::NotAFrame {
            head: chain.head,
            len: total,
            max,
        });
    }
    let mut header = [0u8; NET_HDR_LEN];
    read_at(mem, &chain.readable, 0, &mut header).ok_or(QueueError::Access("a transmit buffer"))?;
    Ok((NetHdr::from_bytes(&header), total as usize - NET_HDR_LEN))
}

/// The frame of a transmit chain (its bytes after the virtio-net header) and the header,
/// copied out once each. The frame is `None` when the monitor has no memory for it (the
/// caller drops it, counted, as a NIC drops what it has no buffer for): a guest's frame
/// never aborts the monitor.
pub(super) fn gather(
    mem: &GuestMem,
    chain: &Chain,
    offload: TxOffload,
) -> Result<(Option<IOBuf>, NetHdr), QueueError> {
    let (header, len) = chain_header(mem, chain, offload)?;
    let mut frame = Vec::new();
    if frame.try_reserve_exact(len).is_err() {
        return Ok((None, header));
    }
    frame.resize(len, 0);
    read_at(mem, &chain.readable, NET_HDR_LEN, &mut frame)
        .ok_or(QueueError::Access("a transmit buffer"))?;
    Ok((Some(IOBuf::from_vec(frame)), header))
}

/// The pieces of bytes `at..at + len` of the chain made of `bufs` (guest ranges, in
/// order): each a guest address and the range, counted from `at`, of the bytes it holds.
/// They cover fewer than `len` bytes when the chain is shorter.
pub(super) fn chain_spans(
    bufs: &[Buf],
    at: usize,
    len: usize,
) -> impl Iterator<Item = (u64, core::ops::Range<usize>)> + '_ {
    let (mut skip, mut done) = (at, 0);
    bufs.iter().filter_map(move |buf| {
        let here = buf.len as usize;
        if done == len {
            return None;
        }
        if skip >= here {
            skip -= here;
            return None;
        }
        let n = (here - skip).min(len - done);
        let span = (buf.addr + skip as u64, done..done + n);
        (skip, done) = (0, done + n);
        Some(span)
    })
}

/// Copies `out.len()` bytes from offset `at` of the chain made of `bufs`; `None` if the
/// chain is shorter or a range is not guest memory.
pub(super) fn read_at(mem: &GuestMem, bufs: &[Buf], at: usize, out: &mut [u8]) -> Option<()> {
    let mut covered = 0;
    for (addr, range) in chain_spans(bufs, at, out.len()) {
        covered = range.end;
        mem.read_into(addr, &mut out[range])?;
    }
    (covered == out.len()).then_some(())
}

/// Copies `bytes` to offset `at` of the chain made of `bufs`; `None` as for [`read_at`].
pub(super) fn write_at(mem: &GuestMem, bufs: &[Buf], at: usize, bytes: &[u8]) -> Option<()> {
    let mut covered = 0;
    for (addr, range) in chain_spans(bufs, at, bytes.len()) {
        covered = range.end;
        mem.write_bytes(addr, &bytes[range])?;
    }
    (covered == bytes.len()).then_some(())
}

/// Writes the header and `frame` into a receive chain; the bytes written, or `None` if
/// the chain is too small (the frame is dropped).
pub(super) fn scatter(
    mem: &GuestMem,
    chain: &Chain,
    frame: &[u8],
    checksum: FrameChecksum,
    gso: Option<Segmentation>,
) -> Result<Option<u32>, QueueError> {
    scatter_parts(
        mem,
        chain,
        frame.len(),
        core::iter::once(frame),
        checksum,
        gso,
    )
}

/// [`scatter`] for a frame in pieces (a header buffer and payload slices, as a stack
/// builds it): each piece copied once into the guest's buffers, none into one buffer
/// first.
pub(super) fn scatter_chain(
    mem: &GuestMem,
    chain: &Chain,
    frame: &IOBufChain,
    checksum: FrameChecksum,
    gso: Option<Segmentation>,
) -> Result<Option<u32>, QueueError> {
    scatter_parts(mem, chain, frame.len(), frame.segments(), checksum, gso)
}

/// The virtio-net header, then `parts` (`len` bytes in all) in order, across the
/// chain's writable buffers.
fn scatter_parts<'a>(
    mem: &GuestMem,
    chain: &Chain,
    len: usize,
    parts: impl Iterator<Item = &'a [u8]>,
    checksum: FrameChecksum,
    gso: Option<Segmentation>,
) -> Result<Option<u32>, QueueError> {
    let room: u64 = chain.writable.iter().map(|b| u64::from(b.len)).sum();
    let total = NET_HDR_LEN + len;
    if (total as u64) > room {
        return Ok(None);
    }
    let access = || QueueError::Access("a receive buffer");
    let header = guest_header(checksum, gso).to_bytes();
    write_at(mem, &chain.writable, 0, &header).ok_or_else(access)?;
    let mut at = NET_HDR_LEN;
    for part in parts {
        write_at(mem, &chain.writable, at, part).ok_or_else(access)?;
        at += part.len();
    }
    Ok(Some(total as u32))
}
