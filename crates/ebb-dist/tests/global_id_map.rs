//! The GlobalIdMap across a real Messenger: a front end serving the embedded map, a node
//! joined over loopback TCP resolving a global Ebb on first use, writing, and watching
//! an entry (changes delivered as messages, on the watching core).

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ebb::net::NetConfig;
use ebb::{EbbId, SharedEbb};
use ebb_dist::global_id_map::{
    EmbeddedIdMap, GLOBAL_ID_MAP_EBB, GlobalEbb, GlobalIdMap, ID_MAP_CHANGED_KIND, ID_MAP_KIND,
    IdMapReply, NodeWatches, RemoteIdMap, Versioned, resolve,
};
use ebb_dist::messenger::{FrontEnd, Messenger};
use ebb_dist::remote::encode;

mod common;
use common::{run, tolerant};

fn gid(k: u32) -> EbbId {
    EbbId::from_u32(ebb::FIRST_GLOBAL_ID + k).unwrap()
}

/// What a watcher saw: (version, bytes, the core it ran on).
type Seen = Arc<Mutex<Vec<(u64, Vec<u8>, u32)>>>;

/// A global Ebb: its rep is the text its owner published.
struct Motd(String);

impl GlobalEbb for Motd {
    fn from_entry(_id: EbbId, entry: &Versioned) -> Result<Self, String> {
        String::from_utf8(entry.value.clone())
            .map(Motd)
            .map_err(|e| e.to_string())
    }
}

#[test]
fn a_node_resolves_writes_and_watches_through_the_front_end() {
    let seen = run(|| async {
        let network = ebb::net::start(NetConfig::default()).await.unwrap();
        let front = FrontEnd::start(&network, 0, tolerant()).await.unwrap();
        let names = EmbeddedIdMap::new();
        {
            let (names, m) = (names.clone(), front.messenger().clone());
            front
                .messenger()
                .on_call(GLOBAL_ID_MAP_EBB, ID_MAP_KIND, move |from, request| {
                    let m = m.clone();
                    let reply = names.serve(from, &request, move |node, id, entry| {
                        let change = encode(&IdMapReply::Changed(id.as_u32(), entry.clone()));
                        let _ = m.send(
                            node,
                            GLOBAL_ID_MAP_EBB,
                            ID_MAP_CHANGED_KIND,
                            change.unwrap(),
                        );
                    });
                    async move { reply }
                });
        }
        names.set(gid(20), b"hello, nodes".to_vec()).await.unwrap();

        let node = Messenger::new(tolerant());
        let watches = NodeWatches::install(&node);
        let token = 0x1d;
        let expected = front.expect(token);
        let (admitted, joined) =
            ebb::future::join(expected, node.join(&network, front.local_addr(), token)).await;
        let info = joined.expect("the node joins");
        assert_eq!(admitted.unwrap(), info);
        let map = RemoteIdMap::with_watches(Rc::new(node.clone()), watches);

        // A global miss, resolved through the front end once, then bound here.
        assert!(SharedEbb::<Motd>::lookup(gid(20)).is_err());
        let motd = resolve::<Motd>(&map, gid(20)).await.unwrap();
        assert_eq!(motd.rep().0, "hello, nodes");
        resolve::<Motd>(&map, gid(20)).await.unwrap();
        assert_eq!(map.remote_reads(), 1);

        // The node's writes land in the front end's table.
        let mine = info.global_ids.start;
        let mine = EbbId::from_u32(mine).unwrap();
        assert_eq!(map.set(mine, b"node data".to_vec()).await, Ok(1));
        assert_eq!(names.table().get(mine).unwrap().value, b"node data");

        // A watch: changes come as messages, run on this core.
        let seen: Seen = Arc::default();
        let s = seen.clone();
        let watch = map
            .watch(
                gid(21),
                Box::new(move |_id, e| {
                    s.lock()
                        .unwrap()
                        .push((e.version, e.value.clone(), ebb::core_id().0))
                }),
            )
            .await
            .unwrap();
        names.set(gid(21), b"one".to_vec()).await.unwrap();
        names.set(gid(21), b"two".to_vec()).await.unwrap();
        let deadline = ebb::now() + Duration::from_secs(10);
        while seen.lock().unwrap().len() < 2 && ebb::now() < deadline {
            ebb::sleep(Duration::from_millis(2)).await;
        }
        // After unwatch, nothing more arrives.
        map.unwatch(watch);
        ebb::sleep(Duration::from_millis(50)).await;
        names.set(gid(21), b"three".to_vec()).await.unwrap();
        ebb::sleep(Duration::from_millis(100)).await;
        seen.lock().unwrap().clone()
    });
    assert_eq!(
        seen,
        [(1, b"one".to_vec(), 0), (2, b"two".to_vec(), 0)],
        "both changes, in order, on the watching core (0), none after unwatch"
    );
}
