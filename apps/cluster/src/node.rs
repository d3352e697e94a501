//! A node: joins the front end named on its command line, serves its shard of the map,
//! adds to the replicated counter when asked, reads host files through the front end,
//! and ends when the front end goes away.

use alloc::rc::Rc;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::net::SocketAddrV4;
use core::time::Duration;

use ebb::SharedEbb;
use ebb::net::{self, NetConfig};
use ebb_dist::global_id_map::{GlobalEbb, RemoteIdMap, Versioned, resolve};
use ebb_dist::messenger::{Messenger, MessengerConfig};
use ebb_dist::node::NodeId;
use ebb_dist::objects::fragmented::{MapShard, SHARD_KIND};
use ebb_dist::objects::replicated::{Consistency, CounterClient};
use ebb_dist::remote::{decode, encode};
use sha2::{Digest, Sha256};

use crate::protocol::{
    COUNTER, ECHO_KIND, FILES, FileServerEntry, HOLD_KIND, INCREMENT_KIND, Increment, MAP, NODE,
    OFFLOAD_KIND, Offloaded, PEER_KIND, PEER_PORT, PING_KIND, PONG_KIND, PeerLink, PeerReport,
    READ_CHUNK, READ_KIND, ReadRequest, SILENCE_LIMIT, SINK_KIND, SINK_TOTAL_KIND,
};

/// The node's network, per core (only the core that started it has one).
type CoreNetwork = ebb::EbbRef<ebb::MulticoreEbb<core::cell::RefCell<Option<Rc<net::Network>>>>>;

/// What a shard may hold: the rest of a 128 MiB node is its runtime's, its network's and
/// the Messenger's queues.
pub const SHARD_BYTES: usize = 32 << 20;

/// The largest payload the node accepts from the front end.
const MAX_REQUEST: u32 = 1 << 20;

/// Runs the node; the exit code.
pub async fn run(front_end: SocketAddrV4, token: u64, rest: &[String]) -> i32 {
    let (config, _) = match NetConfig::from_args(rest) {
        Ok(c) => c,
        Err(e) => {
            ebb::eprintln!("cluster node: {e}");
            return 2;
        }
    };
    let network = match net::start(config).await {
        Ok(n) => n,
        Err(e) => {
            ebb::eprintln!("cluster node: cannot start the network: {e}");
            return 1;
        }
    };
    // A request's payload is decoded into owned values (postcard into `Vec`s), which a
    // 128 MiB node allocates whole: bound it well below the wire's 16 MiB so no request
    // can exhaust the node's heap (the largest here are the bench's 1 MiB messages).
    let messenger = Messenger::new(MessengerConfig {
        max_payload: MAX_REQUEST,
        silence_limit: Some(SILENCE_LIMIT),
        ..MessengerConfig::default()
    });
    let shard = Arc::new(MapShard::new(SHARD_BYTES));
    messenger.on_call(MAP, SHARD_KIND, move |_from, request| {
        let reply = shard.serve(&request);
        async move { reply }
    });
    {
        let messenger = messenger.clone();
        messenger
            .clone()
            .on_call(NODE, INCREMENT_KIND, move |_from, request| {
                let messenger = messenger.clone();
                async move { increment(messenger, request).await }
            });
    }
    {
        let messenger = messenger.clone();
        messenger
            .clone()
            .on_call(NODE, OFFLOAD_KIND, move |_from, request| {
                let messenger = messenger.clone();
                async move { offload(messenger, request).await }
            });
    }
    messenger.on_call(NODE, ECHO_KIND, |_from, request| async move { Ok(request) });
    // The network is this core's (not `Send`): a per-core Ebb hands it to the peer
    // handler's future, which runs here.
    let network = Rc::new(network);
    let here = {
        let network = network.clone();
        let here: CoreNetwork = match ebb::MulticoreEbb::create(|_| core::cell::RefCell::new(None))
        {
            Ok(here) => here,
            Err(e) => {
                ebb::eprintln!("cluster node: no Ebb id for its network: {e}");
                return 1;
            }
        };
        *here.rep().borrow_mut() = Some(network);
        here
    };
    {
        let messenger = messenger.clone();
        messenger
            .clone()
            .on_call(NODE, PEER_KIND, move |_from, request| {
                let messenger = messenger.clone();
                let network = here.try_rep().ok().and_then(|n| n.borrow().clone());
                async move {
                    let network = network.ok_or("this core has no network")?;
                    call_peer(messenger, &network, request).await
                }
            });
    }
    {
        let m = messenger.clone();
        messenger.on_message(NODE, PING_KIND, move |from, payload| {
            let _ = m.send(from, NODE, PONG_KIND, payload);
        });
    }
    {
        // The throughput run: count the bytes, answer once the announced total arrived.
        let sink = Arc::new(spin::Mutex::new((0u64, u64::MAX)));
        let (m, s) = (messenger.clone(), sink.clone());
        messenger.on_message(NODE, SINK_TOTAL_KIND, move |_from, payload| {
            let total = decode::<u64>(&payload).unwrap_or(u64::MAX);
            *s.lock() = (0, total);
            let _ = &m;
        });
        let m = messenger.clone();
        messenger.on_message(NODE, SINK_KIND, move |from, payload| {
            let mut counted = sink.lock();
            counted.0 += payload.len() as u64;
            if counted.0 >= counted.1 {
                counted.1 = u64::MAX;
                let _ = m.send(from, NODE, PONG_KIND, ebb::IOBufChain::default());
            }
        });
    }
    messenger.on_call(NODE, HOLD_KIND, |_from, request| async move {
        ebb::sleep(Duration::from_secs(60)).await;
        Ok(request)
    });
    // A window from the front end (it runs this node in its own process): join through
    // it, no network. Otherwise over TCP.
    let (joined, path) = match ebb::shm::connect_to_front_end() {
        Ok(conn) => (
            messenger.join_shared(conn, token).await,
            alloc::format!("shared memory with the front end; {network} for the rest"),
        ),
        Err(ebb::shm::ShmError::NoWindow(_)) => (
            messenger.join(&network, front_end.into(), token).await,
            alloc::format!("{network}"),
        ),
        Err(e) => {
            ebb::eprintln!("cluster node: cannot open the shared window: {e}");
            return 1;
        }
    };
    let info = match joined {
        Ok(info) => info,
        Err(e) => {
            ebb::eprintln!("cluster node: cannot join the front end at {front_end}: {e}");
            return 1;
        }
    };
    // Other nodes may connect directly (the front end tells them where this port is),
    // as soon as it counts this node joined: listen first, print after (a console line
    // is an exit to the monitor).
    let _peers = match messenger.listen_for_peers(&network, PEER_PORT).await {
        Ok(listener) => Some(listener),
        Err(e) => {
            ebb::eprintln!("cluster node: cannot listen for other nodes on {PEER_PORT}: {e}");
            None
        }
    };
    ebb::println!(
        "cluster node: joined as {} ({path}; global ids {:?})",
        info.node,
        info.global_ids
    );
    // Serve until the front end goes away.
    let reason = messenger.peer_lost(NodeId::FRONT_END).await;
    ebb::println!(
        "cluster node {}: the front end is gone ({reason:?}); stopping",
        info.node
    );
    0
}

