//! The per-core readiness reactor: which source owns which epoll token, and which
//! devices the core polls in memory.
//!
//! Sockets register with the calling core's epoll instance, edge-triggered, and get a
//! token; when the loop's device-event step sees readiness for a token, the reactor calls
//! that source. All of it is thread-local to the core.
//!
//! A device whose rings live in memory shared with the kernel (an AF_XDP socket) also
//! registers a [`PolledSource`]: while the core polls without waiting, the platform asks
//! it first — a load, no system call — and asks epoll only every
//! [`EPOLL_INTERVAL`](crate::platform::EPOLL_INTERVAL) (see `HostedPlatform::poll_events`).
//! Its descriptor stays in epoll too, for the core's sleeps.

use rustix::event::epoll::{self, Event, EventData, EventFlags};
use rustix::fd::{AsFd, OwnedFd};
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;

/// Something that reacts to readiness on a file descriptor.
pub trait Source {
    /// Readiness arrived (edge-triggered: act until `EAGAIN`, or remember that you did not).
    fn ready(self: Rc<Self>, flags: EventFlags);
}

/// A device its core can poll in memory, without a system call.
pub trait PolledSource {
    /// Whether the device may have work (cheap: loads from shared memory). May be
    /// spurious, never missing what the device's epoll readiness would have reported.
    fn has_work(&self) -> bool;

    /// Work was seen: let the device's owner poll it.
    fn dispatch(self: Rc<Self>);

    /// The core is about to sleep in epoll: a device whose other side must be told to
    /// wake it (a shared-memory ring) says so now, then looks once more. Returns whether
    /// work is there already (the core then does not sleep). The default does nothing:
    /// a device whose descriptor's readiness wakes the core needs nothing more.
    fn arm(&self) -> bool {
        false
    }
}

/// A memory-polled registration's name, to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolledToken(u64);

/// A registration's name in its core's reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(u64);

struct CoreReactor {
    epoll: OwnedFd,
    sources: Vec<Option<Rc<dyn Source>>>,
    free: Vec<usize>,
    polled: Vec<(PolledToken, Rc<dyn PolledSource>)>,
    next_polled: u64,
}

thread_local! {
    static REACTOR: RefCell<Option<CoreReactor>> = const { RefCell::new(None) };
    /// Filled by each `epoll_pwait` (constant-initialized: no lazy-init check per call;
    /// its capacity is reserved on first use).
    static EVENTS: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: Cell<usize> = const { Cell::new(0) };
    static POLLED: Cell<usize> = const { Cell::new(0) };
}

/// Attaches the calling thread to its core's epoll instance `epoll` (the runtime does
/// this, with the platform's instance for the core).
pub(crate) fn enter(epoll: &OwnedFd) -> io::Result<()> {
    let epoll = epoll.try_clone()?;
    REACTOR.with(|r| {
        *r.borrow_mut() = Some(CoreReactor {
            epoll,
            sources: Vec::new(),
            free: Vec::new(),
            polled: Vec::new(),
            next_polled: 0,
        })
    });
    Ok(())
}

/// Detaches the thread, dropping every source still registered.
pub(crate) fn leave() {
    let reactor = REACTOR.with(|r| r.borrow_mut().take());
    drop(reactor);
    REGISTERED.with(|c| c.set(0));
    POLLED.with(|c| c.set(0));
}

/// Events one `epoll_pwait` returns at most.
const EVENT_BATCH: usize = 256;

/// The calling thread's epoll event buffer, with room for [`EVENT_BATCH`] events.
pub(crate) fn with_event_buffer<R>(f: impl FnOnce(&mut Vec<Event>) -> R) -> R {
    EVENTS.with(|events| {
        let mut events = events.borrow_mut();
        if events.capacity() == 0 {
            events.reserve_exact(EVENT_BATCH);
        }
        f(&mut events)
    })
}

fn with_reactor<R>(f: impl FnOnce(&mut CoreReactor) -> io::Result<R>) -> io::Result<R> {
    REACTOR.with(|r| match r.borrow_mut().as_mut() {
        Some(reactor) => f(reactor),
        None => Err(io::Error::other("not on a hosted Ebbflow core")),
    })
}

