//! [`NetStackError`]: why the network stack could not start or answer.

use ebb_net_driver::DeviceError;

/// Why the network stack could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum NetStackError {
    /// A device could not be watched.
    #[error("cannot watch the network device: {0}")]
    Device(#[source] DeviceError),
    /// No device was given.
    #[error("no network device to run on")]
    NoDevice,
    /// Called from inside a connection callback, while the stack is being polled.
    #[error("the stack is being polled (called from inside a callback)")]
    Busy,
    /// The stack was shut down before the address was configured.
    #[error("the network stack was shut down")]
    ShutDown,
    /// More queues than the runtime has cores.
    #[error("{queues} queues given, but the runtime has {cores} cores (one queue per core)")]
    TooManyQueues {
        /// Queues given.
        queues: usize,
        /// Cores of the runtime.
        cores: usize,
    },
    /// The calling core runs no queue of this stack.
    #[error("core {0} runs no queue of this network stack")]
    NotOnThisCore(u32),
    /// The stack's per-core Ebb could not be created (no Ebb id left on this node).
    #[error("cannot create the stack's per-core Ebb: {0}")]
    Ebb(#[source] ebb_core::ebb::EbbError),
}
