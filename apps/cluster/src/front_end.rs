//! The front end: a plain hosted program that boots the nodes, drives the workload and
//! serves host files to the nodes.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebb::future::promise;
use ebb::net::{self, Ipv4Addr, NetConfig, SocketAddrV4};
use ebb::{IOBuf, IOBufChain};
use ebb_dist::allocator::{
    GuestForward, LocalNodeAllocator, NodeHandle, NodeImage, NodeNetwork, NodeSpec,
    allocate_in_background,
};
use ebb_dist::global_id_map::{
    EmbeddedIdMap, GLOBAL_ID_MAP_EBB, GlobalIdMap, ID_MAP_CHANGED_KIND, ID_MAP_KIND, IdMapReply,
};
use ebb_dist::messenger::{FrontEnd, Messenger, MessengerConfig};
use ebb_dist::node::NodeId;
use ebb_dist::objects::fragmented::MapClient;
use ebb_dist::objects::replicated::{COUNTER_KIND, CounterHome};
use ebb_dist::remote::{RemoteError, decode, encode};
use sha2::{Digest, Sha256};

use crate::protocol::{
    COUNTER, FILES, FileServerEntry, HOLD_KIND, INCREMENT_KIND, Increment, MAP, NODE, OFFLOAD_KIND,
    Offloaded, PEER_KIND, PEER_PORT, PeerLink, PeerReport, READ_CHUNK, READ_KIND, ReadRequest,
    SILENCE_LIMIT,
};

/// The port a node connects to on the user-mode endpoint (10.0.2.3), spliced by its
/// monitor to the front end's Messenger on the host.
const FRONT_END_GUEST_PORT: u16 = 7100;
/// The endpoint port on which a node reaches the first node's peer port (rootless).
const PEER_ENDPOINT_PORT: u16 = 7101;
/// Calls a node makes to another over their direct connection.
const PEER_CALLS: u32 = 2000;
/// How long a node may take from `allocate` to joined.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Operations in flight at once (each on a distinct key, so their order does not matter).
const IN_FLIGHT: usize = 64;

/// The front end's options.
#[derive(Debug)]
pub struct Options {
    /// The node image (the native build of this app).
    pub image: PathBuf,
    /// Native nodes to boot.
    pub nodes: u32,
    /// Hosted nodes to start as well (this executable in processes of their own).
    pub hosted_nodes: u32,
    /// Random map operations to run.
    pub ops: u64,
    /// Counter increments per node, in each mode.
    pub increments: u32,
    /// The file a node reads through the front end.
    pub file: PathBuf,
    /// Kill the last node after this many operations (the fault demonstration).
    pub kill_after: Option<u64>,
    /// The workload's seed.
    pub seed: u64,
    /// Rounds of the Messenger benchmark to run first (`--bench N`; 0: none).
    pub bench: u32,
    /// `--tap-bridge BRIDGE:ADDR` (root): the native nodes get TAP devices enslaved to
    /// this existing bridge, addresses next to ADDR (the bridge's own), and reach the
    /// front end, which listens on ADDR, directly — no user-mode network.
    pub tap_bridge: Option<(String, Ipv4Addr)>,
    /// How the native nodes reach the front end.
    pub transport: Transport,
}

/// How a native node talks to the front end (`--transport`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A shared-memory window (the node runs in this process): no network at all.
    Shared,
    /// TCP: through the node's user-mode network (or the TAP bridge).
    Network,
    /// Node 1 through a window, the others through the network (to compare both in one
    /// run).
    Mixed,
}

impl Transport {
    fn shared_for(self, index: u32) -> bool {
        match self {
            Transport::Shared => true,
            Transport::Network => false,
            Transport::Mixed => index == 0,
        }
    }
}

/// The window a node with a shared-memory transport gets: rings of 2 MiB each way.
const SHARED_WINDOW: u64 = (4 << 20) + 4096;

