//! Devices (being written).
