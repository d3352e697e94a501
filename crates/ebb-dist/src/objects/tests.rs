//! The objects' logic against an in-process [`Caller`] that runs the destination's
//! handler directly — what these tests check is routing, moving and merging; the
//! Messenger's own tests and the multi-node tests check the transport.

use super::fragmented::{MapClient, MapShard, SHARD_KIND};
use super::replicated::{COUNTER_KIND, Consistency, CounterClient, CounterHome};
use crate::messenger::CallError;
use crate::node::NodeId;
use crate::remote::RemoteError;
use crate::testing::{LocalCaller, Nodes, gid, now};
use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::vec::Vec;
use ebb::{EbbId, IOBufChain};
use proptest::prelude::*;

fn shards(nodes: &Rc<Nodes>, ids: &[u32], ebb: EbbId) -> Vec<Rc<MapShard>> {
    ids.iter()
        .map(|&n| {
            let shard = Rc::new(MapShard::new(64 << 20));
            let s = shard.clone();
            nodes.handlers.borrow_mut().insert(
                (n, ebb.as_u32(), SHARD_KIND),
                Rc::new(move |req: &IOBufChain| s.serve(req)),
            );
            shard
        })
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Get(u16),
    Set(u16, u8),
    Delete(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..2000).prop_map(Op::Get),
        (0u16..2000, any::<u8>()).prop_map(|(k, v)| Op::Set(k, v)),
        (0u16..2000).prop_map(Op::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]
    /// Random operations, with a shard added half-way, agree with a plain map.
    #[test]
    fn the_fragmented_map_equals_a_model(ops in proptest::collection::vec(op(), 2000..4000)) {
        let nodes = Rc::new(Nodes::default());
        let ebb = gid(7);
        let held = shards(&nodes, &[1, 2, 3, 4], ebb);
        let client = MapClient::new(
            Rc::new(LocalCaller { me: NodeId(0), nodes: nodes.clone() }),
            ebb,
            &[NodeId(1), NodeId(2), NodeId(3)],
        );
        let mut model = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            if i == ops.len() / 2 {
                let before = model.len();
                let moved = now(client.add_shard(NodeId(4))).unwrap();
                prop_assert!(moved <= before);
                prop_assert_eq!(moved, held[3].len());
            }
            match *op {
                Op::Get(k) => {
                    let got = now(client.get(&k.to_le_bytes())).unwrap();
                    prop_assert_eq!(got, model.get(&k).map(|&v| alloc::vec![v]));
                }
                Op::Set(k, v) => {
                    let old = now(client.set(&k.to_le_bytes(), alloc::vec![v])).unwrap();
                    prop_assert_eq!(old, model.insert(k, v).map(|v| alloc::vec![v]));
                }
                Op::Delete(k) => {
                    let old = now(client.delete(&k.to_le_bytes())).unwrap();
                    prop_assert_eq!(old, model.remove(&k).map(|v| alloc::vec![v]));
                }
            }
        }
        let counts = now(client.counts()).unwrap();
        prop_assert_eq!(counts.iter().map(|&(_, n)| n as usize).sum::<usize>(), model.len());
    }
}

#[test]
fn adding_a_fourth_shard_moves_about_a_quarter() {
    let nodes = Rc::new(Nodes::default());
    let ebb = gid(8);
    let held = shards(&nodes, &[1, 2, 3, 4], ebb);
    let client = MapClient::new(
        Rc::new(LocalCaller {
            me: NodeId(0),
            nodes,
        }),
        ebb,
        &[NodeId(1), NodeId(2), NodeId(3)],
    );
    for k in 0..20_000u32 {
        now(client.set(&k.to_le_bytes(), k.to_le_bytes().to_vec())).unwrap();
    }
    let moved = now(client.add_shard(NodeId(4))).unwrap();
    assert!((3_750..6_250).contains(&moved), "moved {moved} of 20000");
    assert_eq!(held[3].len(), moved);
    for k in (0..20_000u32).step_by(97) {
        let got = now(client.get(&k.to_le_bytes())).unwrap();
        assert_eq!(got, Some(k.to_le_bytes().to_vec()));
    }
}

#[test]
fn a_full_shard_refuses_the_set_and_keeps_what_it_had() {
    let nodes = Rc::new(Nodes::default());
    let ebb = gid(9);
    let shard = Rc::new(MapShard::new(100));
    let s = shard.clone();
    nodes.handlers.borrow_mut().insert(
        (1, ebb.as_u32(), SHARD_KIND),
        Rc::new(move |req: &IOBufChain| s.serve(req)),
    );
    let client = MapClient::new(
        Rc::new(LocalCaller {
            me: NodeId(0),
            nodes,
        }),
        ebb,
        &[NodeId(1)],
    );
    now(client.set(b"a", alloc::vec![1; 50])).unwrap();
    let refused = now(client.set(b"b", alloc::vec![2; 60]));
    assert!(
        matches!(refused, Err(RemoteError::Call(CallError::Failed { .. }))),
        "{refused:?}"
    );
    assert_eq!(now(client.get(b"a")).unwrap(), Some(alloc::vec![1; 50]));
    assert_eq!(shard.len(), 1);
}

#[test]
fn counters_are_exact_in_both_modes_and_a_failed_flush_loses_nothing() {
    for mode in [Consistency::Synchronous, Consistency::Merged] {
        let nodes = Rc::new(Nodes::default());
        let ebb = gid(10);
        let home = Rc::new(CounterHome::new());
        let h = home.clone();
        nodes.handlers.borrow_mut().insert(
            (0, ebb.as_u32(), COUNTER_KIND),
            Rc::new(move |req: &IOBufChain| h.serve(req)),
        );
        let clients: Vec<CounterClient> = (1..=3)
            .map(|n| {
                let caller = Rc::new(LocalCaller {
                    me: NodeId(n),
                    nodes: nodes.clone(),
                });
                CounterClient::new(caller, ebb, NodeId::FRONT_END, mode)
            })
            .collect();
        for round in 0..100 {
            for (i, c) in clients.iter().enumerate() {
                now(c.add(i as i64 + 1)).unwrap();
            }
            if mode == Consistency::Merged && round == 50 {
                // The home goes away for one flush: the delta stays pending.
                nodes.down.borrow_mut().push(NodeId::FRONT_END);
                assert!(now(clients[0].flush()).is_err());
                nodes.down.borrow_mut().clear();
            }
        }
        for c in &clients {
            now(c.flush()).unwrap();
        }
        assert_eq!(home.total(), 100 * (1 + 2 + 3), "{mode:?}");
        assert_eq!(now(clients[2].read()).unwrap(), 600);
    }
}
