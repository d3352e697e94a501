//! # ebb-threadtest — Hoard's `threadtest` loop, once
//!
//! One thread's work in Hoard's `threadtest.cpp`: `iterations` rounds of allocating an
//! array of `per_thread` pointers, allocating `per_thread` 8-byte objects into it (writing
//! each), then freeing them all in order and freeing the array. The hosted binaries
//! (`bench/src/threadtest.rs`, one per global allocator) and the native guest
//! (`tests/guests/src/bin/bench_threadtest.rs`) both run this function, so their numbers
//! measure the same loop.
//!
//! `no_std` + `alloc`: it allocates through whatever global allocator the binary has.

#![no_std]

extern crate alloc;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::hint::black_box;

/// Hoard's `Foo`: two ints, 8 bytes.
struct Foo {
    x: i32,
    y: i32,
}

/// One thread's rounds; returns a sum of what it read so the work cannot be optimized
/// away.
#[inline]
pub fn worker(per_thread: usize, iterations: usize) -> i64 {
    let mut sum = 0i64;
    for _ in 0..iterations {
        let mut objects: Vec<Box<Foo>> = Vec::with_capacity(per_thread);
        for j in 0..per_thread {
            objects.push(Box::new(Foo {
                x: black_box(14),
                y: j as i32,
            }));
        }
        let objects = black_box(objects);
        sum += objects.first().map_or(0, |f| f.x as i64 + f.y as i64);
        drop(objects); // frees every object in order, then the array
    }
    sum
}
