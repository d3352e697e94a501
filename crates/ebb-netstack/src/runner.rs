//! One core's runner of the stack: the three event sources of the crate docs (device
//! readiness, the deadline timer task, the idle handler) around one `ebb_net` `Stack`.

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::future::Future;
use core::net::{Ipv4Addr, SocketAddrV4};
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;

use ebb_core::ebb::{EbbRef, MulticoreEbb};
use ebb_core::event::{self, IdleId, IdleStatus, Sleep};
use ebb_core::future::{Promise, promise};
use ebb_core::net::TcpErrorKind;
use ebb_core::{CoreId, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::steering::FlowDirectory;
use ebb_net::tcp::{TcpConfig, TcpConn, TcpLayer};

use crate::counters::{NetStackCounters, RunnerCounters};
use crate::error::NetStackError;
use crate::forwarding::{CoreForwarder, admit};
use ebb_net_driver::{DeviceReady, PlatformDevice, Readiness, RxFrame};

/// Frames steered from other cores that may wait for this core's next poll.
pub const MAX_STEERED_WAITING: usize = 4096;

/// Back-to-back `Stack::poll` rounds in one runner's poll before yielding to the loop.
pub const MAX_ROUNDS: usize = 8;

/// While transmission is blocked, poll again after this long even without a writable
/// report: the push-back may come from the fault injector holding frames rather than from
/// the device, and then no report would come.
pub(crate) const TX_BLOCKED_RETRY: Duration = Duration::from_millis(1);

/// An interface's address and gateway, or none: what a multi-core stack's home core
/// hands the others when its DHCP lease changes.
pub(crate) type LeasedAddress = Option<(Ipv4Cidr, Option<Ipv4Addr>)>;

/// The shared state of the three event sources; see the module docs. One per core of
/// the stack.
pub(crate) struct CoreRunner {
    /// The stack's per-core parts, where this runner is this core's.
    pub(crate) id: StackParts,
    /// The core this runner runs on.
    pub(crate) core: CoreId,
    pub(crate) stack: RefCell<Stack<Box<dyn PlatformDevice>, TcpLayer>>,
    /// Frames other cores steered here, injected at the next poll.
    pub(crate) inbox: RefCell<Vec<RxFrame>>,
    /// The idle handler, until [`CoreRunner::stop`].
    pub(crate) idle: Cell<Option<IdleId>>,
    /// A second handle on the stack's TCP layer, usable while the stack is borrowed.
    pub(crate) tcp: TcpLayer,
    /// The last poll left work to do now (not counting blocked transmission).
    pub(crate) work_left: Cell<bool>,
    /// The device refused frames: wait for a writable edge.
    pub(crate) tx_blocked: Cell<bool>,
    /// When the stack next wants a poll (strictly in the future when set).
    pub(crate) deadline: Cell<Option<Instant>>,
    /// The timer task, to wake when the deadline moves earlier (or at shutdown).
    pub(crate) timer_waker: RefCell<Option<Waker>>,
    /// The deadline the timer task sleeps on.
    pub(crate) timer_armed: Cell<Option<Instant>>,
    /// The address once configured (static, or leased).
    pub(crate) address: Cell<Option<Ipv4Cidr>>,
    /// Multi-core: the stack this runner is part of.
    pub(crate) multi: Option<MultiCore>,
    /// Home core of a multi-core stack: the address (and gateway) last sent to the
    /// other cores (`None`: nothing sent yet).
    pub(crate) shared_address: Cell<Option<LeasedAddress>>,
    pub(crate) address_waiters: RefCell<Vec<Promise<Result<Ipv4Cidr, NetStackError>>>>,
    pub(crate) stopped: Cell<bool>,
    /// Shared with the steering hook, which counts what it forwards. A `RefCell`, not a
    /// `Cell`: a count is then one increment in place, where `Cell::get`/`set` copied
    /// all eleven counters out and back (about 45 instructions a count, twice a poll).
    pub(crate) counters: Rc<RefCell<RunnerCounters>>,
}

impl CoreRunner {
    pub(crate) fn count(&self, f: impl FnOnce(&mut RunnerCounters)) {
        f(&mut self.counters.borrow_mut());
    }

    /// Polls the stack until it has nothing due now (at most [`MAX_ROUNDS`] rounds),
    /// then records what is left and arms the timer.
    pub(crate) fn poll_now(&self) {
        if self.stopped.get() {
            return;
        }
        let Ok(mut stack) = self.stack.try_borrow_mut() else {
            // Re-entered from a callback inside `poll`: the running poll covers it.
            return;
        };
        {
            let mut inbox = self.inbox.borrow_mut();
            if !inbox.is_empty() {
                stack.inject(inbox.drain(..));
            }
        }
        let mut rounds = 0;
        let (now, next, tx_blocked) = loop {
            let now = event::now();
            let next = stack.poll(now);
            rounds += 1;
            self.count(|c| c.polls += 1);
            let tx_blocked = !stack.iface_mut().transmit_queue().is_empty();
            let due_now = next.is_some_and(|at| at <= now);
            if !due_now || tx_blocked || rounds >= MAX_ROUNDS {
                break (now, next, tx_blocked);
            }
        };
        // The address comes from the interface itself (static, bound, renewed, dropped);
        // DHCP events are drained so they do not pile up.
        while stack.iface_mut().next_dhcp_event().is_some() {}
        let address = stack.iface().ipv4_cidr();
        let gateway = stack.iface().gateway();
        let runs_dhcp = stack.iface().dhcp_state().is_some();
        drop(stack);
        if runs_dhcp {
            self.share_address(address.map(|cidr| (cidr, gateway)));
        }

        self.tx_blocked.set(tx_blocked);
        if tx_blocked {
            self.count(|c| c.tx_blocked += 1);
        }
        self.work_left
            .set(!tx_blocked && next.is_some_and(|at| at <= now));
        let next = if tx_blocked {
            Some(now + TX_BLOCKED_RETRY)
        } else {
            next.filter(|&at| at > now)
        };
        self.arm(next);
        self.address.set(address);
        // Checked before taken: `take` swaps an empty vector in on every poll, about 20
        // instructions a request for waiters that exist only while an address is awaited.
        if let Some(cidr) = address
            && !self.address_waiters.borrow().is_empty()
        {
            for waiter in self.address_waiters.take() {
                let _ = waiter.set(Ok(cidr));
            }
        }
    }

    /// On the home core of a multi-core stack whose interface runs DHCP: when the lease's
    /// address or gateway changes, sends it to every other core's interface (which is
    /// [`InterfaceConfig::new_managed`]), so all cores answer on the leased address.
    fn share_address(&self, address: LeasedAddress) {
        let Some(multi) = &self.multi else { return };
        if self.core != multi.directory.home() || self.shared_address.get() == Some(address) {
            return;
        }
        self.shared_address.set(Some(address));
        for &core in &multi.directory.cores()[1..] {
            let id = multi.id;
            let sent = event::spawn_on(core, move || {
                if let Some(runner) = local_runner(id) {
                    runner.take_address(address);
                }
            });
            if sent.is_err() {
                log::warn!("core {} did not take the stack's new address", core.0);
            }
        }
    }

    /// The home core's DHCP lease changed (see [`CoreRunner::share_address`]).
    fn take_address(&self, address: LeasedAddress) {
        if let Ok(mut stack) = self.stack.try_borrow_mut() {
            stack.iface_mut().set_address(address);
        }
        self.poll_now();
    }

    /// Records the next deadline; wakes the timer task if it must wake earlier.
    fn arm(&self, deadline: Option<Instant>) {
        self.deadline.set(deadline);
        let Some(at) = deadline else { return };
        if self.timer_armed.get().is_none_or(|armed| at < armed)
            && let Some(waker) = self.timer_waker.borrow().as_ref()
        {
            waker.wake_by_ref();
        }
    }

    /// The idle handler: poll when the application acted or work was left.
    fn idle(&self) -> IdleStatus {
        if self.stopped.get() || self.tx_blocked.get() {
            // Blocked transmission waits for the writable edge, not a spin.
            return IdleStatus::Idle;
        }
        if self.work_left.get() || self.tcp.needs_poll() {
            self.count(|c| c.idle_polls += 1);
            self.poll_now();
        }
        if !self.tx_blocked.get() && (self.work_left.get() || self.tcp.needs_poll()) {
            IdleStatus::Busy
        } else {
            IdleStatus::Idle
        }
    }

    pub(crate) fn counters(&self) -> Result<NetStackCounters, NetStackError> {
        let stack = self.stack.try_borrow().map_err(|_| NetStackError::Busy)?;
        Ok(NetStackCounters {
            interface: stack.iface().counters(),
            tcp: self.tcp.counters(),
            device: stack.device().counters(),
            faults: stack.device().fault_stats(),
            device_io_errors: stack.device().io_errors(),
            runner: *self.counters.borrow(),
        })
    }
}

/// What a runner on a core of a multi-core stack needs besides its queue.
#[derive(Clone)]
pub(crate) struct MultiCore {
    /// The stack's per-core parts (as in [`CoreRunner::id`]).
    pub(crate) id: StackParts,
    pub(crate) directory: Arc<FlowDirectory>,
}

/// A stack's per-core parts: a multicore Ebb whose representative on each core holds
/// that core's runner (none on a core that runs no queue of the stack, or after
/// shutdown). The handle is `Copy + Send`, so steered frames and cross-core requests
/// carry it and reach the runner of whichever core runs them; each rep is touched only
/// by its own core.
pub(crate) type StackParts = EbbRef<MulticoreEbb<CorePart>>;

/// One core's representative of [`StackParts`].
pub(crate) struct CorePart(pub(crate) RefCell<Option<Rc<CoreRunner>>>);

/// The error code a cross-core request reports when the target core runs no part of the
/// stack (it failed to start, or the stack was shut down): `ENODEV`.
pub(crate) const NO_PART_HERE: i32 = 19;

/// The calling core's runner of the stack `parts`, if it runs a queue of it.
pub(crate) fn local_runner(parts: StackParts) -> Option<Rc<CoreRunner>> {
    parts.try_rep().ok()?.0.borrow().clone()
}

impl CoreRunner {
    /// Builds a runner of stack `id` for `device` on the calling core, starts its three
    /// event sources and installs it as this core's part of `id`; with `multi`, makes it
    /// that multi-core stack's part on this core (claims, steering).
    pub(crate) fn start(
        id: StackParts,
        device: Box<dyn PlatformDevice>,
        iface: InterfaceConfig,
        tcp_config: TcpConfig,
        multi: Option<MultiCore>,
    ) -> Result<Rc<CoreRunner>, NetStackError> {
        let core = event::core_id();
        let tcp = TcpLayer::new(tcp_config);
        let mut stack = Stack::new(device, iface, tcp.clone());
        let counters = Rc::new(RefCell::new(RunnerCounters::default()));
        if let Some(multi) = &multi {
            tcp.set_directory(Rc::new(multi.directory.claims_for(core)));
            // A batch for another core runs there as an event: that core's runner of
            // this stack (if it still has one) takes it as if its own queue had.
            let send_batch = move |to: CoreId, batch: Vec<RxFrame>| {
                event::spawn_on(to, move || {
                    if let Some(runner) = local_runner(id) {
                        runner.receive_steered(batch);
                    }
                })
                .is_ok()
            };
            stack.set_steering(Box::new(CoreForwarder::new(
                core,
                multi.directory.clone(),
                counters.clone(),
                send_batch,
            )));
        }
        let runner = Rc::new(CoreRunner {
            id,
            core,
            stack: RefCell::new(stack),
            inbox: RefCell::new(Vec::new()),
            idle: Cell::new(None),
            tcp,
            work_left: Cell::new(true),
            tx_blocked: Cell::new(false),
            deadline: Cell::new(None),
            timer_waker: RefCell::new(None),
            timer_armed: Cell::new(None),
            address: Cell::new(None),
            multi: multi.clone(),
            shared_address: Cell::new(None),
            address_waiters: RefCell::new(Vec::new()),
            stopped: Cell::new(false),
            counters,
        });
        let weak = Rc::downgrade(&runner);
        let ready = DeviceReady::new(move |readiness| {
            if let Some(runner) = weak.upgrade() {
                runner.device_ready(readiness);
            }
        });
        runner
            .stack
            .borrow_mut()
            .device_mut()
            .watch(ready)
            .map_err(NetStackError::Device)?;
        let idle_driver = runner.clone();
        let idle = event::add_idle_handler(move || idle_driver.idle());
        runner.idle.set(Some(idle));
        drop(event::spawn_local(DeadlineTimer {
            runner: runner.clone(),
            sleep: None,
        }));
        if let Ok(part) = id.try_rep() {
            *part.0.borrow_mut() = Some(runner.clone());
        }
        // The first poll sends the gratuitous ARP (static) or the DHCP DISCOVER.
        runner.poll_now();
        Ok(runner)
    }

    /// Stops this core's part: one last poll to send what is queued, then the
    /// descriptor leaves the reactor, the idle handler goes and the timer task ends.
    /// Idempotent.
    pub(crate) fn stop(&self) {
        if self.stopped.get() {
            return;
        }
        self.poll_now();
        self.stopped.set(true);
        if let Ok(mut stack) = self.stack.try_borrow_mut() {
            stack.device_mut().unwatch();
        }
        if let Some(idle) = self.idle.take() {
            event::remove_idle_handler(idle);
        }
        if let Some(waker) = self.timer_waker.take() {
            waker.wake();
        }
        for waiter in self.address_waiters.take() {
            let _ = waiter.set(Err(NetStackError::ShutDown));
        }
        if let Ok(part) = self.id.try_rep() {
            part.0.borrow_mut().take();
        }
    }

    /// Frames steered here by another core: processed by a poll now. The inbox is
    /// bounded like a device ring: what would overflow [`MAX_STEERED_WAITING`] is
    /// dropped and counted (a core flooded by another's steering cannot grow it without
    /// bound).
    pub(crate) fn receive_steered(&self, frames: Vec<RxFrame>) {
        if self.stopped.get() {
            return;
        }
        let n = frames.len() as u64;
        self.count(|c| c.steered_in += n);
        let dropped = admit(&mut self.inbox.borrow_mut(), frames, MAX_STEERED_WAITING);
        if dropped > 0 {
            self.count(|c| c.steered_dropped += dropped);
        }
        self.poll_now();
    }

    /// Connects from this core (which owns the connection); see [`NetStack::connect`].
    pub(crate) fn connect(
        &self,
        remote: SocketAddrV4,
    ) -> impl Future<Output = Result<TcpConn, TcpErrorKind>> + 'static {
        let started = match self.address.get() {
            None => Err(TcpErrorKind::AddressNotAvailable),
            Some(cidr) => {
                let (tx, rx) = promise();
                self.tcp
                    .connect(
                        SocketAddrV4::new(cidr.address(), 0),
                        remote,
                        move |result| {
                            let _ = tx.set(result);
                        },
                    )
                    .map(|()| rx)
            }
        };
        async move {
            // A dropped promise means the stack dropped the connection attempt unanswered.
            started?.await.unwrap_or(Err(TcpErrorKind::Other(0)))
        }
    }
}

