//! virtio 1.x over the MMIO transport, as the monitor's virtio-net device and the guest's
//! driver both speak it: register offsets, status and feature bits, the split-ring layout,
//! the `virtio_net` header and config space, and the EVENT_IDX notification rule.
//!
//! Values are from the virtio 1.2 specification (§2.7 split virtqueues, §4.2 MMIO
//! transport, §5.1 network device); the host-side tests of `ebb-vmm` check them against
//! the rust-vmm `virtio-bindings` crate. All multi-byte fields are little-endian.
//!
//! # Where devices are
//!
//! Device slots are [`MMIO_SLOT_SIZE`] bytes apart from [`MMIO_BASE`], where QEMU's
//! `microvm` machine puts its virtio-MMIO transports; `ebb-vmm` uses the same base, so one
//! probe finds devices under both. A driver probes slots `0..MMIO_SLOTS` in order and stops
//! at the first whose magic is not [`MAGIC`]; a slot whose device id is 0 is an empty
//! transport (QEMU creates them) and is skipped. Both boot paths map
//! `MMIO_WINDOW_START..MMIO_WINDOW_END` user read-write (uncached), and guest RAM never
//! reaches into it.

/// Guest-physical address of slot 0.
pub const MMIO_BASE: u64 = 0xfeb0_0000;
/// Bytes between slots (registers up to 0x100, then the device config).
pub const MMIO_SLOT_SIZE: u64 = 0x200;
/// Slots a driver probes (QEMU microvm has up to 24).
pub const MMIO_SLOTS: u64 = 24;
/// Start of the 2 MiB-aligned window both boot paths map for MMIO (covers every slot).
pub const MMIO_WINDOW_START: u64 = 0xfea0_0000;
/// End (exclusive) of the MMIO window.
pub const MMIO_WINDOW_END: u64 = 0xfec0_0000;

/// Guest-physical address of slot `n`.
pub const fn slot_addr(n: u64) -> u64 {
    MMIO_BASE + n * MMIO_SLOT_SIZE
}

/// `MagicValue`: "virt" in little-endian byte order.
pub const MAGIC: u32 = 0x7472_6976;
/// `Version` of the modern (virtio 1.x) MMIO transport; 1 is the legacy one.
pub const MMIO_VERSION: u32 = 2;
/// `DeviceID` of a network device.
pub const DEVICE_ID_NET: u32 = 1;
/// `VendorID` the monitor reports: "EBB\0".
pub const VENDOR_ID_EBB: u32 = u32::from_le_bytes(*b"EBB\0");

