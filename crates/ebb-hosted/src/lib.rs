//! # ebb-hosted — Ebbflow as a Linux process
//!
//! The hosted runtime runs an Ebbflow application as an ordinary process: one thread per
//! core, pinned to its own CPU, each running the `ebb-core` event loop over its own epoll
//! instance. It fills in the [`Platform`](ebb_core::Platform) seam:
//!
//! * **waiting** — `epoll_pwait2` with the core's next timer deadline (nanosecond timeouts,
//!   no timerfd needed);
//! * **waking** — each core has an eventfd in its epoll set; `spawn_on` writes it only when
//!   the target core announced it may sleep, so a busy core is never interrupted;
//! * **devices** — sockets register with the calling core's [`reactor`], which dispatches
//!   readiness to them from inside the loop's device-event step.
//!
//! On top sits [`tcp`]: EbbRT's event-driven TCP interface (`ebb_core::net`) over Linux
//! sockets, the same interface ebb-net offers natively. [`netstack`] runs ebb-net's own
//! stack in the process instead, over a TAP device (crate `ebb-tap`), from the core's
//! event loop with the same application interface.
//!
//! ## Invariants
//!
//! * Everything a core registers (sockets, handlers) is used only on that core: reactor state
//!   is thread-local and nothing in it is `Send`.
//! * Handlers are never called re-entrantly; see [`tcp`].
//! * All system calls go through `rustix`; the crate has no `unsafe` code (the TAP
//!   device's ioctls are `ebb-tap`'s).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod netstack;
mod platform;
pub mod reactor;
mod runtime;
pub mod tcp;

pub use platform::HostedPlatform;
pub use runtime::{Config, ConfigError, DEFAULT_IDLE_POLL, run};
