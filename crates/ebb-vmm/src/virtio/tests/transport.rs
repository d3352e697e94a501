//! The MMIO transport against a hostile driver: queue setup, status and feature
//! negotiation, register accesses.

use super::*;

// ===== queue setup =====

/// A fresh device whose driver sets up receive and control well and the transmit queue
/// with `size` at `rings`, then DRIVER_OK; driven to rest.
fn setup_case(size: u32, rings: (u64, u64, u64)) -> Guest {
    bounded(move || {
        let mut g = Guest::new();
        assert!(g.negotiate(Guest::good_features()));
        g.queue(RX, u32::from(SIZE), Guest::rings(RX));
        g.queue(TX, size, rings);
        g.queue(CTRL, u32::from(SIZE), Guest::rings(CTRL));
        g.driver_ok();
        g.settle();
        g
    })
}

#[test]
fn bad_queue_sizes_and_ring_addresses_break_the_device_naming_the_queue() {
    let (desc, avail, used) = Guest::rings(TX);
    type Case<'a> = (&'a str, u32, (u64, u64, u64), &'a str);
    let cases: Vec<Case> = vec![
        ("size zero", 0, (desc, avail, used), "queue size 0 is not"),
        (
            "size not a power of two",
            100,
            (desc, avail, used),
            "queue size 100 is not",
        ),
        (
            "size above the maximum",
            512,
            (desc, avail, used),
            "queue size 512 is not",
        ),
        (
            "size 32768",
            32768,
            (desc, avail, used),
            "queue size 32768 is not",
        ),
        (
            "descriptor table misaligned",
            16,
            (desc + 8, avail, used),
            "the descriptor table at 0x110008",
        ),
        (
            "available ring misaligned",
            16,
            (desc, avail + 1, used),
            "the available ring at 0x111001",
        ),
        (
            "used ring misaligned",
            16,
            (desc, avail, used + 2),
            "the used ring at 0x112002",
        ),
        (
            "used ring past the end",
            16,
            (desc, avail, MEM - 16),
            "the used ring at 0x7ffff0",
        ),
        (
            "descriptor table above 4 GiB",
            16,
            ((1 << 32) | desc, avail, used),
            "the descriptor table at 0x100110000",
        ),
        (
            "available ring at the top of the address space",
            16,
            (desc, u64::MAX - 1, used),
            "the available ring at 0xfffffffffffffffe",
        ),
        (
            "used ring in the MMIO window",
            16,
            (desc, avail, MMIO_BASE),
            "the used ring at 0xfeb00000",
        ),
    ];
    for (name, size, rings, words) in cases {
        let g = setup_case(size, rings);
        let why = g.dev.broken();
        assert!(
            g.status() & status::DEVICE_NEEDS_RESET != 0
                && [queue_name(TX), words]
                    .iter()
                    .all(|w| why.as_deref().unwrap_or("").contains(w)),
            "{name}: wanted DEVICE_NEEDS_RESET and a reason naming queue 1 and {words:?}, \
             got {why:?}"
        );
    }
}

#[test]
fn a_queue_size_beyond_16_bits_is_not_truncated() {
    // 0x1_0010 would be 16 if the device kept only the low 16 bits.
    let g = setup_case(0x1_0010, Guest::rings(TX));
    g.assert_broken(&[queue_name(TX), "queue size 65552 is not"]);
}

#[test]
fn a_queue_made_ready_before_its_addresses_is_refused() {
    let mut g = Guest::new();
    assert!(g.negotiate(Guest::good_features()));
    g.queue(RX, u32::from(SIZE), Guest::rings(RX));
    // Size set, then READY at once: the rings are all at 0, on top of each other.
    g.write(regs::QUEUE_SEL, u32::from(TX));
    g.write(regs::QUEUE_NUM, u32::from(SIZE));
    g.write(regs::QUEUE_READY, 1);
    g.driver_ok();
    g.settle();
    g.assert_broken(&[queue_name(TX), "overlap"]);
    // Not even the size: size 0.
    let mut g = Guest::new();
    assert!(g.negotiate(Guest::good_features()));
    g.write(regs::QUEUE_SEL, u32::from(RX));
    g.write(regs::QUEUE_READY, 1);
    g.driver_ok();
    g.settle();
    g.assert_broken(&[queue_name(RX), "queue size 0"]);
}

#[test]
fn queue_registers_of_a_ready_queue_are_ignored() {
    let mut g = Guest::new();
    g.start();
    g.write(regs::QUEUE_SEL, u32::from(TX));
    g.write(regs::QUEUE_NUM, 3);
    g.write(regs::QUEUE_DESC_LOW, 0xdead_0001);
    g.write(regs::QUEUE_DEVICE_HIGH, 0xffff_ffff);
    g.write(regs::QUEUE_READY, 0);
    assert_eq!(g.read(regs::QUEUE_READY), 1);
    let len = g.tx_buffer(BUF, FRAME);
    g.desc(TX, 0, d(BUF, len, 0, 0));
    g.publish(TX, 0);
    g.settle();
    g.assert_healthy();
    assert_eq!(g.sent(), vec![FRAME.to_vec()]);
}