/// Registers `fd` for `flags` (edge-triggered is added) on the calling core.
pub fn register(fd: impl AsFd, flags: EventFlags, source: Rc<dyn Source>) -> io::Result<Token> {
    with_reactor(|reactor| {
        let slot = match reactor.free.pop() {
            Some(slot) => slot,
            None => {
                reactor.sources.push(None);
                reactor.sources.len() - 1
            }
        };
        let token = slot as u64;
        if let Err(e) = epoll::add(
            &reactor.epoll,
            fd,
            EventData::new_u64(token),
            flags | EventFlags::ET,
        ) {
            reactor.free.push(slot);
            return Err(e.into());
        }
        reactor.sources[slot] = Some(source);
        REGISTERED.with(|c| c.set(c.get() + 1));
        Ok(Token(token))
    })
}

/// Removes a registration. The source is dropped after the call returns to the loop.
pub fn deregister(fd: impl AsFd, token: Token) -> io::Result<()> {
    with_reactor(|reactor| {
        let slot = token.0 as usize;
        let removed = reactor.sources.get_mut(slot).and_then(Option::take);
        if removed.is_some() {
            reactor.free.push(slot);
            REGISTERED.with(|c| c.set(c.get() - 1));
        }
        // The fd may already be closed by the kernel's view (it is not: we still own it).
        epoll::delete(&reactor.epoll, fd)?;
        Ok(())
    })
}

/// Adds `source` to the calling core's memory-polled devices.
pub fn register_polled(source: Rc<dyn PolledSource>) -> io::Result<PolledToken> {
    let token = with_reactor(|reactor| {
        let token = PolledToken(reactor.next_polled);
        reactor.next_polled += 1;
        reactor.polled.push((token, source));
        Ok(token)
    })?;
    POLLED.with(|c| c.set(c.get() + 1));
    Ok(token)
}

/// Removes a memory-polled registration of the calling core; unknown tokens are ignored.
pub fn deregister_polled(token: PolledToken) {
    let removed = with_reactor(|reactor| {
        let before = reactor.polled.len();
        reactor.polled.retain(|(t, _)| *t != token);
        Ok(before - reactor.polled.len())
    })
    .unwrap_or(0);
    POLLED.with(|c| c.set(c.get() - removed));
}

/// Whether the calling core has memory-polled devices (one thread-local load).
pub(crate) fn polls_memory() -> bool {
    POLLED.with(Cell::get) > 0
}

/// Dispatches the calling core's memory-polled devices that have work; returns how many.
pub(crate) fn poll_memory() -> usize {
    // Collected first: a dispatch polls the stack, which may register or deregister.
    let ready: Vec<Rc<dyn PolledSource>> = REACTOR.with(|r| {
        r.borrow().as_ref().map_or_else(Vec::new, |reactor| {
            reactor
                .polled
                .iter()
                .filter(|(_, source)| source.has_work())
                .map(|(_, source)| source.clone())
                .collect()
        })
    });
    let found = ready.len();
    for source in ready {
        source.dispatch();
    }
    found
}

/// Arms the calling core's memory-polled devices before it sleeps (see
/// [`PolledSource::arm`]); returns whether any found work.
pub(crate) fn arm_memory() -> bool {
    REACTOR.with(|r| {
        r.borrow().as_ref().is_some_and(|reactor| {
            // Every device is armed (no short cut): each must ask for its wake.
            reactor
                .polled
                .iter()
                .fold(false, |found, (_, source)| source.arm() | found)
        })
    })
}

/// How many sources the calling core has registered.
pub fn registered() -> usize {
    REGISTERED.with(Cell::get)
}

pub(crate) fn dispatch(token: u64, flags: EventFlags) {
    let source = REACTOR.with(|r| {
        r.borrow()
            .as_ref()
            .and_then(|reactor| reactor.sources.get(token as usize).cloned().flatten())
    });
    // Called with no borrow held: the source may register or deregister others.
    if let Some(source) = source {
        source.ready(flags);
    }
}
