//! Shares memory with the program that embeds the monitor (`crates/ebb-vmm/tests/window.rs`):
//! prints where its shared window is and the word the host wrote at its start, writes that
//! word's complement after it and rings the host's doorbell, then sleeps in WAIT until the
//! host sets the third word and wakes this core. Exits 0 when the host's wake arrived as
//! a kick; 3 without a window, 4 when the host never answered, 5 when no kick came.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU64, Ordering};
use ebb_native::{hypercall, println, ring_host_doorbell, shared_window};

const SECOND: u64 = 1_000_000_000;

fn main() -> i32 {
    let Some((addr, len)) = shared_window() else {
        println!("window: none");
        return 3;
    };
    println!("window: {addr:#x} {len}");
    // SAFETY: the monitor maps the window read-write and identity-mapped for the whole run
    // and gives it to nothing else in the guest; it is page-aligned and at least a page
    // long, so three aligned words fit. The host writes it concurrently, so it is only
    // accessed atomically.
    let words = unsafe { &*(addr as *const [AtomicU64; 3]) };
    let host_word = words[0].load(Ordering::Acquire);
    println!("window: host wrote {host_word:#x}");
    words[1].store(!host_word, Ordering::Release);
    ring_host_doorbell();
    let mut kicked = false;
    while words[2].load(Ordering::Acquire) == 0 {
        if hypercall::wait(10 * SECOND) {
            kicked = true;
        } else {
            println!("window: the host did not answer");
            return 4;
        }
    }
    // The host sets the word before it wakes us: a wake we have not slept through yet
    // is pending in the kick eventfd, so this WAIT returns at once.
    if !kicked {
        kicked = hypercall::wait(10 * SECOND);
    }
    println!("window: woken, kicked {kicked}");
    if kicked { 0 } else { 5 }
}

ebb_native::entry!(main);
