//! The I/O thread and its engine: rounds of moving frames between the rings and the
//! backends (the copying path here, the direct path in [`super::direct`], both over the
//! chain accessors of [`super::chain`]), and when the thread sleeps (see the parent
//! module's "The I/O thread").

use super::chain::{gather, scatter_chain};
use super::control::control_command;
use super::copying::{receive_copying, transmit_copying};
use super::direct::{receive_direct, transmit_direct};
use super::offload::{TxOffload, tx_request};
use super::placement::TrafficPlacement;
use super::transport::VirtioNetDevice;
use super::turn::{GuestTurn, asks_for_answer};
use super::{
    DEVICE_MTU, IDLE_POLL, PENDING_OUTPUT_RETRY, QueueFault, RX_BACKLOG, SLEEP_MAX, add_faults, on,
};
use crate::guest::GuestMem;
use crate::shared::Shared;
use crate::virtio::host_link::HostLink;
use crate::virtio::queue::{Chain, DeviceQueue, Direction, QueueError};
use ebb_abi::virtio::features;
use ebb_core::{IOBufChain, Instant as NetInstant};
use ebb_net_driver::{
    ETHERNET_HEADER_LEN, FaultStats, FrameChecksum, RxFrame, Segmentation, TxFrame,
};
use rustix::event::epoll;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// What the I/O thread needs.
pub struct IoThread {
    /// The device.
    pub device: Arc<VirtioNetDevice>,
    /// The VM.
    pub shared: Arc<Shared>,
    /// One backend per pair, or one for all.
    pub backends: Vec<Box<dyn HostLink>>,
    /// The guest's kick eventfd per queue (ioeventfds on QueueNotify).
    pub queue_kicks: Vec<EventFd>,
    /// Each vCPU's wake-up eventfd (the one WAIT sleeps on), pair `i` ↔ vCPU `i`.
    pub vcpu_wakes: Vec<EventFd>,
    /// How long to poll after the last work before sleeping ([`io_poll_window`]).
    pub idle_poll: Duration,
    /// The thread shares its CPU with the vCPUs (`cpus_shared`): while the guest has
    /// frames it has not taken, host input does not wake the thread (see `run`). On a
    /// CPU of its own, waking costs the guest nothing and keeps input flowing.
    pub guest_first: bool,
    /// Moves the vCPUs and this thread as the traffic asks (a node on scarce CPUs
    /// beside a front end; see [`TrafficPlacement`]).
    pub placement: Option<TrafficPlacement>,
}

/// One live queue pair in the I/O thread.
struct Pair {
    rx: Option<DeviceQueue>,
    tx: Option<DeviceQueue>,
    backlog: VecDeque<(IOBufChain, FrameChecksum)>,
    /// Direct and copying backends ([`HostLink::direct`], [`HostLink::copying`]): a
    /// transmit chain the backend refused (full), written first next round.
    held_tx: Option<Chain>,
    /// Direct and copying backends: a receive chain taken when the backend had no frame,
    /// filled first next round.
    held_rx: Option<Chain>,
    /// Direct and copying backends: the receive ring was empty when frames were looked for, so any
    /// frames wait in the backend (not in `backlog`) for buffers.
    rx_starved: bool,
}

impl Pair {
    /// Frames for the guest wait for its receive buffers: in the backlog, or (direct and
    /// copying backends) in the backend.
    fn waits_for_guest(&self) -> bool {
        !self.backlog.is_empty() || self.rx_starved
    }
}

/// The I/O thread's live queues and what it carries from one round to the next. One
/// [`step`](Self::step) is one round of processing without the sleeping, so the
/// hostile-guest tests drive the device a round at a time over fake guest memory and an
/// in-memory backend, without KVM or a thread.
pub(crate) struct Engine {
    /// The transport epoch the queues were built for (`u64::MAX`: none).
    epoch: u64,
    /// `VirtioNetDevice::changes` when the transport was last looked at (`None`: never).
    seen_changes: Option<u64>,
    pairs: Vec<Pair>,
    ctrl: Option<DeviceQueue>,
    active_pairs: usize,
    /// The features negotiated for the current epoch.
    features: u64,
    /// Large receive may be on in the backends ([`HostLink::set_large_receive`]): set
    /// for a driver that negotiated GUEST_TSO4, cleared once every backend turned it off.
    large_receive: bool,
    frames: Vec<RxFrame>,
    /// Frames for the guest from a backend that hands over chains
    /// ([`HostLink::receive_chains`]), or `frames` made chains.
    chains: Vec<TxFrame>,
    /// Frames for the backend, each with its checksum state.
    outgoing: VecDeque<TxFrame>,
    /// Bytes moved on the IOBuf path since [`IoThread::run`] last took them (what
    /// [`TrafficPlacement`] measures).
    moved: u64,
    /// The guest was handed frames that ask for an answer (a segment with data, or
    /// opening or closing a connection) and has transmitted nothing since: its turn
    /// (see `turn`).
    awaiting_answer: bool,
    /// Rounds in which the guest transmitted: a turn that saw one more is over, even if
    /// the same round handed the guest new frames (which begin the next).
    answers: u64,
}

