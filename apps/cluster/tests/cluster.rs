//! The distributed example end to end: the hosted front end (this package's executable)
//! boots two native nodes (this package's native build) in its own process with rootless
//! networking, and checks every answer itself; these tests check that it says so and
//! exits 0 — with all nodes serving, and with one node killed mid-workload.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kvm(test: &str) -> Option<()> {
    let usable = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    match usable {
        Ok(_) => Some(()),
        Err(e) => ebb_testkit::skip(
            test,
            ebb_testkit::Capability::Kvm,
            &format!("/dev/kvm unusable: {e}"),
        ),
    }
}

/// The node image: this app built natively, once.
fn node_image() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../apps");
        ebb_testkit::guests::app_image(&repo_root(), &target_dir, "cluster", "cluster tests: ")
    })
}

/// Runs the front end with `args`; its stdout, after checking it exited 0. One at a
/// time: two front ends with two nodes each would be six busy threads on two CPUs, and
/// a node starved of its CPU for the Messenger's silence limit (the app's
/// `SILENCE_LIMIT`, 5 s) is declared lost.
fn front_end(args: &[&str]) -> String {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_cluster"))
        .args(args)
        .env("EBB_NODE_IMAGE", node_image())
        .env("EBB_CPUS", "2")
        .output()
        .expect("run the front end");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "{stdout}{stderr}(front end ran {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "the front end failed ({}):\n{stdout}{stderr}",
        out.status
    );
    stdout
}

fn line<'a>(stdout: &'a str, starts: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(starts))
        .unwrap_or_else(|| panic!("no line starting {starts:?} in:\n{stdout}"))
}

/// Two native nodes reaching the front end by `transport` (the front end's
/// `--transport`), described so in their join lines as `path`: the whole example,
/// checked.
fn two_native_nodes(transport: &str, path: &str) {
    let file = repo_root().join("README.md");
    let out = front_end(&[
        "--transport",
        transport,
        "--ops",
        "100000",
        "--file",
        file.to_str().unwrap(),
        "--seed",
        "7",
    ]);
    for node in ["node 1", "node 2"] {
        let joined = line(&out, &format!("cluster: {node} joined in"));
        assert!(joined.contains("allocate → joined"), "{joined}");
        assert!(joined.contains(path), "{joined}");
    }
    let map = line(&out, "cluster: 100000 map operations");
    assert!(
        map.contains("node 1 served") && map.contains("node 2 served"),
        "{map}"
    );
    assert!(map.contains("the map equals the model"), "{map}");
    for mode in ["synchronous", "merged"] {
        let counter = line(&out, &format!("cluster: replicated counter ({mode})"));
        assert!(
            counter.contains("2 nodes × 1000 increments = 2000 at home, exact"),
            "{counter}"
        );
    }
    // The file offload, twice: the first a global miss resolved through the front end's
    // GlobalIdMap, the second a local hit; the file's exact bytes both times.
    let reads: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("through the front end ("))
        .collect();
    assert_eq!(reads.len(), 2, "{out}");
    assert!(
        reads[0].contains(
            "a global miss on the file server's Ebb, resolved through the front end's GlobalIdMap"
        ),
        "{}",
        reads[0]
    );
    assert!(
        reads[1].contains("the file server's Ebb already bound there"),
        "{}",
        reads[1]
    );
    let len = std::fs::metadata(&file).unwrap().len();
    for read in reads {
        assert!(
            read.contains(&format!("{len} bytes")) && read.ends_with("(matches)"),
            "{read}"
        );
    }
    assert!(line(&out, "cluster: done (2 nodes").contains("joined in"));
    node_to_node(&out, "rootless: a guest-to-host forward");
}

/// The nodes' direct traffic: one node called the other over a connection of their own.
fn node_to_node(out: &str, how: &str) {
    let direct = out
        .lines()
        .find(|l| l.contains(" directly ("))
        .unwrap_or_else(|| panic!("no node-to-node line in:\n{out}"));
    assert!(direct.contains(how), "{direct}");
    assert!(
        direct.contains("2000 calls over their own connection, each answered with its bytes"),
        "{direct}"
    );
}

/// The default: each node joins and talks through a shared-memory window with the front
/// end that runs it — no network at all.
#[test]
fn two_native_nodes_over_shared_memory_serve_the_map_count_exactly_and_read_a_host_file() {
    let test =
        "two_native_nodes_over_shared_memory_serve_the_map_count_exactly_and_read_a_host_file";
    let Some(()) = kvm(test) else { return };
    two_native_nodes("shared", "shared memory");
}

