//! The guest console: one single-producer, single-consumer byte ring per core in guest
//! memory ([`ConsoleRing`](ebb_abi::ConsoleRing)), drained by the monitor.
//!
//! The guest never exits to print: it appends to its ring and publishes the new `head`.
//! The monitor drains every ring periodically from its main thread, on the flush
//! hypercall, and once more when the VM ends. The monitor keeps the authoritative `tail`
//! in its own memory and reads nothing else from the ring header but `head`, so a guest
//! that scribbles on its ring can only garble its own output or, when `head` runs more
//! than a ring's capacity ahead, end its VM with [`AbiError::ConsoleCorrupt`].

use crate::abi_error::AbiError;
use crate::guest::GuestMem;
use crate::layout::Layout;
use ebb_abi::{CONSOLE_CAPACITY, ConsoleRing};
use std::io::Write;
use std::mem::{offset_of, size_of};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// Where drained bytes go.
pub type Sink = Box<dyn Write + Send>;

/// The monitor's side of every core's console ring.
pub struct Console {
    rings: Vec<u64>,
    tails: Vec<Mutex<u64>>,
    sink: Mutex<Sink>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("rings", &self.rings)
            .finish()
    }
}

impl Console {
    /// Initializes every core's ring header in guest memory and returns the drainer.
    pub fn new(mem: &GuestMem, layout: &Layout, sink: Sink) -> Option<Self> {
        let rings: Vec<u64> = (0..layout.cpus).map(|c| layout.console(c)).collect();
        for &ring in &rings {
            mem.write_u64(
                ring + offset_of!(ConsoleRing, capacity) as u64,
                CONSOLE_CAPACITY,
            )?;
        }
        Some(Console {
            tails: rings.iter().map(|_| Mutex::new(0)).collect(),
            rings,
            sink: Mutex::new(sink),
        })
    }

    /// Copies core `core`'s unread bytes to the sink.
    pub fn drain(&self, mem: &GuestMem, core: u32) -> Result<(), AbiError> {
        let (Some(&ring), Some(tail)) =
            (self.rings.get(core as usize), self.tails.get(core as usize))
        else {
            return Ok(());
        };
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        let head_addr = ring + offset_of!(ConsoleRing, head) as u64;
        let head = mem
            .load_u64(head_addr, Ordering::Acquire)
            .ok_or(AbiError::ConsoleCorrupt {
                core,
                head: 0,
                tail: *tail,
            })?;
        let available = head.wrapping_sub(*tail);
        if available == 0 {
            return Ok(());
        }
        if available > CONSOLE_CAPACITY {
            return Err(AbiError::ConsoleCorrupt {
                core,
                head,
                tail: *tail,
            });
        }
        let data = ring + size_of::<ConsoleRing>() as u64;
        let start = *tail % CONSOLE_CAPACITY;
        let first = available.min(CONSOLE_CAPACITY - start);
        let old_tail = *tail;
        let corrupt = || AbiError::ConsoleCorrupt {
            core,
            head,
            tail: old_tail,
        };
        let mut bytes = mem.read_bytes(data + start, first).ok_or_else(corrupt)?;
        if first < available {
            bytes.extend(
                mem.read_bytes(data, available - first)
                    .ok_or_else(corrupt)?,
            );
        }
        {
            let mut sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
            // The console is best effort: a closed stdout must not take the VM down.
            let _ = sink.write_all(&bytes).and_then(|()| sink.flush());
        }
        *tail = head;
        mem.store_u64(
            ring + offset_of!(ConsoleRing, tail) as u64,
            head,
            Ordering::Release,
        )
        .ok_or_else(corrupt)?;
        Ok(())
    }

