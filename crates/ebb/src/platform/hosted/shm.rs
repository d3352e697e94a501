//! What `ebb::shm` needs of the hosted platform: the front end's end of a node's window,
//! polled by the core's reactor in memory while it spins and woken by the node's
//! doorbell (an eventfd in the core's epoll) while it sleeps.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::sync::Arc;
use std::os::fd::{AsFd, OwnedFd};

use ebb_hosted::reactor::{self, PolledSource, Source};
use rustix::event::epoll::EventFlags;

use crate::shm::{ConnCore, Mapping, Notify, ShmError, Unregister};

/// The front end's side: see [`host::attach`].
pub mod host {
    use super::*;
    use ebb_shm::{Endpoint, Side};

    /// A node's shared window as the front end that runs its monitor sees it.
    pub struct HostWindow {
        /// The window's memory (the monitor's mapping of the node's top pages).
        pub mapping: Arc<dyn Mapping>,
        /// Readable when the node rang the doorbell (a duplicate of the monitor's
        /// ioeventfd eventfd; the connection drains it).
        pub doorbell: OwnedFd,
        /// Wakes the node's vCPU `core` from its sleep (the monitor's kick eventfd).
        pub wake_guest: Arc<dyn Fn(u32) + Send + Sync>,
    }

    impl core::fmt::Debug for HostWindow {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("HostWindow")
                .field("bytes", &self.mapping.size())
                .finish_non_exhaustive()
        }
    }

    /// Opens the front end's end of `window` and returns the connection, owned and
    /// polled by the calling core (hosted only).
    pub fn attach(window: HostWindow) -> Result<crate::shm::SharedConn, ShmError> {
        attach_end(window, Side::Host)
    }

    /// [`attach`] for either end: a hosted program that plays both sides of a window
    /// in one process (tests, and benchmarks of the rings without a VM) opens the other
    /// end with `Side::Guest`, its `doorbell` the eventfd the host end's `wake_guest`
    /// writes and its `wake_guest` writing the host end's doorbell.
    pub fn attach_end(window: HostWindow, side: Side) -> Result<crate::shm::SharedConn, ShmError> {
        let HostWindow {
            mapping,
            doorbell,
            wake_guest,
        } = window;
        let endpoint = Endpoint::open(mapping, side, ebb_core::event::core_id().0)?;
        set_nonblocking(&doorbell)?;
        let notify: Notify = Box::new(move |endpoint: &Endpoint| wake_guest(endpoint.peer_core()));
        let doorbell = Rc::new(doorbell);
        crate::shm::open(endpoint, notify, move |core| register(core, doorbell))
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), ShmError> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let flags = fcntl_getfl(fd).map_err(|e| ShmError::Register(e.to_string()))?;
    fcntl_setfl(fd, flags | OFlags::NONBLOCK).map_err(|e| ShmError::Register(e.to_string()))
}

/// A hosted process has no window of its own.
pub(crate) fn guest_window() -> Result<(Arc<dyn Mapping>, Notify), ShmError> {
    Err(ShmError::NoWindow(
        "a hosted process has none: only a native node its front end runs in-process has one",
    ))
}

/// Never called: [`guest_window`] always fails hosted.
pub(crate) fn register_guest(_core: Rc<ConnCore>) -> Result<Unregister, ShmError> {
    Err(ShmError::NoWindow("a hosted process has none"))
}

struct Polled(Rc<ConnCore>);

impl PolledSource for Polled {
    fn has_work(&self) -> bool {
        self.0.has_work()
    }
    fn dispatch(self: Rc<Self>) {
        self.0.dispatch();
    }
    fn arm(&self) -> bool {
        self.0.arm()
    }
}

struct Doorbell {
    fd: Rc<OwnedFd>,
    core: Rc<ConnCore>,
}

impl Source for Doorbell {
    fn ready(self: Rc<Self>, _flags: EventFlags) {
        // Drain the counter (edge-triggered: the next ring is a new edge).
        let mut count = [0u8; 8];
        if rustix::io::read(&*self.fd, &mut count).is_ok() {
            crate::shm::count_wake_received();
        }
        if self.core.has_work() {
            self.core.dispatch();
        }
    }
}

fn register(core: Rc<ConnCore>, doorbell: Rc<OwnedFd>) -> Result<Unregister, ShmError> {
    let error = |e: std::io::Error| ShmError::Register(e.to_string());
    let polled = reactor::register_polled(Rc::new(Polled(core.clone()))).map_err(error)?;
    let source = Rc::new(Doorbell {
        fd: doorbell.clone(),
        core,
    });
    let token = match reactor::register(doorbell.as_fd(), EventFlags::IN, source) {
        Ok(token) => token,
        Err(e) => {
            reactor::deregister_polled(polled);
            return Err(error(e));
        }
    };
    Ok(Box::new(move || {
        reactor::deregister_polled(polled);
        let _ = reactor::deregister(doorbell.as_fd(), token);
    }))
}
