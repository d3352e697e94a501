//! Devices a core polls: the native counterpart of the hosted runtime's epoll reactor.
//!
//! A native device (a virtio-net queue pair) shares its rings with the monitor and raises
//! no interrupt. Its core learns about work by looking: every time the event loop polls
//! for device events ([`NativePlatform::poll_events`](crate::platform::NativePlatform)),
//! each registered [`PolledDevice`] is asked [`has_work`](PolledDevice::has_work) — a
//! load from shared memory — and dispatched if so. Before the core sleeps in the WAIT
//! hypercall, every device is [`arm`](PolledDevice::arm)ed: it asks the monitor to wake
//! this vCPU when work arrives (virtio's `used_event`), then looks once more, which closes
//! the race with work that arrived in between; if any found work the core does not sleep.
//!
//! So while a core is busy or in its idle-poll window it never exits to the monitor, and a
//! sleeping core is woken by the device only.
//!
//! # Invariants
//!
//! * A core's list is touched only by that core (an Ebb rep per core).
//! * A device is dispatched only from `poll_events`, never from inside one of its own
//!   methods, so its [`dispatch`](PolledDevice::dispatch) may poll the stack that owns it.

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

use ebb_core::ebb::{EbbRef, MulticoreEbb};

/// A device its core polls.
pub trait PolledDevice {
    /// Whether the device has work now (cheap: a load from shared memory).
    fn has_work(&self) -> bool;

    /// The core is about to sleep: ask to be woken when work arrives, then report whether
    /// work is there already.
    fn arm(&self) -> bool;

    /// Work was found: let its owner process it.
    fn dispatch(&self);
}

/// Names a registration, to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollId(u64);

#[derive(Default)]
struct CoreDevices {
    devices: RefCell<Vec<(PollId, Rc<dyn PolledDevice>)>>,
    next: Cell<u64>,
}

type Devices = EbbRef<MulticoreEbb<CoreDevices>>;

/// The per-core lists, created by the first registration on any core.
static DEVICES: spin::Once<Option<Devices>> = spin::Once::new();

fn devices() -> Option<&'static CoreDevices> {
    let ebb = (*DEVICES.get()?)?;
    ebb.try_rep().ok()
}

/// Adds `device` to the calling core's list. Returns `None` if the list could not be
/// created (no Ebb id left, or not on a core of a running runtime).
pub fn register(device: Rc<dyn PolledDevice>) -> Option<PollId> {
    let ebb = (*DEVICES.call_once(|| MulticoreEbb::create(|_| CoreDevices::default()).ok()))?;
    let here = ebb.try_rep().ok()?;
    let id = PollId(here.next.get());
    here.next.set(id.0 + 1);
    here.devices.borrow_mut().push((id, device));
    Some(id)
}

/// Removes a registration of the calling core. Unknown ids are ignored.
pub fn deregister(id: PollId) {
    if let Some(here) = devices() {
        here.devices.borrow_mut().retain(|(i, _)| *i != id);
    }
}

/// The devices of this core with work, dispatched; returns how many.
pub(crate) fn poll() -> usize {
    let Some(here) = devices() else { return 0 };
    let ready: Vec<Rc<dyn PolledDevice>> = {
        let devices = here.devices.borrow();
        if devices.is_empty() {
            return 0;
        }
        devices
            .iter()
            .filter(|(_, d)| d.has_work())
            .map(|(_, d)| d.clone())
            .collect()
    };
    for device in &ready {
        device.dispatch();
    }
    ready.len()
}

/// Whether any device of this core has work, without dispatching it: what a wait that
/// cannot be woken by the device (under PVH, which spins instead of sleeping) checks to
/// end early.
pub(crate) fn any_work() -> bool {
    let Some(here) = devices() else { return false };
    here.devices.borrow().iter().any(|(_, d)| d.has_work())
}

/// Arms every device of this core before it sleeps; dispatches those that found work
/// meanwhile and returns how many (0: the core may sleep).
pub(crate) fn arm_all() -> usize {
    let Some(here) = devices() else { return 0 };
    let ready: Vec<Rc<dyn PolledDevice>> = {
        let devices = here.devices.borrow();
        devices
            .iter()
            .filter(|(_, d)| d.arm())
            .map(|(_, d)| d.clone())
            .collect()
    };
    for device in &ready {
        device.dispatch();
    }
    ready.len()
}