    /// Drains every core's ring; the first corrupt ring's error is returned after the
    /// others are drained.
    pub fn drain_all(&self, mem: &GuestMem) -> Result<(), AbiError> {
        let mut result = Ok(());
        for core in 0..self.rings.len() as u32 {
            if let Err(e) = self.drain(mem, core) {
                result = result.and(Err(e));
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    //! The drainer against a guest that writes what it likes into its ring (no KVM).
    use super::*;
    use crate::testing::FakeGuest;

    /// Appends `bytes` to core `core`'s ring as the guest does, publishing `head`.
    fn produce(g: &FakeGuest, core: u32, bytes: &[u8]) {
        let ring = g.layout.console(core);
        let head = g.mem().read_u64(ring).expect("in memory");
        let data = ring + size_of::<ConsoleRing>() as u64;
        for (i, b) in bytes.iter().enumerate() {
            let at = (head + i as u64) % CONSOLE_CAPACITY;
            g.mem().write_bytes(data + at, &[*b]).expect("in memory");
        }
        set_head(g, core, head + bytes.len() as u64);
    }

    fn set_head(g: &FakeGuest, core: u32, head: u64) {
        let ring = g.layout.console(core);
        g.mem()
            .store_u64(ring, head, Ordering::Release)
            .expect("in memory");
    }

    fn drain(g: &FakeGuest, core: u32) -> Result<(), AbiError> {
        g.shared.console.drain(g.mem(), core)
    }

    #[test]
    fn output_comes_out_in_order_across_the_wrap() {
        let g = FakeGuest::new(1);
        assert_eq!(
            g.mem().read_u64(g.layout.console(0) + 16),
            Some(CONSOLE_CAPACITY),
            "the monitor sets the capacity"
        );
        // Fill to just before the end, drain, then write across the wrap.
        let filler = vec![b'.'; CONSOLE_CAPACITY as usize - 3];
        produce(&g, 0, &filler);
        drain(&g, 0).expect("drains");
        produce(&g, 0, b"partial ");
        drain(&g, 0).expect("drains");
        produce(&g, 0, b"line\n");
        drain(&g, 0).expect("drains");
        let printed = g.printed();
        assert_eq!(&printed[filler.len()..], "partial line\n");
        // The monitor publishes its tail for the guest.
        let tail = g
            .mem()
            .read_u64(g.layout.console(0) + 8)
            .expect("in memory");
        assert_eq!(tail, CONSOLE_CAPACITY + 10);
        // Nothing new: nothing printed, no error.
        drain(&g, 0).expect("drains");
        assert_eq!(g.printed().len(), printed.len());
    }

    #[test]
    fn a_whole_ring_at_once_is_fine_and_more_is_corrupt() {
        let g = FakeGuest::new(1);
        set_head(&g, 0, CONSOLE_CAPACITY);
        drain(&g, 0).expect("exactly a ring's worth");
        assert_eq!(g.printed().len() as u64, CONSOLE_CAPACITY);
        set_head(&g, 0, 2 * CONSOLE_CAPACITY + 1);
        assert_eq!(
            drain(&g, 0).unwrap_err(),
            AbiError::ConsoleCorrupt {
                core: 0,
                head: 2 * CONSOLE_CAPACITY + 1,
                tail: CONSOLE_CAPACITY
            }
        );
    }

    #[test]
    fn a_head_that_jumps_back_or_far_ahead_is_corrupt_and_nothing_is_printed() {
        let g = FakeGuest::new(1);
        produce(&g, 0, b"hello\n");
        drain(&g, 0).expect("drains");
        for head in [0, 5, u64::MAX, 6 + CONSOLE_CAPACITY + 1] {
            set_head(&g, 0, head);
            assert!(
                matches!(drain(&g, 0), Err(AbiError::ConsoleCorrupt { tail: 6, .. })),
                "head {head:#x}"
            );
        }
        assert_eq!(g.printed(), "hello\n");
    }

    #[test]
    fn the_guests_tail_and_capacity_fields_are_not_trusted() {
        let g = FakeGuest::new(1);
        let ring = g.layout.console(0);
        g.mem()
            .write_u64(ring + 8, u64::MAX - 3)
            .expect("in memory"); // tail
        g.mem().write_u64(ring + 16, 7).expect("in memory"); // capacity
        produce(&g, 0, b"still fine\n");
        drain(&g, 0).expect("drains with the monitor's own tail");
        assert_eq!(g.printed(), "still fine\n");
    }

    #[test]
    fn every_ring_is_drained_even_after_a_corrupt_one() {
        let g = FakeGuest::new(3);
        produce(&g, 0, b"zero\n");
        set_head(&g, 1, u64::MAX);
        produce(&g, 2, b"two\n");
        assert!(matches!(
            g.shared.console.drain_all(g.mem()),
            Err(AbiError::ConsoleCorrupt { core: 1, .. })
        ));
        assert_eq!(g.printed(), "zero\ntwo\n");
        // A core the VM does not have is ignored.
        drain(&g, 7).expect("no such ring");
    }
}
