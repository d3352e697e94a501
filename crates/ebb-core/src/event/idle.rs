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

/// One core's idle handlers. Handlers may add or remove handlers (themselves included)
/// while they run; changes take effect from the next round.
#[derive(Default)]
pub(crate) struct IdleHandlers {
    handlers: RefCell<Vec<(IdleId, Handler)>>,
    removed_while_running: RefCell<Vec<IdleId>>,
    running: Cell<bool>,
    next_id: Cell<u64>,
}

impl IdleHandlers {
    pub(crate) fn add(&self, handler: Handler) -> IdleId {
        let id = IdleId(self.next_id.get());
        self.next_id.set(id.0 + 1);
        self.handlers.borrow_mut().push((id, handler));
        id
    }

    pub(crate) fn remove(&self, id: IdleId) {
        self.handlers.borrow_mut().retain(|(h, _)| *h != id);
        if self.running.get() {
            self.removed_while_running.borrow_mut().push(id);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.borrow().is_empty()
    }

    /// Runs every handler once. Returns whether any reported [`IdleStatus::Busy`].
    pub(crate) fn run(&self) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut running = core::mem::take(&mut *self.handlers.borrow_mut());
        self.running.set(true);
        let mut busy = false;
        for (id, handler) in running.iter_mut() {
            if self.removed_while_running.borrow().contains(id) {
                continue;
            }
            busy |= handler() == IdleStatus::Busy;
        }
        self.running.set(false);
        let removed = core::mem::take(&mut *self.removed_while_running.borrow_mut());
        running.retain(|(id, _)| !removed.contains(id));
        let mut handlers = self.handlers.borrow_mut();
        running.append(&mut handlers);
        *handlers = running;
        busy
    }

    /// Drops every handler (the core is stopping).
    pub(crate) fn clear(&self) -> Vec<(IdleId, Handler)> {
        core::mem::take(&mut *self.handlers.borrow_mut())
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
}
