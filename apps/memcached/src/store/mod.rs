//! The item store (being written).