/// Register offsets from a slot's base. All are 32-bit, naturally aligned accesses,
/// except the device config at [`regs::CONFIG`] and above (any width).
pub mod regs {
    /// R: [`super::MAGIC`].
    pub const MAGIC: u64 = 0x000;
    /// R: [`super::MMIO_VERSION`].
    pub const VERSION: u64 = 0x004;
    /// R: device type; 0 is an empty slot.
    pub const DEVICE_ID: u64 = 0x008;
    /// R: vendor.
    pub const VENDOR_ID: u64 = 0x00c;
    /// R: 32 device feature bits, the window chosen by [`DEVICE_FEATURES_SEL`].
    pub const DEVICE_FEATURES: u64 = 0x010;
    /// W: 0 = feature bits 0..32, 1 = bits 32..64.
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    /// W: the driver's accepted feature bits, window chosen by [`DRIVER_FEATURES_SEL`].
    pub const DRIVER_FEATURES: u64 = 0x020;
    /// W: window of [`DRIVER_FEATURES`].
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    /// W: the queue the following queue registers refer to.
    pub const QUEUE_SEL: u64 = 0x030;
    /// R: largest size of the selected queue; 0 = the queue does not exist.
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    /// W: size the driver chose (a power of two, at most the maximum).
    pub const QUEUE_NUM: u64 = 0x038;
    /// RW: 1 once the driver has set the queue up; reads 0 after a reset.
    pub const QUEUE_READY: u64 = 0x044;
    /// W: the index of a queue with new available buffers (a "kick").
    pub const QUEUE_NOTIFY: u64 = 0x050;
    /// R: interrupt causes (unused here: the guest takes no interrupts).
    pub const INTERRUPT_STATUS: u64 = 0x060;
    /// W: acknowledges interrupt causes.
    pub const INTERRUPT_ACK: u64 = 0x064;
    /// RW: the device status byte ([`super::status`]); writing 0 resets the device.
    pub const STATUS: u64 = 0x070;
    /// W: descriptor table address, low 32 bits.
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    /// W: descriptor table address, high 32 bits.
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    /// W: available ring ("driver area") address, low 32 bits.
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    /// W: available ring address, high 32 bits.
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    /// W: used ring ("device area") address, low 32 bits.
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    /// W: used ring address, high 32 bits.
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    /// R: changes whenever the device config changes.
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Start of the device-specific config ([`super::VirtioNetConfigSpace`] for a network
    /// device).
    pub const CONFIG: u64 = 0x100;
}

/// Device status bits (the [`regs::STATUS`] register).
pub mod status {
    /// The driver noticed the device.
    pub const ACKNOWLEDGE: u32 = 1;
    /// The driver knows how to drive it.
    pub const DRIVER: u32 = 2;
    /// The driver is set up; the device may use the queues.
    pub const DRIVER_OK: u32 = 4;
    /// Feature negotiation is complete (the device clears it if it refuses the features).
    pub const FEATURES_OK: u32 = 8;
    /// The device hit an error it cannot recover from without a reset (a bad descriptor).
    pub const DEVICE_NEEDS_RESET: u32 = 0x40;
    /// The driver gave up.
    pub const FAILED: u32 = 0x80;
}

/// Feature bits (bit numbers).
pub mod features {
    /// net: the device handles packets with partial checksums.
    pub const NET_CSUM: u32 = 0;
    /// net: the driver handles packets with partial checksums.
    pub const NET_GUEST_CSUM: u32 = 1;
    /// net: the device reports the MTU in its config.
    pub const NET_MTU: u32 = 3;
    /// net: the driver takes TCPv4 frames longer than the MTU (not offered by ebb-vmm).
    pub const NET_GUEST_TSO4: u32 = 7;
    /// net: the device cuts TCPv4 frames longer than the MTU into segments itself
    /// (TCP segmentation offload; needs [`NET_CSUM`]).
    pub const NET_HOST_TSO4: u32 = 11;
    /// net: the device has a MAC address in its config.
    pub const NET_MAC: u32 = 5;
    /// net: the driver may merge receive buffers (not offered by ebb-vmm).
    pub const NET_MRG_RXBUF: u32 = 15;
    /// net: the config's `status` field is valid.
    pub const NET_STATUS: u32 = 16;
    /// net: there is a control queue.
    pub const NET_CTRL_VQ: u32 = 17;
    /// net: several receive/transmit queue pairs, steered per flow.
    pub const NET_MQ: u32 = 22;
    /// Descriptors may point at indirect tables (not offered by ebb-vmm).
    pub const RING_INDIRECT_DESC: u32 = 28;
    /// `used_event` / `avail_event` notification suppression.
    pub const RING_EVENT_IDX: u32 = 29;
    /// virtio 1.x; required by the modern MMIO transport.
    pub const VERSION_1: u32 = 32;

    /// The mask of one bit number.
    pub const fn bit(n: u32) -> u64 {
        1 << n
    }
}

/// Split-ring descriptor flag: the chain continues at `next`.
pub const DESC_F_NEXT: u16 = 1;
/// Split-ring descriptor flag: the device writes this buffer (receive buffers).
pub const DESC_F_WRITE: u16 = 2;
/// Split-ring descriptor flag: the buffer is an indirect table (never negotiated here).
pub const DESC_F_INDIRECT: u16 = 4;
/// Available-ring flag: the driver does not want used-buffer notifications (without
/// EVENT_IDX).
pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Used-ring flag: the device does not want kicks (without EVENT_IDX).
pub const USED_F_NO_NOTIFY: u16 = 1;
/// Largest queue size of a split ring.
pub const MAX_QUEUE_SIZE: u16 = 32768;

/// One split-ring descriptor, 16 bytes, in a 16-byte-aligned table of `size` entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// Guest-physical address of the buffer.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// [`DESC_F_NEXT`], [`DESC_F_WRITE`], [`DESC_F_INDIRECT`].
    pub flags: u16,
    /// The next descriptor of the chain when [`DESC_F_NEXT`] is set.
    pub next: u16,
}

/// One used-ring element: the head of a returned chain and the bytes the device wrote.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsedElem {
    /// Index of the chain's first descriptor.
    pub id: u32,
    /// Bytes written into the chain's device-writable buffers.
    pub len: u32,
}

