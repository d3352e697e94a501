//! A split virtqueue, device side, over hostile guest memory.
//!
//! Every index and descriptor the guest wrote is checked before use:
//! [`walk_chain`] (a pure function, fuzzed by `fuzz/fuzz_targets/virtqueue.rs`) follows a
//! descriptor chain and refuses indices out of the table, loops (a chain longer than the
//! queue), zero lengths, chains of more than 4 GiB, buffers outside guest memory or
//! inside the MMIO window, indirect descriptors (never negotiated), readable buffers
//! after writable ones and chains of the wrong direction; [`QueueConfig::validate`]
//! refuses sizes that are not powers of two and rings misaligned, outside memory or
//! overlapping; [`DeviceQueue::pop`] refuses an available index that runs more than the
//! queue size ahead. Any of these is a [`QueueError`] that breaks the device; none
//! panics or loops.

use crate::guest::GuestMem;
use ebb_abi::virtio::{
    DESC_F_INDIRECT, DESC_F_NEXT, DESC_F_WRITE, MAX_QUEUE_SIZE, MMIO_WINDOW_END, MMIO_WINDOW_START,
    RING_ENTRIES_OFFSET, RING_IDX_OFFSET, avail_event_offset, avail_ring_bytes, desc_table_bytes,
    need_event, used_event_offset, used_ring_bytes,
};
use std::sync::atomic::{Ordering, fence};

/// One buffer of a validated chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf {
    /// Guest-physical address (inside guest memory).
    pub addr: u64,
    /// Length, not zero.
    pub len: u32,
}

/// Which way a chain's buffers must go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Device-readable only (transmit).
    Read,
    /// Device-writable only (receive).
    Write,
    /// Readable ones, then writable ones (control commands).
    ReadThenWrite,
}

/// Buffers of one direction in a chain: a few in place (a memcached reply from the
/// guest's driver is five: the virtio-net header, ebb-net's headers and the reply's
/// three pieces), more on the heap.
pub type Bufs = smallvec::SmallVec<[Buf; 6]>;

/// A validated chain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chain {
    /// The head index, to return in the used ring.
    pub head: u16,
    /// Device-readable buffers, in order.
    pub readable: Bufs,
    /// Device-writable buffers, in order.
    pub writable: Bufs,
}

