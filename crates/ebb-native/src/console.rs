//! This core's console: bytes go into its shared-memory [`ConsoleRing`], which the monitor
//! drains. Printing never leaves the guest unless the ring is full (then one flush
//! hypercall empties it). Under a standard hypervisor (PVH boot) they go to the serial
//! port instead.

use crate::abi::{CONSOLE_CAPACITY, ConsoleRing};
use crate::{arch, hypercall};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU64, Ordering};

/// Appends `bytes` to this core's ring, flushing through the monitor when it is full.
pub fn write_bytes(mut bytes: &[u8]) {
    if crate::pvh::active() {
        crate::pvh::serial_write(bytes);
        return;
    }
    let ring = arch::percore().console as *mut ConsoleRing;
    // SAFETY: the per-core block names this core's ring, mapped read-write for the whole
    // run. `head` and `tail` are 8-aligned u64s accessed only atomically (the monitor
    // uses atomic accesses too); this core is the ring's only producer.
    let (head, tail) = unsafe {
        (
            AtomicU64::from_ptr(&raw mut (*ring).head),
            AtomicU64::from_ptr(&raw mut (*ring).tail),
        )
    };
    // SAFETY: the data area follows the header within the ring's CONSOLE_STRIDE bytes.
    let data = unsafe { ring.add(1) } as *mut u8;
    let mut h = head.load(Ordering::Relaxed);
    while !bytes.is_empty() {
        let used = h.wrapping_sub(tail.load(Ordering::Acquire));
        let free = CONSOLE_CAPACITY.saturating_sub(used);
        if free == 0 {
            hypercall::console_flush();
            continue;
        }
        let n = (free as usize).min(bytes.len());
        for (i, &b) in bytes[..n].iter().enumerate() {
            let at = (h + i as u64) % CONSOLE_CAPACITY;
            // SAFETY: `at < CONSOLE_CAPACITY`, inside the data area; the monitor does not
            // read these bytes until `head` is published below (release ordering).
            unsafe { data.add(at as usize).write_volatile(b) };
        }
        h += n as u64;
        head.store(h, Ordering::Release);
        bytes = &bytes[n..];
    }
}

/// Collects one `print!`'s output so it reaches the ring in as few pieces as possible.
struct LineBuffer {
    buf: [u8; 256],
    len: usize,
}

impl LineBuffer {
    fn flush(&mut self) {
        write_bytes(&self.buf[..self.len]);
        self.len = 0;
    }
}

impl Write for LineBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for chunk in s.as_bytes().chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        Ok(())
    }
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments<'_>) {
    let mut line = LineBuffer {
        buf: [0; 256],
        len: 0,
    };
    let _ = line.write_fmt(args);
    line.flush();
}
