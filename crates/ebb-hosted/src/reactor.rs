//! The per-core readiness reactor: which source owns which epoll token.
//!
//! Sockets register with the calling core's epoll instance, edge-triggered, and get a
//! token; when the loop's device-event step sees readiness for a token, the reactor calls
//! that source. All of it is thread-local to the core.

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

/// A registration's name in its core's reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(u64);

struct CoreReactor {
    epoll: OwnedFd,
    sources: Vec<Option<Rc<dyn Source>>>,
    free: Vec<usize>,
}

thread_local! {
    static REACTOR: RefCell<Option<CoreReactor>> = const { RefCell::new(None) };
    static EVENTS: RefCell<Vec<Event>> = RefCell::new(Vec::with_capacity(256));
    static REGISTERED: Cell<usize> = const { Cell::new(0) };
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
        })
    });
    Ok(())
}

/// Detaches the thread, dropping every source still registered.
pub(crate) fn leave() {
    let reactor = REACTOR.with(|r| r.borrow_mut().take());
    drop(reactor);
    REGISTERED.with(|c| c.set(0));
}

pub(crate) fn with_event_buffer<R>(f: impl FnOnce(&mut Vec<Event>) -> R) -> R {
    EVENTS.with(|events| f(&mut events.borrow_mut()))
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
