//! A split virtqueue, driver side: descriptor table, available ring and used ring in
//! page-aligned memory the driver owns, with EVENT_IDX notification suppression.
//!
//! The driver writes descriptors and the available ring; the device writes the used ring.
//! Indices are free-running `u16`s (slot = index mod size, size a power of two).
//!
//! * **Kicks** (driver → device): after publishing `avail.idx` from `old` to `new` the
//!   driver reads the device's `avail_event` and writes `QueueNotify` only if the device
//!   asked to hear about an index in `[old, new)` — a device that is polling leaves it
//!   behind and gets no exit.
//! * **Used-buffer notifications** (device → driver): the driver leaves `used_event`
//!   alone while its core is busy and sets it to the next used index only in
//!   [`UsedWatch::arm`], just before its core sleeps.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU16, Ordering, fence};

use super::mmio::{Regs, shared};
use crate::abi::virtio::{
    DESC_F_NEXT, DESC_F_WRITE, RING_ENTRIES_OFFSET, RING_IDX_OFFSET, avail_event_offset,
    avail_ring_bytes, desc_table_bytes, need_event, regs, used_event_offset, used_ring_bytes,
};

const PAGE: usize = 4096;

/// One page of ring memory.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// One buffer of a chain: guest-physical address, length, device-writable or not.
#[derive(Clone, Copy, Debug)]
pub struct Buffer {
    /// Address (virtual = physical).
    pub addr: u64,
    /// Length in bytes (not zero).
    pub len: u32,
    /// The device writes it (receive buffers) rather than reads it.
    pub write: bool,
}

/// See the module docs.
pub struct SplitRing {
    queue: u16,
    size: u16,
    regs: Regs,
    desc: u64,
    avail: u64,
    used: u64,
    free: Vec<u16>,
    /// The next available index to publish.
    avail_idx: u16,
    /// The next used index to consume; shared with the queue's [`UsedWatch`] (written only
    /// by the ring, on its core: an atomic only so the ring stays `Send` until then).
    last_used: Arc<AtomicU16>,
    kicks: u64,
}

impl core::fmt::Debug for SplitRing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitRing")
            .field("queue", &self.queue)
            .field("size", &self.size)
            .field("free", &self.free.len())
            .finish()
    }
}

impl SplitRing {
    /// Allocates a ring of `size` entries (a power of two) for queue `queue` and tells the
    /// device where it is (the queue must be selected and not ready). Does not set
    /// `QueueReady`.
    pub fn new(regs: Regs, queue: u16, size: u16) -> SplitRing {
        debug_assert!(size.is_power_of_two());
        let pages = |bytes: u64| (bytes as usize).div_ceil(PAGE);
        let (d, a, u) = (
            pages(desc_table_bytes(size)),
            pages(avail_ring_bytes(size)),
            pages(used_ring_bytes(size)),
        );
        // Never freed: the device may read and write the rings for as long as the VM runs
        // (it is not reset when a driver object is dropped), so the memory must never be
        // handed to anyone else.
        let memory: &'static mut [Page] =
            Box::leak(vec![Page([0; PAGE]); d + a + u].into_boxed_slice());
        let desc = memory.as_ptr() as u64;
        let avail = desc + (d * PAGE) as u64;
        let used = avail + (a * PAGE) as u64;
        regs.write(regs::QUEUE_NUM, u32::from(size));
        for (low, value) in [
            (regs::QUEUE_DESC_LOW, desc),
            (regs::QUEUE_DRIVER_LOW, avail),
            (regs::QUEUE_DEVICE_LOW, used),
        ] {
            regs.write(low, value as u32);
            regs.write(low + 4, (value >> 32) as u32);
        }
        SplitRing {
            queue,
            size,
            regs,
            desc,
            avail,
            used,
            free: (0..size).rev().collect(),
            avail_idx: 0,
            last_used: Arc::new(AtomicU16::new(0)),
            kicks: 0,
        }
    }

