//! Exits with code 42.
#![no_std]
#![no_main]

fn main() -> i32 {
    42
}

ebb_native::entry!(main);