#[test]
fn a_queue_set_up_after_driver_ok_is_refused() {
    let mut g = Guest::new();
    assert!(g.negotiate(Guest::good_features()));
    g.queue(RX, u32::from(SIZE), Guest::rings(RX));
    g.queue(TX, u32::from(SIZE), Guest::rings(TX));
    g.driver_ok();
    g.settle();
    // The control queue, too late: the device never uses it, so it must not read ready.
    g.write(regs::QUEUE_SEL, u32::from(CTRL));
    g.write(regs::QUEUE_NUM, u32::from(SIZE));
    g.write(regs::QUEUE_READY, 1);
    assert_eq!(g.read(regs::QUEUE_READY), 0);
    g.settle();
    g.assert_healthy();
}

#[test]
fn a_queue_that_does_not_exist_reads_as_absent() {
    let mut g = Guest::new();
    for sel in [3, 99, u32::MAX] {
        g.write(regs::QUEUE_SEL, sel);
        assert_eq!(g.read(regs::QUEUE_NUM_MAX), 0, "queue {sel}");
        g.write(regs::QUEUE_NUM, 16);
        g.write(regs::QUEUE_DESC_LOW, 0x1000);
        g.write(regs::QUEUE_READY, 1);
        assert_eq!(g.read(regs::QUEUE_READY), 0, "queue {sel}");
    }
    g.start();
    g.assert_healthy();
}

// ===== status and features =====

#[test]
fn features_outside_the_offer_or_without_version_1_are_refused() {
    let good = Guest::good_features();
    for (name, accepted) in [
        (
            "indirect descriptors",
            good | features::bit(features::RING_INDIRECT_DESC),
        ),
        (
            "mergeable receive buffers",
            good | features::bit(features::NET_MRG_RXBUF),
        ),
        ("a bit above 32", good | features::bit(40)),
        ("no VERSION_1", good & !features::bit(features::VERSION_1)),
    ] {
        let g = Guest::new();
        assert!(!g.negotiate(accepted), "{name}: FEATURES_OK stays clear");
        g.assert_healthy();
    }
    // Feature windows beyond the two that exist read 0 and take nothing.
    let g = Guest::new();
    g.write(regs::DEVICE_FEATURES_SEL, 2);
    assert_eq!(g.read(regs::DEVICE_FEATURES), 0);
    g.write(regs::DEVICE_FEATURES_SEL, 1);
    assert_eq!(g.read(regs::DEVICE_FEATURES), 1, "VERSION_1 is bit 32");
    g.write(regs::DRIVER_FEATURES_SEL, 7);
    g.write(regs::DRIVER_FEATURES, u32::MAX);
    assert!(g.negotiate(good));
}

#[test]
fn features_without_event_idx_are_refused() {
    // The device always suppresses notifications with EVENT_IDX; a driver that did not
    // accept it would wait for notifications the device never sends.
    let g = Guest::new();
    assert!(!g.negotiate(Guest::good_features() & !features::bit(features::RING_EVENT_IDX)));
    g.assert_healthy();
}

#[test]
fn feature_writes_after_features_ok_are_ignored() {
    let g = Guest::new();
    let good = Guest::good_features();
    assert!(g.negotiate(good));
    g.features(good | features::bit(features::RING_INDIRECT_DESC) | features::bit(40));
    assert_eq!(g.dev.features(), Some(good));
    g.write(
        regs::STATUS,
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK,
    );
    assert_eq!(g.dev.features(), Some(good));
    g.assert_healthy();
}

#[test]
fn driver_ok_without_features_ok_breaks_the_device() {
    for accepted in [None, Some(features::bit(features::RING_INDIRECT_DESC))] {
        let mut g = Guest::new();
        g.write(regs::STATUS, status::ACKNOWLEDGE | status::DRIVER);
        if let Some(bits) = accepted {
            // Refused features: FEATURES_OK cleared, and the driver goes on regardless.
            assert!(!g.negotiate(bits | Guest::good_features()));
        }
        for q in [RX, TX] {
            g.queue(q, u32::from(SIZE), Guest::rings(q));
        }
        g.write(
            regs::STATUS,
            status::ACKNOWLEDGE | status::DRIVER | status::DRIVER_OK,
        );
        g.settle();
        g.assert_broken(&["DRIVER_OK", "FEATURES_OK"]);
        // It never touched the rings.
        assert_eq!(g.used(TX), vec![]);
    }
}

// ===== register accesses =====