    /// Entries of the ring.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Free descriptors.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// Notifications written to `QueueNotify` so far.
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Writes `chain` as descriptors and queues its head in the available ring (seen by
    /// the device at the next [`publish`](Self::publish)). Returns the head, or `None`
    /// (nothing written) if there are not enough free descriptors or `chain` is empty.
    pub fn push(&mut self, chain: &[Buffer]) -> Option<u16> {
        if chain.is_empty() || chain.len() > self.free.len() {
            return None;
        }
        let ids: Vec<u16> = (0..chain.len()).filter_map(|_| self.free.pop()).collect();
        for (i, (buffer, &id)) in chain.iter().zip(&ids).enumerate() {
            let at = self.desc + 16 * u64::from(id);
            let next = ids.get(i + 1).copied();
            let mut flags = if buffer.write { DESC_F_WRITE } else { 0 };
            if next.is_some() {
                flags |= DESC_F_NEXT;
            }
            shared::write_u64(at, buffer.addr);
            shared::write_u32(at + 8, buffer.len);
            shared::write_u16(at + 12, flags);
            shared::write_u16(at + 14, next.unwrap_or(0));
        }
        let head = ids[0];
        let slot = u64::from(self.avail_idx & (self.size - 1));
        shared::write_u16(self.avail + RING_ENTRIES_OFFSET + 2 * slot, head);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        Some(head)
    }

    /// Makes every pushed chain visible to the device, and kicks it if it asked to be
    /// (EVENT_IDX). Returns whether it kicked.
    pub fn publish(&mut self) -> bool {
        let old = shared::read_u16(self.avail + RING_IDX_OFFSET);
        let new = self.avail_idx;
        if old == new {
            return false;
        }
        // Descriptors and ring entries before the index that publishes them.
        fence(Ordering::Release);
        shared::write_u16(self.avail + RING_IDX_OFFSET, new);
        // The index before reading what the device wants (pairs with its fence between
        // setting avail_event and re-reading avail.idx before it sleeps).
        fence(Ordering::SeqCst);
        let event = shared::read_u16(self.used + avail_event_offset(self.size));
        if need_event(event, new, old) {
            self.regs.write(regs::QUEUE_NOTIFY, u32::from(self.queue));
            self.kicks += 1;
            true
        } else {
            false
        }
    }

    /// Whether the device has returned chains not yet consumed.
    pub fn has_used(&self) -> bool {
        shared::read_u16(self.used + RING_IDX_OFFSET) != self.last_used.load(Ordering::Relaxed)
    }

    /// The next chain the device returned: its head and the bytes it wrote. Its
    /// descriptors are free again.
    pub fn pop_used(&mut self) -> Option<(u16, u32)> {
        let last = self.last_used.load(Ordering::Relaxed);
        if shared::read_u16(self.used + RING_IDX_OFFSET) == last {
            return None;
        }
        // The element after the index that published it.
        fence(Ordering::Acquire);
        let slot = u64::from(last & (self.size - 1));
        let elem = self.used + RING_ENTRIES_OFFSET + 8 * slot;
        let id = shared::read_u32(elem);
        let len = shared::read_u32(elem + 4);
        self.last_used
            .store(last.wrapping_add(1), Ordering::Relaxed);
        // A device that returns a head it was never given is broken; the chain is
        // ignored rather than freeing descriptors still in use.
        let head = u16::try_from(id).ok().filter(|&h| h < self.size)?;
        let mut id = head;
        for _ in 0..self.size {
            let at = self.desc + 16 * u64::from(id);
            self.free.push(id);
            if shared::read_u16(at + 12) & DESC_F_NEXT == 0 {
                break;
            }
            id = shared::read_u16(at + 14) & (self.size - 1);
        }
        Some((head, len))
    }

    /// What the queue's readiness check needs, without borrowing the ring.
    pub fn watch(&self) -> UsedWatch {
        UsedWatch {
            used_idx: self.used + RING_IDX_OFFSET,
            used_event: self.avail + used_event_offset(self.size),
            last_used: self.last_used.clone(),
        }
    }
}

/// Watches one ring's used index from outside the ring (the core's poll list).
#[derive(Clone)]
pub struct UsedWatch {
    used_idx: u64,
    used_event: u64,
    last_used: Arc<AtomicU16>,
}

impl UsedWatch {
    /// Whether the device returned chains not yet consumed.
    pub fn has_used(&self) -> bool {
        shared::read_u16(self.used_idx) != self.last_used.load(Ordering::Relaxed)
    }

    /// Asks the device to notify at its next used entry, then looks once more.
    pub fn arm(&self) -> bool {
        shared::write_u16(self.used_event, self.last_used.load(Ordering::Relaxed));
        // `used_event` before re-reading the index (pairs with the device's fence
        // between adding used entries and reading used_event).
        fence(Ordering::SeqCst);
        self.has_used()
    }
}