/// Adds to the counter as the front end asked; answers with the count added.
async fn increment(
    messenger: Messenger,
    request: ebb::IOBufChain,
) -> Result<ebb::IOBufChain, String> {
    let Increment { times, merged } = decode(&request).map_err(|e| e.to_string())?;
    let mode = if merged {
        Consistency::Merged
    } else {
        Consistency::Synchronous
    };
    let counter = CounterClient::new(Rc::new(messenger), COUNTER, NodeId::FRONT_END, mode);
    for _ in 0..times {
        counter.add(1).await.map_err(|e| e.to_string())?;
    }
    counter.flush().await.map_err(|e| e.to_string())?;
    encode(&times).map_err(|e| e.to_string())
}

/// Reads the file the front end named, through the front end's file server, and says
/// how long it was and what it held.
async fn offload(
    messenger: Messenger,
    request: ebb::IOBufChain,
) -> Result<ebb::IOBufChain, String> {
    let path: String = decode(&request).map_err(|e| e.to_string())?;
    // The file server is a global Ebb: on this node's first use, a miss resolved through
    // the front end's GlobalIdMap; then bound here.
    let server_was_bound = SharedEbb::<FileServer>::lookup(FILES).is_ok();
    let map = RemoteIdMap::new(Rc::new(messenger.clone()));
    let server = resolve::<FileServer>(&map, FILES)
        .await
        .map_err(|e| e.to_string())?
        .rep();
    if !server.offered.contains(&path) {
        return Err(alloc::format!("the file server does not offer {path}"));
    }
    let mut hash = Sha256::new();
    let (mut len, mut reads) = (0u64, 0u32);
    loop {
        let ask = ReadRequest {
            path: path.clone(),
            offset: len,
            len: READ_CHUNK,
        };
        let payload = encode(&ask).map_err(|e| e.to_string())?;
        let chunk = messenger
            .call(server.owner, FILES, READ_KIND, payload)
            .await
            .map_err(|e| e.to_string())?;
        reads += 1;
        if chunk.is_empty() {
            break;
        }
        for segment in chunk.segments() {
            hash.update(segment);
        }
        len += chunk.len() as u64;
    }
    let done = Offloaded {
        len,
        sha256: hash.finalize().to_vec(),
        reads,
        server_was_bound,
    };
    encode(&done).map_err(|e| e.to_string())
}

