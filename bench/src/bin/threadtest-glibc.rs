//! Hoard threadtest with the system allocator (glibc malloc).

#[path = "../threadtest.rs"]
mod threadtest;

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

fn main() {
    threadtest::run("glibc");
}