impl Engine {
    pub(crate) fn new() -> Engine {
        Engine {
            epoch: u64::MAX,
            seen_changes: None,
            pairs: Vec::new(),
            ctrl: None,
            active_pairs: 1,
            features: 0,
            moved: 0,
            awaiting_answer: false,
            answers: 0,
            // Backends start with it off (the TAP is opened without TUN_F_TSO4).
            large_receive: false,
            frames: Vec::new(),
            chains: Vec::new(),
            outgoing: VecDeque::new(),
        }
    }

    /// Rebuilds the queues if the transport changed, then moves what can move between
    /// the rings and `backends`, writing `wakes[pair]` when the driver asked to hear.
    /// A queue fault breaks the device. Returns whether there was work.
    pub(crate) fn step(
        &mut self,
        device: &VirtioNetDevice,
        mem: &GuestMem,
        now: NetInstant,
        backends: &mut [Box<dyn HostLink>],
        wakes: &[EventFd],
    ) -> bool {
        // Acquire: pairs with `changed`, so the transport's new state is visible below.
        let changes = device.changes.load(Ordering::Acquire);
        if self.seen_changes != Some(changes) {
            self.seen_changes = Some(changes);
            self.rebuild(device, mem, backends);
        }
        match self.work(device, mem, now, backends, wakes) {
            Ok(worked) => worked,
            Err(e) => {
                device.break_device(&e.to_string());
                self.pairs.clear();
                self.ctrl = None;
                false
            }
        }
    }

    /// Builds the queues the transport now describes (none unless it is live), with
    /// large receive in `backends` on for a driver that negotiated GUEST_TSO4 and off
    /// otherwise (see [`switch_large_receive`](Self::switch_large_receive)).
    fn rebuild(
        &mut self,
        device: &VirtioNetDevice,
        mem: &GuestMem,
        backends: &mut [Box<dyn HostLink>],
    ) {
        match device.activation(mem) {
            Ok(Some((e, configs, negotiated))) if e != self.epoch => {
                let guest_tso4 = negotiated & features::bit(features::NET_GUEST_TSO4) != 0;
                if let Err(e) = self.switch_large_receive(backends, device.pairs, guest_tso4) {
                    // Frames up to 64 KiB would keep coming to a driver whose buffers
                    // hold an MTU: each dropped, the guest's TCP stalled for no reason it
                    // could see. Better a device that says it is broken.
                    device.break_for_backend(&format!(
                        "cannot turn large receive off for a driver without GUEST_TSO4: {e}"
                    ));
                    self.pairs.clear();
                    self.ctrl = None;
                    return;
                }
                self.epoch = e;
                self.features = negotiated;
                let queue = |i: usize, want| {
                    configs
                        .get(i)
                        .filter(|c| c.size != 0)
                        .map(|c| DeviceQueue::new(*c, want))
                };
                self.pairs = (0..usize::from(device.pairs))
                    .map(|p| Pair {
                        rx: queue(2 * p, Direction::Write),
                        tx: queue(2 * p + 1, Direction::Read),
                        backlog: VecDeque::new(),
                        held_tx: None,
                        held_rx: None,
                        rx_starved: false,
                    })
                    .collect();
                self.ctrl = queue(2 * usize::from(device.pairs), Direction::ReadThenWrite);
                self.active_pairs = 1;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                self.pairs.clear();
                self.ctrl = None;
                self.epoch = u64::MAX;
                // Reset (or broken): the next driver may not take large frames. A
                // failure here is tried again at its DRIVER_OK, which breaks the device
                // if it still fails and that driver has no GUEST_TSO4.
                if let Err(e) = self.switch_large_receive(backends, device.pairs, false) {
                    log::warn!("virtio-net: cannot turn large receive off at reset: {e}");
                }
            }
            Err(e) => {
                device.break_device(&e.to_string());
                self.pairs.clear();
            }
        }
    }

