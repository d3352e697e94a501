//! Consistent hashing: which node holds a key of a fragmented object.
//!
//! Each node stands on the ring at [`POINTS_PER_NODE`] pseudo-random points; a key belongs
//! to the node at the first point at or after the key's hash (wrapping). Adding a node
//! moves only the keys that now fall before one of its points — about 1/N of them — and
//! removing one moves only its own keys. The hash is fixed here (FNV-1a, finished with
//! splitmix64's mixer), not the standard library's per-process one, so every node and
//! every build computes the same placement.

use alloc::vec::Vec;

use crate::node::NodeId;

/// Points each node has on the ring: enough that the load spread across nodes stays
/// within a few percent of even.
pub const POINTS_PER_NODE: u32 = 128;

/// The placement of keys on nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashRing {
    /// (point, node), sorted by point.
    points: Vec<(u64, NodeId)>,
}

/// The ring's hash of `bytes`: stable across nodes, builds and runs.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// splitmix64's finisher: spreads FNV's low-entropy high bits over the whole word.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn point(node: NodeId, replica: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&node.0.to_le_bytes());
    bytes[4..].copy_from_slice(&replica.to_le_bytes());
    stable_hash(&bytes)
}

impl HashRing {
    /// A ring of `nodes`.
    pub fn new(nodes: impl IntoIterator<Item = NodeId>) -> HashRing {
        let mut ring = HashRing::default();
        for n in nodes {
            ring.add(n);
        }
        ring
    }

    /// Puts `node` on the ring (no change if it is there).
    pub fn add(&mut self, node: NodeId) {
        if self.contains(node) {
            return;
        }
        self.points
            .extend((0..POINTS_PER_NODE).map(|r| (point(node, r), node)));
        // Ties (astronomically rare) are broken by node id, so every node sorts alike.
        self.points.sort_unstable();
    }

    /// Takes `node` off the ring.
    pub fn remove(&mut self, node: NodeId) {
        self.points.retain(|&(_, n)| n != node);
    }

    /// Whether `node` is on the ring.
    pub fn contains(&self, node: NodeId) -> bool {
        self.points.iter().any(|&(_, n)| n == node)
    }

    /// The nodes on the ring, in id order.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.points.iter().map(|&(_, n)| n).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    /// The node that holds `key`, or `None` on an empty ring.
    pub fn node_for(&self, key: &[u8]) -> Option<NodeId> {
        self.node_for_hash(stable_hash(key))
    }

    /// The node that holds a key whose [`stable_hash`] is `hash`.
    pub fn node_for_hash(&self, hash: u64) -> Option<NodeId> {
        if self.points.is_empty() {
            return None;
        }
        let i = self.points.partition_point(|&(p, _)| p < hash);
        Some(self.points[i % self.points.len()].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn keys(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("key:{i}").into_bytes()).collect()
    }

    #[test]
    fn the_hash_is_fixed() {
        // A changed hash would move every key of every running application: pinned.
        assert_eq!(stable_hash(b""), mix(0xcbf2_9ce4_8422_2325));
        assert_eq!(stable_hash(b"ebbflow"), stable_hash(b"ebbflow"));
        assert_ne!(stable_hash(b"a"), stable_hash(b"b"));
    }

    #[test]
    fn adding_a_node_moves_about_one_in_n_keys() {
        let keys = keys(100_000);
        for n in 1..6u32 {
            let before = HashRing::new((1..=n).map(NodeId));
            let mut after = before.clone();
            after.add(NodeId(n + 1));
            let moved = keys
                .iter()
                .filter(|k| before.node_for(k) != after.node_for(k))
                .count();
            // Every moved key moved to the new node.
            assert!(
                keys.iter()
                    .filter(|k| before.node_for(k) != after.node_for(k))
                    .all(|k| after.node_for(k) == Some(NodeId(n + 1)))
            );
            let share = moved as f64 / keys.len() as f64;
            let ideal = 1.0 / f64::from(n + 1);
            assert!(
                (share - ideal).abs() < 0.25 * ideal,
                "{n}+1 nodes: {share:.3} of the keys moved, ideal {ideal:.3}"
            );
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let keys = keys(20_000);
        let before = HashRing::new([NodeId(1), NodeId(2), NodeId(3)]);
        let mut after = before.clone();
        after.remove(NodeId(2));
        for k in &keys {
            let (b, a) = (before.node_for(k).unwrap(), after.node_for(k).unwrap());
            assert!(b == a || b == NodeId(2), "{k:?}: {b} → {a}");
            assert_ne!(a, NodeId(2));
        }
        assert_eq!(after.nodes(), [NodeId(1), NodeId(3)]);
    }

    #[test]
    fn load_is_near_even() {
        let ring = HashRing::new((1..=4).map(NodeId));
        let mut counts = [0usize; 5];
        for k in keys(100_000) {
            counts[ring.node_for(&k).unwrap().0 as usize] += 1;
        }
        for &c in &counts[1..] {
            assert!((18_000..32_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn an_empty_ring_places_nothing() {
        assert_eq!(HashRing::default().node_for(b"x"), None);
        let mut ring = HashRing::new([NodeId(4)]);
        ring.add(NodeId(4));
        assert_eq!(ring.nodes(), [NodeId(4)]);
        assert_eq!(ring.node_for(b"anything"), Some(NodeId(4)));
    }
}
