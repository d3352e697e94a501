//! # ebb-native — Ebbflow as its own kernel, in ring 3 of a KVM VM
//!
//! The guest side of the native runtime. An image built with this crate is a static
//! x86_64 ELF that `ebb-vmm` boots directly at CPL 3 (see `docs/06-native-monitor.md`):
//!
//! * [`abi`] — the boot protocol and hypercall ABI, re-exported from the `ebb-abi` crate
//!   that the monitor depends on too (the monitor does not depend on this crate);
//! * `entry!` — declares the image's main function; `_start` validates the boot info and
//!   runs it on core 0 (other cores run an optional secondary function, then park);
//! * `runtime_entry!` / `runtime` — runs **ebb-core's runtime** on every vCPU: core 0
//!   builds the `Runtime`, publishes it in a static (the other vCPUs spin until it is
//!   there), every vCPU runs its event loop, `async fn main() -> i32` runs as core 0's
//!   first task, and its result becomes the VM's exit code. ebb-core's executor, timers,
//!   Ebbs and RCU run unchanged;
//! * `platform` — `NativePlatform`, ebb-core's `Platform` here: the clock is the TSC
//!   scaled by the boot-info frequency (anchored to the monitor's monotonic clock); an idle
//!   core makes the WAIT hypercall with its next timer deadline; `wake` is the kick
//!   (ioeventfd), which ebb-core sends only to a core that may be asleep;
//! * `poll` — devices a core polls (virtio-net queue pairs in shared memory): checked on
//!   every poll for device events, armed before the WAIT hypercall so the device can wake
//!   the vCPU — the native counterpart of the hosted epoll reactor;
//! * `heap` — the `#[global_allocator]`: ebb-mem's general-purpose allocator (per-core
//!   slabs with remote frees over a buddy page allocator) fed every usable region of the
//!   boot memory map on first use (feature `global-allocator`, on by default);
//! * `virtio` — the virtio-net driver (virtio-MMIO transport, split rings with EVENT_IDX,
//!   one queue pair per core as an `ebb_net_driver::PlatformDevice`), which runs unchanged
//!   against ebb-vmm's device and QEMU's;
//! * `netstack` — ebb-net over those queue pairs: `netstack::start` is what
//!   `ebb::net` calls natively (the counterpart of `ebb_hosted::netstack::start`);
//! * `hypercall` — typed wrappers around the port-I/O hypercalls (exit, clock, wait,
//!   kick, doorbell, console flush, panic);
//! * `window` — the window of guest memory shared with the program that embeds the
//!   monitor (`shared_window()`, a `MemKind::Shared` region the heap never takes) and
//!   `ring_host_doorbell()`, which tells that program the guest wrote to it;
//! * `console` — `print!`/`println!` into this core's shared-memory console ring: no exit
//!   per line, the monitor drains the ring;
//! * a `#[panic_handler]` that sends the message and a frame-pointer backtrace through the
//!   panic hypercall;
//! * `pvh` — the same image under a standard hypervisor (`qemu-system-x86_64 -kernel
//!   IMAGE`): a PVH ELF note and a short ring-0 stub build what the monitor builds and
//!   enter `_start` at CPL 3; then the console is the serial port, EXIT is QEMU's
//!   `isa-debug-exit`, WAIT polls the TSC (one vCPU).
//!
//! Everything but [`abi`] (and the macros, which expand to nothing usable there) exists
//! only when building for `target_os = "none"` — one `guest_only!` block in this file; on
//! the host this crate is the ABI alone, so `cargo test --workspace` builds it harmlessly (ebb-core
//! is a dependency only for that target, without its `std` feature, which selects its
//! GS-based per-core backend).
//!
//! ## The per-core block
//!
//! Each vCPU's GS base points at its own block of [`abi::PERCORE_STRIDE`] bytes (36 KiB),
//! placed by the monitor after the image: the monitor's [`abi::PerCore`] header below
//! [`abi::PERCORE_RUNTIME_OFFSET`], then, zero-filled, ebb-core's words (`ebb_core::
//! percore::gs_layout`: core id + 1 and the event-loop context at 256 and 264, the Ebb
//! translation table at 4 KiB, `MAX_EBBS` × 8 bytes). A compile-time check in `runtime`
//! fails the build if ebb-core's layout ever outgrows the block. An Ebb rep lookup is one
//! `mov reg, gs:[TABLE + id * 8]` and one branch.
//!
//! ## Invariants
//!
//! * The code runs at CPL 3 with IOPL 3 and never executes a privileged instruction (no
//!   `hlt`: an idle core sleeps in the WAIT hypercall). The one exception is the PVH stub
//!   (`pvh::boot`), which runs at CPL 0 before `_start`, and only under a standard
//!   hypervisor.
//! * GS base points at this core's [`abi::PerCore`] block for the whole run; `gs:[0]` is
//!   the block's own address. Bytes from [`abi::PERCORE_RUNTIME_OFFSET`] on belong to
//!   ebb-core and are touched only by this core.
//! * Each core writes only its own console ring (single producer); the boot info is never
//!   written.
//! * `unsafe` lives in `arch` (instructions), `console` (the ring in shared memory),
//!   `entry` (the boot info and command line the monitor wrote, the app's entry
//!   functions), `heap` (handing the memory map to the allocator), `pvh` (the ring-0
//!   stub), `virtio::mmio` (device registers and shared rings) and `window` (the shared
//!   window as an `ebb_shm::Mapping`), each block with a
//!   `// SAFETY:` comment; the crate root denies it everywhere else.