const USAGE: &str = "usage: cluster [--nodes N] [--hosted-nodes N] [--ops N] [--increments N] [--file PATH] \
[--kill-after OPS] [--seed N] [--bench ROUNDS] [--tap-bridge BRIDGE:ADDR] [--transport shared|network|mixed] \
[--node-image PATH]   (the image: else $EBB_NODE_IMAGE)";

impl Options {
    /// Parses the front end's arguments.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let value = |flag: &str| -> Option<&String> {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
        };
        let number = |flag: &str, default: u64| -> Result<u64, String> {
            value(flag).map_or(Ok(default), |v| {
                v.parse()
                    .map_err(|_| format!("{flag} takes a number\n{USAGE}"))
            })
        };
        let image = value("--node-image")
            .cloned()
            .or_else(|| std::env::var("EBB_NODE_IMAGE").ok())
            .ok_or_else(|| {
                format!("no node image: give --node-image or EBB_NODE_IMAGE\n{USAGE}")
            })?;
        let file = value("--file").cloned().unwrap_or_else(|| image.clone());
        Ok(Options {
            image: image.into(),
            nodes: u32::try_from(number("--nodes", 2)?).map_err(|_| "too many nodes")?,
            hosted_nodes: u32::try_from(number("--hosted-nodes", 0)?)
                .map_err(|_| "too many nodes")?,
            ops: number("--ops", 100_000)?,
            increments: u32::try_from(number("--increments", 1000)?)
                .map_err(|_| "too many increments")?,
            file: file.into(),
            kill_after: value("--kill-after")
                .map(|v| v.parse())
                .transpose()
                .map_err(|_| format!("--kill-after takes a number\n{USAGE}"))?,
            seed: number("--seed", 1)?,
            bench: u32::try_from(number("--bench", 0)?).map_err(|_| "too many rounds")?,
            tap_bridge: value("--tap-bridge")
                .map(|v| {
                    v.split_once(':')
                        .and_then(|(br, ip)| Some((br.to_string(), ip.parse().ok()?)))
                        .ok_or_else(|| format!("--tap-bridge takes BRIDGE:ADDR\n{USAGE}"))
                })
                .transpose()?,
            transport: match value("--transport").map(String::as_str) {
                // On a bridge the nodes are on the network by default.
                None if value("--tap-bridge").is_some() => Transport::Network,
                None | Some("shared") => Transport::Shared,
                Some("network") => Transport::Network,
                Some("mixed") => Transport::Mixed,
                Some(other) => {
                    return Err(format!(
                        "--transport takes shared, network or mixed, not {other:?}\n{USAGE}"
                    ));
                }
            },
        })
    }
}

/// A node the front end booted.
struct Node {
    id: NodeId,
    /// What runs it, until it is stopped.
    running: Option<Running>,
    joined_in: Duration,
}

/// A node's runner: a VM in this process, or a hosted node in a child process.
enum Running {
    Native(NodeHandle),
    Hosted(std::process::Child),
}

impl Running {
    /// How the node talks to the front end.
    fn path(&self) -> &'static str {
        match self {
            Running::Native(handle) if handle.shared_window().is_some() => "shared memory",
            Running::Native(_) => "TCP through its network",
            Running::Hosted(_) => "TCP on loopback",
        }
    }

    /// Stops the node; how it ended.
    fn stop(self) -> Result<String, String> {
        match self {
            Running::Native(handle) => handle
                .free()
                .map(|outcome| format!("{outcome:?}"))
                .map_err(|e| e.to_string()),
            Running::Hosted(mut child) => {
                let _ = child.kill();
                child
                    .wait()
                    .map(|status| format!("hosted process ended: {status}"))
                    .map_err(|e| e.to_string())
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Running::Native(handle) => format!(
                "native, its VM {} in this process, {}",
                handle.name(),
                self.path()
            ),
            Running::Hosted(child) => format!("hosted, process {}", child.id()),
        }
    }
}

/// Runs the front end; the exit code.
pub async fn run(options: Options) -> i32 {
    match drive(options).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cluster: {e}");
            1
        }
    }
}

