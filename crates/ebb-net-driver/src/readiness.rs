//! The seam between the network runtime and a platform's device: a [`NetDevice`] that can
//! also tell its core when it has work ([`PlatformDevice`]).
//!
//! Two platforms, two ways to learn that a device has work:
//!
//! * **hosted** (`ebb-hosted`): the TAP descriptor is registered with the core's epoll
//!   reactor; readiness edges arrive as events of the loop;
//! * **native** (`ebb-native`): a virtio-net queue pair lives in memory shared with the
//!   device; the core checks its used rings when it polls for events and, before it
//!   sleeps, arms the device's notification so a frame wakes it.
//!
//! Either way the platform calls [`DeviceReady::ready`] on the device's core, and the
//! runtime polls the stack. The runtime never asks how.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::string::String;

use crate::{FaultInjector, FaultStats, NetDevice};

/// What a device reports when it signals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Frames may have arrived (or the device failed: the poll will find out).
    pub readable: bool,
    /// The device may take frames again after it pushed back on transmit.
    pub writable: bool,
}

impl Readiness {
    /// Frames may have arrived.
    pub const READABLE: Readiness = Readiness {
        readable: true,
        writable: false,
    };
}

/// The callback a device calls, on its core, when it may have work: the runtime then polls
/// the stack (a writable report only matters while transmission is blocked).
#[derive(Clone)]
pub struct DeviceReady(Rc<dyn Fn(Readiness)>);

impl DeviceReady {
    /// Wraps the runtime's reaction.
    pub fn new(f: impl Fn(Readiness) + 'static) -> Self {
        DeviceReady(Rc::new(f))
    }

    /// Reports readiness (on the device's core).
    pub fn ready(&self, readiness: Readiness) {
        (self.0)(readiness)
    }
}

impl core::fmt::Debug for DeviceReady {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("DeviceReady")
    }
}

/// A device queue pair a platform hands the network runtime: a [`NetDevice`] that reports
/// its readiness on the core that drives it.
///
/// Invariants the runtime relies on:
/// * after [`watch`](Self::watch) and until [`unwatch`](Self::unwatch), `ready` is called
///   on the watching core whenever frames may have arrived, including frames that arrived
///   before `watch` (a readiness edge may be spurious, never missing);
/// * `ready` is never called from inside a method of the device (the runtime holds the
///   device borrowed while it polls).
pub trait PlatformDevice: NetDevice {
    /// Starts reporting readiness to `ready`, on the calling core.
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError>;

    /// Stops reporting (the stack is shutting down). Idempotent.
    fn unwatch(&mut self);

    /// A name for messages and counters (the TAP interface, the virtio queue pair).
    fn name(&self) -> String;

    /// Operations on the device that failed unexpectedly (not push-back), so far.
    fn io_errors(&self) -> u64 {
        0
    }

    /// What a fault injector around the device did, if there is one.
    fn fault_stats(&self) -> Option<FaultStats> {
        None
    }
}

/// A device could not be watched (or opened, for the platform's own constructors).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

impl<D: PlatformDevice> PlatformDevice for FaultInjector<D> {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        self.inner_mut().watch(ready)
    }
    fn unwatch(&mut self) {
        self.inner_mut().unwatch()
    }
    fn name(&self) -> String {
        self.inner().name()
    }
    fn io_errors(&self) -> u64 {
        self.inner().io_errors()
    }
    fn fault_stats(&self) -> Option<FaultStats> {
        Some(self.stats())
    }
}

impl<D: PlatformDevice + ?Sized> PlatformDevice for Box<D> {
    fn watch(&mut self, ready: DeviceReady) -> Result<(), DeviceError> {
        (**self).watch(ready)
    }
    fn unwatch(&mut self) {
        (**self).unwatch()
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn io_errors(&self) -> u64 {
        (**self).io_errors()
    }
    fn fault_stats(&self) -> Option<FaultStats> {
        (**self).fault_stats()
    }
}
