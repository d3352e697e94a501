//! The MMIO transport: the register file the vCPU threads serve on MMIO exits, feature
//! negotiation, reset and breakage (see the parent module's "Transport").

use super::offload::Offload;
use super::{NetStats, QUEUE_MAX, QueueFault, on};
use crate::guest::GuestMem;
use crate::virtio::queue::{QueueConfig, QueueError};
use core::mem::{offset_of, size_of};
use ebb_abi::virtio::{
    DEVICE_ID_NET, MAGIC, MMIO_BASE, MMIO_SLOT_SIZE, MMIO_VERSION, NET_S_LINK_UP, VENDOR_ID_EBB,
    VirtioNetConfigSpace, features, regs, status,
};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

/// Why an access of `len` bytes to register `offset` is not one the transport takes (the
/// spec allows only aligned 32-bit accesses below the config space), or `None`.
fn bad_access(what: &str, len: usize, offset: u64) -> Option<String> {
    if len != 4 {
        Some(format!("{len}-byte {what} register {offset:#x}"))
    } else if !offset.is_multiple_of(4) {
        Some(format!("misaligned {what} register {offset:#x}"))
    } else {
        None
    }
}

/// Register state, behind a lock the vCPU threads and the I/O thread share.
#[derive(Debug, Default)]
struct Transport {
    status: u32,
    device_features_sel: u32,
    driver_features_sel: u32,
    driver_features: u64,
    queue_sel: u32,
    queues: Vec<(QueueConfig, bool)>,
    broken: Option<String>,
    /// Bumped on every activation or reset: the I/O thread rebuilds its queues.
    epoch: u64,
}

/// The virtio-net device the monitor serves (the guest's driver is `ebb-native`'s): see the
/// [module docs](super).
pub struct VirtioNetDevice {
    mac: [u8; 6],
    pub(super) pairs: u16,
    /// What the device offers beyond the basics.
    offload: Offload,
    transport: Mutex<Transport>,
    /// Tells a sleeping I/O thread that the transport changed.
    pub(super) control: EventFd,
    /// Counts transport changes (reset, activation, breakage): the I/O thread compares it
    /// with what it last saw each round — one load — instead of locking the transport.
    pub(super) changes: AtomicU64,
    /// Counters.
    pub stats: NetStats,
}

impl std::fmt::Debug for VirtioNetDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioNetDevice")
            .field("pairs", &self.pairs)
            .finish()
    }
}

/// The features the device offers: the basics, and those of `offload` (HOST_TSO4 and
/// GUEST_TSO4 only with the checksum offload they depend on).
fn offered_features(offload: Offload) -> u64 {
    let bits = |list: &[u32]| list.iter().fold(0, |acc, &bit| acc | features::bit(bit));
    let mut offered = bits(&[
        features::VERSION_1,
        features::RING_EVENT_IDX,
        features::NET_MAC,
        features::NET_STATUS,
        features::NET_MTU,
        features::NET_MQ,
        features::NET_CTRL_VQ,
    ]);
    if offload.checksum {
        offered |= bits(&[features::NET_CSUM, features::NET_GUEST_CSUM]);
        if offload.tso4 {
            offered |= bits(&[features::NET_HOST_TSO4]);
        }
        if offload.guest_tso4 {
            offered |= bits(&[features::NET_GUEST_TSO4]);
        }
    }
    offered
}

/// Features the spec makes depend on others (virtio 1.2 §5.1.3.1): `(feature, needs)`.
/// Segmentation needs the segments' checksums completed — by the device on transmit
/// (CSUM), by the driver's trust in a partial checksum on receive (GUEST_CSUM). A driver
/// accepting a feature without what it needs is refused.
const FEATURE_DEPENDENCIES: [(u32, u32); 2] = [
    (features::NET_HOST_TSO4, features::NET_CSUM),
    (features::NET_GUEST_TSO4, features::NET_GUEST_CSUM),
];

