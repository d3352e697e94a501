//! Prints a greeting with its privilege level and exits 0.
#![no_std]
#![no_main]

use ebb_native::{arch, boot_info, println};

fn main() -> i32 {
    let info = boot_info();
    println!(
        "hello from ring 3 (CPL {}, {} cpus, {} MiB, tsc {} kHz)",
        arch::current_privilege_level(),
        info.cpu_count,
        info.mem_size >> 20,
        info.tsc_khz
    );
    0
}

ebb_native::entry!(main);
