//! virtio-net for native guests: a modern virtio-MMIO device ([`net`]) with validated split
//! queues ([`queue`]) and the host side of the link ([`host_link`]: TAP, passt, fault
//! injection).

pub mod host_link;
pub mod net;
pub mod queue;

pub use host_link::{CopyingLink, HostLink, HostLinkError, PortForward};
pub use net::{IoThread, NetStats, Offload, TrafficPlacement, VcpuTid, VirtioNetDevice};

#[cfg(test)]
mod tests;
