//! # memcached on Ebbflow
//!
//! A cache server compatible with memcached 1.6 as its clients see it, written once
//! against `ebb::net` so it runs hosted (Linux sockets, or ebb-net on TAP) and native
//! (ebb-net on virtio-net):
//!
//! * [`protocol`] — the text and binary protocols: requests parsed incrementally from the
//!   IOBufs a connection receives (values stay IOBufs: no copy), replies encoded as IOBuf
//!   chains (a `get` hit sends the stored value's buffers themselves);
//! * [`store`] — the items: lock-free reads, expiry, CAS ids, the memory limit with
//!   eviction, the statistics;
//! * [`server`] — the shared server and the per-connection handler that ties them
//!   together over `ebb::net`.
//!
//! `no_std` + `alloc`, so native images link it.

#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod alloc_cap;
pub mod protocol;
pub mod server;
pub mod store;
