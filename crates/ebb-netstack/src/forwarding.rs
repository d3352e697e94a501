//! Several cores: forwarding each received frame that another core owns to that core
//! (see the crate docs, "Several cores"). Which core owns a frame is the
//! [`FlowDirectory`]'s answer; how a batch reaches the other core is the runner's
//! (`send_batch`), so this module knows nothing of runners.

use alloc::rc::Rc;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

use ebb_core::CoreId;
use ebb_net::stack::FrameSteering;
use ebb_net::steering::{FlowDirectory, Steer};
use ebb_net_driver::RxFrame;

use crate::counters::RunnerCounters;

/// Appends `frames` to `inbox` up to `limit` frames in all; returns how many were
/// dropped for want of room (the newest, as a full device ring drops arrivals).
pub(crate) fn admit(inbox: &mut Vec<RxFrame>, mut frames: Vec<RxFrame>, limit: usize) -> u64 {
    let room = limit.saturating_sub(inbox.len());
    let dropped = frames.len().saturating_sub(room);
    frames.truncate(room);
    inbox.extend(frames);
    dropped as u64
}

/// One core's forwarder (see the crate docs, "Several cores"): asks the directory about
/// every received frame and sends other cores theirs, one message per core per batch.
pub(crate) struct CoreForwarder<F> {
    here: CoreId,
    directory: Arc<FlowDirectory>,
    /// Frames for each core of the stack (by position in `directory.cores()`), reused;
    /// each keeps what the device said of its checksum.
    outboxes: Vec<Vec<RxFrame>>,
    counters: Rc<RefCell<RunnerCounters>>,
    /// Sends a batch to a core's runner; false if it could not be sent.
    send_batch: F,
}

impl<F: FnMut(CoreId, Vec<RxFrame>) -> bool> CoreForwarder<F> {
    /// The forwarder of core `here` of the stack whose directory is `directory`, counting
    /// in `counters`, sending batches with `send_batch`.
    pub(crate) fn new(
        here: CoreId,
        directory: Arc<FlowDirectory>,
        counters: Rc<RefCell<RunnerCounters>>,
        send_batch: F,
    ) -> Self {
        CoreForwarder {
            here,
            outboxes: vec![Vec::new(); directory.cores().len()],
            directory,
            counters,
            send_batch,
        }
    }

    fn outbox(&mut self, core: CoreId) -> Option<&mut Vec<RxFrame>> {
        let index = self.directory.cores().iter().position(|&c| c == core)?;
        self.outboxes.get_mut(index)
    }

    fn count(&self, f: impl FnOnce(&mut RunnerCounters)) {
        f(&mut self.counters.borrow_mut());
    }
}

impl<F: FnMut(CoreId, Vec<RxFrame>) -> bool> FrameSteering for CoreForwarder<F> {
    fn steer(&mut self, frames: &mut Vec<RxFrame>) {
        let directory = self.directory.clone();
        let (mut out, mut everywhere) = (0, 0);
        frames.retain(
            |frame| match directory.steer(self.here, frame.buf.as_slice()) {
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
            },
        );
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
            if !(self.send_batch)(core, batch) {
                self.count(|c| c.steer_failures += n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use ebb_core::IOBuf;

    fn frames(tags: core::ops::Range<u8>) -> Vec<RxFrame> {
        tags.map(|t| RxFrame::new(IOBuf::copy_from_slice(&[t])))
            .collect()
    }

    #[test]
    fn the_steered_inbox_is_bounded_and_drops_the_newest() {
        let mut inbox = Vec::new();
        assert_eq!(admit(&mut inbox, frames(0..3), 5), 0);
        assert_eq!(admit(&mut inbox, frames(3..7), 5), 2, "two over the bound");
        let kept: Vec<u8> = inbox.iter().map(|f| f.buf.as_slice()[0]).collect();
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