/// What is wrong with a queue or chain: the device stops using the queue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// Size zero, not a power of two, or above the maximum.
    #[error("queue size {0} is not a power of two between 1 and the maximum")]
    BadSize(u32),
    /// A ring is misaligned or not inside guest memory.
    #[error("the {ring} at {addr:#x} is misaligned or outside guest memory")]
    BadRing {
        /// Which ring.
        ring: &'static str,
        /// Its address.
        addr: u64,
    },
    /// Two rings share bytes (a driver that made the queue ready before writing its
    /// addresses has all three at 0): the device would write its used ring over the
    /// driver's descriptors or available ring.
    #[error("the {0} and the {1} overlap")]
    RingsOverlap(&'static str, &'static str),
    /// `avail.idx` ran more than a queue's worth ahead of what the device consumed.
    #[error("available index jumped from {from} to {to} (queue size {size})")]
    IndexJump {
        /// What the device consumed up to.
        from: u16,
        /// What the guest published.
        to: u16,
        /// The queue size.
        size: u16,
    },
    /// A head or next index outside the descriptor table.
    #[error("descriptor index {index} is outside the table of {size}")]
    BadIndex {
        /// The index.
        index: u32,
        /// The queue size.
        size: u16,
    },
    /// The chain is longer than the queue: a loop.
    #[error("descriptor chain from head {head} loops or is longer than the queue")]
    Loop {
        /// Its head.
        head: u16,
    },
    /// The chain's buffers add up to more than 4 GiB, which no used-ring length can
    /// describe (virtio 1.2 §2.7.5: drivers must not).
    #[error("descriptor chain from head {head} holds more than 4 GiB")]
    TooLong {
        /// Its head.
        head: u16,
    },
    /// A descriptor with length zero.
    #[error("descriptor {index} has length zero")]
    ZeroLength {
        /// The descriptor.
        index: u16,
    },
    /// A buffer outside guest memory or inside the MMIO window.
    #[error("descriptor {index}: buffer {addr:#x}+{len} is outside guest memory")]
    OutOfRange {
        /// The descriptor.
        index: u16,
        /// Its address.
        addr: u64,
        /// Its length.
        len: u32,
    },
    /// An indirect descriptor (the feature was not offered).
    #[error("descriptor {index} is indirect, which was not negotiated")]
    Indirect {
        /// The descriptor.
        index: u16,
    },
    /// Buffers in the wrong direction for this queue.
    #[error("descriptor {index} goes the wrong way for this queue ({want:?})")]
    WrongDirection {
        /// The descriptor.
        index: u16,
        /// What the queue takes.
        want: Direction,
    },
    /// A transmit chain that holds no frame: the virtio-net header or less, or more
    /// than any frame.
    #[error(
        "transmit chain {head} holds {len} bytes: not a 12-byte header and a frame (at most {max} in all)"
    )]
    NotAFrame {
        /// Its head.
        head: u16,
        /// Its bytes.
        len: u64,
        /// The most a chain may hold.
        max: u64,
    },
    /// A transmit header asking for a checksum the device cannot complete: `NEEDS_CSUM`
    /// without CSUM negotiated, or a checksum field (`csum_start + csum_offset`, two
    /// bytes) outside the frame.
    #[error(
        "transmit chain {head}: NEEDS_CSUM at csum_start {start} + csum_offset {offset} \
         in a {len}-byte frame{}",
        if *.negotiated { "" } else { " without VIRTIO_NET_F_CSUM negotiated" }
    )]
    BadChecksumRequest {
        /// Its head.
        head: u16,
        /// `csum_start`.
        start: u16,
        /// `csum_offset`.
        offset: u16,
        /// The frame's length.
        len: usize,
        /// Whether CSUM was negotiated.
        negotiated: bool,
    },
    /// A transmit header asking for segmentation (GSO) the device cannot do or must not
    /// hand on: see [`GsoFault`].
    #[error(
        "transmit chain {head}: gso_type {gso_type:#04x} with hdr_len {hdr_len} and gso_size \
         {gso_size} in a {len}-byte frame: {fault}"
    )]
    BadGsoRequest {
        /// Its head.
        head: u16,
        /// `gso_type`, as the driver wrote it.
        gso_type: u8,
        /// `hdr_len`.
        hdr_len: u16,
        /// `gso_size`.
        gso_size: u16,
        /// The frame's length.
        len: usize,
        /// What is wrong with the request.
        fault: GsoFault,
    },
    /// Guest memory could not be read where the ring says.
    #[error("cannot access the {0} in guest memory")]
    Access(&'static str),
}

/// What is wrong with a transmit header's GSO request ([`QueueError::BadGsoRequest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GsoFault {
    /// TCPv4 segmentation asked of a device that did not agree to do it.
    #[error("TCPV4 without VIRTIO_NET_F_HOST_TSO4 negotiated")]
    Tso4NotNegotiated,
    /// Segments whose checksums nobody is asked to complete (virtio 1.2 §5.1.6.2.1: a
    /// GSO frame must have NEEDS_CSUM).
    #[error("GSO without NEEDS_CSUM")]
    WithoutNeedsCsum,
    /// The ECN bit (0x80): a segment of a frame with TCP's CWR flag, which needs
    /// VIRTIO_NET_F_HOST_ECN; not offered.
    #[error("the ECN bit without VIRTIO_NET_F_HOST_ECN, which is not offered")]
    Ecn,
    /// UDP, TCPv6 or an undefined type: nothing the device offers.
    #[error("a gso_type the device does not offer (only TCPV4, 1)")]
    UnknownType,
    /// Segments of no payload at all.
    #[error("gso_size 0")]
    ZeroSegmentSize,
    /// Headers said to be longer than the frame that holds them.
    #[error("hdr_len past the end of the frame")]
    HeadersPastTheFrame,
}

/// A raw descriptor as the guest wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawDesc {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Flags.
    pub flags: u16,
    /// Next index.
    pub next: u16,
}

