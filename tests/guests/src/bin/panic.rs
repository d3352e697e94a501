//! Panics with a recognizable message a few frames deep.
#![no_std]
#![no_main]

use ebb_native::println;

#[inline(never)]
fn deeper(n: u32) -> u32 {
    if n == 0 {
        panic!("deliberate panic: {} * {} = {}", 6, 7, 6 * 7);
    }
    deeper(core::hint::black_box(n - 1)) + 1
}

fn main() -> i32 {
    println!("about to panic");
    deeper(core::hint::black_box(3)) as i32
}

ebb_native::entry!(main);
