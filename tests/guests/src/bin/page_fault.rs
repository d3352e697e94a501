//! Reads an unmapped address: the monitor must report RIP (symbolized) and CR2.
#![no_std]
#![no_main]

use ebb_native::println;

/// Far beyond guest memory, canonical, never mapped.
const UNMAPPED: u64 = 0xdead_b000;

#[inline(never)]
fn read_unmapped() -> u64 {
    // SAFETY: none — this read faults on purpose; the monitor reports it.
    unsafe { core::ptr::read_volatile(core::hint::black_box(UNMAPPED << 12) as *const u64) }
}

fn main() -> i32 {
    println!("reading {:#x}", UNMAPPED << 12);
    read_unmapped() as i32
}

ebb_native::entry!(main);
