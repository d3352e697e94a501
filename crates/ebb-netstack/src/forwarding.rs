//! Several cores: which core processes each received frame (see the crate docs,
//! "Several cores").

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::Cell;

use ebb_core::{CoreId, IOBuf, event};
use ebb_net::stack::FrameSteering;
use ebb_net::steering::Steer;

use crate::counters::RunnerCounters;
use crate::runner::{MultiCore, local_runner};

/// Appends `frames` to `inbox` up to `limit` frames in all; returns how many were
/// dropped for want of room (the newest, as a full device ring drops arrivals).
pub(crate) fn admit(inbox: &mut Vec<IOBuf>, mut frames: Vec<IOBuf>, limit: usize) -> u64 {
    let room = limit.saturating_sub(inbox.len());
    let dropped = frames.len().saturating_sub(room);
    frames.truncate(room);
    inbox.extend(frames);
    dropped as u64
}

/// One core's steering (see the module docs, "Several cores"): asks the directory about
/// every received frame and sends other cores theirs, one message per core per batch.
pub(crate) struct CoreSteering {
    pub(crate) here: CoreId,
    pub(crate) multi: MultiCore,
    /// Frames for each core of the stack (by position in `directory.cores()`), reused.
    pub(crate) outboxes: Vec<Vec<IOBuf>>,
    pub(crate) counters: Rc<Cell<RunnerCounters>>,
}

impl CoreSteering {
    fn outbox(&mut self, core: CoreId) -> Option<&mut Vec<IOBuf>> {
        let index = self
            .multi
            .directory
            .cores()
            .iter()
            .position(|&c| c == core)?;
        self.outboxes.get_mut(index)
    }

    fn count(&self, f: impl FnOnce(&mut RunnerCounters)) {
        let mut c = self.counters.get();
        f(&mut c);
        self.counters.set(c);
    }
}

impl FrameSteering for CoreSteering {
    fn steer(&mut self, frames: &mut Vec<IOBuf>) {
        let directory = self.multi.directory.clone();
        let (mut out, mut everywhere) = (0, 0);
        frames.retain(|frame| match directory.steer(self.here, frame.as_slice()) {
            Steer::Here => true,
            Steer::To(core) => match self.outbox(core) {
                Some(outbox) => {
                    outbox.push(frame.clone());
                    out += 1;
                    false
                }
                None => true,
            },
            Steer::Everywhere => {
                for &core in directory.cores() {
                    if core != self.here
                        && let Some(outbox) = self.outbox(core)
                    {
                        outbox.push(frame.clone());
                    }
                }
                everywhere += 1;
                true
            }
        });
        self.count(|c| {
            c.steered_out += out;
            c.steered_everywhere += everywhere;
        });
        for (index, &core) in directory.cores().iter().enumerate() {
            let Some(outbox) = self.outboxes.get_mut(index) else {
                continue;
            };
            if outbox.is_empty() {
                continue;
            }
            let batch = core::mem::take(outbox);
            let n = batch.len() as u64;
            let id = self.multi.id;
            let sent = event::spawn_on(core, move || {
                if let Some(runner) = local_runner(id) {
                    runner.receive_steered(batch);
                }
            });
            if sent.is_err() {
                self.count(|c| c.steer_failures += n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn frames(tags: core::ops::Range<u8>) -> Vec<IOBuf> {
        tags.map(|t| IOBuf::copy_from_slice(&[t])).collect()
    }

    #[test]
    fn the_steered_inbox_is_bounded_and_drops_the_newest() {
        let mut inbox = Vec::new();
        assert_eq!(admit(&mut inbox, frames(0..3), 5), 0);
        assert_eq!(admit(&mut inbox, frames(3..7), 5), 2, "two over the bound");
        let kept: Vec<u8> = inbox.iter().map(|f| f.as_slice()[0]).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4], "the oldest kept, in order");
        assert_eq!(admit(&mut inbox, frames(7..9), 5), 2, "full: all dropped");
        inbox.clear();
        assert_eq!(
            admit(&mut inbox, frames(0..2), 5),
            0,
            "room again once drained"
        );
    }
}