/// Bytes of a descriptor table of `size` entries (alignment 16).
pub const fn desc_table_bytes(size: u16) -> u64 {
    16 * size as u64
}
/// Bytes of an available ring of `size` entries with `used_event` (alignment 2):
/// `flags: u16, idx: u16, ring: [u16; size], used_event: u16`.
pub const fn avail_ring_bytes(size: u16) -> u64 {
    6 + 2 * size as u64
}
/// Bytes of a used ring of `size` entries with `avail_event` (alignment 4):
/// `flags: u16, idx: u16, ring: [UsedElem; size], avail_event: u16`.
pub const fn used_ring_bytes(size: u16) -> u64 {
    6 + 8 * size as u64
}
/// Offset of `avail.idx` (and of `used.idx`) from its ring's start.
pub const RING_IDX_OFFSET: u64 = 2;
/// Offset of `avail.ring[0]` (and `used.ring[0]`) from its ring's start.
pub const RING_ENTRIES_OFFSET: u64 = 4;
/// Offset of `used_event` from the available ring's start.
pub const fn used_event_offset(size: u16) -> u64 {
    4 + 2 * size as u64
}
/// Offset of `avail_event` from the used ring's start.
pub const fn avail_event_offset(size: u16) -> u64 {
    4 + 8 * size as u64
}

/// The EVENT_IDX rule (Linux's `vring_need_event`): having moved an index from `old` to
/// `new`, must the other side be notified, given that it asked to hear about `event`?
/// True iff `event` lies in `[old, new)`, with u16 wrap-around.
pub const fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// Queue index of pair `n`'s receive queue (transmit is `2n + 1`).
pub const fn rx_queue(pair: u16) -> u16 {
    2 * pair
}
/// Queue index of pair `n`'s transmit queue.
pub const fn tx_queue(pair: u16) -> u16 {
    2 * pair + 1
}
/// Queue index of the control queue when the device has `max_pairs` queue pairs.
pub const fn ctrl_queue(max_pairs: u16) -> u16 {
    2 * max_pairs
}

/// The header in front of every frame on a virtio-net queue (with VERSION_1 it always
/// has `num_buffers`): 12 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetHdr {
    /// [`NET_HDR_F_NEEDS_CSUM`], [`NET_HDR_F_DATA_VALID`].
    pub flags: u8,
    /// [`NET_HDR_GSO_NONE`], or [`NET_HDR_GSO_TCPV4`] on transmit with
    /// [`features::NET_HOST_TSO4`].
    pub gso_type: u8,
    /// Length of the Ethernet, IP and TCP headers (GSO only).
    pub hdr_len: u16,
    /// GSO: the TCP payload bytes of each segment but the last.
    pub gso_size: u16,
    /// Where checksumming starts ([`NET_HDR_F_NEEDS_CSUM`]).
    pub csum_start: u16,
    /// Where the checksum goes, relative to `csum_start`.
    pub csum_offset: u16,
    /// Buffers this frame spans (1 without MRG_RXBUF).
    pub num_buffers: u16,
}
/// Bytes of [`NetHdr`].
pub const NET_HDR_LEN: usize = 12;
/// [`NetHdr::flags`]: the checksum at `csum_start + csum_offset` must be completed.
pub const NET_HDR_F_NEEDS_CSUM: u8 = 1;
/// [`NetHdr::flags`]: the device checked the checksum.
pub const NET_HDR_F_DATA_VALID: u8 = 2;
/// [`NetHdr::gso_type`]: not a GSO frame.
pub const NET_HDR_GSO_NONE: u8 = 0;
/// [`NetHdr::gso_type`]: a TCPv4 frame for the device to cut into `gso_size` segments.
pub const NET_HDR_GSO_TCPV4: u8 = 1;

impl NetHdr {
    /// The header of a frame with complete checksums, not to be segmented: all zero.
    pub const PLAIN: NetHdr = NetHdr {
        flags: 0,
        gso_type: NET_HDR_GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
        num_buffers: 0,
    };

    /// A header asking for the checksum at `start + offset` to be completed
    /// ([`NET_HDR_F_NEEDS_CSUM`]).
    pub const fn needs_csum(start: u16, offset: u16) -> NetHdr {
        NetHdr {
            flags: NET_HDR_F_NEEDS_CSUM,
            csum_start: start,
            csum_offset: offset,
            ..NetHdr::PLAIN
        }
    }

    /// The same header, asking for the frame to be cut into TCPv4 segments of
    /// `gso_size` payload bytes behind `hdr_len` bytes of headers.
    pub const fn with_tcpv4_gso(self, hdr_len: u16, gso_size: u16) -> NetHdr {
        NetHdr {
            gso_type: NET_HDR_GSO_TCPV4,
            hdr_len,
            gso_size,
            ..self
        }
    }