/// Over TCP through each node's rootless user-mode network (a guest-to-host forward).
#[test]
fn two_native_nodes_over_user_mode_networking_serve_the_map_count_exactly_and_read_a_host_file() {
    let test = "two_native_nodes_over_user_mode_networking_serve_the_map_count_exactly_and_read_a_host_file";
    let Some(()) = kvm(test) else { return };
    two_native_nodes("network", "TCP through its network");
}

#[test]
fn a_node_killed_mid_workload_is_reported_fails_its_calls_and_the_rest_keep_serving() {
    let test = "a_node_killed_mid_workload_is_reported_fails_its_calls_and_the_rest_keep_serving";
    let Some(()) = kvm(test) else { return };
    for transport in ["shared", "network"] {
        killed_mid_workload(transport);
    }
}

fn killed_mid_workload(transport: &str) {
    let out = front_end(&[
        "--transport",
        transport,
        "--ops",
        "40000",
        "--kill-after",
        "20000",
        "--increments",
        "200",
    ]);
    let killed = line(&out, "cluster: killed node ");
    // The front end itself asserts both within 1 s; the line says how long they took.
    assert!(killed.contains("reported lost after"), "{killed}");
    assert!(killed.contains("its pending call failed after"), "{killed}");
    let victim = killed
        .trim_start_matches("cluster: killed ")
        .split(" (")
        .next()
        .unwrap();
    let after = line(&out, &format!("cluster: after {victim} was killed"));
    assert!(
        after.contains("the surviving shards kept serving"),
        "{after}"
    );
    assert!(line(&out, "cluster: 40000 map operations").contains("the map equals the model"));
    let counter = line(&out, "cluster: replicated counter (merged)");
    assert!(
        counter.contains("1 node × 200 increments = 200 at home, exact"),
        "{counter}"
    );
}

/// Hosted and native nodes in one application: a hosted node (this executable in a
/// process of its own) holds a shard beside two native ones.
#[test]
fn a_hosted_node_serves_beside_native_ones() {
    let test = "a_hosted_node_serves_beside_native_ones";
    let Some(()) = kvm(test) else { return };
    let out = front_end(&[
        "--hosted-nodes",
        "1",
        "--ops",
        "30000",
        "--increments",
        "100",
    ]);
    assert!(line(&out, "cluster: node ").contains("joined in"));
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("joined in") && l.contains("hosted, process"))
            .count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("joined in") && l.contains("native, its VM"))
            .count(),
        2,
        "{out}"
    );
    let map = line(&out, "cluster: 30000 map operations");
    for node in ["node 1 served", "node 2 served", "node 3 served"] {
        assert!(map.contains(node), "{map}");
    }
    let counter = line(&out, "cluster: replicated counter (merged)");
    assert!(
        counter.contains("3 nodes × 100 increments = 300 at home, exact"),
        "{counter}"
    );
}

/// As root: the native nodes on TAP devices enslaved to a bridge, each with its own
/// address, reaching the front end (listening on the bridge's address) directly.
#[test]
fn two_native_nodes_on_a_tap_bridge() {
    let test = "two_native_nodes_on_a_tap_bridge";
    let Some(()) = kvm(test) else { return };
    let Some(()) = ebb_testkit::netns::need_namespace_and_tap(test, &[]) else {
        return;
    };
    let bridge = ebb_testkit::netns::unique_name("ebcb");
    let ip = |args: &[&str]| ebb_testkit::netns::ip(args);
    ip(&["link", "add", &bridge, "type", "bridge"]);
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
    let _gone = Gone(bridge.clone());
    ip(&["addr", "add", "10.77.0.1/24", "dev", &bridge]);
    ip(&["link", "set", &bridge, "up"]);
    let out = front_end(&[
        "--tap-bridge",
        &format!("{bridge}:10.77.0.1"),
        "--ops",
        "30000",
        "--increments",
        "100",
    ]);
    let map = line(&out, "cluster: 30000 map operations");
    assert!(
        map.contains("node 1 served") && map.contains("node 2 served"),
        "{map}"
    );
    assert!(map.contains("the map equals the model"), "{map}");
    let counter = line(&out, "cluster: replicated counter (merged)");
    assert!(
        counter.contains("2 nodes × 100 increments = 200 at home, exact"),
        "{counter}"
    );
    node_to_node(&out, "directly on the TAP bridge");
}