/// Follows the chain from `head` in a table of `size` descriptors read by `read`,
/// checking every descriptor against `mem_size` (see the module docs).
pub fn walk_chain(
    head: u16,
    size: u16,
    mem_size: u64,
    want: Direction,
    mut read: impl FnMut(u16) -> Option<RawDesc>,
) -> Result<Chain, QueueError> {
    let mut chain = Chain {
        head,
        ..Chain::default()
    };
    let mut index = head;
    let mut total = 0u64;
    for _ in 0..size {
        if index >= size {
            return Err(QueueError::BadIndex {
                index: u32::from(index),
                size,
            });
        }
        let d = read(index).ok_or(QueueError::Access("descriptor table"))?;
        if d.flags & DESC_F_INDIRECT != 0 {
            return Err(QueueError::Indirect { index });
        }
        if d.len == 0 {
            return Err(QueueError::ZeroLength { index });
        }
        let end = d.addr.checked_add(u64::from(d.len));
        let in_memory = end.is_some_and(|end| end <= mem_size);
        let in_window = end.is_some_and(|end| d.addr < MMIO_WINDOW_END && end > MMIO_WINDOW_START);
        if !in_memory || in_window {
            return Err(QueueError::OutOfRange {
                index,
                addr: d.addr,
                len: d.len,
            });
        }
        // At most `size` (≤ 32768) lengths below 2^32 each: no overflow.
        total += u64::from(d.len);
        if total > u64::from(u32::MAX) {
            return Err(QueueError::TooLong { head });
        }
        let buf = Buf {
            addr: d.addr,
            len: d.len,
        };
        let writable = d.flags & DESC_F_WRITE != 0;
        let allowed = match want {
            Direction::Read => !writable,
            Direction::Write => writable,
            Direction::ReadThenWrite => writable || chain.writable.is_empty(),
        };
        if !allowed {
            return Err(QueueError::WrongDirection { index, want });
        }
        if writable {
            chain.writable.push(buf);
        } else {
            chain.readable.push(buf);
        }
        if d.flags & DESC_F_NEXT == 0 {
            return Ok(chain);
        }
        index = d.next;
    }
    Err(QueueError::Loop { head })
}

/// Where a queue's rings are, as the driver configured them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueConfig {
    /// Entries.
    pub size: u16,
    /// Descriptor table.
    pub desc: u64,
    /// Available ring.
    pub avail: u64,
    /// Used ring.
    pub used: u64,
}

impl QueueConfig {
    /// Checks size and ring placement against guest memory of `mem_size` bytes.
    pub fn validate(&self, max_size: u16, mem_size: u64) -> Result<(), QueueError> {
        let size = self.size;
        if size == 0 || !size.is_power_of_two() || size > max_size || size > MAX_QUEUE_SIZE {
            return Err(QueueError::BadSize(u32::from(size)));
        }
        let rings = [
            ("descriptor table", self.desc, desc_table_bytes(size), 16),
            ("available ring", self.avail, avail_ring_bytes(size), 2),
            ("used ring", self.used, used_ring_bytes(size), 4),
        ];
        for (ring, addr, len, align) in rings {
            let fits = addr.checked_add(len).is_some_and(|end| end <= mem_size);
            if !fits || !addr.is_multiple_of(align) {
                return Err(QueueError::BadRing { ring, addr });
            }
        }
        // Every ring is inside memory now, so the ends cannot overflow.
        for (i, (a, a_addr, a_len, _)) in rings.iter().enumerate() {
            for (b, b_addr, b_len, _) in &rings[i + 1..] {
                if a_addr < &(b_addr + b_len) && b_addr < &(a_addr + a_len) {
                    return Err(QueueError::RingsOverlap(a, b));
                }
            }
        }
        Ok(())
    }
}

/// A live queue: the rings and the device's own indices.
#[derive(Debug)]
pub struct DeviceQueue {
    config: QueueConfig,
    want: Direction,
    /// The next available index to consume.
    next_avail: u16,
    /// The next used index to produce.
    next_used: u16,
}

impl DeviceQueue {
    /// A queue over validated `config` whose chains must go `want`.
    pub fn new(config: QueueConfig, want: Direction) -> DeviceQueue {
        DeviceQueue {
            config,
            want,
            next_avail: 0,
            next_used: 0,
        }
    }

    /// Whether the guest has published chains not yet taken.
    pub fn has_available(&self, mem: &GuestMem) -> Result<bool, QueueError> {
        Ok(self.avail_idx(mem)? != self.next_avail)
    }

    fn avail_idx(&self, mem: &GuestMem) -> Result<u16, QueueError> {
        mem.load_u16(self.config.avail + RING_IDX_OFFSET, Ordering::Acquire)
            .ok_or(QueueError::Access("available ring"))
    }