    /// The 12 bytes on the wire (little-endian fields).
    pub const fn to_bytes(&self) -> [u8; NET_HDR_LEN] {
        let [h0, h1] = self.hdr_len.to_le_bytes();
        let [g0, g1] = self.gso_size.to_le_bytes();
        let [s0, s1] = self.csum_start.to_le_bytes();
        let [o0, o1] = self.csum_offset.to_le_bytes();
        let [n0, n1] = self.num_buffers.to_le_bytes();
        [
            self.flags,
            self.gso_type,
            h0,
            h1,
            g0,
            g1,
            s0,
            s1,
            o0,
            o1,
            n0,
            n1,
        ]
    }

    /// The header these 12 bytes encode.
    pub const fn from_bytes(b: &[u8; NET_HDR_LEN]) -> NetHdr {
        NetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16::from_le_bytes([b[2], b[3]]),
            gso_size: u16::from_le_bytes([b[4], b[5]]),
            csum_start: u16::from_le_bytes([b[6], b[7]]),
            csum_offset: u16::from_le_bytes([b[8], b[9]]),
            num_buffers: u16::from_le_bytes([b[10], b[11]]),
        }
    }
}

/// The network device's config space at [`regs::CONFIG`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtioNetConfigSpace {
    /// The MAC address ([`features::NET_MAC`]).
    pub mac: [u8; 6],
    /// [`NET_S_LINK_UP`] ([`features::NET_STATUS`]).
    pub status: u16,
    /// Queue pairs the device has ([`features::NET_MQ`]).
    pub max_virtqueue_pairs: u16,
    /// The MTU ([`features::NET_MTU`]).
    pub mtu: u16,
}
/// [`VirtioNetConfigSpace::status`]: the link is up.
pub const NET_S_LINK_UP: u16 = 1;

/// Control-queue class of multi-queue commands.
pub const NET_CTRL_MQ: u8 = 4;
/// [`NET_CTRL_MQ`] command: use this many queue pairs (a le16 follows).
pub const NET_CTRL_MQ_VQ_PAIRS_SET: u8 = 0;
/// Control-queue ack: the command succeeded.
pub const NET_OK: u8 = 0;
/// Control-queue ack: the command failed.
pub const NET_ERR: u8 = 1;

const _: () = {
    assert!(core::mem::size_of::<Descriptor>() == 16);
    assert!(core::mem::size_of::<UsedElem>() == 8);
    assert!(core::mem::size_of::<NetHdr>() == NET_HDR_LEN);
    assert!(core::mem::offset_of!(VirtioNetConfigSpace, status) == 6);
    assert!(core::mem::offset_of!(VirtioNetConfigSpace, max_virtqueue_pairs) == 8);
    assert!(core::mem::offset_of!(VirtioNetConfigSpace, mtu) == 10);
    assert!(MMIO_BASE >= MMIO_WINDOW_START);
    assert!(MMIO_BASE + MMIO_SLOTS * MMIO_SLOT_SIZE <= MMIO_WINDOW_END);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_net_header_round_trips_through_its_bytes() {
        let h = NetHdr::needs_csum(34, 16).with_tcpv4_gso(54, 1448);
        let bytes = h.to_bytes();
        assert_eq!(bytes, [1, 1, 54, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0]);
        assert_eq!(NetHdr::from_bytes(&bytes), h);
        assert_eq!(NetHdr::PLAIN.to_bytes(), [0; NET_HDR_LEN]);
    }

    #[test]
    fn need_event_matches_the_spec_examples() {
        // The other side asked about index 5; we moved 3 -> 6: it must hear.
        assert!(need_event(5, 6, 3));
        // Moved 6 -> 8: 5 was already passed, no notification.
        assert!(!need_event(5, 8, 6));
        // Exactly at the boundary: moved 5 -> 6 covers event 5.
        assert!(need_event(5, 6, 5));
        // Wrap-around.
        assert!(need_event(0xffff, 2, 0xfffe));
        assert!(!need_event(2, 2, 0xfffe));
    }

    #[test]
    fn ring_sizes_for_256_entries() {
        assert_eq!(desc_table_bytes(256), 4096);
        assert_eq!(avail_ring_bytes(256), 518);
        assert_eq!(used_ring_bytes(256), 2054);
        assert_eq!(used_event_offset(256), 516);
        assert_eq!(avail_event_offset(256), 2052);
    }
}
