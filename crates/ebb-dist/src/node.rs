//! Nodes: who is who in a distributed application.
//!
//! The front end is node 0; every node it allocates gets the next number. Each node owns
//! a slice of the *global* Ebb-id range, so an id a node allocates for an Ebb that spans
//! nodes names that Ebb everywhere and never collides with another node's.

use core::fmt;
use core::net::SocketAddrV4;
use core::ops::Range;

use ebb::EbbId;
use serde::{Deserialize, Serialize};

/// A node of one distributed application. The front end is [`NodeId::FRONT_END`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The hosted front end that allocates the others.
    pub const FRONT_END: NodeId = NodeId(0);
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// The first global Ebb id (ebb-core's): ids below it are node-local (static ids and each
/// node's own dynamic ids); ids from here to the end of the per-core table are handed out
/// to nodes in slices of [`GLOBAL_IDS_PER_NODE`].
pub use ebb::FIRST_GLOBAL_ID;

/// How many global ids each node owns.
pub const GLOBAL_IDS_PER_NODE: u32 = 64;

/// The end of the global range (the per-core table's size).
pub const GLOBAL_ID_END: u32 = ebb::MAX_EBBS as u32;

/// The most nodes one application can have, front end included.
pub const MAX_NODES: u32 = (GLOBAL_ID_END - FIRST_GLOBAL_ID) / GLOBAL_IDS_PER_NODE;

/// The global ids `node` owns, or `None` beyond [`MAX_NODES`].
pub const fn global_ids_of(node: NodeId) -> Option<Range<u32>> {
    if node.0 >= MAX_NODES {
        return None;
    }
    let start = FIRST_GLOBAL_ID + node.0 * GLOBAL_IDS_PER_NODE;
    Some(start..start + GLOBAL_IDS_PER_NODE)
}

/// Which node owns the global id `id` (`None` for a node-local id).
pub fn owner_of(id: EbbId) -> Option<NodeId> {
    let n = id.as_u32();
    (FIRST_GLOBAL_ID..GLOBAL_ID_END)
        .contains(&n)
        .then(|| NodeId((n - FIRST_GLOBAL_ID) / GLOBAL_IDS_PER_NODE))
}

/// What a node learns when it joins (EbbRT's `RuntimeInfo`): its id, its global ids and
/// where the front end is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// The joining node's id.
    pub node: NodeId,
    /// The global Ebb ids it may allocate.
    pub global_ids: Range<u32>,
    /// The front end's Messenger address, as the node reaches it.
    pub front_end: SocketAddrV4,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ranges_tile_the_table_without_overlap() {
        let mut next = FIRST_GLOBAL_ID;
        for n in 0..MAX_NODES {
            let r = global_ids_of(NodeId(n)).unwrap();
            assert_eq!(r.start, next);
            next = r.end;
            assert_eq!(owner_of(ebb_id(r.start)), Some(NodeId(n)));
            assert_eq!(owner_of(ebb_id(r.end - 1)), Some(NodeId(n)));
        }
        assert_eq!(next, GLOBAL_ID_END);
        assert_eq!(global_ids_of(NodeId(MAX_NODES)), None);
        assert_eq!(owner_of(ebb_id(FIRST_GLOBAL_ID - 1)), None);
    }

    fn ebb_id(n: u32) -> EbbId {
        EbbId::from_u32(n).unwrap()
    }
}
