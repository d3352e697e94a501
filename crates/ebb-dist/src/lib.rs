//! # ebb-dist — distributed Ebbs
//!
//! EbbRT's other half: an application is a *heterogeneous distributed system* — a hosted
//! front end (an ordinary Linux process running Ebbflow hosted) that allocates native
//! back-end nodes, with Ebbs whose representatives span the nodes. This crate gives the
//! pieces, written once for both runtimes over `ebb::net`:
//!
//! * [`node`] — who is who: [`NodeId`](node::NodeId)s, the global Ebb-id range each node
//!   owns, and the [`RuntimeInfo`](node::RuntimeInfo) a node receives when it joins;
//! * `allocator` (hosted only) — the `NodeAllocator` that boots native nodes from the
//!   front end, in its own process (ebb-vmm as a library) or as child processes;
//! * [`wire`] — the Messenger's frame format: a versioned fixed header (source node,
//!   destination Ebb, the message kind the receiving Ebb registered, a call id, the length)
//!   and an incremental decoder that splits a byte stream of IOBufs into frames without
//!   copying payloads.
//! * [`messenger`] — ordered, reliable Ebb-to-Ebb messages and calls over one TCP
//!   connection per peer, with bounded queues, peer-loss reporting and heartbeats; the
//!   join handshake ([`FrontEnd`](messenger::FrontEnd), [`Messenger::join`](messenger::Messenger::join))
//!   and direct node-to-node connections.
//!
//! ## Invariants
//!
//! * Everything a peer sends is hostile input: a frame that does not decode closes that
//!   connection with a [`wire::WireError`]; nothing a peer sends panics a node or makes it
//!   allocate more than [`wire::MAX_PAYLOAD`] bytes per connection ahead of delivery;
//!   decoding what it sent allocates fallibly ([`fallible`]): short of memory, that call
//!   or message fails, the node goes on.
//! * Message kinds are numbers the receiving Ebb registered, never a compiler's type hash
//!   (EbbRT's portability bug): two builds of one application always agree on the wire.
//! * `no_std` + `alloc`, so native images link it (the hosted-only `allocator` uses
//!   `std`); no `unsafe`.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

#[cfg(all(not(test), not(target_os = "none")))]
extern crate std;

#[cfg(not(target_os = "none"))]
pub mod allocator;
pub mod fallible;
pub mod global_id_map;
pub mod hash_ring;
pub mod messenger;
pub mod node;
pub mod objects;
pub mod remote;
#[cfg(test)]
mod testing;
pub mod wire;
