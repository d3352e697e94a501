//! The etcd backend against a real etcd cluster on loopback (Debian's `etcd-server`):
//! three members, one killed mid-run; watches; a front end killed and its lease expiring.
//! Needs the `etcd` feature (CI: `cargo test -p ebb-etcd --features etcd`) and the
//! `etcd` binary (skipped without it).
#![cfg(feature = "etcd")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::EbbId;
use ebb_dist::global_id_map::{GlobalIdMap, Versioned};
use ebb_dist::node::NodeId;
use ebb_etcd::{EtcdConfig, EtcdIdMap};
use ebb_testkit::netcheck::free_port;

/// A local etcd cluster; its members are killed and their data removed on drop.
struct Cluster {
    members: Vec<Option<Child>>,
    endpoints: Vec<String>,
    dir: PathBuf,
}

impl Cluster {
    fn start(test: &str, n: usize) -> Option<Cluster> {
        ebb_testkit::need_tools(test, &["etcd"])?;
        let dir = std::env::temp_dir().join(format!("ebb-etcd-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.join(format!("m{i}.log"))).unwrap();
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("m{i}")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args([
                    "--initial-cluster-token",
                    &format!("{test}-{}", std::process::id()),
                ])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start etcd");
            members.push(Some(child));
            endpoints.push(client_url);
        }
        let cluster = Cluster {
            members,
            endpoints,
            dir,
        };
        // Ready when every member's log says it serves clients (a leader was elected).
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..n {
            let log = cluster.dir.join(format!("m{i}.log"));
            while !std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("ready to serve client requests")
            {
                assert!(
                    Instant::now() < deadline,
                    "etcd member {i} not ready in 30 s:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(cluster)
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn config(&self, prefix: &str) -> EtcdConfig {
        EtcdConfig::new(self.endpoints.clone(), prefix)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn gid(k: u32) -> EbbId {
    EbbId::from_u32(ebb::FIRST_GLOBAL_ID + k).unwrap()
}

/// Runs `main` as core 0's first task of a one-core hosted runtime.
fn on_a_core<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    main: impl FnOnce() -> F + Send,
) -> T {
    let config = ebb::Config {
        cores: 1,
        pin: false,
        idle_poll: Duration::ZERO,
    };
    ebb::run(config, main).expect("the hosted runtime runs")
}

#[test]
fn entries_survive_the_loss_of_one_member_of_three() {
    let test = "entries_survive_the_loss_of_one_member_of_three";
    let Some(mut cluster) = Cluster::start(test, 3) else {
        return;
    };
    let map = Arc::new(EtcdIdMap::connect(cluster.config("/ebbflow/survive")).expect("connect"));
    let value = |k: u32| format!("entry {k}").into_bytes();
    let m = map.clone();
    on_a_core(move || {
        let map = m;
        async move {
            for k in 0..50 {
                assert_eq!(map.set(gid(k), value(k)).await, Ok(1));
            }
        }
    });
    // Kill the first member — the one the client was most likely talking to.
    cluster.kill(0);
    let started = Instant::now();
    let m = map.clone();
    on_a_core(move || {
        let map = m;
        async move {
            for k in 50..100 {
                assert_eq!(map.set(gid(k), value(k)).await, Ok(1), "entry {k}");
            }
            for k in 0..100 {
                let got = map.get(gid(k)).await.expect("read");
                assert_eq!(
                    got,
                    Some(Versioned {
                        version: 1,
                        value: value(k)
                    }),
                    "entry {k}"
                );
            }
            assert_eq!(map.set(gid(7), b"again".to_vec()).await, Ok(2));
            assert_eq!(map.set(gid(7), b"again".to_vec()).await, Ok(2), "no change");
        }
    });
    println!(
        "100 entries intact after losing 1 of 3 members; the 50 later writes and 100 reads took {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Arc::try_unwrap(map).expect("one owner left").leave();
}

#[test]
fn a_watch_delivers_each_change_on_the_watching_core() {
    let test = "a_watch_delivers_each_change_on_the_watching_core";
    let Some(cluster) = Cluster::start(test, 1) else {
        return;
    };
    let watcher = Arc::new(EtcdIdMap::connect(cluster.config("/ebbflow/watch")).expect("connect"));
    let writer = Arc::new(EtcdIdMap::connect(cluster.config("/ebbflow/watch")).expect("connect"));
    let seen = on_a_core(move || async move {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        watcher
            .watch(
                gid(3),
                Box::new(move |id, e| {
                    s.lock()
                        .unwrap()
                        .push((id, e.version, e.value.clone(), ebb::core_id().0))
                }),
            )
            .await
            .expect("watch");
        writer.set(gid(3), b"one".to_vec()).await.unwrap();
        writer.set(gid(4), b"elsewhere".to_vec()).await.unwrap();
        writer.set(gid(3), b"two".to_vec()).await.unwrap();
        let deadline = ebb::now() + Duration::from_secs(10);
        while seen.lock().unwrap().len() < 2 && ebb::now() < deadline {
            ebb::sleep(Duration::from_millis(10)).await;
        }
        seen.lock().unwrap().clone()
    });
    assert_eq!(
        seen,
        [
            (gid(3), 1, b"one".to_vec(), 0),
            (gid(3), 2, b"two".to_vec(), 0)
        ]
    );
}

#[test]
fn a_killed_front_ends_nodes_expire_with_its_lease_and_a_clean_leave_at_once() {
    let test = "a_killed_front_ends_nodes_expire_with_its_lease_and_a_clean_leave_at_once";
    let Some(cluster) = Cluster::start(test, 1) else {
        return;
    };
    let prefix = "/ebbflow/lease";
    let observer = Arc::new(EtcdIdMap::connect(cluster.config(prefix)).expect("connect"));
    let members = || {
        let o = observer.clone();
        on_a_core(move || o.members())
    };
    // A front end in another process holds node 5 under a 2 s lease.
    let mut held = Command::new(env!("CARGO_BIN_EXE_ebb-etcd-hold"))
        .args(["--endpoints", &cluster.endpoints.join(",")])
        .args(["--prefix", prefix, "--node", "5", "--ttl", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start ebb-etcd-hold");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(held.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("registered node 5"), "{line:?}");
    assert_eq!(members().unwrap(), [NodeId(5)]);
    held.kill().unwrap();
    held.wait().unwrap();
    let killed = Instant::now();
    while members().unwrap().contains(&NodeId(5)) {
        assert!(
            killed.elapsed() < Duration::from_secs(6),
            "node 5 still registered 6 s after its front end was killed (lease 2 s)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let expired_after = killed.elapsed();
    println!(
        "killed front end's node expired after {:.2} s (lease TTL 2 s)",
        expired_after.as_secs_f64()
    );
    // A front end that leaves cleanly revokes its lease: gone at once.
    let leaving = Arc::new(EtcdIdMap::connect(cluster.config(prefix)).expect("connect"));
    let l = leaving.clone();
    on_a_core(move || l.register_node(NodeId(6), Vec::new())).unwrap();
    assert_eq!(members().unwrap(), [NodeId(6)]);
    Arc::try_unwrap(leaving).expect("one owner left").leave();
    assert_eq!(members().unwrap(), []);
}

#[test]
fn an_unreachable_store_is_a_clear_error() {
    let mut config = EtcdConfig::new(
        vec![format!("http://127.0.0.1:{}", free_port())],
        "/ebbflow/none",
    );
    config.connect_timeout = Duration::from_millis(500);
    let err = EtcdIdMap::connect(config).expect_err("nothing listens there");
    assert!(err.to_string().contains("cannot reach etcd"), "{err}");
}
