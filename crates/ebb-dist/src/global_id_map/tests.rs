use super::*;
use crate::node::NodeId;
use crate::testing::{LocalCaller, Nodes, gid, now};
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use ebb::IOBufChain;

/// A global Ebb whose representative is just the owner's greeting.
struct Greeting(String);

impl GlobalEbb for Greeting {
    fn from_entry(_id: EbbId, entry: &Versioned) -> Result<Self, String> {
        String::from_utf8(entry.value.clone())
            .map(Greeting)
            .map_err(|e| e.to_string())
    }
}

use alloc::string::ToString;

fn front_end_and_node() -> (EmbeddedIdMap, RemoteIdMap) {
    let nodes = Rc::new(Nodes::default());
    let map = EmbeddedIdMap::new();
    let served = map.clone();
    nodes.handlers.borrow_mut().insert(
        (0, GLOBAL_ID_MAP_EBB.as_u32(), ID_MAP_KIND),
        Rc::new(move |req: &IOBufChain| served.serve(NodeId(1), req, |_, _, _| {})),
    );
    let node = RemoteIdMap::new(Rc::new(LocalCaller {
        me: NodeId(1),
        nodes,
    }));
    (map, node)
}

#[test]
fn a_global_miss_is_resolved_through_the_front_end_once_then_cached() {
    let (front_end, node) = front_end_and_node();
    let id = gid(40);
    now(front_end.set(id, b"hello from node 0".to_vec())).unwrap();
    let first = now(resolve::<Greeting>(&node, id)).unwrap();
    let again = now(resolve::<Greeting>(&node, id)).unwrap();
    assert_eq!(first.rep().0, "hello from node 0");
    assert_eq!(again.id(), id);
    assert_eq!(node.remote_reads(), 1, "the second resolve is a local hit");
}

#[test]
fn unpublished_and_bad_entries_are_errors_not_bindings() {
    let (front_end, node) = front_end_and_node();
    let missing = gid(41);
    assert_eq!(
        now(resolve::<Greeting>(&node, missing)).err(),
        Some(ResolveError::NotPublished(missing))
    );
    let bad = gid(42);
    now(front_end.set(bad, alloc::vec![0xff, 0xfe])).unwrap();
    assert!(matches!(
        now(resolve::<Greeting>(&node, bad)),
        Err(ResolveError::BadEntry { .. })
    ));
    assert!(!ebb::local_id_map().contains(bad));
}

#[test]
fn node_writes_reach_the_front_ends_table_and_refusals_come_back() {
    let (front_end, node) = front_end_and_node();
    assert_eq!(now(node.set(gid(43), b"v1".to_vec())), Ok(1));
    assert_eq!(now(node.set(gid(43), b"v2".to_vec())), Ok(2));
    assert_eq!(front_end.table().get(gid(43)).unwrap().value, b"v2");
    let local = EbbId::from_u32(400).unwrap();
    assert!(matches!(
        now(node.set(local, Vec::new())),
        Err(IdMapError::Backend(_))
    ));
    let too_long = alloc::vec![0; MAX_VALUE_LEN + 1];
    assert!(now(node.set(gid(44), too_long)).is_err());
}
