//! # ebb-net — Ebbflow's TCP/IP stack
//!
//! A sans-IO network stack after EbbRT's: event driven, zero copy, per core. Time and
//! devices are passed in, so the same code runs in tests, hosted over a TAP device, inside
//! the monitor and natively.
//!
//! * [`wire`] — zero-copy views of packets with checked constructors, and `Repr`s that
//!   parse and emit them (Ethernet II, ARP, IPv4, ICMPv4, UDP, TCP, DHCPv4), plus the
//!   checksum duties. No accessor panics once a view is checked; malformed input is an
//!   error value.
//! * [`transport`] — the seam between the IP layer and TCP (zero copy both ways).
//! * [`iface`] — the IP layer: Ethernet, ARP, IPv4, ICMP echo, UDP sockets, DHCPv4 client.
//! * [`stack`] — the driver a runtime polls: device, interface and TCP, one `poll(now)`.
//! * [`steering`] — multi-core: which core owns each connection, and where each received
//!   frame is processed.
//! * [`testing`] — frames for tests of this crate and of the crates above it.
//!
//! Devices are `ebb-net-driver`'s: the `NetDevice` trait drivers implement, frames that
//! carry their checksum state, an in-memory link joining two stacks, and a seeded
//! fault-injecting wrapper.
//!
//! The crate is `no_std` + `alloc`.

#![no_std]
#![forbid(unsafe_code)] // phy, wire and iface state it; nothing here needs it
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod iface;
pub mod stack;
pub mod steering;
pub mod tcp;
pub mod testing;
pub mod transport;
pub mod wire;
