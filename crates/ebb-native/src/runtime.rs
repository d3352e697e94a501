//! Running ebb-core's event loops on every vCPU.
//!
//! [`run`] (core 0) builds the node's [`Runtime`] over a [`NativePlatform`], publishes it
//! in a static and runs core 0's loop with the application's `main` as its first task;
//! [`secondary`] (every other core) spins until the runtime is published, then runs its
//! own loop. When `main` completes, its result is kept, the runtime shuts down (every loop
//! returns) and `run` returns the result, which `_start` hands to the EXIT hypercall.
//!
//! [`runtime_entry!`](crate::runtime_entry) wires both into an image.

use crate::abi::{PERCORE_RUNTIME_OFFSET, PERCORE_STRIDE};
use crate::entry::boot_info;
use crate::platform::NativePlatform;
use alloc::sync::Arc;
use core::future::Future;
use core::sync::atomic::{AtomicI32, Ordering};
use core::time::Duration;
use ebb_core::CoreId;
use ebb_core::event::{self, Handle, Runtime};

// ebb-core keeps its per-core data (core id, loop context, Ebb table) at fixed offsets from
// the GS base: it must lie in the runtime's part of the monitor's per-core block.
const _: () = {
    use ebb_core::percore::gs_layout;
    assert!(gs_layout::BASE as u64 >= PERCORE_RUNTIME_OFFSET);
    assert!(gs_layout::END as u64 <= PERCORE_STRIDE);
};

/// How the runtime is set up.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// How long an idle core keeps polling before it makes the WAIT hypercall (adaptive
    /// polling; see `ebb_core::event::Runtime::with_idle_poll`). At least
    /// [`SHARED_CPUS_IDLE_POLL`] when the monitor sets `BOOT_FLAG_SHARED_CPUS`.
    pub idle_poll: Duration,
    /// Timed WAITs end this long before their deadline and the loop polls the rest (see
    /// [`NativePlatform::with_wait_early`]); zero waits right up to the deadline.
    pub wait_early: Duration,
}

/// The shortest idle poll on CPUs shared with the monitor's device thread
/// (`BOOT_FLAG_SHARED_CPUS`): long enough to span the gap between a busy client's
/// requests (a 64-byte ping-pong from the host takes ~55 µs on one shared CPU; p50 63 µs
/// with a 50 µs window, 53 µs with this one), short enough that a guest gone quiet sleeps
/// within a millisecond.
pub const SHARED_CPUS_IDLE_POLL: Duration = Duration::from_millis(1);

/// How long an idle core polls before it sleeps, by default: longer than a sleeping
/// vCPU takes to be woken (80-110 µs under the nested KVM of our machines: the WAIT
/// hypercall's exit, the monitor's wake, the re-entry), so that a core whose next event
/// comes within what a wake would cost does not pay for one — the classic rule of
/// spinning as long as blocking costs, which keeps the worst case within twice the best.
/// With 50 µs, a front end's 64-byte Messenger ping-pong with a node took 3.8× Linux
/// TCP's round trip on a TAP bridge and 8.0× through the user-mode network, the node
/// sleeping between messages; with 150 µs, 1.8× and 2.2×, with 40-67% less CPU per
/// round trip (docs/benchmarks.md, "Distributed Ebbs"). The runtime's adaptive budget still
/// cuts the polling of a core whose polls find nothing.
pub const IDLE_POLL: Duration = Duration::from_micros(150);

impl Default for Config {
    fn default() -> Self {
        Config {
            idle_poll: IDLE_POLL,
            wait_early: Duration::ZERO,
        }
    }
}

struct Node {
    runtime: Runtime,
    platform: Arc<NativePlatform>,
}

static NODE: spin::Once<Node> = spin::Once::new();
static EXIT_CODE: AtomicI32 = AtomicI32::new(0);

/// Runs the node with the default [`Config`]; see [`run_with`].
pub fn run<F, Fut>(main: F) -> i32
where
    F: FnOnce() -> Fut + 'static,
    Fut: Future<Output = i32> + 'static,
{
    run_with(Config::default(), main)
}

/// On core 0: builds the runtime over every vCPU, runs core 0's event loop with `main()`
/// as its first task, and returns `main`'s result once it completes and the loops stop.
///
/// # Panics
///
/// If called on another core, or twice.
pub fn run_with<F, Fut>(config: Config, main: F) -> i32
where
    F: FnOnce() -> Fut + 'static,
    Fut: Future<Output = i32> + 'static,
{
    assert_eq!(
        crate::core_id(),
        0,
        "ebb_native::runtime::run runs on core 0"
    );
    assert!(!NODE.is_completed(), "the runtime is already running");
    let info = boot_info();
    let platform = Arc::new(NativePlatform::with_wait_early(info, config.wait_early));
    // The monitor's advice: on a CPU shared with its device thread, which preempts a
    // polling vCPU, polling is free and sleeping is dear.
    let idle_poll = if info.flags & crate::abi::BOOT_FLAG_SHARED_CPUS != 0 {
        config.idle_poll.max(SHARED_CPUS_IDLE_POLL)
    } else {
        config.idle_poll
    };
    let runtime =
        match Runtime::with_idle_poll(platform.clone(), info.cpu_count as usize, idle_poll) {
            Ok(runtime) => runtime,
            Err(e) => panic!("cannot build the runtime: {e}"),
        };
    // Publishing (release) lets the secondary cores in.
    let node = NODE.call_once(|| Node { runtime, platform });
    node.runtime.run_core(CoreId(0), move || {
        let _main = event::spawn_local(async move {
            EXIT_CODE.store(main().await, Ordering::Relaxed);
            event::shutdown();
        });
    });
    EXIT_CODE.load(Ordering::Relaxed)
}

/// On every core but 0: waits for core 0 to build the runtime, then runs this core's loop
/// until the runtime shuts down.
pub fn secondary(core: u32) {
    let node = loop {
        if let Some(node) = NODE.get() {
            break node;
        }
        core::hint::spin_loop();
    };
    node.runtime.run_core(CoreId(core), || {});
}

/// The running node's platform (`None` before [`run`] built it).
pub fn platform() -> Option<&'static NativePlatform> {
    NODE.get().map(|n| &*n.platform)
}

/// A handle to the running node's runtime (`None` before [`run`] built it).
pub fn handle() -> Option<Handle> {
    NODE.get().map(|n| n.runtime.handle())
}