/// Whether `accepted` holds a feature without what it depends on
/// ([`FEATURE_DEPENDENCIES`]).
fn misses_a_dependency(accepted: u64) -> bool {
    let has = |bit| accepted & features::bit(bit) != 0;
    FEATURE_DEPENDENCIES
        .iter()
        .any(|&(feature, needs)| has(feature) && !has(needs))
}

impl VirtioNetDevice {
    /// A device with `pairs` queue pairs (one per vCPU) and MAC `mac`, offering `offload`
    /// (only what the backend can honour: see [`Offload`] and the module docs).
    pub fn new(mac: [u8; 6], pairs: u16, offload: Offload) -> std::io::Result<VirtioNetDevice> {
        Ok(VirtioNetDevice {
            mac,
            pairs,
            offload,
            transport: Mutex::new(Transport {
                queues: vec![(QueueConfig::default(), false); usize::from(2 * pairs + 1)],
                ..Transport::default()
            }),
            control: EventFd::new(EFD_NONBLOCK)?,
            changes: AtomicU64::new(0),
            stats: NetStats::default(),
        })
    }

    /// Queues: two per pair and the control queue.
    pub fn queue_count(&self) -> u16 {
        2 * self.pairs + 1
    }

    /// Whether `addr` is in the window this device answers for (every slot).
    pub fn claims(addr: u64) -> bool {
        (ebb_abi::virtio::MMIO_WINDOW_START..ebb_abi::virtio::MMIO_WINDOW_END).contains(&addr)
    }