async fn drive(options: Options) -> Result<(), String> {
    // Linux sockets, on loopback — or on the bridge's address, where TAP nodes reach it.
    let listen_on = options
        .tap_bridge
        .as_ref()
        .map_or(Ipv4Addr::LOCALHOST, |(_, ip)| *ip);
    let (net_config, _) = NetConfig::from_args(&["--addr".into(), listen_on.to_string()])
        .map_err(|e| e.to_string())?;
    let network = net::start(net_config)
        .await
        .map_err(|e| format!("cannot start the network: {e}"))?;
    let config = MessengerConfig {
        silence_limit: Some(SILENCE_LIMIT),
        ..MessengerConfig::default()
    };
    let front = FrontEnd::start(&network, 0, config)
        .await
        .map_err(|e| format!("cannot start the front end: {e}"))?;
    let messenger = front.messenger().clone();
    let host_port = front.local_addr().port();

    // The front end's own Ebbs: the counter's home and the file server.
    let home = Arc::new(CounterHome::new());
    {
        let home = home.clone();
        messenger.on_call(COUNTER, COUNTER_KIND, move |_from, request| {
            let reply = home.serve(&request);
            async move { reply }
        });
    }
    let offered: Arc<HashSet<PathBuf>> = Arc::new([options.file.clone()].into_iter().collect());
    messenger.on_call(FILES, READ_KIND, move |from, request| {
        let reply = read_for(&offered, from, &request);
        async move { reply }
    });
    // The GlobalIdMap (embedded: this front end holds it) and what it publishes: where
    // the file server is, for nodes to resolve on first use.
    let names = EmbeddedIdMap::new();
    {
        let (names, messenger) = (names.clone(), messenger.clone());
        messenger
            .clone()
            .on_call(GLOBAL_ID_MAP_EBB, ID_MAP_KIND, move |from, request| {
                let messenger = messenger.clone();
                let reply = names.serve(from, &request, move |node, id, entry| {
                    if let Ok(change) = encode(&IdMapReply::Changed(id.as_u32(), entry.clone())) {
                        let _ =
                            messenger.send(node, GLOBAL_ID_MAP_EBB, ID_MAP_CHANGED_KIND, change);
                    }
                });
                async move { reply }
            });
    }
    let entry = FileServerEntry {
        owner: NodeId::FRONT_END.0,
        offered: vec![options.file.to_string_lossy().into_owned()],
    };
    let entry = ebb_dist::remote::encode(&entry)
        .map_err(|e| e.to_string())?
        .to_vec();
    names
        .set(FILES, entry)
        .await
        .map_err(|e| format!("cannot publish the file server: {e}"))?;
    let lost: Arc<Mutex<BTreeMap<NodeId, Instant>>> = Arc::default();
    {
        let (lost, names) = (lost.clone(), names.clone());
        messenger.on_peer_lost(move |node, _reason| {
            lost.lock().unwrap().insert(node, Instant::now());
            names.forget_node(node);
        });
    }

    // Boot the nodes, all at once, and wait for each to join.
    let image = std::fs::read(&options.image).map_err(|e| {
        format!(
            "cannot read the node image {}: {e}",
            options.image.display()
        )
    })?;
    let image: Arc<[u8]> = image.into();
    // Nodes are built off this event loop (it keeps serving the joins under way).
    let allocator = std::sync::Arc::new(LocalNodeAllocator::new());
    // TAP devices the front end made (with --tap-bridge): removed when this returns,
    // after the nodes that use them (declared later, dropped first).
    let mut taps: Vec<BridgedTap> = Vec::new();
    let mut pending = Vec::new();
    // Where the first native node listens for other nodes, as the others reach it: through
    // a guest-to-host forward to its published peer port (rootless), or its bridge address.
    let mut first_peer: Option<(SocketAddrV4, &'static str)> = None;
    let mut first_peer_host: Option<SocketAddrV4> = None;
    for i in 0..options.nodes {
        let token = random_token(i);
        let started = Instant::now();
        // Rootless: the node reaches the front end at its monitor's endpoint, spliced to
        // the front end's port on loopback. On a bridge: directly.
        let (network, reachable_at, mut args) = match &options.tap_bridge {
            None => {
                let at = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 3), FRONT_END_GUEST_PORT);
                let mut guest_forwards = vec![GuestForward {
                    endpoint_port: FRONT_END_GUEST_PORT,
                    host: SocketAddrV4::new(Ipv4Addr::LOCALHOST, host_port),
                }];
                // The first node publishes its peer port on the host; the others reach it
                // through a guest-to-host forward of their own.
                let forwards = if i == 0 { vec![PEER_PORT] } else { Vec::new() };
                if let Some(host) = first_peer_host {
                    guest_forwards.push(GuestForward {
                        endpoint_port: PEER_ENDPOINT_PORT,
                        host,
                    });
                }
                let network = NodeNetwork::User {
                    forwards,
                    guest_forwards,
                    outbound: false,
                };
                (network, at, Vec::new())
            }
            Some((bridge, ip)) => {
                let [a, b, c, d] = ip.octets();
                let mine = Ipv4Addr::new(a, b, c, d.wrapping_add(10 + i as u8));
                let tap = format!("{}t{i}", &bridge[..bridge.len().min(11)]);
                let args = vec!["--ip".into(), format!("{mine}/24")];
                let at = SocketAddrV4::new(*ip, host_port);
                if i == 0 {
                    first_peer = Some((
                        SocketAddrV4::new(mine, PEER_PORT),
                        "directly on the TAP bridge",
                    ));
                }
                (NodeNetwork::Tap(tap), at, args)
            }
        };
        let expectation = front.expect_at(token, reachable_at);
        args.extend([
            "--ebb-front-end".into(),
            reachable_at.to_string(),
            "--ebb-join-token".into(),
            format!("{token:x}"),
        ]);
        let shared = options.transport.shared_for(i);
        let spec = NodeSpec {
            network: network.clone(),
            args,
            shared_window: if shared { SHARED_WINDOW } else { 0 },
            ..NodeSpec::new(NodeImage::Bytes(image.clone()))
        };
        if let (NodeNetwork::Tap(tap), Some((bridge, _))) = (&network, &options.tap_bridge) {
            // On the bridge before the node runs: a TAP enslaved after the guest's first
            // ARP request or SYN lost it, and the join waited for a retransmission (1 s).
            taps.push(BridgedTap::create(tap, bridge)?);
        }
        let handle = allocate_in_background(allocator.clone(), spec)
            .await
            .map_err(|e| format!("cannot boot node {}: {e}", i + 1))?;
        if let Some(window) = handle.host_window() {
            // The node finds its window and joins through it (with its token, as over
            // TCP); this core polls the front end's end.
            let window = window.map_err(|e| format!("cannot open node {}'s window: {e}", i + 1))?;
            let conn = ebb::shm::attach(window)
                .map_err(|e| format!("cannot open node {}'s window: {e}", i + 1))?;
            front.accept_shared(conn);
        }
        if i == 0 && first_peer_host.is_none() {
            first_peer_host = handle.forwarded(PEER_PORT);
            if first_peer_host.is_some() {
                first_peer = Some((
                    SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 3), PEER_ENDPOINT_PORT),
                    "rootless: a guest-to-host forward to the first node's published port",
                ));
            }
        }
        pending.push((expectation, started, Running::Native(handle)));
    }
    // Hosted nodes: this executable again, as a node, in processes of their own, reaching
    // the front end on loopback.
    for i in 0..options.hosted_nodes {
        let token = random_token(1000 + i);
        let expectation = front.expect(token);
        let started = Instant::now();
        let child = std::process::Command::new(
            std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?,
        )
        .args(["--ebb-front-end", &format!("{listen_on}:{host_port}")])
        .args(["--ebb-join-token", &format!("{token:x}")])
        .env("EBB_CPUS", "1")
        .spawn()
        .map_err(|e| format!("cannot start a hosted node: {e}"))?;
        pending.push((expectation, started, Running::Hosted(child)));
    }
    let mut nodes = Vec::new();
    for (expectation, started, running) in pending {
        let info = ebb::timeout(JOIN_TIMEOUT, expectation)
            .await
            .map_err(|_| match &running {
                Running::Native(handle) => format!(
                    "a node did not join within {JOIN_TIMEOUT:?}; its console:\n{}",
                    handle.console().text()
                ),
                Running::Hosted(_) => {
                    format!("a hosted node did not join within {JOIN_TIMEOUT:?}")
                }
            })?
            .map_err(|e| format!("a node could not join: {e}"))?;
        let joined_in = started.elapsed();
        println!(
            "cluster: {} joined in {:.1} ms (allocate → joined; {})",
            info.node,
            joined_in.as_secs_f64() * 1e3,
            running.describe()
        );
        nodes.push(Node {
            id: info.node,
            running: Some(running),
            joined_in,
        });
    }
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    if options.bench > 0 {
        // Every native node: each of its paths (shared memory, TCP through its network)
        // beside Linux TCP, in the same rounds.
        let targets: Vec<(NodeId, &'static str)> = nodes
            .iter()
            .filter_map(|n| match &n.running {
                Some(r @ Running::Native(_)) => Some((
                    n.id,
                    match (r.path(), &options.tap_bridge) {
                        ("TCP through its network", Some(_)) => "TCP on its TAP bridge",
                        (path, _) => path,
                    },
                )),
                _ => None,
            })
            .collect();
        println!(
            "{}",
            crate::bench::run(&messenger, &targets, options.bench).await?
        );
    }

    // Node to node: the last native node connects to the first directly (not through
    // the front end) and calls it.
    if let (Some((addr, how)), true) = (first_peer, options.nodes >= 2) {
        let (a, b) = (nodes[0].id, nodes[options.nodes as usize - 1].id);
        let link = PeerLink {
            node: a.0,
            ip: addr.ip().octets(),
            port: addr.port(),
            calls: PEER_CALLS,
        };
        let request = encode(&link).map_err(|e| e.to_string())?;
        let answer = ebb::timeout(
            Duration::from_secs(30),
            messenger.call(b, NODE, PEER_KIND, request),
        )
        .await
        .map_err(|_| format!("{b} did not finish its calls to {a} in 30 s"))?
        .map_err(|e| format!("{b} could not call {a} directly: {e}"))?;
        let report: PeerReport = decode(&answer).map_err(|e| e.to_string())?;
        println!(
            "cluster: {b} → {a} directly ({how}): {} calls over their own connection, each answered with its bytes; round trip median {:.1} µs, p99 {:.1} µs",
            report.calls,
            report.median_ns as f64 / 1e3,
            report.p99_ns as f64 / 1e3
        );
    }

    // The key-value workload through the fragmented map, checked against a model.
    let map = MapClient::new(Rc::new(messenger.clone()), MAP, &ids);
    let report = workload(&options, &messenger, &map, &mut nodes, &lost).await?;
    println!("{report}");

    // The replicated counter, every node at once, in both consistencies.
    let survivors: Vec<NodeId> = nodes
        .iter()
        .filter(|n| n.running.is_some())
        .map(|n| n.id)
        .collect();
    for merged in [false, true] {
        let before = home.total();
        let started = Instant::now();
        let calls = survivors.iter().map(|&node| {
            let payload = encode(&Increment {
                times: options.increments,
                merged,
            });
            let messenger = messenger.clone();
            async move {
                let payload = payload.map_err(|e| e.to_string())?;
                messenger
                    .call(node, NODE, INCREMENT_KIND, payload)
                    .await
                    .map_err(|e| e.to_string())
            }
        });
        for result in ebb::future::join_all(calls).await {
            result.map_err(|e| format!("a node could not increment: {e}"))?;
        }
        let added = home.total() - before;
        let expected = i64::from(options.increments) * survivors.len() as i64;
        let mode = if merged { "merged" } else { "synchronous" };
        if added != expected {
            return Err(format!(
                "replicated counter ({mode}): {added} at home, expected {expected}"
            ));
        }
        println!(
            "cluster: replicated counter ({mode}): {} node{} × {} increments = {added} at home, exact ({:.1} ms)",
            survivors.len(),
            if survivors.len() == 1 { "" } else { "s" },
            options.increments,
            started.elapsed().as_secs_f64() * 1e3
        );
    }

    // The file offload: a node reads a host file through the front end's file server,
    // twice — the first time its use of the file server's global Ebb misses and is
    // resolved through the GlobalIdMap, the second finds it bound.
    let reader = survivors[0];
    let path = options.file.to_string_lossy().into_owned();
    let bytes = std::fs::read(&options.file).map_err(|e| format!("cannot read {path}: {e}"))?;
    let want = Sha256::digest(&bytes).to_vec();
    for attempt in 1..=2 {
        let request = encode(&path).map_err(|e| e.to_string())?;
        let answer = messenger
            .call(reader, NODE, OFFLOAD_KIND, request)
            .await
            .map_err(|e| format!("{reader} could not read {path}: {e}"))?;
        let got: Offloaded = decode(&answer).map_err(|e| e.to_string())?;
        if got.len != bytes.len() as u64 || got.sha256 != want {
            return Err(format!(
                "{reader} read {} bytes of {path} through the front end, not its {} bytes (digests differ)",
                got.len,
                bytes.len()
            ));
        }
        if got.server_was_bound != (attempt == 2) {
            return Err(format!(
                "{reader}'s file server Ebb was {}bound on read {attempt}",
                if got.server_was_bound { "" } else { "not " }
            ));
        }
        let how = if got.server_was_bound {
            "the file server's Ebb already bound there"
        } else {
            "a global miss on the file server's Ebb, resolved through the front end's GlobalIdMap"
        };
        println!(
            "cluster: {reader} read {path} through the front end ({how}): {} bytes in {} reads, SHA-256 {} (matches)",
            got.len,
            got.reads,
            hex(&got.sha256)
        );
    }

    // Stop: nodes see the front end go and exit; free bounds the rest.
    messenger.shutdown();
    for node in &mut nodes {
        if let Some(running) = node.running.take() {
            running
                .stop()
                .map_err(|e| format!("cannot stop {}: {e}", node.id))?;
        }
    }
    let joins: Vec<String> = nodes
        .iter()
        .map(|n| format!("{:.1}", n.joined_in.as_secs_f64() * 1e3))
        .collect();
    println!(
        "cluster: done ({} nodes; joined in {} ms)",
        nodes.len(),
        joins.join(", ")
    );
    Ok(())
}