impl CoreRunner {
    /// The device reported readiness (see [`PlatformDevice::watch`]).
    fn device_ready(&self, readiness: Readiness) {
        let writable = readiness.writable && self.tx_blocked.get();
        if readiness.readable {
            self.count(|c| c.readable_events += 1);
        }
        if writable {
            self.count(|c| c.writable_events += 1);
        }
        if readiness.readable || writable {
            self.poll_now();
        }
    }
}

/// The timer task's future: sleeps until the runner's deadline, polls, repeats; ends at
/// shutdown.
pub(crate) struct DeadlineTimer {
    pub(crate) runner: Rc<CoreRunner>,
    pub(crate) sleep: Option<Sleep>,
}

impl Future for DeadlineTimer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            let runner = &this.runner;
            if runner.stopped.get() {
                runner.timer_waker.take();
                return Poll::Ready(());
            }
            *runner.timer_waker.borrow_mut() = Some(cx.waker().clone());
            let Some(want) = runner.deadline.get() else {
                this.sleep = None;
                runner.timer_armed.set(None);
                return Poll::Pending;
            };
            let armed = runner.timer_armed.get();
            if this.sleep.is_none() || armed.is_none_or(|armed| want < armed) {
                this.sleep = Some(event::sleep_until(want));
                runner.timer_armed.set(Some(want));
            }
            let Some(sleep) = this.sleep.as_mut() else {
                return Poll::Pending;
            };
            match Pin::new(sleep).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => {
                    this.sleep = None;
                    runner.timer_armed.set(None);
                    runner.deadline.set(None);
                    runner.count(|c| c.timer_fires += 1);
                    runner.poll_now();
                }
            }
        }
    }
}
