//! The application's calls on a connection: [`TcpConn`]'s settings and its
//! [`TcpConnection`] implementation. None of them sends a segment (they have no
//! output); each marks the connection for the layer's next poll.

use ebb_core::iobuf::IOBufChain;
use ebb_core::net::{CloseReason, SendError, TcpConnection, TcpHandler};

use super::config::Keepalive;
use super::conn_table::FourTuple;
use super::layer::{TcpConn, TcpLayer};
use super::state::{AppEvent, State};
use alloc::boxed::Box;
use core::net::SocketAddr;

impl TcpConn {
    /// Installs the connection's handler (replacing any previous one). Events that waited
    /// for a handler (data, FIN, close) are delivered to it on the layer's next event delivery.
    pub fn set_handler(&self, handler: impl TcpHandler) {
        let conn = &self.0;
        *conn.handler.borrow_mut() = Some(Box::new(handler));
        let closed = {
            let mut tcb = conn.tcb.borrow_mut();
            if tcb.close_reported && !tcb.events.iter().any(|e| matches!(e, AppEvent::Closed(_))) {
                true
            } else {
                tcb.has_handler = true;
                false
            }
        };
        if closed {
            // `closed` was already delivered; there is nothing more to tell.
            conn.handler.borrow_mut().take();
            return;
        }
        let held = {
            let tcb = conn.tcb.borrow();
            !tcb.events.is_empty() || tcb.held_bytes > 0
        };
        if let Some(inner) = conn.layer.upgrade() {
            if let Ok(mut state) = inner.state.try_borrow_mut() {
                TcpLayer::settle(&inner, &mut state, conn);
            }
            if held {
                // Held events go to the new handler, and the window they shrank reopens.
                inner.mark_dirty(conn);
                inner.mark_ready(conn);
            }
        }
    }

    /// Nagle's algorithm off (`true`, the default: send at once) or on (`false`: while
    /// data is in flight, hold back a segment smaller than the MSS so sends coalesce).
    pub fn set_nodelay(&self, nodelay: bool) {
        self.0.tcb.borrow_mut().nodelay = nodelay;
        self.0.wake();
    }

    /// Turns keepalive on with `keepalive`'s settings, or off with `None` (see
    /// [`Keepalive`]); the idle time counts from when the peer was last heard from.
    pub fn set_keepalive(&self, keepalive: Option<Keepalive>) {
        {
            let mut tcb = self.0.tcb.borrow_mut();
            tcb.keepalive = keepalive;
            tcb.arm_keepalive();
        }
        self.0.wake();
    }

    /// Sets this connection's send buffer (see [`TcpConfig::send_buffer`](super::TcpConfig::send_buffer)),
    /// at least one byte. Lowered below what is queued now, the application is offered
    /// no room until the peer has acknowledged down to it; raised past it while the
    /// application waits for room, it hears `send_window_increased`.
    pub fn set_send_buffer(&self, bytes: usize) {
        {
            let mut tcb = self.0.tcb.borrow_mut();
            tcb.send_buffer = bytes.max(1);
            if tcb.window_blocked && tcb.send_window() > 0 {
                tcb.window_blocked = false;
                tcb.events.push_back(AppEvent::SendWindowIncreased);
            }
        }
        self.0.wake();
    }

    /// The connection's RFC 9293 state.
    pub fn state(&self) -> State {
        self.0.tcb.borrow().state
    }

    /// Whether the connection has ended (TIME-WAIT counts as ended for the application).
    pub fn is_closed(&self) -> bool {
        matches!(self.state(), State::Closed | State::TimeWait)
    }

    /// The connection's addresses.
    pub fn four_tuple(&self) -> FourTuple {
        self.0.tuple
    }
}

impl TcpConnection for TcpConn {
    fn send(&self, data: IOBufChain) -> Result<(), SendError> {
        self.0.tcb.borrow_mut().app_send(data)?;
        self.0.wake();
        Ok(())
    }

    fn send_from(&self, data: &mut IOBufChain) -> Result<(), SendError> {
        self.0.tcb.borrow_mut().app_send_from(data)?;
        self.0.wake();
        Ok(())
    }

    fn try_send(&self, data: IOBufChain) -> Result<IOBufChain, SendError> {
        let rest = self.0.tcb.borrow_mut().app_try_send(data)?;
        self.0.wake();
        Ok(rest)
    }

    fn send_window(&self) -> usize {
        self.0.tcb.borrow().send_window()
    }

    fn queued_bytes(&self) -> usize {
        self.0.tcb.borrow().unsent()
    }

    fn set_receive_window_open(&self, open: bool) {
        let changed = {
            let mut tcb = self.0.tcb.borrow_mut();
            let was = tcb.receive_open;
            tcb.receive_open = open;
            was != open
        };
        if changed && open {
            // Held data is delivered, and the peer hears about the window on the poll.
            self.0.wake();
            if let Some(inner) = self.0.layer.upgrade() {
                inner.mark_ready(&self.0);
            }
        }
    }

    fn close(&self) {
        let changed = self.0.tcb.borrow_mut().app_close();
        if changed {
            self.0.wake();
        }
    }

    fn abort(&self) {
        let aborted = {
            let mut tcb = self.0.tcb.borrow_mut();
            match tcb.state {
                State::Closed => false,
                State::TimeWait => {
                    tcb.state = State::Closed;
                    tcb.timers.clear();
                    false
                }
                state => {
                    tcb.rst_pending = state != State::SynSent;
                    tcb.state = State::Closed;
                    tcb.timers.clear();
                    tcb.queue = IOBufChain::new();
                    tcb.queue_cursor = Default::default();
                    tcb.report_closed(CloseReason::Aborted);
                    true
                }
            }
        };
        if let Some(inner) = self.0.layer.upgrade() {
            if aborted {
                inner.counters.borrow_mut().connections_aborted += 1;
            }
            inner.mark_dirty(&self.0);
            inner.mark_ready(&self.0);
        }
    }

    fn peer_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.0.tuple.remote)
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.0.tuple.local)
    }
}
