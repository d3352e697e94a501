//! [`Movable`]: lets the forwarder, built on one thread, be moved once, whole, to the
//! monitor's I/O thread (a [`HostLink`](ebb_vmm::virtio::HostLink) must be `Send`).
//!
//! The only `unsafe` of the crate.

/// A value whose non-`Send` parts (`Rc` reference counts and `IOBuf` storage shared
/// within it) are all owned by the value itself: see the `SAFETY` comment below.
pub(crate) struct Movable<T>(T);

impl<T> Movable<T> {
    /// Wraps `value`. The caller (this crate, for `UserNet`'s `Inner` only, the one
    /// type `Movable` is `Send` for) keeps the promise of the `SAFETY` comment: no
    /// `Rc`, `TcpConn`, `TcpLayer` or `IOBuf` reachable from `value` has a clone
    /// outside it.
    pub(crate) fn new(value: T) -> Self {
        Movable(value)
    }

    pub(crate) fn get(&self) -> &T {
        &self.0
    }

    pub(crate) fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

// SAFETY: implemented for `Movable<Inner>` only: `UserNet`'s state, the forwarder
// (`forwarder::Forwarder`), the rest's backend (a `Box<dyn HostLink>`, `Send` itself), and
// frames on their way (`TxFrame`s of `IOBuf`s). The forwarder's non-`Send` parts are
// ebb-net's TCP layer and connections (`Rc`s), the handlers and callbacks this crate
// installs on them (which hold `Rc`s to the forwarder's own per-connection state, and the
// guest forwards' accept callbacks an `Rc` to the forwarder's queue of accepted
// connections, which holds `TcpConn`s of the same layer), and `IOBuf`s (a non-atomic
// reference count). Every clone of each of these lives inside this object graph: the
// crate hands none out (its API returns plain values and counters; frames given to the
// virtio device are used and dropped by the same thread that calls `UserNet`, see
// below). Moving the `Movable` therefore moves every owner of each reference count
// together: no two threads can ever touch one count, which is all that `Send` protects
// against for `Rc`. `UserNet` is used by one thread at a time (`&mut` for every call),
// and frames it hands out through `NetDevice::receive` or takes in through `transmit`
// are owned by that caller's thread, which also makes every later call (the monitor's
// I/O thread, or a test's single thread); they may share storage with buffers kept here,
// and both stay on that thread. Nothing in the graph is thread-bound otherwise (no
// thread-locals in ebb-net's TCP, interface or ebb-core's IOBufs).
unsafe impl Send for Movable<crate::Inner> {}
