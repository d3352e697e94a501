//! virtio-net for native guests: a modern virtio-MMIO device ([`net`]) with validated split
//! queues ([`queue`]) and host backends ([`backend`]: TAP, passt, fault injection).

pub mod backend;
pub mod net;
pub mod queue;

pub use backend::{HostLink, HostLinkError, PortForward};
pub use net::{IoThread, NetStats, Offload, VirtioNetDevice};

#[cfg(test)]
mod tests;
