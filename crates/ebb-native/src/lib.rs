//! # ebb-native — Ebbflow as its own kernel, in ring 3 of a KVM VM
//!
//! The guest side of the native runtime. An image built with this crate is a static
//! x86_64 ELF that `ebb-vmm` boots directly at CPL 3 (see `docs/06-native-monitor.md`):
//!
//! * [`abi`] — the boot protocol and hypercall ABI shared with the monitor (plain data,
//!   builds everywhere; the monitor depends on it);
//! * `entry!` — declares the image's main function; `_start` validates the boot info and
//!   runs it on core 0 (other cores run an optional secondary function, then park);
//! * `hypercall` — typed wrappers around the port-I/O hypercalls (exit, clock, wait,
//!   kick, console flush, panic);
//! * `console` — `print!`/`println!` into this core's shared-memory console ring: no exit
//!   per line, the monitor drains the ring;
//! * a `#[panic_handler]` that sends the message and a frame-pointer backtrace through the
//!   panic hypercall.
//!
//! Everything but [`abi`] exists only when building for `target_os = "none"`; on the host
//! this crate is the ABI alone, so `cargo test --workspace` builds it harmlessly.
//!
//! ## Invariants
//!
//! * The code runs at CPL 3 with IOPL 3 and never executes a privileged instruction.
//! * GS base points at this core's [`abi::PerCore`] block for the whole run; `gs:[0]` is
//!   the block's own address.
//! * Each core writes only its own console ring (single producer); the boot info is never
//!   written.
//! * `unsafe` lives in `arch` (instructions) and `console` (the ring in shared memory),
//!   each block with a `// SAFETY:` comment.

#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod abi;

#[cfg(target_os = "none")]
pub mod arch;
#[cfg(target_os = "none")]
pub mod console;
#[cfg(target_os = "none")]
mod entry;
#[cfg(target_os = "none")]
pub mod hypercall;
#[cfg(target_os = "none")]
mod panic;

#[cfg(target_os = "none")]
pub use entry::{boot_info, cmdline, core_id, park};

/// Declares the image's entry functions: `entry!(main)` runs `fn main() -> i32` on core 0
/// and exits with its result; `entry!(main, secondary)` also runs `fn secondary(core: u32)`
/// on every other core. Cores with nothing (more) to do park in the wait hypercall.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        $crate::entry!($main, $crate::park_secondary);
    };
    ($main:path, $secondary:path) => {
        #[unsafe(no_mangle)]
        extern "Rust" fn __ebb_native_main() -> i32 {
            let main: fn() -> i32 = $main;
            main()
        }
        #[unsafe(no_mangle)]
        extern "Rust" fn __ebb_native_secondary(core: u32) {
            let secondary: fn(u32) = $secondary;
            secondary(core)
        }
    };
}

/// The default secondary-core function: does nothing (the core then parks).
pub fn park_secondary(_core: u32) {}

/// Prints to this core's console ring.
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::console::_print(format_args!($($arg)*)) };
}

/// Prints a line to this core's console ring.
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::console::_print(format_args!("{}\n", format_args!($($arg)*))) };
}
