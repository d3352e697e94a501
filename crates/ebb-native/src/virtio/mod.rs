//! virtio over the MMIO transport, driver side: the network device (`net`), the split
//! ring (`ring`), and register and shared-memory access (`mmio`, the module's only
//! `unsafe`). The ABI both sides share is `crate::abi::virtio`.

#[allow(unsafe_code)] // the module's only `unsafe`
pub mod mmio;
pub mod net;
pub mod ring;

pub use net::{QueuePair, VirtioError, VirtioNetDriver, open};