#![no_std]
#![deny(unsafe_code)]
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// On the host `alloc` goes unused (the crate is the ABI alone there).
extern crate alloc;

/// The boot protocol and hypercall ABI, from the crate both sides share.
pub use ebb_abi as abi;

/// The one platform switch: what the block holds exists only in the guest build
/// (`target_os = "none"`); on the host this crate is [`abi`] alone. Like `cfg_if!`, the
/// macro puts the one `cfg` on every item of the block.
macro_rules! guest_only {
    ($($item:item)*) => {
        $( #[cfg(target_os = "none")] $item )*
    };
}

guest_only! {
    #[allow(unsafe_code)] // see the crate docs
    pub mod arch;
    #[allow(unsafe_code)] // see the crate docs
    pub mod console;
    #[allow(unsafe_code)] // see the crate docs
    mod entry;
    #[allow(unsafe_code)] // see the crate docs
    pub mod heap;
    pub mod hypercall;
    pub mod netstack;
    mod panic;
    pub mod platform;
    pub mod poll;
    #[allow(unsafe_code)] // see the crate docs
    pub mod pvh;
    pub mod runtime;
    pub mod virtio;
    #[allow(unsafe_code)] // see the crate docs
    pub mod window;

    pub use ebb_core;
    pub use entry::{boot_info, cmdline, core_id, park};
    pub use window::{ring_host_doorbell, shared_window};
}

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

/// Declares an image whose `main` runs on ebb-core's runtime: `runtime_entry!(main)` with
/// `async fn main() -> i32` (or any `fn() -> impl Future<Output = i32>`) builds the runtime
/// on core 0, runs an event loop on every vCPU, runs `main` as core 0's first task and
/// exits the VM with its result. See [`runtime::run`].
#[macro_export]
macro_rules! runtime_entry {
    ($main:path) => {
        fn __ebb_native_runtime_main() -> i32 {
            $crate::runtime::run($main)
        }
        $crate::entry!(__ebb_native_runtime_main, $crate::runtime::secondary);
    };
}

/// The default secondary-core function: does nothing (the core then parks).
pub fn park_secondary(_core: u32) {}

/// Prints to this core's console ring.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::console::_print(format_args!($($arg)*)) };
}

/// Prints a line to this core's console ring.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::console::_print(format_args!("{}\n", format_args!($($arg)*))) };
}
