//! The text and binary protocols (being written).