    /// Turns large receive on or off in every backend ([`HostLink::set_large_receive`])
    /// unless it already is, for a device with `pairs` queue pairs.
    ///
    /// On, it is only where large frames can reach the guest whole, GSO header and all:
    /// on the direct receive path, so every backend direct with a virtio-net header and
    /// one per pair. Where it is not — or a backend refuses — it stays off, logged, and
    /// the driver that negotiated GUEST_TSO4 gets MTU-sized frames, which the feature
    /// allows (it lets the device send large frames, it does not oblige it).
    ///
    /// Off, it must be: the error of any backend that failed (the others are still
    /// turned off, and the next call tries again).
    fn switch_large_receive(
        &mut self,
        backends: &mut [Box<dyn HostLink>],
        pairs: u16,
        on: bool,
    ) -> std::io::Result<()> {
        if self.large_receive == on {
            return Ok(());
        }
        let set_all = |backends: &mut [Box<dyn HostLink>], on| {
            backends
                .iter_mut()
                .map(|b| b.set_large_receive(on))
                .fold(Ok(()), std::io::Result::and)
        };
        let backends_per_pair = backends.len() == usize::from(pairs);
        if !on {
            set_all(backends, false)?;
            self.large_receive = false;
            return Ok(());
        }
        // Direct backends pass the TAP's GSO header through, one per pair; the IOBuf
        // path writes the device's own (and the backend refuses if it cannot).
        let whole_to_the_guest = backends.iter_mut().all(|b| match b.direct() {
            Some(d) => d.vnet_hdr && backends_per_pair,
            None => b.copying().is_none(),
        });
        let unavailable = |why: &dyn std::fmt::Display| {
            log::warn!(
                "virtio-net: GUEST_TSO4 negotiated but large receive is unavailable ({why}): \
                 frames to the guest stay MTU-sized"
            );
        };
        if !whole_to_the_guest {
            unavailable(&"the backend's frames take the copying path, without GSO headers");
            return Ok(());
        }
        match set_all(backends, true) {
            Ok(()) => self.large_receive = true,
            Err(e) => {
                unavailable(&e);
                // Backends that did turn it on turn it off again. Should that fail too,
                // their large frames still suit this driver; the flag stays set so that
                // the next driver's activation tries again.
                self.large_receive = set_all(backends, false).is_err();
            }
        }
        Ok(())
    }

    /// EVENT_IDX on the live queues: asks for kicks (before sleeping) or stops asking
    /// (while polling). Returns whether work arrived meanwhile.
    ///
    /// Transmit and control chains are work whenever they are there. Receive buffers
    /// are work only for a queue whose backlog waits for them: the guest keeps its
    /// receive ring stocked, so "buffers are available" is true nearly always, and
    /// counting it kept this thread from ever sleeping (it spun on the CPU it was meant
    /// to leave to a vCPU). The same goes for kicks: a receive queue with no backlog
    /// does not ask for them, or every buffer the guest re-posts would wake this thread
    /// for nothing.
    pub(crate) fn want_kicks(&self, mem: &GuestMem, wanted: bool) -> bool {
        let mut arrived = false;
        for pair in &self.pairs {
            if let Some(tx) = &pair.tx {
                arrived |= tx.set_kicks_wanted(mem, wanted).unwrap_or(false);
            }
            if let Some(rx) = &pair.rx {
                let waiting = pair.waits_for_guest();
                arrived |= rx.set_kicks_wanted(mem, wanted && waiting).unwrap_or(false) && waiting;
            }
        }
        if let Some(ctrl) = &self.ctrl {
            arrived |= ctrl.set_kicks_wanted(mem, wanted).unwrap_or(false);
        }
        arrived
    }

    /// Whether frames for the guest wait for its receive buffers: the guest is behind,
    /// and what frees the buffers is the guest's receive kick (asked for by
    /// [`want_kicks`](Self::want_kicks)), not more input from the host.
    pub(crate) fn guest_behind(&self) -> bool {
        self.pairs.iter().any(Pair::waits_for_guest)
    }

    /// Whether the guest was handed frames that ask for an answer and has transmitted
    /// nothing since.
    pub(crate) fn awaiting_answer(&self) -> bool {
        self.awaiting_answer
    }

    /// How many rounds the guest transmitted in, so far.
    pub(crate) fn answers(&self) -> u64 {
        self.answers
    }

    /// Stops waiting for the guest's answer (its turn is over).
    pub(crate) fn end_guest_turn(&mut self) {
        self.awaiting_answer = false;
    }

    /// Whether frames taken from the guest still wait for the backend to accept them
    /// (it was full): the thread must come back soon even if nothing wakes it.
    pub(crate) fn has_pending_output(&self) -> bool {
        !self.outgoing.is_empty() || self.pairs.iter().any(|p| p.held_tx.is_some())
    }

