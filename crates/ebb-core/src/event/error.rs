//! [`SpawnError`]: why work could not be sent to a core.

use crate::CoreId;
use core::fmt;

/// Why work could not be sent to a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// The runtime has no such core.
    NoSuchCore(CoreId),
    /// The runtime is shutting down and accepts no new work.
    ShuttingDown,
    /// Called from a thread that is not an Ebbflow core (use a [`Handle`](super::Handle)).
    NotOnCore,
    /// The work was dropped before it ran (the target core stopped).
    Dropped,
    /// A runtime was asked for zero cores or more than the supported maximum.
    BadCoreCount(usize),
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::NoSuchCore(core) => write!(f, "there is no {core} in this runtime"),
            SpawnError::ShuttingDown => write!(f, "the runtime is shutting down"),
            SpawnError::NotOnCore => write!(f, "not called on an Ebbflow core"),
            SpawnError::Dropped => write!(f, "the work was dropped before it ran"),
            SpawnError::BadCoreCount(n) => write!(
                f,
                "a runtime needs between 1 and {} cores, not {n}",
                crate::MAX_CORES
            ),
        }
    }
}

impl core::error::Error for SpawnError {}
