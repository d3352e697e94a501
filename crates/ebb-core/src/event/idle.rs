//! Idle handlers: recurring work a core does when it has nothing else to do.
//!
//! EbbRT's adaptive polling lives here: a driver under load installs an idle handler that
//! polls its device instead of taking interrupts, and removes it when traffic drops.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

/// Names an installed idle handler, to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdleId(u64);

/// What an idle handler found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdleStatus {
    /// It did work: the core must not sleep yet (poll again next iteration).
    Busy,
    /// Nothing to do: as far as this handler is concerned, the core may sleep.
    Idle,
}

type Handler = Box<dyn FnMut() -> IdleStatus>;

/// An installed handler. `handler` is `None` only while it runs (checked out of the list,
/// so that it may add and remove handlers itself).
struct Entry {
    id: IdleId,
    handler: Option<Handler>,
    /// Removed during a round: skipped for the rest of it, dropped at its end.
    removed: bool,
}

/// One core's idle handlers. Handlers may add or remove handlers (themselves included)
/// while they run; changes take effect from the next round.
///
/// The loop runs them at every iteration, so a round allocates nothing and moves nothing:
/// handlers are run in place, by index, each checked out of its slot while it runs. A
/// round runs the handlers there were when it began (additions go to the end, beyond
/// it); a removal during a round only marks its entry (indices stay put), and the marked
/// entries are dropped when the round ends.
#[derive(Default)]
pub(crate) struct IdleHandlers {
    handlers: RefCell<Vec<Entry>>,
    running: Cell<bool>,
    /// Some entry was marked removed during the current round.
    removed_while_running: Cell<bool>,
    next_id: Cell<u64>,
}

impl IdleHandlers {
    pub(crate) fn add(&self, handler: Handler) -> IdleId {
        let id = IdleId(self.next_id.get());
        self.next_id.set(id.0 + 1);
        self.handlers.borrow_mut().push(Entry {
            id,
            handler: Some(handler),
            removed: false,
        });
        id
    }

    pub(crate) fn remove(&self, id: IdleId) {
        let mut handlers = self.handlers.borrow_mut();
        if self.running.get() {
            if let Some(entry) = handlers.iter_mut().find(|e| e.id == id) {
                entry.removed = true;
                self.removed_while_running.set(true);
            }
        } else {
            handlers.retain(|e| e.id != id);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.borrow().is_empty()
    }

    /// Runs every handler once. Returns whether any reported [`IdleStatus::Busy`].
    #[inline]
    pub(crate) fn run(&self) -> bool {
        if self.is_empty() {
            return false;
        }
        self.run_round()
    }

    fn run_round(&self) -> bool {
        self.running.set(true);
        let count = self.handlers.borrow().len();
        let mut busy = false;
        for index in 0..count {
            let handler = {
                let mut handlers = self.handlers.borrow_mut();
                let entry = &mut handlers[index];
                if entry.removed {
                    None
                } else {
                    entry.handler.take()
                }
            };
            let Some(mut handler) = handler else { continue };
            busy |= handler() == IdleStatus::Busy;
            // Back in its slot, removed or not: a handler that removed itself is dropped
            // with the other marked entries below, after the round, as before.
            self.handlers.borrow_mut()[index].handler = Some(handler);
        }
        self.running.set(false);
        if self.removed_while_running.replace(false) {
            let removed: Vec<Entry> = {
                let mut handlers = self.handlers.borrow_mut();
                let (gone, kept) = core::mem::take(&mut *handlers)
                    .into_iter()
                    .partition(|e| e.removed);
                *handlers = kept;
                gone
            };
            // Dropped with no borrow held: a handler's drop may add or remove handlers.
            drop(removed);
        }
        busy
    }

    /// Drops every handler (the core is stopping).
    pub(crate) fn clear(&self) -> Vec<Box<dyn FnMut() -> IdleStatus>> {
        core::mem::take(&mut *self.handlers.borrow_mut())
            .into_iter()
            .filter_map(|e| e.handler)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::rc::Rc;

    #[test]
    fn handlers_run_in_order_and_report_busy() {
        let idle = IdleHandlers::default();
        let log = Rc::new(RefCell::new(Vec::new()));
        let l1 = log.clone();
        idle.add(Box::new(move || {
            l1.borrow_mut().push(1);
            IdleStatus::Idle
        }));
        assert!(!idle.run());
        let l2 = log.clone();
        idle.add(Box::new(move || {
            l2.borrow_mut().push(2);
            IdleStatus::Busy
        }));
        assert!(idle.run());
        assert_eq!(*log.borrow(), [1, 1, 2]);
    }

    #[test]
    fn a_handler_can_remove_itself_and_add_another() {
        let idle = Rc::new(IdleHandlers::default());
        let runs = Rc::new(Cell::new(0));
        let own_id = Rc::new(Cell::new(None));
        let (i, r, o) = (idle.clone(), runs.clone(), own_id.clone());
        let id = idle.add(Box::new(move || {
            r.set(r.get() + 1);
            i.remove(o.get().unwrap());
            let r2 = r.clone();
            i.add(Box::new(move || {
                r2.set(r2.get() + 100);
                IdleStatus::Idle
            }));
            IdleStatus::Idle
        }));
        own_id.set(Some(id));
        idle.run();
        assert_eq!(runs.get(), 1);
        idle.run();
        assert_eq!(
            runs.get(),
            101,
            "the removed handler did not run again; the new one did"
        );
    }

    #[test]
    fn a_handler_removed_by_an_earlier_one_is_skipped_in_that_round() {
        let idle = Rc::new(IdleHandlers::default());
        let log = Rc::new(RefCell::new(Vec::new()));
        let victim = Rc::new(Cell::new(None));
        let (i, l, v) = (idle.clone(), log.clone(), victim.clone());
        idle.add(Box::new(move || {
            l.borrow_mut().push(1);
            if let Some(id) = v.take() {
                i.remove(id);
            }
            IdleStatus::Idle
        }));
        let l = log.clone();
        victim.set(Some(idle.add(Box::new(move || {
            l.borrow_mut().push(2);
            IdleStatus::Busy
        }))));
        let l = log.clone();
        idle.add(Box::new(move || {
            l.borrow_mut().push(3);
            IdleStatus::Idle
        }));
        assert!(!idle.run(), "the busy handler was removed before its turn");
        assert!(!idle.run());
        assert_eq!(*log.borrow(), [1, 3, 1, 3]);
        assert_eq!(idle.clear().len(), 2);
        assert!(idle.is_empty());
    }
}