use alloc::string::ToString;

/// Connects to the node the front end named (unless connected already) and calls it
/// directly: node-to-node traffic, not through the front end.
async fn call_peer(
    messenger: Messenger,
    network: &net::Network,
    request: ebb::IOBufChain,
) -> Result<ebb::IOBufChain, String> {
    let link: PeerLink = decode(&request).map_err(|e| e.to_string())?;
    let node = NodeId(link.node);
    let connected = messenger
        .peers()
        .iter()
        .any(|&(n, alive)| n == node && alive);
    if !connected {
        let [a, b, c, d] = link.ip;
        let addr = SocketAddrV4::new(core::net::Ipv4Addr::new(a, b, c, d), link.port);
        messenger
            .connect_peer(network, node, addr.into())
            .await
            .map_err(|e| alloc::format!("cannot connect to {node} at {addr}: {e}"))?;
    }
    let payload = ebb::IOBufChain::from(ebb::IOBuf::copy_from_slice(&[0x6e; 64]));
    let mut rtts = Vec::new();
    rtts.try_reserve(link.calls as usize)
        .map_err(|_| "no memory for the round trips".to_string())?;
    for _ in 0..link.calls {
        let start = ebb::now();
        let reply = messenger
            .call(node, NODE, ECHO_KIND, payload.clone())
            .await
            .map_err(|e| e.to_string())?;
        if reply.to_vec() != payload.to_vec() {
            return Err(alloc::format!("{node} echoed other bytes"));
        }
        rtts.push(ebb::now().saturating_duration_since(start).as_nanos() as u64);
    }
    rtts.sort_unstable();
    let at = |q: usize| rtts.get(rtts.len() * q / 100).copied().unwrap_or(0);
    encode(&PeerReport {
        calls: link.calls,
        median_ns: at(50),
        p99_ns: at(99),
    })
    .map_err(|e| e.to_string())
}

/// This node's representative of the front end's file server: who serves, what.
struct FileServer {
    owner: NodeId,
    offered: Vec<String>,
}

impl GlobalEbb for FileServer {
    fn from_entry(_id: ebb::EbbId, entry: &Versioned) -> Result<Self, String> {
        let e: FileServerEntry = postcard_entry(&entry.value)?;
        Ok(FileServer {
            owner: NodeId(e.owner),
            offered: e.offered,
        })
    }
}

fn postcard_entry(bytes: &[u8]) -> Result<FileServerEntry, String> {
    decode(&ebb::IOBufChain::from(ebb::IOBuf::copy_from_slice(bytes))).map_err(|e| e.to_string())
}

/// A node's part of its command line.
pub struct Role {
    /// Where the front end is, as this node reaches it.
    pub front_end: SocketAddrV4,
    /// The token it presents to join.
    pub token: u64,
    /// The other arguments (network options).
    pub rest: Vec<String>,
}

/// The node role's arguments, if these are a node's: `--ebb-front-end ADDR
/// --ebb-join-token T` (what the front end's allocator gives a node), and the rest.
pub fn role(args: &[String]) -> Option<Result<Role, String>> {
    let at = |flag: &str| args.iter().position(|a| a == flag);
    let front = at("--ebb-front-end")?;
    let parse = || {
        let addr = args
            .get(front + 1)
            .and_then(|a| a.parse::<SocketAddrV4>().ok())
            .ok_or("--ebb-front-end takes ADDR:PORT")?;
        let token = at("--ebb-join-token")
            .and_then(|i| args.get(i + 1))
            .and_then(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok())
            .ok_or("--ebb-join-token takes a hexadecimal token")?;
        let rest = args
            .iter()
            .enumerate()
            .filter(|&(i, _)| {
                let flag_or_value = |f: usize| i == f || i == f + 1;
                !flag_or_value(front) && !at("--ebb-join-token").is_some_and(flag_or_value)
            })
            .map(|(_, a)| a.clone())
            .collect();
        Ok(Role {
            front_end: addr,
            token,
            rest,
        })
    };
    Some(parse().map_err(|e: &str| e.to_string()))
}