    /// The transport changed: the I/O thread rebuilds its queues next round (and wakes
    /// for it if asleep).
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
        let _ = self.control.write(1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Transport> {
        self.transport.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The config space ([`VirtioNetConfigSpace`]) as the driver reads it.
    fn config_bytes(&self) -> [u8; size_of::<VirtioNetConfigSpace>()] {
        let mut c = [0u8; size_of::<VirtioNetConfigSpace>()];
        let mut put = |at: usize, bytes: &[u8]| c[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset_of!(VirtioNetConfigSpace, mac), &self.mac);
        put(
            offset_of!(VirtioNetConfigSpace, status),
            &NET_S_LINK_UP.to_le_bytes(),
        );
        put(
            offset_of!(VirtioNetConfigSpace, max_virtqueue_pairs),
            &self.pairs.to_le_bytes(),
        );
        put(
            offset_of!(VirtioNetConfigSpace, mtu),
            &(super::DEVICE_MTU as u16).to_le_bytes(),
        );
        c
    }

    /// A read exit at `addr`: fills `data`.
    pub fn mmio_read(&self, addr: u64, data: &mut [u8]) {
        self.stats.mmio_exits.fetch_add(1, Ordering::Relaxed);
        data.fill(0);
        if !(MMIO_BASE..MMIO_BASE + MMIO_SLOT_SIZE).contains(&addr) {
            return; // other slots: no transport (magic reads 0)
        }
        let offset = addr - MMIO_BASE;
        if offset >= regs::CONFIG {
            let config = self.config_bytes();
            for (i, byte) in data.iter_mut().enumerate() {
                *byte = config
                    .get((offset - regs::CONFIG) as usize + i)
                    .copied()
                    .unwrap_or(0);
            }
            return;
        }
        if let Some(why) = bad_access("read of", data.len(), offset) {
            self.break_device(&why);
            return;
        }
        let t = self.lock();
        let queue = t.queues.get(t.queue_sel as usize);
        let value = match offset {
            regs::MAGIC => MAGIC,
            regs::VERSION => MMIO_VERSION,
            regs::DEVICE_ID => DEVICE_ID_NET,
            regs::VENDOR_ID => VENDOR_ID_EBB,
            regs::DEVICE_FEATURES => match t.device_features_sel {
                0 => self.offered() as u32,
                1 => (self.offered() >> 32) as u32,
                _ => 0,
            },
            regs::QUEUE_NUM_MAX => queue.map_or(0, |_| u32::from(QUEUE_MAX)),
            regs::QUEUE_READY => queue.map_or(0, |q| u32::from(q.1)),
            regs::INTERRUPT_STATUS => 0,
            regs::STATUS => t.status,
            regs::CONFIG_GENERATION => 0,
            _ => 0,
        };
        data.copy_from_slice(&value.to_le_bytes());
    }

    /// A write exit at `addr` of `data`.
    pub fn mmio_write(&self, addr: u64, data: &[u8]) {
        self.stats.mmio_exits.fetch_add(1, Ordering::Relaxed);
        if !(MMIO_BASE..MMIO_BASE + regs::CONFIG).contains(&addr) {
            return; // config space is read-only here; other slots are empty
        }
        let offset = addr - MMIO_BASE;
        if let Some(why) = bad_access("write to", data.len(), offset) {
            self.break_device(&why);
            return;
        }
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            return; // four bytes: checked just above
        };
        let value = u32::from_le_bytes(bytes);
        let mut t = self.lock();
        let sel = t.queue_sel as usize;
        // The selected queue's registers are read-only once it is ready, and every
        // queue's once the driver is running: the device uses (or, for a queue not ready
        // at DRIVER_OK, ignores) what it saw at DRIVER_OK until a reset.
        let frozen = t.queues.get(sel).is_some_and(|q| q.1) || t.status & status::DRIVER_OK != 0;
        let set_queue = |t: &mut Transport, f: &dyn Fn(&mut QueueConfig)| {
            if let Some((config, _)) = t.queues.get_mut(sel)
                && !frozen
            {
                f(config);
            }
        };
        let low = |old: u64| (old & !0xffff_ffff) | u64::from(value);
        let high = |old: u64| (old & 0xffff_ffff) | (u64::from(value) << 32);
        match offset {
            regs::DEVICE_FEATURES_SEL => t.device_features_sel = value,
            regs::DRIVER_FEATURES_SEL => t.driver_features_sel = value,
            // Negotiated is negotiated: the device acts on the accepted set from here on.
            regs::DRIVER_FEATURES if t.status & status::FEATURES_OK != 0 => {}
            regs::DRIVER_FEATURES => match t.driver_features_sel {
                0 => t.driver_features = (t.driver_features & !0xffff_ffff) | u64::from(value),
                1 => {
                    t.driver_features = (t.driver_features & 0xffff_ffff) | (u64::from(value) << 32)
                }
                _ => {}
            },
            regs::QUEUE_SEL => t.queue_sel = value,
            regs::QUEUE_NUM => match u16::try_from(value) {
                Ok(size) => set_queue(&mut t, &|q| q.size = size),
                // Kept as 16 bits, 0x1_0010 would become a valid 16.
                Err(_) if t.queues.get(sel).is_some() && !frozen => {
                    let fault = on(sel, self.pairs)(QueueError::BadSize(value));
                    self.break_locked(&mut t, &fault.to_string());
                }
                Err(_) => {}
            },
            regs::QUEUE_DESC_LOW => set_queue(&mut t, &|q| q.desc = low(q.desc)),
            regs::QUEUE_DESC_HIGH => set_queue(&mut t, &|q| q.desc = high(q.desc)),
            regs::QUEUE_DRIVER_LOW => set_queue(&mut t, &|q| q.avail = low(q.avail)),
            regs::QUEUE_DRIVER_HIGH => set_queue(&mut t, &|q| q.avail = high(q.avail)),
            regs::QUEUE_DEVICE_LOW => set_queue(&mut t, &|q| q.used = low(q.used)),
            regs::QUEUE_DEVICE_HIGH => set_queue(&mut t, &|q| q.used = high(q.used)),
            regs::QUEUE_READY => {
                if let Some(q) = t.queues.get_mut(sel)
                    && !frozen
                {
                    q.1 = value == 1;
                }
            }
            regs::QUEUE_NOTIFY => {} // kicks arrive through the ioeventfd
            regs::INTERRUPT_ACK => {}
            regs::STATUS => self.write_status(&mut t, value),
            _ => {}
        }
    }

    fn write_status(&self, t: &mut Transport, value: u32) {
        if value == 0 {
            let queues = t.queues.len();
            *t = Transport {
                queues: vec![(QueueConfig::default(), false); queues],
                epoch: t.epoch + 1,
                ..Transport::default()
            };
            self.changed();
            return;
        }
        let mut value = value;
        if value & status::FEATURES_OK != 0 && t.status & status::FEATURES_OK == 0 {
            // The device implements only EVENT_IDX notification suppression: a driver
            // without it would wait for notifications (and skip kicks) by rules the device
            // does not follow.
            let required =
                features::bit(features::VERSION_1) | features::bit(features::RING_EVENT_IDX);
            let acceptable = t.driver_features & !self.offered() == 0
                && t.driver_features & required == required
                && !misses_a_dependency(t.driver_features);
            if !acceptable {
                value &= !status::FEATURES_OK;
            }
        }
        let activated = value & status::DRIVER_OK != 0 && t.status & status::DRIVER_OK == 0;
        t.status = value | (t.status & status::DEVICE_NEEDS_RESET);
        if activated && value & status::FEATURES_OK == 0 {
            // Never negotiated, or refused and the driver went on: the device does not know
            // which ring layout and notification rules the driver expects.
            self.break_locked(t, "DRIVER_OK without FEATURES_OK: no features were agreed");
            return;
        }
        if activated {
            t.epoch += 1;
            self.changed();
        }
    }

    /// The features offered.
    pub fn offered(&self) -> u64 {
        offered_features(self.offload)
    }

    /// Marks the device broken: the guest sees DEVICE_NEEDS_RESET, the I/O thread stops.
    pub fn break_device(&self, why: &str) {
        self.break_locked(&mut self.lock(), why);
    }

    /// [`break_device`](Self::break_device) with the transport already locked.
    fn break_locked(&self, t: &mut Transport, why: &str) {
        self.stop_locked(t, "guest driver error", why);
    }

    /// Marks the device broken for a failure of the host side, not of the driver: the
    /// guest sees DEVICE_NEEDS_RESET all the same, the log line says whose fault it is.
    pub(super) fn break_for_backend(&self, why: &str) {
        self.stop_locked(&mut self.lock(), "backend failure", why);
    }

    /// Stops the device: `cause` (whose fault) and `why` logged once, `why` kept for
    /// [`broken`](Self::broken).
    fn stop_locked(&self, t: &mut Transport, cause: &str, why: &str) {
        if t.broken.is_none() {
            log::error!("virtio-net: {cause}, device stopped: {why}");
            t.broken = Some(why.to_string());
        }
        t.status |= status::DEVICE_NEEDS_RESET;
        t.epoch += 1;
        self.changed();
    }

    /// The features the driver accepted, once the device has agreed to them (FEATURES_OK).
    pub fn features(&self) -> Option<u64> {
        let t = self.lock();
        (t.status & status::FEATURES_OK != 0).then_some(t.driver_features)
    }

    /// Why the device is broken, if it is.
    pub fn broken(&self) -> Option<String> {
        self.lock().broken.clone()
    }

    /// The live queues if the driver is done setting up, validated against `mem`.
    pub(super) fn activation(
        &self,
        mem: &GuestMem,
    ) -> Result<Option<(u64, Vec<QueueConfig>, u64)>, QueueFault> {
        let t = self.lock();
        if t.broken.is_some() || t.status & status::DRIVER_OK == 0 {
            return Ok(None);
        }
        let mut configs = Vec::new();
        for (i, (config, ready)) in t.queues.iter().enumerate() {
            if *ready {
                config
                    .validate(QUEUE_MAX, mem.size())
                    .map_err(on(i, self.pairs))?;
                configs.push(*config);
            } else {
                configs.push(QueueConfig::default());
            }
        }
        Ok(Some((t.epoch, configs, t.driver_features)))
    }
}
