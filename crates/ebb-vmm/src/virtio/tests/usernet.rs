//! The backend-generic cases of `engine.rs` again with the in-memory backend behind
//! ebb-usernet's forwarder (`--net user` of `ebb run`): the frames of the cases are not
//! the forwarder's endpoint's, so its demux hands them to the backend as it hands them
//! to passt, and the device must behave exactly as over the bare backend.
//!
//! ebb-usernet links the library `ebb_vmm`, a different crate from this test build's
//! `crate`: its `HostLink` is another trait. Two adapters cross between them; the frame
//! types are ebb-net-driver's, the same on both sides.

use super::*;
use ebb_usernet::{MonitorLink, UserNet, UserNetConfig};

/// Runs `case` with [`Guest::build`] putting its backend behind the forwarder.
fn behind_usernet(case: fn()) {
    USERNET.set(true);
    case();
    USERNET.set(false);
}

macro_rules! again_behind_the_forwarder {
    ($($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                behind_usernet(super::engine::$case);
            }
        )*
    };
}

again_behind_the_forwarder!(
    a_well_behaved_driver_moves_frames_both_ways,
    hostile_chains_break_the_device_naming_the_queue_and_the_fault,
    an_available_index_may_not_run_more_than_a_queue_ahead,
    a_broken_device_stays_stopped_until_reset,
    a_reset_device_works_again,
    overlapping_buffers_are_the_guests_own_business,
    a_frame_larger_than_the_posted_buffer_is_dropped_and_counted,
    garbage_in_the_event_indices_and_the_used_ring_changes_only_wake_ups,
    transmit_chains_that_hold_no_frame_break_the_device,
    a_head_published_twice_is_served_twice,
    reasons_name_queues_of_every_pair_and_the_control_queue,
    a_stocked_receive_ring_alone_lets_the_device_sleep,
    frames_waiting_for_buffers_make_the_device_ask_for_receive_kicks,
    the_sleep_is_cut_short_by_pending_output_and_backend_deadlines,
    frames_that_ask_for_an_answer_give_the_guest_a_turn,
);

/// `backend` as the rest of a forwarder with no forwards, the forwarder as this build's
/// host link. The endpoint's gratuitous ARP, queued when it is built, is taken out first:
/// the cases count the frames the guest gets.
pub(super) fn behind_the_forwarder(backend: Box<dyn HostLink>) -> Box<dyn HostLink> {
    let rest: Box<dyn MonitorLink> = Box::new(AsLibraryLink(backend));
    let mut forwarder =
        UserNet::new(&UserNetConfig::new(Vec::new()), Some(rest)).expect("a forwarder");
    let mut announced = Vec::new();
    forwarder.receive(NetInstant::ZERO, &mut announced, 64);
    assert!(
        announced
            .iter()
            .all(|f| f.buf.as_slice().get(12..14) == Some(&[0x08, 0x06])),
        "only the endpoint's ARP announcement"
    );
    Box::new(Forwarder(forwarder))
}

/// This build's host link as the library's (the forwarder's rest).
struct AsLibraryLink(Box<dyn HostLink>);

impl NetDevice for AsLibraryLink {
    fn capabilities(&self) -> DeviceCapabilities {
        self.0.capabilities()
    }
    fn receive(&mut self, now: NetInstant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.0.receive(now, out, max)
    }
    fn transmit(&mut self, now: NetInstant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.0.transmit(now, frames)
    }
    fn poll_at(&self) -> Option<NetInstant> {
        self.0.poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
}

impl MonitorLink for AsLibraryLink {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }
    fn drain(&mut self) {
        self.0.drain()
    }
    fn has_pending_output(&self) -> bool {
        self.0.has_pending_output()
    }
}

/// The forwarder as this build's host link.
struct Forwarder(UserNet);

impl NetDevice for Forwarder {
    fn capabilities(&self) -> DeviceCapabilities {
        self.0.capabilities()
    }
    fn receive(&mut self, now: NetInstant, out: &mut Vec<RxFrame>, max: usize) -> usize {
        self.0.receive(now, out, max)
    }
    fn transmit(&mut self, now: NetInstant, frames: &mut VecDeque<TxFrame>) -> usize {
        self.0.transmit(now, frames)
    }
    fn poll_at(&self) -> Option<NetInstant> {
        self.0.poll_at()
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
}

impl HostLink for Forwarder {
    fn fd(&self) -> BorrowedFd<'_> {
        MonitorLink::fd(&self.0)
    }
    fn drain(&mut self) {
        MonitorLink::drain(&mut self.0)
    }
    fn has_pending_output(&self) -> bool {
        MonitorLink::has_pending_output(&self.0)
    }
}