    /// The next available chain, validated, or `None` if there is none.
    pub fn pop(&mut self, mem: &GuestMem) -> Result<Option<Chain>, QueueError> {
        let published = self.avail_idx(mem)?;
        let pending = published.wrapping_sub(self.next_avail);
        if pending == 0 {
            return Ok(None);
        }
        if pending > self.config.size {
            return Err(QueueError::IndexJump {
                from: self.next_avail,
                to: published,
                size: self.config.size,
            });
        }
        let slot = u64::from(self.next_avail & (self.config.size - 1));
        let head = mem
            .load_u16(
                self.config.avail + RING_ENTRIES_OFFSET + 2 * slot,
                Ordering::Acquire,
            )
            .ok_or(QueueError::Access("available ring"))?;
        let desc = self.config.desc;
        let chain = walk_chain(head, self.config.size, mem.size(), self.want, |i| {
            let at = desc + 16 * u64::from(i);
            let mut raw = [0u8; 16];
            mem.read_into(at, &mut raw)?;
            Some(RawDesc {
                addr: u64::from_le_bytes(raw[0..8].try_into().ok()?),
                len: u32::from_le_bytes(raw[8..12].try_into().ok()?),
                flags: u16::from_le_bytes(raw[12..14].try_into().ok()?),
                next: u16::from_le_bytes(raw[14..16].try_into().ok()?),
            })
        })?;
        self.next_avail = self.next_avail.wrapping_add(1);
        Ok(Some(chain))
    }

    /// Returns chain `head` with `written` bytes written. Returns the used index before
    /// (for [`needs_notification`](Self::needs_notification)).
    pub fn push_used(
        &mut self,
        mem: &GuestMem,
        head: u16,
        written: u32,
    ) -> Result<u16, QueueError> {
        let old = self.next_used;
        let slot = u64::from(old & (self.config.size - 1));
        let at = self.config.used + RING_ENTRIES_OFFSET + 8 * slot;
        mem.write_u32(at, u32::from(head))
            .and_then(|()| mem.write_u32(at + 4, written))
            .ok_or(QueueError::Access("used ring"))?;
        self.next_used = old.wrapping_add(1);
        mem.store_u16(
            self.config.used + RING_IDX_OFFSET,
            self.next_used,
            Ordering::Release,
        )
        .ok_or(QueueError::Access("used ring"))?;
        Ok(old)
    }

    /// EVENT_IDX: having moved the used index from `old`, must the driver be told?
    pub fn needs_notification(&self, mem: &GuestMem, old: u16) -> Result<bool, QueueError> {
        fence(Ordering::SeqCst);
        let event = mem
            .load_u16(
                self.config.avail + used_event_offset(self.config.size),
                Ordering::Acquire,
            )
            .ok_or(QueueError::Access("available ring"))?;
        Ok(need_event(event, self.next_used, old))
    }