/// A node's TAP device, made persistent by the front end and on the bridge before the
/// node's monitor opens it (one queue: the nodes have one vCPU); deleted when dropped.
struct BridgedTap(String);

impl BridgedTap {
    fn create(tap: &str, bridge: &str) -> Result<BridgedTap, String> {
        ip(&["tuntap", "add", "dev", tap, "mode", "tap"])?;
        let made = BridgedTap(tap.to_string());
        ip(&["link", "set", tap, "master", bridge])?;
        ip(&["link", "set", tap, "up"])?;
        Ok(made)
    }
}

impl Drop for BridgedTap {
    fn drop(&mut self) {
        if let Err(e) = ip(&["link", "del", &self.0]) {
            eprintln!("cluster: removing {}: {e}", self.0);
        }
    }
}

/// Runs `ip ARGS` (as root).
fn ip(args: &[&str]) -> Result<(), String> {
    let status = std::process::Command::new("ip")
        .args(args)
        .status()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("ip {} failed ({status})", args.join(" ")))
    }
}

/// Serves one read of an offered file.
fn read_for(
    offered: &HashSet<PathBuf>,
    from: NodeId,
    request: &IOBufChain,
) -> Result<IOBufChain, String> {
    use std::io::{Read, Seek, SeekFrom};
    let ReadRequest { path, offset, len } = decode(request).map_err(|e| e.to_string())?;
    let path = PathBuf::from(path);
    if !offered.contains(&path) {
        return Err(format!("{from} may not read {}", path.display()));
    }
    let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buf = vec![0u8; len.min(READ_CHUNK) as usize];
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    buf.truncate(filled);
    Ok(IOBufChain::from(IOBuf::from_vec(buf)))
}

