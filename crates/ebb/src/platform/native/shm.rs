//! What `ebb::shm` needs of the native platform: the node's end of the window its front
//! end gave it, polled with the core's other devices and armed before the core sleeps;
//! the node wakes a sleeping front end by ringing the host's doorbell.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::sync::Arc;

use ebb_native::poll::{self, PolledDevice};

use crate::shm::{ConnCore, Mapping, Notify, ShmError, Unregister};

/// The front end's side, which a native node does not have.
pub mod host {}

/// The window the monitor gave this node, and how to wake its front end.
pub(crate) fn guest_window() -> Result<(Arc<dyn Mapping>, Notify), ShmError> {
    let window = ebb_native::window::GuestWindow::get().ok_or(ShmError::NoWindow(
        "the monitor gave this node none (only a front end running the node in its own \
         process does)",
    ))?;
    let notify: Notify = Box::new(|_| ebb_native::window::ring_host_doorbell());
    Ok((Arc::new(window), notify))
}

struct Polled(Rc<ConnCore>);

impl PolledDevice for Polled {
    fn has_work(&self) -> bool {
        self.0.has_work()
    }
    fn arm(&self) -> bool {
        self.0.arm()
    }
    fn dispatch(&self) {
        self.0.dispatch();
    }
}

pub(crate) fn register_guest(core: Rc<ConnCore>) -> Result<Unregister, ShmError> {
    let id = poll::register(Rc::new(Polled(core))).ok_or(ShmError::Register(
        "no per-core device list (no Ebb id left, or not on a running core)".into(),
    ))?;
    Ok(Box::new(move || poll::deregister(id)))
}