    fn work(
        &mut self,
        device: &VirtioNetDevice,
        mem: &GuestMem,
        now: NetInstant,
        backends: &mut [Box<dyn HostLink>],
        wakes: &[EventFd],
    ) -> Result<bool, QueueFault> {
        if self.pairs.is_empty() {
            return Ok(false);
        }
        let pairs = device.pairs;
        let wake = |pair: usize| {
            if let Some(fd) = wakes.get(pair) {
                let _ = fd.write(1);
                device.stats.wakes.fetch_add(1, Ordering::Relaxed);
            }
        };
        let outgoing = &mut self.outgoing;
        let negotiated = TxOffload {
            csum: self.features & features::bit(features::NET_CSUM) != 0,
            tso4: self.features & features::bit(features::NET_HOST_TSO4) != 0,
        };
        let guest_csum = self.features & features::bit(features::NET_GUEST_CSUM) != 0;
        let guest_tso4 = self.features & features::bit(features::NET_GUEST_TSO4) != 0;
        let mut worked = false;
        // Control commands.
        if let Some(q) = &mut self.ctrl {
            let on = on(2 * usize::from(pairs), pairs);
            while let Some(chain) = q.pop(mem).map_err(&on)? {
                let ack = control_command(mem, &chain, device.pairs, &mut self.active_pairs);
                let written = match chain.writable.first() {
                    Some(buf) => {
                        mem.write_bytes(buf.addr, &[ack])
                            .ok_or(QueueError::Access("control ack"))
                            .map_err(&on)?;
                        1
                    }
                    None => 0,
                };
                q.push_used(mem, chain.head, written).map_err(&on)?;
                worked = true;
            }
        }
        // Transmit: guest → backend.
        let mut transmitted = false;
        let n_backends = backends.len();
        let one_backend_per_pair = n_backends == self.pairs.len();
        for (p, pair) in self.pairs.iter_mut().enumerate() {
            let Some(tx) = &mut pair.tx else { continue };
            let on = on(2 * p + 1, pairs);
            let backend = &mut backends[p.min(n_backends - 1)];
            if let Some(direct) = backend.direct() {
                let (moved, returned) = transmit_direct(
                    mem,
                    tx,
                    &mut pair.held_tx,
                    direct,
                    negotiated,
                    &device.stats,
                )
                .map_err(&on)?;
                worked |= moved;
                transmitted |= moved;
                if wake_asked(mem, tx, returned).map_err(&on)? {
                    wake(p);
                }
                continue;
            }
            if one_backend_per_pair && let Some(link) = backend.copying() {
                let (moved, returned) =
                    transmit_copying(mem, tx, &mut pair.held_tx, link, negotiated, &device.stats)
                        .map_err(&on)?;
                worked |= moved;
                transmitted |= moved;
                if wake_asked(mem, tx, returned).map_err(&on)? {
                    wake(p);
                }
                continue;
            }
            // The IOBuf path hands a backend frames and checksum states. HOST_TSO4 is
            // offered for a direct backend or one that takes large frames on this path
            // (`HostLinkFactory::offload`): a validated GSO request becomes a frame
            // longer than the MTU, which the backend cuts as `Segmentation::of` says
            // (the request's sizes are not carried: for the MTU, they follow from the
            // frame's headers) or takes whole.
            let copying = negotiated;
            let mut returned = None;
            while outgoing.len() < 256 {
                let Some(chain) = tx.pop(mem).map_err(&on)? else {
                    break;
                };
                let (frame, header) = gather(mem, &chain, copying).map_err(&on)?;
                let Some(frame) = frame else {
                    // No memory for it: dropped and counted, the chain returned.
                    let old = tx.push_used(mem, chain.head, 0).map_err(&on)?;
                    returned.get_or_insert(old);
                    device.stats.tx_dropped.fetch_add(1, Ordering::Relaxed);
                    worked = true;
                    continue;
                };
                self.moved += frame.len() as u64;
                let request = tx_request(&header, chain.head, frame.len(), copying).map_err(&on)?;
                request.count(&device.stats);
                let old = tx.push_used(mem, chain.head, 0).map_err(&on)?;
                returned.get_or_insert(old);
                outgoing.push_back(TxFrame {
                    chain: IOBufChain::from(frame),
                    checksum: request.checksum,
                });
                worked = true;
                transmitted = true;
            }
            if wake_asked(mem, tx, returned).map_err(&on)? {
                wake(p);
            }
            let before = outgoing.len();
            backend.transmit(now, outgoing);
            device
                .stats
                .tx_frames
                .fetch_add((before - outgoing.len()) as u64, Ordering::Relaxed);
            // What the backend could not take now is dropped only if it is still
            // full next round; keep it for now (bounded above).
        }
        if transmitted {
            self.awaiting_answer = false;
            self.answers += 1;
        }
        // Whether a frame handed to the guest this round asks it for an answer.
        let mut asked = false;
        // Receive: backend → guest. Only as many frames as the backlog has room for:
        // the rest waits in the backend (passt's are read out of its socket all the same,
        // by `drain`), so nothing is dropped here for want of guest buffers.
        let frames = &mut self.frames;
        for (b, backend) in backends.iter_mut().enumerate() {
            // Straight into the guest's buffers when the backend can and no frame needs
            // its checksum completed on the way (a header the driver cannot read).
            if let Some(direct) = backend.direct()
                && n_backends == self.pairs.len()
                && (guest_csum || !direct.vnet_hdr)
            {
                let pair = &mut self.pairs[b];
                let Some(rx) = &mut pair.rx else { continue };
                let on = on(2 * b, pairs);
                let (moved, returned) = receive_direct(
                    mem,
                    rx,
                    &mut pair.held_rx,
                    &mut pair.rx_starved,
                    direct,
                    guest_tso4,
                    &device.stats,
                    &mut asked,
                )
                .map_err(&on)?;
                worked |= moved;
                if wake_asked(mem, rx, returned).map_err(&on)? {
                    wake(b);
                }
                continue;
            }
            if one_backend_per_pair && let Some(link) = backend.copying() {
                let pair = &mut self.pairs[b];
                let Some(rx) = &mut pair.rx else { continue };
                let on = on(2 * b, pairs);
                let (moved, returned) = receive_copying(
                    mem,
                    rx,
                    &mut pair.held_rx,
                    &mut pair.rx_starved,
                    link,
                    &device.stats,
                    &mut asked,
                )
                .map_err(&on)?;
                worked |= moved;
                if wake_asked(mem, rx, returned).map_err(&on)? {
                    wake(b);
                }
                continue;
            }
            backend.drain();
            let room = if n_backends == self.pairs.len() {
                RX_BACKLOG.saturating_sub(self.pairs[b].backlog.len())
            } else {
                self.pairs
                    .iter()
                    .map(|p| RX_BACKLOG.saturating_sub(p.backlog.len()))
                    .min()
                    .unwrap_or(0)
            };
            let chains = &mut self.chains;
            chains.clear();
            let n = match backend.receive_chains(now, chains, room.min(64)) {
                Some(n) => n,
                None => {
                    frames.clear();
                    let n = backend.receive(now, frames, room.min(64));
                    chains.extend(frames.drain(..).map(|f| TxFrame {
                        chain: IOBufChain::from(f.buf),
                        checksum: f.checksum,
                    }));
                    n
                }
            };
            if n > 0 {
                worked = true;
            }
            for mut received in chains.drain(..) {
                if !guest_csum {
                    // Complete checksums only: a driver without GUEST_CSUM reads no flags.
                    received.complete();
                }
                let TxFrame {
                    chain: frame,
                    checksum,
                } = received;
                let p = if n_backends == self.pairs.len() {
                    b
                } else {
                    // The headers are in the first piece (`TxFrame`'s layout).
                    flow_pair(frame.segments().next().unwrap_or(&[]), self.active_pairs)
                };
                let last = self.pairs.len() - 1;
                let backlog = &mut self.pairs[p.min(last)].backlog;
                if backlog.len() >= RX_BACKLOG {
                    device.stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    backlog.push_back((frame, checksum));
                }
            }
        }
        // Copying backends: one kick for all this round transmitted (and the buffers
        // its receives returned), not one per frame.
        for backend in backends.iter_mut() {
            if let Some(link) = backend.copying() {
                link.flush();
            }
        }
        for (p, pair) in self.pairs.iter_mut().enumerate() {
            let Some(rx) = &mut pair.rx else { continue };
            let on = on(2 * p, pairs);
            let mut returned = None;
            while let Some((frame, checksum)) = pair.backlog.front() {
                let Some(chain) = rx.pop(mem).map_err(&on)? else {
                    break;
                };
                // A frame longer than the MTU reaches the guest behind a GSO header, and
                // only a guest that negotiated GUEST_TSO4 (else it is dropped: no
                // buffer of such a guest holds one).
                let gso = guest_tso4
                    .then(|| Segmentation::of(frame.segments().next()?, DEVICE_MTU))
                    .flatten();
                let written = if frame.len() > DEVICE_MTU + ETHERNET_HEADER_LEN && gso.is_none() {
                    None
                } else {
                    scatter_chain(mem, &chain, frame, *checksum, gso).map_err(&on)?
                };
                if written.is_none() {
                    device.stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                } else {
                    asked = asked || asks_for_answer(frame.segments().next().unwrap_or(&[]));
                    self.moved += frame.len() as u64;
                    device.stats.rx_frames.fetch_add(1, Ordering::Relaxed);
                    if gso.is_some() {
                        device.stats.rx_gso.fetch_add(1, Ordering::Relaxed);
                    }
                    let counter = match checksum {
                        FrameChecksum::Partial { .. } => Some(&device.stats.rx_csum_partial),
                        FrameChecksum::Verified => Some(&device.stats.rx_csum_valid),
                        FrameChecksum::Complete => None,
                    };
                    if let Some(c) = counter {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let old = rx
                    .push_used(mem, chain.head, written.unwrap_or(0))
                    .map_err(&on)?;
                returned.get_or_insert(old);
                pair.backlog.pop_front();
                worked = true;
            }
            if wake_asked(mem, rx, returned).map_err(&on)? {
                wake(p);
            }
        }
        self.awaiting_answer |= asked;
        Ok(worked)
    }
}

impl IoThread {
    /// Runs until the VM stops.
    pub fn run(mut self) {
        let epoll = match epoll::create(epoll::CreateFlags::CLOEXEC) {
            Ok(e) => e,
            Err(e) => {
                log::error!("virtio-net: epoll: {e}");
                return;
            }
        };
        // The guest's side alone, for while the guest is behind (below).
        let guest_side = match epoll::create(epoll::CreateFlags::CLOEXEC) {
            Ok(e) => e,
            Err(e) => {
                log::error!("virtio-net: epoll: {e}");
                return;
            }
        };
        let add = |set: &std::os::fd::OwnedFd, fd: std::os::fd::BorrowedFd<'_>, token, flags| {
            epoll::add(set, fd, epoll::EventData::new_u64(token), flags).is_ok()
        };
        // The eventfds are read empty after each wake (level-triggered is right). A
        // backend is edge-triggered: frames left in it because the guest's backlog is
        // full must not wake this thread again and again; what frees the backlog is the
        // guest re-posting receive buffers, a kick this thread asks for (`want_kicks`).
        // Each eventfd's token says which one woke the thread, so only that one is read.
        for set in [&epoll, &guest_side] {
            add(
                set,
                crate::sys::borrow_eventfd(&self.device.control),
                CONTROL_TOKEN,
                epoll::EventFlags::IN,
            );
            for (queue, kick) in self.queue_kicks.iter().enumerate() {
                add(
                    set,
                    crate::sys::borrow_eventfd(kick),
                    queue as u64,
                    epoll::EventFlags::IN,
                );
            }
        }
        // Whether each backend's descriptor is watched: only such a backend may wait for
        // reports before reading (below).
        let watched: Vec<bool> = self
            .backends
            .iter()
            .map(|backend| {
                add(
                    &epoll,
                    backend.fd(),
                    BACKEND_TOKEN,
                    epoll::EventFlags::IN | epoll::EventFlags::ET,
                )
            })
            .collect();
        let shared = self.shared.clone();
        let mem = &shared.mem;
        let mut engine = Engine::new();
        let mut last_work = Instant::now();
        let started = Instant::now();
        let mut events = Vec::with_capacity(16);
        let idle_poll = self.idle_poll;
        log::debug!("virtio-net: the I/O thread polls {idle_poll:?} before it sleeps");
        if io_real_time(
            self.guest_first,
            idle_poll,
            std::env::var(IO_REAL_TIME_ENV).ok(),
        ) {
            match crate::sys::become_real_time(IO_REAL_TIME_PRIORITY) {
                Ok(()) => {
                    self.device
                        .stats
                        .io_real_time
                        .store(true, Ordering::Relaxed);
                    log::debug!(
                        "virtio-net: the I/O thread runs at SCHED_FIFO {IO_REAL_TIME_PRIORITY}"
                    );
                }
                Err(e) => log::debug!(
                    "virtio-net: the I/O thread stays at normal priority ({e}; SCHED_FIFO needs \
                     root, CAP_SYS_NICE or RLIMIT_RTPRIO)"
                ),
            }
        }
        // Sleeping after every round of work (no poll window: a CPU shared with a vCPU),
        // this thread reads its epoll at each wake and so knows when a backend's
        // descriptor reported input; a backend that can then reads its descriptor only
        // after such a report, instead of with a system call each round that nearly
        // always found nothing (the user-mode network's epoll and passt's socket: about
        // five of the device thread's eleven system calls per request at a paced load).
        // Polling, it reads no epoll, and every backend reads every round.
        let on_readiness = idle_poll.is_zero();
        if on_readiness {
            for (backend, watched) in self.backends.iter_mut().zip(&watched) {
                if *watched {
                    backend.read_on_readiness();
                }
            }
        }
        let mut backend_reported = true;
        let mut turn = GuestTurn::from_env();
        let mut last_faults: Option<FaultStats> = None;
        while !self.shared.stopping() {
            if on_readiness && std::mem::take(&mut backend_reported) {
                // One token for every backend: each looks.
                for backend in &mut self.backends {
                    backend.readable();
                }
            }
            let now = NetInstant::from_nanos(started.elapsed().as_nanos() as u64);
            let worked = engine.step(&self.device, mem, now, &mut self.backends, &self.vcpu_wakes);
            if let Some(placement) = &mut self.placement {
                let moved = core::mem::take(&mut engine.moved);
                placement.observe(now, moved, &self.device.stats.placement_swaps);
            }
            let faults = self
                .backends
                .iter()
                .filter_map(|b| b.fault_stats())
                .reduce(add_faults);
            if faults != last_faults {
                last_faults = faults;
                *self
                    .device
                    .stats
                    .faults
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = faults;
            }
            if worked {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < idle_poll {
                std::hint::spin_loop();
                continue;
            }
            // Sleep: ask for kicks, look once more, then wait.
            events.clear();
            if !engine.want_kicks(mem, true) {
                let now = NetInstant::from_nanos(started.elapsed().as_nanos() as u64);
                let timeout = sleep_bound(
                    now,
                    engine.has_pending_output()
                        || self.backends.iter().any(|b| b.has_pending_output()),
                    self.backends.iter().filter_map(|b| b.poll_at()).min(),
                );
                let timeout = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: timeout.as_nanos() as i64,
                };
                // While the guest has not taken the frames it was given, input from the
                // host does not wake this thread: on a CPU shared with the vCPU, waking
                // for each arriving packet preempted the guest each time, and under a
                // flood the guest, starved, fell further behind (receive livelock:
                // measured, memcached at 48k requests/s offered served 25-30k, with
                // seconds of latency). The host's input waits in its socket buffers,
                // flow-controlled, and its events in `epoll`'s ready list.
                // While the guest serves what it was handed (see `turn`), host input
                // waits for its answer, too.
                let mut timeout = timeout;
                let guest_turn = self.guest_first
                    && match turn.left(
                        engine.awaiting_answer(),
                        engine.answers(),
                        Instant::now(),
                        &self.device.stats,
                    ) {
                        Some(left) => {
                            timeout.tv_nsec = timeout.tv_nsec.min(left.as_nanos() as i64);
                            true
                        }
                        None => {
                            engine.end_guest_turn();
                            false
                        }
                    };
                let set = if self.guest_first && (engine.guest_behind() || guest_turn) {
                    &guest_side
                } else {
                    &epoll
                };
                let _ = epoll::wait(
                    set,
                    rustix::buffer::spare_capacity(&mut events),
                    Some(&timeout),
                );
            }
            // Clear what woke us — only that: each read is a system call, and reading the
            // control and every kick eventfd after each wake made three in four of those
            // reads find nothing (docs/benchmarks.md, "Where the main job's CPU goes").
            // An eventfd left signalled (work was found before sleeping) stays ready in
            // epoll, level-triggered, and is read after the next wait, which it ends at
            // once. A transport change is seen through `changes`.
            for event in &events {
                match event.data.u64() {
                    BACKEND_TOKEN => backend_reported = true,
                    CONTROL_TOKEN => {
                        let _ = self.device.control.read();
                    }
                    queue => {
                        if let Some(Ok(n)) = self.queue_kicks.get(queue as usize).map(|k| k.read())
                        {
                            self.device.stats.kicks.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                }
            }
            engine.want_kicks(mem, false);
            last_work = Instant::now();
        }
    }
}

/// The I/O thread's epoll token of a backend (queues' kick eventfds are their index).
const BACKEND_TOKEN: u64 = u64::MAX;
/// The I/O thread's epoll token of the control eventfd.
const CONTROL_TOKEN: u64 = u64::MAX - 1;

/// How long the I/O thread may sleep when nothing wakes it: [`SLEEP_MAX`], less when
/// output waits for a full backend ([`PENDING_OUTPUT_RETRY`]: TAP and passt's socket
/// say nothing when they drain) or a backend (the fault injector holding a delayed
/// frame) wants to be polled at `poll_at`.
pub(crate) fn sleep_bound(
    now: NetInstant,
    pending_output: bool,
    poll_at: Option<NetInstant>,
) -> Duration {
    let mut bound = SLEEP_MAX;
    if pending_output {
        bound = bound.min(PENDING_OUTPUT_RETRY);
    }
    if let Some(at) = poll_at {
        bound = bound.min(at.saturating_duration_since(now));
    }
    bound
}

/// Environment variable: `0` keeps the I/O thread at normal priority where it would
/// take [`IO_REAL_TIME_PRIORITY`].
pub const IO_REAL_TIME_ENV: &str = "EBB_VMM_IO_REAL_TIME";

/// The `SCHED_FIFO` priority of an I/O thread that shares its CPUs with the vCPUs, when
/// the monitor may raise it: the lowest, above every normal thread. At nice 19 below
/// it, a polling vCPU still kept a woken device thread waiting now and then, for
/// the rest of the vCPU's protected slice (the scheduler lets a task that was just
/// picked run on before a waking one preempts it); a real-time thread preempts a normal
/// one the moment it wakes. Measured with the main job at paced loads, 3 alternated
/// rounds (docs/benchmarks.md, "The device thread at real-time priority"): p99 at 8k /
/// 16k / 32k requests/s, median of the rounds, 263 / 316 / 334 µs against 544 / 428 / 581.
/// Safe only because such a thread never polls ([`io_real_time`]): it sleeps whenever it
/// has nothing to move, and while the guest serves what it was handed.
pub const IO_REAL_TIME_PRIORITY: i32 = 1;

/// Whether the I/O thread asks for [`IO_REAL_TIME_PRIORITY`]: on CPUs it shares with the
/// vCPUs (`guest_first`), never while it polls (a real-time thread that spins would take
/// the guest's CPU for the whole poll window), unless [`IO_REAL_TIME_ENV`] (`env`) is `0`.
pub(crate) fn io_real_time(guest_first: bool, idle_poll: Duration, env: Option<String>) -> bool {
    guest_first && idle_poll.is_zero() && env.as_deref() != Some("0")
}

/// Environment variable overriding the I/O thread's poll window, in microseconds.
pub const IO_POLL_ENV: &str = "EBB_VMM_IO_POLL_US";

/// How long the I/O thread polls after its last work before it sleeps: [`IDLE_POLL`]
/// when it has a CPU to poll on; zero when it shares every CPU with a vCPU
/// (`cpus_shared`, [`shares_cpus_with_vcpus`]), where each microsecond of its polling is
/// taken from a guest with work to do (measured with native memcached on one CPU: 1.4×
/// the requests per second without it). [`IO_POLL_ENV`] overrides both.
pub(crate) fn io_poll_window(cpus_shared: bool) -> Duration {
    if let Some(us) = std::env::var(IO_POLL_ENV).ok().and_then(|v| v.parse().ok()) {
        return Duration::from_micros(us);
    }
    if cpus_shared {
        Duration::ZERO
    } else {
        IDLE_POLL
    }
}

/// Whether this process may run on no more CPUs than it has vCPUs (its affinity mask,
/// as `taskset` sets it), so that a device thread always competes with a vCPU for a CPU.
/// An unreadable mask counts as "not sharing" (polling stays on, as before).
pub(crate) fn shares_cpus_with_vcpus(vcpus: usize) -> bool {
    rustix::thread::sched_getaffinity(None).is_ok_and(|set| set.count() as usize <= vcpus)
}

/// Whether the driver asked to be woken for the used entries returned this round, the
/// first at used index `returned` (`None`: none were).
fn wake_asked(mem: &GuestMem, q: &DeviceQueue, returned: Option<u16>) -> Result<bool, QueueError> {
    match returned {
        Some(old) => q.needs_notification(mem, old),
        None => Ok(false),
    }
}

/// The queue pair for a frame from a single-queue backend: a symmetric hash of its IPv4
/// addresses and TCP/UDP ports, so both directions of a flow agree; other frames go to
/// pair 0.
fn flow_pair(frame: &[u8], pairs: usize) -> usize {
    if pairs <= 1 || frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
        return 0;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let proto = ip[9];
    let addrs = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]])
        ^ u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    let ports = if (proto == 6 || proto == 17) && ip.len() >= ihl + 4 {
        u32::from(u16::from_be_bytes([ip[ihl], ip[ihl + 1]]))
            ^ u32::from(u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]))
    } else {
        0
    };
    let h = (addrs ^ ports).wrapping_mul(0x9e37_79b9);
    (h >> 16) as usize % pairs
}