/// The map workload: `options.ops` random gets, sets and deletes, [`IN_FLIGHT`] at a
/// time on distinct keys, each result checked against a model; with `kill_after`, the
/// last node is killed mid-run and its keys' operations must fail while the others'
/// keep succeeding.
async fn workload(
    options: &Options,
    messenger: &Messenger,
    map: &MapClient,
    nodes: &mut [Node],
    lost: &Arc<Mutex<BTreeMap<NodeId, Instant>>>,
) -> Result<String, String> {
    let mut model: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut rng = options.seed | 1;
    let mut served: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut dead: Option<NodeId> = None;
    let mut failed_on_dead = 0u64;
    let mut kill_report = String::new();
    let started = Instant::now();
    let mut done = 0u64;
    while done < options.ops {
        if dead.is_none() && options.kill_after.is_some_and(|at| done >= at) {
            kill_report = kill_last(messenger, nodes, lost).await?;
            dead = nodes.last().map(|n| n.id);
            // Its keys are gone with it.
            model.retain(|k, _| map.shard_of(&key(*k)) != dead);
        }
        let mut batch: Vec<(u32, Op)> = Vec::new();
        let mut keys = HashSet::new();
        while batch.len() < IN_FLIGHT && done + (batch.len() as u64) < options.ops {
            let k = (next(&mut rng) % 10_000) as u32;
            if !keys.insert(k) {
                break;
            }
            let op = match next(&mut rng) % 10 {
                0..=3 => Op::Get,
                4..=8 => Op::Set(value(&mut rng)),
                _ => Op::Delete,
            };
            batch.push((k, op));
        }
        let calls = batch.iter().map(|(k, op)| {
            let key = key(*k);
            let op = op.clone();
            async move {
                match op {
                    Op::Get => map.get(&key).await,
                    Op::Set(v) => map.set(&key, v).await,
                    Op::Delete => map.delete(&key).await,
                }
            }
        });
        let results = ebb::future::join_all(calls).await;
        for ((k, op), result) in batch.into_iter().zip(results) {
            let shard = map.shard_of(&key(k)).expect("the map has shards");
            if Some(shard) == dead {
                match result {
                    Err(RemoteError::Call(_)) => failed_on_dead += 1,
                    other => {
                        return Err(format!(
                            "an operation on killed {shard}'s key {k} did not fail: {other:?}"
                        ));
                    }
                }
                continue;
            }
            let got = result.map_err(|e| format!("operation on key {k} ({shard}): {e}"))?;
            let want = match op {
                Op::Get => model.get(&k).cloned(),
                Op::Set(v) => model.insert(k, v),
                Op::Delete => model.remove(&k),
            };
            if got != want {
                return Err(format!(
                    "key {k} on {shard}: the map answered {got:?}, the model {want:?}"
                ));
            }
            *served.entry(shard).or_default() += 1;
        }
        done = served.values().sum::<u64>() + failed_on_dead;
    }
    let elapsed = started.elapsed();
    // The map as a whole equals the model: every key read back.
    for (&k, v) in &model {
        let got = map.get(&key(k)).await.map_err(|e| e.to_string())?;
        if got.as_ref() != Some(v) {
            return Err(format!("key {k}: read back {got:?}, the model holds {v:?}"));
        }
    }
    let per_node: Vec<String> = served
        .iter()
        .map(|(node, n)| format!("{node} served {n}"))
        .collect();
    let mut report = format!(
        "cluster: {done} map operations in {:.2} s ({:.0}/s): {}; the map equals the model ({} keys read back)",
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64(),
        per_node.join(", "),
        model.len()
    );
    if let Some(dead) = dead {
        report.push_str(&format!(
            "\n{kill_report}\ncluster: after {dead} was killed, {failed_on_dead} operations on its keys failed with an error; the surviving shards kept serving"
        ));
    }
    Ok(report)
}

