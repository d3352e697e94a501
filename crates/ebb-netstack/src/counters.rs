//! What the runtime counts: how each event source drove the stack, and a snapshot of
//! every layer's counters.

use ebb_net::iface::InterfaceCounters;
use ebb_net::tcp::TcpCounters;
use ebb_net_driver::{DeviceCounters, FaultStats};

/// How often each event source drove the stack: shows that an idle stack sleeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerCounters {
    /// `Stack::poll` calls.
    pub polls: u64,
    /// Readable reports from the device (an epoll edge hosted, a used ring that moved
    /// natively).
    pub readable_events: u64,
    /// Writable reports that found transmission blocked (and polled).
    pub writable_events: u64,
    /// Timer expiries.
    pub timer_fires: u64,
    /// Polls from the idle handler (application acted, or work was left over).
    pub idle_polls: u64,
    /// Polls after which the device pushed back on transmit.
    pub tx_blocked: u64,
    /// Received frames this core steered to the core owning them (several cores only).
    pub steered_out: u64,
    /// Frames other cores steered to this one.
    pub steered_in: u64,
    /// Received frames copied to every core (ARP replies).
    pub steered_everywhere: u64,
    /// Steered frames lost because the destination core refused the message (it was
    /// shutting down).
    pub steer_failures: u64,
    /// Frames other cores steered here and this core dropped: its inbox already held
    /// [`MAX_STEERED_WAITING`](crate::MAX_STEERED_WAITING) frames (overload, as a full device ring).
    pub steered_dropped: u64,
}

/// A snapshot of every counter of the stack.
#[derive(Clone, Debug)]
pub struct NetStackCounters {
    /// The IP layer: frames per protocol, drops by reason.
    pub interface: InterfaceCounters,
    /// TCP: segments, retransmissions, connections.
    pub tcp: TcpCounters,
    /// The device (with injected drops when faults are on).
    pub device: DeviceCounters,
    /// What the fault injector did, when it is on.
    pub faults: Option<FaultStats>,
    /// Device operations that failed unexpectedly ([`PlatformDevice::io_errors`](crate::PlatformDevice::io_errors)).
    pub device_io_errors: u64,
    /// How the stack was driven.
    pub runner: RunnerCounters,
}
