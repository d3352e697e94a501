//! The guest console: one single-producer, single-consumer byte ring per core in guest
//! memory ([`ConsoleRing`](ebb_native::abi::ConsoleRing)), drained by the monitor.
//!
//! The guest never exits to print: it appends to its ring and publishes the new `head`.
//! The monitor drains every ring periodically from its main thread, on the flush
//! hypercall, and once more when the VM ends. The monitor keeps the authoritative `tail`
//! in its own memory and reads nothing else from the ring header but `head`, so a guest
//! that scribbles on its ring can only garble its own output or, when `head` runs more
//! than a ring's capacity ahead, end its VM with [`AbiError::ConsoleCorrupt`].

use crate::guest::GuestMem;
use crate::hypercall::AbiError;
use crate::layout::Layout;
use ebb_native::abi::{CONSOLE_CAPACITY, ConsoleRing};
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