    /// EVENT_IDX: asks the driver to kick when it publishes past what is consumed now
    /// (before the device sleeps), or stops asking (`false`: while it polls). Returns
    /// whether chains arrived meanwhile (then the device must not sleep).
    pub fn set_kicks_wanted(&self, mem: &GuestMem, wanted: bool) -> Result<bool, QueueError> {
        let event = if wanted {
            self.next_avail
        } else {
            // Half the index space behind: no publish crosses it soon.
            self.next_avail.wrapping_sub(0x8000)
        };
        mem.store_u16(
            self.config.used + avail_event_offset(self.config.size),
            event,
            Ordering::Release,
        )
        .ok_or(QueueError::Access("used ring"))?;
        fence(Ordering::SeqCst);
        self.has_available(mem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEM: u64 = 1 << 20;

    fn table(descs: &[RawDesc]) -> impl FnMut(u16) -> Option<RawDesc> + '_ {
        |i| descs.get(usize::from(i)).copied()
    }

    fn d(addr: u64, len: u32, flags: u16, next: u16) -> RawDesc {
        RawDesc {
            addr,
            len,
            flags,
            next,
        }
    }

    #[test]
    fn a_good_chain_is_walked_in_order() {
        let t = [
            d(0x1000, 12, DESC_F_NEXT, 2),
            d(0, 0, 0, 0),
            d(0x2000, 100, 0, 0),
        ];
        let c = walk_chain(0, 4, MEM, Direction::Read, table(&t)).unwrap();
        assert_eq!(c.readable.len(), 2);
        assert_eq!(c.readable[1].addr, 0x2000);
    }

    #[test]
    fn hostile_chains_are_refused() {
        use QueueError::*;
        type Case = (Vec<RawDesc>, Direction, fn(&QueueError) -> bool);
        let cases: Vec<Case> = vec![
            (vec![d(0x1000, 8, DESC_F_NEXT, 0)], Direction::Read, |e| {
                matches!(e, Loop { .. })
            }),
            (
                vec![d(0x1000, 8, DESC_F_NEXT, 1), d(0x1000, 8, DESC_F_NEXT, 0)],
                Direction::Read,
                |e| matches!(e, Loop { .. }),
            ),
            (vec![d(0x1000, 8, DESC_F_NEXT, 9)], Direction::Read, |e| {
                matches!(e, BadIndex { .. })
            }),
            (vec![d(0x1000, 0, 0, 0)], Direction::Read, |e| {
                matches!(e, ZeroLength { .. })
            }),
            (vec![d(MEM - 4, 8, 0, 0)], Direction::Read, |e| {
                matches!(e, OutOfRange { .. })
            }),
            (vec![d(u64::MAX - 2, 8, 0, 0)], Direction::Read, |e| {
                matches!(e, OutOfRange { .. })
            }),
            (vec![d(0x1000, u32::MAX, 0, 0)], Direction::Read, |e| {
                matches!(e, OutOfRange { .. })
            }),
            (
                vec![d(0x1000, 8, DESC_F_INDIRECT, 0)],
                Direction::Read,
                |e| matches!(e, Indirect { .. }),
            ),
            (vec![d(0x1000, 8, DESC_F_WRITE, 0)], Direction::Read, |e| {
                matches!(e, WrongDirection { .. })
            }),
            (vec![d(0x1000, 8, 0, 0)], Direction::Write, |e| {
                matches!(e, WrongDirection { .. })
            }),
            (
                vec![
                    d(0x1000, 8, DESC_F_WRITE | DESC_F_NEXT, 1),
                    d(0x2000, 8, 0, 0),
                ],
                Direction::ReadThenWrite,
                |e| matches!(e, WrongDirection { .. }),
            ),
        ];
        for (t, want, expected) in cases {
            let err = walk_chain(0, 2, MEM, want, table(&t)).unwrap_err();
            assert!(expected(&err), "{t:?}: {err}");
        }
        // A buffer in the MMIO window, even in a (hypothetically) huge guest.
        let t = [d(MMIO_WINDOW_START, 8, 0, 0)];
        let err = walk_chain(0, 1, u64::MAX, Direction::Read, table(&t)).unwrap_err();
        assert!(matches!(err, OutOfRange { .. }));
        // More than 4 GiB in all, each buffer inside a (hypothetical) 1 TiB guest.
        let t = [d(0, 3 << 30, DESC_F_NEXT, 1), d(1 << 33, 3 << 30, 0, 0)];
        let err = walk_chain(0, 2, 1 << 40, Direction::Read, table(&t)).unwrap_err();
        assert_eq!(err, TooLong { head: 0 });
        let one = walk_chain(0, 2, 1 << 40, Direction::Read, table(&t[1..])).unwrap();
        assert_eq!(one.readable.len(), 1, "one 3 GiB buffer is fine");
        // Unreadable table.
        let err = walk_chain(0, 4, MEM, Direction::Read, |_| None).unwrap_err();
        assert!(matches!(err, Access(_)));
    }

    #[test]
    fn ring_configs_are_checked() {
        let good = QueueConfig {
            size: 256,
            desc: 0x1000,
            avail: 0x2000,
            used: 0x3000,
        };
        assert!(good.validate(256, MEM).is_ok());
        // Back to back is not overlap: the available ring of 256 is 518 bytes.
        let tight = QueueConfig {
            avail: 0x1000 + 4096,
            used: 0x1000 + 4096 + 520,
            ..good
        };
        assert!(tight.validate(256, MEM).is_ok());
        for bad in [
            QueueConfig { size: 0, ..good },
            QueueConfig { size: 100, ..good },
            QueueConfig { size: 512, ..good },
            QueueConfig {
                desc: 0x1008,
                ..good
            },
            QueueConfig {
                avail: 0x2001,
                ..good
            },
            QueueConfig {
                used: 0x3002,
                ..good
            },
            QueueConfig {
                used: MEM - 16,
                ..good
            },
            QueueConfig {
                desc: u64::MAX - 8,
                ..good
            },
            QueueConfig {
                desc: 0,
                avail: 0,
                used: 0,
                ..good
            },
            QueueConfig {
                used: 0x2000 + 516,
                ..good
            },
        ] {
            assert!(bad.validate(256, MEM).is_err(), "{bad:?}");
        }
    }
}
