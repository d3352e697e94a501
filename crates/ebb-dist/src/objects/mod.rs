//! The seed's two shapes of distributed object, as library types written against
//! [`Caller`](crate::remote::Caller):
//!
//! * [`replicated`] — a counter every node updates, with the consistency the
//!   application picks: each update a synchronous call to the counter's home node, or
//!   updates merged locally and pushed periodically;
//! * [`fragmented`] — a key-value map sharded over nodes by consistent hashing
//!   ([`HashRing`](crate::hash_ring::HashRing)), used as one object; adding a node moves
//!   about 1/N of the keys.
//!
//! Each has a serving side (the state a node holds, answering calls) and a client side
//! (what any node calls). Both sides are used from one core: the client types are not
//! `Send`; a multi-core node gives each core its own client (a `MulticoreEbb`).

pub mod fragmented;
pub mod replicated;

#[cfg(test)]
mod tests;
