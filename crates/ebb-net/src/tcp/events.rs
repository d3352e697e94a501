//! Event delivery: handing the events segment processing queued on each TCB to the
//! application's handlers and callbacks, one at a time, with no borrow held across a
//! callback (the module `tcp`'s borrow invariant).

use alloc::rc::Rc;

use ebb_core::net::TcpHandler;

use super::layer::{ConnRecord, Inner, TcpConn, TcpLayer};
use super::state::AppEvent;
use ebb_core::net::TcpConnection;

impl TcpLayer {
    /// Delivers queued application events; see the module `tcp`'s borrow invariant.
    ///
    /// Inlined check, out-of-line loop: every `receive` and `poll` ends here, and the
    /// usual end of a `poll` has nothing ready — it should cost two loads, not the
    /// loop's prologue and epilogue (about 30 instructions a request at one connection).
    #[inline]
    pub(super) fn deliver_events(&self) {
        let inner = &self.0;
        if inner.ready.borrow().is_empty() || inner.delivering.get() {
            return;
        }
        self.deliver_ready();
    }

    #[inline(never)]
    fn deliver_ready(&self) {
        let inner = &self.0;
        inner.delivering.set(true);
        loop {
            let next = inner.ready.borrow_mut().pop_front();
            let Some(conn) = next else { break };
            conn.in_ready.set(false);
            conn.deliver(inner);
        }
        inner.delivering.set(false);
    }
}

impl ConnRecord {
    /// Runs `f` with the handler taken out of its slot, so the callback may call any
    /// method of this connection (including `set_handler`, whose handler then wins).
    fn with_handler(self: &Rc<Self>, f: impl FnOnce(&mut dyn TcpHandler, &TcpConn)) {
        let taken = self.handler.borrow_mut().take();
        let Some(mut handler) = taken else { return };
        f(&mut *handler, &TcpConn(self.clone()));
        let mut slot = self.handler.borrow_mut();
        if slot.is_none() {
            *slot = Some(handler);
        }
    }

    /// Delivers this connection's deliverable events, one at a time, no borrow held
    /// across a callback. Data waits while the receive window is closed; everything but
    /// the open/failed notifications waits for a handler.
    fn deliver(self: &Rc<Self>, inner: &Rc<Inner>) {
        loop {
            let event = {
                let mut tcb = self.tcb.borrow_mut();
                let has_handler = tcb.has_handler;
                let deliverable = match tcb.events.front() {
                    None => false,
                    Some(AppEvent::Connected | AppEvent::ConnectFailed(_)) => true,
                    Some(AppEvent::Receive(_) | AppEvent::PeerClosed) => {
                        has_handler && tcb.receive_open
                    }
                    Some(_) => has_handler,
                };
                let event = if deliverable {
                    tcb.events.pop_front()
                } else if has_handler && !tcb.receive_open {
                    // A closed receive window holds data back, not the send side's news:
                    // an application that closed its window until its own output drains
                    // (an echo under back-pressure) reopens it on exactly this event, so
                    // it must not wait behind the data it holds back.
                    tcb.events
                        .iter()
                        .position(|e| matches!(e, AppEvent::SendWindowIncreased))
                        .and_then(|at| tcb.events.remove(at))
                } else {
                    None
                };
                let Some(event) = event else {
                    return;
                };
                if let AppEvent::Receive(buf) = &event {
                    tcb.release_held(buf.len());
                }
                event
            };
            match event {
                AppEvent::Connected => {
                    if self.listener.is_some() {
                        self.accept(inner);
                    } else if let Some(callback) = self.on_connect.borrow_mut().take() {
                        callback(Ok(TcpConn(self.clone())));
                    }
                }
                AppEvent::ConnectFailed(kind) => {
                    if let Some(callback) = self.on_connect.borrow_mut().take() {
                        callback(Err(kind));
                    }
                }
                AppEvent::Receive(buf) => self.with_handler(|h, c| h.receive(c, buf)),
                AppEvent::PeerClosed => self.with_handler(|h, c| h.peer_closed(c)),
                AppEvent::SendWindowIncreased => {
                    self.with_handler(|h, c| h.send_window_increased(c))
                }
                AppEvent::Closed(reason) => {
                    let handler = self.handler.borrow_mut().take();
                    self.tcb.borrow_mut().has_handler = false;
                    if let Some(mut handler) = handler {
                        handler.closed(reason);
                    }
                    return;
                }
            }
        }
    }

    /// Hands a passive connection to its listener's accept callback (or resets it if the
    /// listener is gone).
    fn accept(self: &Rc<Self>, inner: &Rc<Inner>) {
        let accept = self.listener.and_then(|key| {
            inner
                .state
                .borrow()
                .listeners
                .get(&key)
                .map(|l| l.accept.clone())
        });
        match accept {
            Some(accept) => {
                if let Ok(mut accept) = accept.try_borrow_mut() {
                    accept(TcpConn(self.clone()));
                }
            }
            None => TcpConn(self.clone()).abort(),
        }
    }
}