/// Kills the last node with a call pending on it; checks that the loss is reported and
/// the pending call fails, both within a second of the kill.
async fn kill_last(
    messenger: &Messenger,
    nodes: &mut [Node],
    lost: &Arc<Mutex<BTreeMap<NodeId, Instant>>>,
) -> Result<String, String> {
    let node = nodes.last_mut().ok_or("no node to kill")?;
    let id = node.id;
    // A call the node holds for a minute: pending when it dies.
    let payload = IOBufChain::from(IOBuf::copy_from_slice(b"hold"));
    let pending = ebb::spawn_local(messenger.call(id, NODE, HOLD_KIND, payload));
    ebb::sleep(Duration::from_millis(20)).await;
    let running = node.running.take().ok_or("already killed")?;
    // Freeing waits for the node's threads (up to FREE_BOUND): off the event loop, which
    // must go on reading the connections — the loss is seen there, and the heartbeats go
    // from there. The thread says when it kills, so the times below count from the kill
    // itself, not from the free's end nor from when the thread got a CPU.
    let (kill, killing) = promise();
    let (free, freed) = promise();
    std::thread::Builder::new()
        .name("cluster-kill".into())
        .spawn(move || {
            let killed = Instant::now();
            let _ = kill.set(killed);
            let outcome = running.stop();
            let _ = free.set((outcome, killed.elapsed()));
        })
        .map_err(|e| format!("cannot start the thread that kills {id}: {e}"))?;
    let killed = killing
        .await
        .map_err(|_| format!("the thread that kills {id} ended early"))?;
    let answer = ebb::timeout(Duration::from_secs(1), pending)
        .await
        .map_err(|_| format!("the call pending on killed {id} did not fail within 1 s"))?;
    let failed_in = killed.elapsed();
    let (outcome, freed_in) = freed
        .await
        .map_err(|_| format!("the thread that kills {id} ended early"))?;
    let outcome = outcome?;
    let error = match answer {
        Err(e) => e,
        Ok(reply) => {
            return Err(format!(
                "the call pending on killed {id} was answered: {reply:?}"
            ));
        }
    };
    let reported = lost
        .lock()
        .unwrap()
        .get(&id)
        .map(|at| at.duration_since(killed))
        .ok_or_else(|| format!("{id} was killed but the Messenger did not report it lost"))?;
    if reported > Duration::from_secs(1) {
        return Err(format!(
            "{id} was reported lost only {reported:?} after the kill"
        ));
    }
    Ok(format!(
        "cluster: killed {id} ({outcome}, stopped in {:.1} ms): reported lost after {:.1} ms; its pending call failed after {:.1} ms ({error})",
        freed_in.as_secs_f64() * 1e3,
        reported.as_secs_f64() * 1e3,
        failed_in.as_secs_f64() * 1e3
    ))
}

#[derive(Clone, Debug)]
enum Op {
    Get,
    Set(Vec<u8>),
    Delete,
}

fn key(k: u32) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn value(rng: &mut u64) -> Vec<u8> {
    let len = 1 + (next(rng) % 64) as usize;
    (0..len).map(|_| next(rng) as u8).collect()
}

/// xorshift64: a fixed, seeded sequence.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn random_token(i: u32) -> u64 {
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (t ^ u64::from(i) << 32).to_le_bytes();
    }
    u64::from_le_bytes(bytes) | 1
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