#[test]
fn register_accesses_that_are_not_32_bit_and_aligned_break_the_device() {
    type Access = Box<dyn Fn(&VirtioNetDevice)>;
    let cases: Vec<(&str, Access, &str)> = vec![
        (
            "1-byte read",
            Box::new(|dev| dev.mmio_read(MMIO_BASE + regs::STATUS, &mut [0u8; 1])),
            "1-byte read of register 0x70",
        ),
        (
            "2-byte read",
            Box::new(|dev| dev.mmio_read(MMIO_BASE + regs::MAGIC, &mut [0u8; 2])),
            "2-byte read of register 0x0",
        ),
        (
            "8-byte read",
            Box::new(|dev| dev.mmio_read(MMIO_BASE + regs::QUEUE_DESC_LOW, &mut [0u8; 8])),
            "8-byte read of register 0x80",
        ),
        (
            "misaligned read",
            Box::new(|dev| dev.mmio_read(MMIO_BASE + regs::STATUS + 2, &mut [0u8; 4])),
            "misaligned",
        ),
        (
            "1-byte write",
            Box::new(|dev| dev.mmio_write(MMIO_BASE + regs::STATUS, &[1])),
            "1-byte write to register 0x70",
        ),
        (
            "8-byte write",
            Box::new(|dev| dev.mmio_write(MMIO_BASE + regs::QUEUE_DESC_LOW, &[1; 8])),
            "8-byte write to register 0x80",
        ),
        (
            "empty write",
            Box::new(|dev| dev.mmio_write(MMIO_BASE + regs::STATUS, &[])),
            "0-byte write",
        ),
    ];
    for (name, access, words) in cases {
        let g = Guest::new();
        access(&g.dev);
        let why = g.dev.broken();
        assert!(
            g.status() & status::DEVICE_NEEDS_RESET != 0
                && why.as_deref().unwrap_or("").contains(words),
            "{name}: wanted DEVICE_NEEDS_RESET and a reason naming {words:?}, got {why:?}"
        );
    }
}

#[test]
fn a_misaligned_register_write_breaks_the_device() {
    let g = Guest::new();
    g.dev
        .mmio_write(MMIO_BASE + regs::STATUS + 1, &[1, 0, 0, 0]);
    g.assert_broken(&["misaligned", "0x71"]);
}

#[test]
fn accesses_outside_the_registers_are_harmless() {
    let g = Guest::new();
    // Other slots have no transport: magic 0, writes go nowhere.
    for slot in [1, 5, 23] {
        let base = MMIO_BASE + slot * ebb_abi::virtio::MMIO_SLOT_SIZE;
        let mut magic = [0xffu8; 4];
        g.dev.mmio_read(base + regs::MAGIC, &mut magic);
        assert_eq!(magic, [0; 4], "slot {slot}");
        g.dev.mmio_write(base + regs::STATUS, &[0xff; 4]);
        g.dev.mmio_write(base + regs::STATUS, &[0xff; 3]);
    }
    // Below the first slot, at the window's ends, and outside it.
    for addr in [
        ebb_abi::virtio::MMIO_WINDOW_START,
        ebb_abi::virtio::MMIO_WINDOW_END - 4,
        MMIO_BASE - 4,
        0,
        u64::MAX - 3,
    ] {
        let mut data = [0xffu8; 4];
        g.dev.mmio_read(addr, &mut data);
        assert_eq!(data, [0; 4], "{addr:#x}");
        g.dev.mmio_write(addr, &[0xff; 4]);
    }
    // A kick that reaches the register file (normally the ioeventfd takes it), for a
    // queue that does not exist.
    g.write(regs::QUEUE_NOTIFY, 0xffff);
    // Registers that do not exist read 0 and ignore writes.
    for offset in [0x018, 0x040, 0x0f0, 0x0f8] {
        assert_eq!(g.read(offset), 0, "{offset:#x}");
        g.write(offset, u32::MAX);
    }
    // The config space: any width, read-only, zero past its 12 bytes.
    let mut mac = [0u8; 6];
    g.dev.mmio_read(MMIO_BASE + regs::CONFIG, &mut mac);
    assert_eq!(mac, [2, 0, 0, 0, 0, 1]);
    g.dev.mmio_write(MMIO_BASE + regs::CONFIG, &[9; 6]);
    g.dev.mmio_write(MMIO_BASE + regs::CONFIG + 3, &[9; 1]);
    g.dev.mmio_read(MMIO_BASE + regs::CONFIG, &mut mac);
    assert_eq!(mac, [2, 0, 0, 0, 0, 1]);
    let mut tail = [0xffu8; 8];
    g.dev.mmio_read(MMIO_BASE + regs::CONFIG + 10, &mut tail);
    assert_eq!(tail, [0xdc, 0x05, 0, 0, 0, 0, 0, 0], "MTU 1500, then zeros");
    g.dev.mmio_read(MMIO_BASE + MMIO_SLOT_SIZE - 2, &mut tail);
    assert_eq!(tail, [0; 8], "past the slot");
    g.assert_healthy();
}
