//! The server: one [`Server`] shared by every core (the store, the settings, the
//! connection counters), and one [`McConnection`] handler per TCP connection, which
//! parses what arrives ([`crate::protocol::Parser`]), executes it against the store and
//! sends the replies.
//!
//! # Invariants
//!
//! * A connection and its handler stay on the core that accepted it; the store is the
//!   only state the cores share (lock-free reads, per-shard writes).
//! * Replies go out in request order, one `send` per batch of requests that arrived
//!   together (pipelined requests are answered together); a `get` hit sends the stored
//!   value's buffers themselves.
//! * Memory per connection is bounded: when a `send` had to queue (the one case in which
//!   every backend promises `send_window_increased`) and more than [`MAX_QUEUED_REPLY`]
//!   bytes wait, the connection stops reading and stops executing what it already
//!   received until the window opens again.
//! * Nothing a client sends can panic the server: the parser refuses bad input with
//!   memcached's replies, and every store error is answered.
//! * Memory held for unparsed input is bounded server-wide, not just per connection
//!   (see [`McConnection::account_input`]): a partial request's buffers are compacted
//!   when they are mostly waste, their footprint is charged to one count, and past
//!   [`Server::input_limit`] a connection holding more than [`INPUT_ALLOWANCE`] is
//!   refused as memcached refuses one whose read buffer cannot grow. Without it, 200
//!   connections each sending most of a 1 MB value, and never the rest, made a 128 MiB
//!   native guest run out of memory.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicU64, Ordering};

use ebb::net::{CloseReason, IOBuf, IOBufChain, TcpConnection, TcpHandler};

use crate::protocol::{
    Command, Keys, Limits, MetaItem, MetaOutcome, Parsed, Parser, Protocol, ReplyTo, Request,
    Response, StoreMode, encode, encode_meta,
};
use crate::store::{
    Arith, ArithOutcome, Ctx, DeleteOutcome, FailingMemory, HeapMemory, ItemMemory, Mode, Store,
    StoreError, StoreOutcome, UnixTime, absolute_expiry,
};

/// The version the server reports (`version`, `stats`): memcached's protocol level, and
/// what it is.
pub const VERSION: &str = "1.6.18-ebbflow";

/// Reply bytes queued on a connection beyond which it stops reading (after a refused
/// send).
pub const MAX_QUEUED_REPLY: usize = 4 << 20;

/// Unparsed input a connection may hold whatever the server-wide count says: an
/// ordinary request (ETC's are under 1.2 KB) is never refused for memory.
pub const INPUT_ALLOWANCE: usize = 16 << 10;

/// Input whose buffers occupy more than twice its bytes plus this is compacted.
const COMPACT_SLACK: usize = 16 << 10;

/// memcached's reply when it cannot grow a connection's read buffer; it closes the
/// connection after it.
pub const OUT_OF_MEMORY_READING: &[u8] = b"SERVER_ERROR out of memory reading request\r\n";

/// Replies collected beyond this are sent before more requests run (a long pipeline of
/// gets is answered in pieces, so the connection can push back in between).
const FLUSH_AT: usize = 256 << 10;

/// What the command line set (memcached's names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `-p`.
    pub port: u16,
    /// `-m`, in bytes.
    pub memory_limit: usize,
    /// `-c`.
    pub max_connections: u64,
    /// `-I`.
    pub item_size_max: usize,
    /// `-M` turns eviction off (errors instead).
    pub evict: bool,
    /// `-v` count.
    pub verbosity: u32,
    /// Cores serving.
    pub threads: usize,
    /// Fault injection for tests and soak runs (`--fail-value-memory PPM`): requests for
    /// value and input memory fail with this probability per million, as if the heap
    /// were exhausted. 0: off.
    pub fail_value_memory: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            port: 11211,
            memory_limit: 64 << 20,
            max_connections: 1024,
            item_size_max: 1 << 20,
            evict: true,
            verbosity: 0,
            threads: 1,
            fail_value_memory: 0,
        }
    }
}

/// Connection counters (memcached's `stats` names).
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Open connections.
    pub curr: AtomicU64,
    /// Connections accepted since start.
    pub total: AtomicU64,
    /// Connections refused for `-c`.
    pub rejected: AtomicU64,
    /// Bytes received from clients.
    pub bytes_read: AtomicU64,
    /// Bytes of replies handed to the network.
    pub bytes_written: AtomicU64,
    /// Memory held by all connections' unparsed input (each segment's whole buffer).
    pub read_buf_bytes: AtomicU64,
    /// Connections refused because that memory was over [`Server::input_limit`]
    /// (memcached's `read_buf_oom`).
    pub read_buf_oom: AtomicU64,
}

/// The server, shared by every core.
pub struct Server {
    /// The items.
    pub store: Store,
    /// The settings in force.
    pub settings: Settings,
    /// Connection counters.
    pub connections: ConnectionStats,
    /// The most memory all connections' unparsed input may hold before connections
    /// holding more than [`INPUT_ALLOWANCE`] are refused: a quarter of `-m`, at least
    /// 4 MiB — beside the items, which `-m` bounds, what partial requests (a large
    /// value on its way) may pin.
    pub input_limit: usize,
    /// Unix time at start (seconds), for `uptime`.
    started: UnixTime,
    /// Where values and compacted input get memory that may be refused.
    memory: Arc<dyn ItemMemory>,
    /// Free memory values leave alone (natively).
    reserve: usize,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("settings", &self.settings)
            .finish()
    }
}

/// The current Unix time in seconds: the wall clock where the platform has one, else the
/// seconds since the runtime started counted from a fixed date (2001-09-09, Unix time
/// 10^9), so relative expiry works everywhere and absolute times compare sensibly.
pub fn now_unix() -> UnixTime {
    match ebb::unix_time() {
        Some(t) => u32::try_from(t.as_secs()).unwrap_or(u32::MAX),
        None => 1_000_000_000u32.saturating_add((ebb::now().as_nanos() / 1_000_000_000) as u32),
    }
}

fn core_index() -> usize {
    ebb::core_id().0 as usize
}

impl Server {
    /// A server with `settings` and a store over the runtime's RCU domain (on a core).
    pub fn new(settings: Settings) -> Option<Server> {
        let domain = ebb::Handle::current()?.rcu().clone();
        let config = crate::store::StoreConfig {
            memory_limit: settings.memory_limit,
            item_size_max: settings.item_size_max,
            evict: settings.evict,
            cores: ebb::num_cores(),
            ..Default::default()
        };
        // Natively, values leave alone the memory `memory_needed` sets aside beside
        // `-m`: what requests on their way and the network may take, which they cannot
        // be refused.
        let reserve = value_reserve(&settings);
        let heap = HeapMemory { reserve };
        let memory: Arc<dyn ItemMemory> = match settings.fail_value_memory {
            0 => Arc::new(heap),
            ppm => Arc::new(FailingMemory::new(heap, ppm, 0x2101)),
        };
        Some(Server {
            store: Store::with_memory(config, domain, memory.clone()),
            memory,
            reserve,
            input_limit: input_limit(&settings),
            settings,
            connections: ConnectionStats::default(),
            started: now_unix(),
        })
    }

    /// The handler for a newly accepted connection, or `None` when `-c` is reached (the
    /// caller sends memcached's refusal and closes).
    pub fn accept(self: &Arc<Self>) -> Option<McConnection> {
        let open = self.connections.curr.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.settings.max_connections {
            self.connections.curr.fetch_sub(1, Ordering::Relaxed);
            self.connections.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.connections.total.fetch_add(1, Ordering::Relaxed);
        Some(McConnection {
            server: self.clone(),
            parser: Parser::new(Limits {
                item_size_max: self.settings.item_size_max,
                ..Limits::default()
            }),
            input: IOBufChain::new(),
            input_footprint: 0,
            charged: 0,
            paused: false,
            closing: false,
            counted: true,
            pending_get: None,
        })
    }

    /// The idle-time work of a core: removes up to `budget` expired items; how many.
    pub fn sweep(&self, budget: usize) -> usize {
        self.store.sweep(Ctx::new(now_unix(), core_index()), budget)
    }

    /// `stats` with `args`: appends the replies for `to` onto `out`.
    fn stats(&self, args: &[Vec<u8>], to: &ReplyTo, out: &mut IOBufChain) {
        let group = args.first().map(Vec::as_slice).unwrap_or(b"");
        let lines: Option<Vec<(&str, String)>> = match group {
            b"" => Some(self.general_stats()),
            b"settings" => Some(self.settings_stats()),
            b"items" => Some(self.items_stats()),
            b"slabs" => Some(self.slabs_stats()),
            b"sizes" | b"conns" => Some(Vec::new()),
            b"reset" => {
                // memcached resets its counters; ours are the store's running totals,
                // which have no reset: say RESET, as clients expect, and keep counting.
                encode(to, &Response::Reset, out);
                return;
            }
            _ => None,
        };
        let Some(lines) = lines else {
            encode(to, &Response::UnknownStats, out);
            return;
        };
        for (name, value) in &lines {
            encode(
                to,
                &Response::Stat {
                    name: name.as_bytes(),
                    value: value.as_bytes(),
                },
                out,
            );
        }
        encode(to, &Response::StatsEnd, out);
    }

    fn general_stats(&self) -> Vec<(&'static str, String)> {
        let s = self.store.stats();
        let c = &self.connections;
        let now = now_unix();
        let load = |a: &AtomicU64| format!("{}", a.load(Ordering::Relaxed));
        let mut v: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: String| v.push((name, value));
        put("pid", String::from("1"));
        put("uptime", format!("{}", now.saturating_sub(self.started)));
        put("time", format!("{now}"));
        put("version", String::from(VERSION));
        put("libevent", String::from("ebbflow"));
        put("pointer_size", String::from("64"));
        put(
            "max_connections",
            format!("{}", self.settings.max_connections),
        );
        put("curr_connections", load(&c.curr));
        put("total_connections", load(&c.total));
        put("rejected_connections", load(&c.rejected));
        put("connection_structures", load(&c.curr));
        put("cmd_get", format!("{}", s.cmd_get));
        put("cmd_set", format!("{}", s.cmd_set));
        put("cmd_flush", format!("{}", s.cmd_flush));
        put("cmd_touch", format!("{}", s.cmd_touch));
        put("get_hits", format!("{}", s.get_hits));
        put("get_misses", format!("{}", s.get_misses));
        put("get_expired", format!("{}", s.get_expired));
        put("get_flushed", format!("{}", s.get_flushed));
        put("delete_misses", format!("{}", s.delete_misses));
        put("delete_hits", format!("{}", s.delete_hits));
        put("incr_misses", format!("{}", s.incr_misses));
        put("incr_hits", format!("{}", s.incr_hits));
        put("decr_misses", format!("{}", s.decr_misses));
        put("decr_hits", format!("{}", s.decr_hits));
        put("cas_misses", format!("{}", s.cas_misses));
        put("cas_hits", format!("{}", s.cas_hits));
        put("cas_badval", format!("{}", s.cas_badval));
        put("touch_hits", format!("{}", s.touch_hits));
        put("touch_misses", format!("{}", s.touch_misses));
        put("read_buf_bytes", load(&c.read_buf_bytes));
        put("read_buf_oom", load(&c.read_buf_oom));
        put("bytes_read", load(&c.bytes_read));
        put("bytes_written", load(&c.bytes_written));
        put("limit_maxbytes", format!("{}", s.limit_maxbytes));
        // Natively the heap is the node's fixed memory: what it holds and what is free in
        // whole pages, beside what the items account for.
        if let (Some(total), Some(free)) = (ebb::memory_total(), ebb::memory_free()) {
            put("heap_bytes", format!("{total}"));
            put("heap_free_bytes", format!("{free}"));
            put("heap_reserve_bytes", format!("{}", self.reserve));
        }
        put("threads", format!("{}", self.settings.threads));
        put("bytes", format!("{}", s.bytes));
        put("curr_items", format!("{}", s.curr_items));
        put("total_items", format!("{}", s.total_items));
        put("expired_unfetched", format!("{}", s.expired_unfetched));
        put("evicted_unfetched", format!("{}", s.evicted_unfetched));
        put("evictions", format!("{}", s.evictions));
        put("reclaimed", format!("{}", s.reclaimed));
        put("outofmemory", format!("{}", s.outofmemory));
        v
    }

    fn settings_stats(&self) -> Vec<(&'static str, String)> {
        let st = &self.settings;
        let mut v: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: String| v.push((name, value));
        put("maxbytes", format!("{}", st.memory_limit));
        put("maxconns", format!("{}", st.max_connections));
        put("tcpport", format!("{}", st.port));
        put("udpport", String::from("0"));
        put("verbosity", format!("{}", st.verbosity));
        put("num_threads", format!("{}", st.threads));
        put(
            "evictions",
            String::from(if st.evict { "on" } else { "off" }),
        );
        put("cas_enabled", String::from("yes"));
        put("binding_protocol", String::from("auto-negotiate"));
        put("item_size_max", format!("{}", st.item_size_max));
        v
    }

    fn items_stats(&self) -> Vec<(&'static str, String)> {
        // One class: the store does not use slab classes (see the store's docs).
        let s = self.store.stats();
        if s.curr_items == 0 {
            return Vec::new();
        }
        let mut v: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: String| v.push((name, value));
        put("items:1:number", format!("{}", s.curr_items));
        put("items:1:evicted", format!("{}", s.evictions));
        put(
            "items:1:evicted_unfetched",
            format!("{}", s.evicted_unfetched),
        );
        put(
            "items:1:expired_unfetched",
            format!("{}", s.expired_unfetched),
        );
        put("items:1:reclaimed", format!("{}", s.reclaimed));
        put("items:1:outofmemory", format!("{}", s.outofmemory));
        v
    }

    fn slabs_stats(&self) -> Vec<(&'static str, String)> {
        let s = self.store.stats();
        let mut v: Vec<(&'static str, String)> = Vec::new();
        let mut put = |name: &'static str, value: String| v.push((name, value));
        put("1:used_chunks", format!("{}", s.curr_items));
        put("1:mem_requested", format!("{}", s.bytes));
        put(
            "active_slabs",
            String::from(if s.curr_items > 0 { "1" } else { "0" }),
        );
        put("total_malloced", format!("{}", s.bytes));
        v
    }
}

/// One connection's handler.
pub struct McConnection {
    server: Arc<Server>,
    parser: Parser,
    /// Received bytes not parsed yet.
    input: IOBufChain,
    /// The memory `input`'s buffers occupy ([`footprint`]), kept as segments arrive and
    /// recomputed only when requests consumed some, so waiting for a large value costs
    /// O(1) per receive.
    input_footprint: usize,
    /// The footprint of `input` counted in the server's `read_buf_bytes`.
    charged: usize,
    /// Reading and executing stopped until the send window opens.
    paused: bool,
    /// A reply asked for the connection to close once sent.
    closing: bool,
    /// Counted in `curr_connections`: until the server closes its side, as memcached
    /// counts a connection until it closes the socket — not until TCP has finished, which
    /// a peer that never acknowledges our FIN (passt, at times) delays by minutes.
    counted: bool,
    /// A `get` answered in part: the rest goes out as the connection takes it.
    pending_get: Option<PendingGet>,
}

/// A `get` whose reply is being built: its keys, and the next one to answer.
struct PendingGet {
    keys: Keys,
    next: usize,
    touch: Option<i64>,
    reply_to: ReplyTo,
}

impl McConnection {
    /// Executes what `input` holds, stopping at a pause or a close; sends the replies.
    fn process(&mut self, conn: &dyn TcpConnection) {
        let mut out = IOBufChain::new();
        let cx = Ctx::new(now_unix(), core_index());
        while !self.closing {
            if self.pending_get.is_some() {
                if self.continue_get(cx, &mut out) && self.flush(conn, &mut out) {
                    break;
                }
                continue;
            }
            match self.parser.parse(&mut self.input) {
                Parsed::Incomplete => break,
                Parsed::Request(command) => {
                    let must_flush = self.execute(cx, command, &mut out);
                    if (must_flush || out.len() >= FLUSH_AT) && self.flush(conn, &mut out) {
                        break;
                    }
                }
                Parsed::Error(e) => {
                    let mut reply = e.reply;
                    out.append(&mut reply);
                    if let Some(key) = e.unlink {
                        self.server.store.delete(cx, &key, 0);
                    }
                    if e.close {
                        self.closing = true;
                    }
                }
            }
        }
        self.flush(conn, &mut out);
        if self.closing {
            self.close(conn);
        }
    }

    /// Answers the keys of the `get` under way, until its reply has grown past
    /// [`FLUSH_AT`]: true when keys are left (the caller flushes, and pauses if the
    /// connection must). A get of many keys, or of large values, so never builds more than
    /// about `FLUSH_AT` plus one value of reply before the connection can push back — a
    /// thousand keys of a 1 MiB value are 65,000 buffers, which built at once made a reply
    /// chain of megabytes (review of issue 21).
    fn continue_get(&mut self, cx: Ctx, out: &mut IOBufChain) -> bool {
        let store = &self.server.store;
        let Some(get) = self.pending_get.as_mut() else {
            return false;
        };
        while let Some(key) = get.keys.get(get.next) {
            get.next += 1;
            let hit = match get.touch {
                Some(exptime) => store.gat(cx, key, exptime),
                None => store.get(cx, key),
            };
            let response = match &hit {
                Some(hit) => Response::Value {
                    key,
                    flags: hit.flags,
                    cas: hit.cas,
                    data: &hit.value,
                },
                None => Response::Miss { key },
            };
            encode(&get.reply_to, &response, out);
            if out.len() >= FLUSH_AT && get.next < get.keys.len() {
                return true;
            }
        }
        encode(&get.reply_to, &Response::End, out);
        self.pending_get = None;
        false
    }

    /// Closes our side (queued replies still go out) and stops counting the connection.
    fn close(&mut self, conn: &dyn TcpConnection) {
        conn.close();
        self.uncount();
    }

    /// Takes the connection out of `curr_connections`, once.
    fn uncount(&mut self) {
        if core::mem::take(&mut self.counted) {
            self.server.connections.curr.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Executes what `input` holds unless paused, then accounts for what is left.
    fn serve(&mut self, conn: &dyn TcpConnection) {
        let before = self.input.len();
        if !self.paused {
            self.process(conn);
        }
        if self.input.len() != before {
            self.input_footprint = footprint(&self.input);
        }
        self.account_input(conn);
    }

    /// Keeps the memory behind the unparsed input honest, after every receive:
    ///
    /// * compacts it when its buffers are mostly waste — a peer sending a partial request
    ///   in tiny segments would otherwise pin a whole receive buffer per few bytes, and a
    ///   short partial request left at the end of a 64 KiB read would be charged all of
    ///   it (into a buffer of twice the bytes, so a long trickle is copied O(1) times per
    ///   byte);
    /// * charges its footprint to the server-wide `read_buf_bytes`;
    /// * past [`Server::input_limit`], refuses a connection holding more than
    ///   [`INPUT_ALLOWANCE`]: memcached's `SERVER_ERROR out of memory reading request`
    ///   (text; a binary connection is just closed) and close, counted `read_buf_oom`.
    ///   The connection refused is the one whose input grows past the allowance while
    ///   the total is over, not necessarily the one holding most; small requests always
    ///   pass.
    fn account_input(&mut self, conn: &dyn TcpConnection) {
        if self.input_footprint > 2 * self.input.len() + COMPACT_SLACK {
            compact(&mut self.input, &*self.server.memory);
            self.input_footprint = footprint(&self.input);
        }
        let held = self.input_footprint;
        // A request answered whole leaves nothing: no shared counter is touched then.
        if held != self.charged {
            self.charge(held);
        }
        let over = || {
            let total = self
                .server
                .connections
                .read_buf_bytes
                .load(Ordering::Relaxed);
            total > self.server.input_limit as u64
        };
        if held > INPUT_ALLOWANCE && !self.closing && over() {
            let binary = self.parser.protocol() == Some(Protocol::Binary);
            self.input = IOBufChain::new();
            self.input_footprint = 0;
            self.charge(0);
            self.server
                .connections
                .read_buf_oom
                .fetch_add(1, Ordering::Relaxed);
            self.closing = true;
            if !binary {
                let _ = conn.send(IOBufChain::from(IOBuf::from_static(OUT_OF_MEMORY_READING)));
            }
            // What still arrives is answered with a reset (`receive`). The window stays
            // open until then: the network layer would hold what arrives for a closed
            // one, up to a whole window per connection (that ran a 128 MiB guest out of
            // memory).
            self.close(conn);
        }
    }

    /// Sets this connection's charge in `read_buf_bytes` to `held`.
    fn charge(&mut self, held: usize) {
        let counter = &self.server.connections.read_buf_bytes;
        if held >= self.charged {
            counter.fetch_add((held - self.charged) as u64, Ordering::Relaxed);
        } else {
            counter.fetch_sub((self.charged - held) as u64, Ordering::Relaxed);
        }
        self.charged = held;
    }

    /// Sends `out`; true when the connection must pause (the send queued past the
    /// bound).
    fn flush(&mut self, conn: &dyn TcpConnection, out: &mut IOBufChain) -> bool {
        if out.is_empty() {
            return false;
        }
        let data = core::mem::take(out);
        let len = data.len();
        let refused = len > conn.send_window();
        if conn.send(data).is_err() {
            self.closing = true;
            return true;
        }
        self.server
            .connections
            .bytes_written
            .fetch_add(len as u64, Ordering::Relaxed);
        if refused && conn.queued_bytes() > MAX_QUEUED_REPLY {
            self.paused = true;
            conn.set_receive_window_open(false);
            return true;
        }
        false
    }

    /// Runs one command, appending its replies to `out`; true when the output must be
    /// flushed now (`noop`, `quit`).
    fn execute(&mut self, cx: Ctx, command: Command, out: &mut IOBufChain) -> bool {
        let command = match command {
            Command {
                request: Request::Get { keys, touch, .. },
                reply_to,
            } => {
                self.pending_get = Some(PendingGet {
                    keys,
                    next: 0,
                    touch,
                    reply_to,
                });
                return self.continue_get(cx, out);
            }
            other => other,
        };
        let store = &self.server.store;
        let to = &command.reply_to;
        let binary = matches!(to, ReplyTo::Binary(_));
        match command.request {
            // Answered by `continue_get`, above.
            Request::Get { .. } => {}
            Request::Store {
                mode,
                key,
                flags,
                exptime,
                cas,
                value,
            } => {
                let mode = match mode {
                    StoreMode::Set => Mode::Set,
                    StoreMode::Add => Mode::Add,
                    StoreMode::Replace => Mode::Replace,
                    StoreMode::Append => Mode::Append,
                    StoreMode::Prepend => Mode::Prepend,
                    StoreMode::Cas => Mode::Cas(cas),
                };
                let result = if binary {
                    store.store_with_cas(cx, mode, &key, flags, exptime, value, cas)
                } else {
                    store.store(cx, mode, &key, flags, exptime, value)
                };
                let response = match result {
                    Ok(StoreOutcome::Stored { cas }) => Response::Stored { cas },
                    Ok(StoreOutcome::NotStored) => Response::NotStored,
                    Ok(StoreOutcome::Exists) => Response::Exists,
                    Ok(StoreOutcome::NotFound) => Response::NotFound,
                    Err(StoreError::TooLarge) => Response::TooLarge,
                    Err(StoreError::OutOfMemory) => {
                        Response::OutOfMemory("out of memory storing object")
                    }
                    // The parser checks keys; a key the store refuses is not stored.
                    Err(StoreError::BadKey) => Response::NotStored,
                };
                encode(to, &response, out);
            }
            Request::Delete { key, cas } => {
                let response = match store.delete(cx, &key, cas) {
                    DeleteOutcome::Deleted => Response::Deleted,
                    DeleteOutcome::NotFound => Response::NotFound,
                    DeleteOutcome::Exists => Response::Exists,
                };
                encode(to, &response, out);
            }
            Request::Arith {
                key,
                incr,
                delta,
                initial,
                exptime,
                cas,
            } => {
                let op = Arith {
                    incr,
                    delta,
                    initial: initial.map(|v| (v, exptime)),
                    cas,
                };
                let response = match store.arith(cx, &key, op) {
                    Ok(ArithOutcome::Value { value, cas }) => Response::Number { value, cas },
                    Ok(ArithOutcome::NotFound) => Response::NotFound,
                    Ok(ArithOutcome::NonNumeric) => Response::NonNumeric,
                    Ok(ArithOutcome::Exists) => Response::Exists,
                    Err(StoreError::TooLarge) => Response::TooLarge,
                    Err(StoreError::OutOfMemory | StoreError::BadKey) => {
                        Response::OutOfMemory("out of memory")
                    }
                };
                encode(to, &response, out);
            }
            Request::Touch { key, exptime } => {
                let response = match store.gat(cx, &key, exptime) {
                    Some(hit) => Response::Touched {
                        flags: hit.flags,
                        cas: hit.cas,
                    },
                    None => Response::NotFound,
                };
                encode(to, &response, out);
            }
            Request::FlushAll { delay } => {
                store.flush_all(cx, delay);
                encode(to, &Response::Ok, out);
            }
            Request::Version => encode(to, &Response::Version(VERSION), out),
            Request::Stats { args } => self.server.stats(&args, to, out),
            Request::Verbosity { .. } => encode(to, &Response::Ok, out),
            Request::Quit => {
                encode(to, &Response::Quit, out);
                self.closing = true;
                return true;
            }
            Request::Noop => {
                encode(to, &Response::Noop, out);
                return true;
            }
            Request::MetaGet { key, flags } => {
                let found = store.meta_get(cx, &key, flags.ttl, !flags.no_bump);
                let outcome = match &found {
                    Some(m) => MetaOutcome::Item(MetaItem {
                        flags: m.hit.flags,
                        cas: m.hit.cas,
                        value: &m.hit.value,
                        ttl: ttl(m.exptime, cx.now),
                        ttl_touched: flags
                            .ttl
                            .map_or(-1, |t| ttl(absolute_expiry(t, cx.now), cx.now)),
                        ttl_vivified: -1,
                        created: false,
                        last_access: u64::from(cx.now.saturating_sub(m.time)),
                        fetched: m.fetched,
                    }),
                    None => MetaOutcome::Miss,
                };
                encode_meta(&flags, &key, &outcome, out);
            }
            Request::MetaSet {
                mode,
                key,
                client_flags,
                exptime,
                cas,
                value,
                flags,
            } => {
                let mode = match mode {
                    StoreMode::Set => Mode::Set,
                    StoreMode::Add => Mode::Add,
                    StoreMode::Replace => Mode::Replace,
                    StoreMode::Append => Mode::Append,
                    StoreMode::Prepend => Mode::Prepend,
                    StoreMode::Cas => Mode::Cas(cas),
                };
                let outcome =
                    match store.store_with_cas(cx, mode, &key, client_flags, exptime, value, cas) {
                        Ok(StoreOutcome::Stored { cas }) => MetaOutcome::Done { cas },
                        Ok(StoreOutcome::NotStored) | Err(StoreError::BadKey) => {
                            MetaOutcome::NotStored
                        }
                        Ok(StoreOutcome::Exists) => MetaOutcome::Exists,
                        Ok(StoreOutcome::NotFound) => MetaOutcome::NotFound,
                        Err(StoreError::TooLarge) => {
                            encode(to, &Response::TooLarge, out);
                            return false;
                        }
                        Err(StoreError::OutOfMemory) => {
                            let oom = Response::OutOfMemory("out of memory storing object");
                            encode(to, &oom, out);
                            return false;
                        }
                    };
                encode_meta(&flags, &key, &outcome, out);
            }
            Request::MetaDelete { key, flags } => {
                let outcome = match store.delete_if(cx, &key, flags.cas) {
                    DeleteOutcome::Deleted => MetaOutcome::Done { cas: 0 },
                    DeleteOutcome::NotFound => MetaOutcome::NotFound,
                    DeleteOutcome::Exists => MetaOutcome::Exists,
                };
                encode_meta(&flags, &key, &outcome, out);
            }
            Request::MetaArith { key, flags } => {
                // A created item starts immortal and takes N then T, or T then N, in
                // request order: the later one is what it keeps.
                let created_exptime = flags
                    .tokens
                    .iter()
                    .filter_map(|t| match t {
                        crate::protocol::MetaToken::SetTtl => flags.ttl,
                        crate::protocol::MetaToken::Vivify => flags.vivify,
                        _ => None,
                    })
                    .next_back()
                    .unwrap_or(0);
                let op = Arith {
                    incr: flags.incr(),
                    delta: flags.delta,
                    initial: flags.vivify.map(|_| (flags.initial, created_exptime)),
                    cas: flags.cas.unwrap_or(0),
                };
                let digits;
                let outcome = match store.meta_arith(cx, &key, op, flags.ttl) {
                    Ok((ArithOutcome::Value { value, cas }, m)) => {
                        let mut text = Vec::with_capacity(20);
                        let _ = write!(Digits(&mut text), "{value}");
                        digits = IOBufChain::from(IOBuf::from_vec(text));
                        let at = |raw: Option<i64>| {
                            raw.map_or(-1, |t| ttl(absolute_expiry(t, cx.now), cx.now))
                        };
                        MetaOutcome::Item(MetaItem {
                            flags: 0,
                            cas,
                            value: &digits,
                            ttl: if m.created {
                                -1
                            } else {
                                ttl(m.exptime, cx.now)
                            },
                            ttl_touched: at(flags.ttl),
                            ttl_vivified: at(flags.vivify),
                            created: m.created,
                            last_access: 0,
                            fetched: false,
                        })
                    }
                    Ok((ArithOutcome::NotFound, _)) => MetaOutcome::NotFound,
                    Ok((ArithOutcome::Exists, _)) => MetaOutcome::Exists,
                    Ok((ArithOutcome::NonNumeric, _)) => {
                        encode(to, &Response::NonNumeric, out);
                        return false;
                    }
                    Err(StoreError::TooLarge | StoreError::OutOfMemory | StoreError::BadKey) => {
                        encode(to, &Response::OutOfMemory("out of memory"), out);
                        return false;
                    }
                };
                encode_meta(&flags, &key, &outcome, out);
            }
        }
        false
    }
}

/// memcached's `t`: `-1` for an item that never expires, else the seconds left as an
/// unsigned 32-bit difference (an expiry in the past wraps, as in memcached).
fn ttl(exptime: UnixTime, now: UnixTime) -> i64 {
    if exptime == 0 {
        -1
    } else {
        i64::from(exptime.wrapping_sub(now))
    }
}

/// A `fmt::Write` into a byte vector.
struct Digits<'a>(&'a mut Vec<u8>);

impl core::fmt::Write for Digits<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl TcpHandler for McConnection {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.server
            .connections
            .bytes_read
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        if self.closing {
            // Closed by us (`quit`, a refused request): what still arrives gets a reset,
            // as a closed Linux socket answers it (memcached's own behaviour there), once
            // our last reply has left — an abort drops what is still queued, and ebb-net
            // sends only when it polls, after a whole batch of received segments. A peer
            // still sending a refused 1 MB value stops then, instead of streaming all of
            // it to a server that drops it — which, with many such peers, kept the core
            // from serving anyone else.
            if conn.queued_bytes() == 0 {
                conn.abort();
            }
            return;
        }
        self.input_footprint += occupied(&data);
        self.input.push_back(data);
        self.serve(conn);
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        if self.paused {
            self.paused = false;
            conn.set_receive_window_open(true);
            self.serve(conn);
        }
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        // As memcached: the peer is done, so are we (once our replies have left).
        self.close(conn);
    }

    fn closed(&mut self, _reason: CloseReason) {
        self.input = IOBufChain::new();
        self.input_footprint = 0;
        if self.charged != 0 {
            self.charge(0);
        }
        self.uncount();
    }
}

impl Drop for McConnection {
    /// A handler dropped without `closed` (a connection that ended before its handler
    /// was installed) still gives back its count and its input's charge.
    fn drop(&mut self) {
        self.uncount();
        if self.charged != 0 {
            self.charge(0);
        }
    }
}

/// The memory `input`'s buffers occupy: each segment's whole storage, since a few bytes
/// cut from a receive buffer keep all of it alive (segments sharing one are counted
/// each: an upper bound).
fn footprint(input: &IOBufChain) -> usize {
    input.iter().map(occupied).sum()
}

/// The memory behind `buf`: its whole storage.
fn occupied(buf: &IOBuf) -> usize {
    buf.headroom() + buf.len() + buf.tailroom()
}

/// Copies `input` into one buffer: its first segment when that is this connection's
/// alone, has room for the rest and is not itself mostly waste (a buffer from an
/// earlier compaction), else a new one with room for as many bytes again, from
/// `memory` — if it refuses, the input stays as it is (its footprint is still charged,
/// and the server-wide bound still refuses the connection if it grows).
fn compact(input: &mut IOBufChain, memory: &dyn ItemMemory) {
    let len = input.len();
    let mut parts = core::mem::take(input);
    let Some(mut head) = parts.pop_front() else {
        return;
    };
    if head.is_unique()
        && head.tailroom() >= len - head.len()
        && occupied(&head) <= 2 * len + COMPACT_SLACK
    {
        for part in parts.segments() {
            // Cannot fail: the storage is unique and the room for all of them checked.
            let grown = head.extend_from_slice(part);
            debug_assert!(grown.is_ok());
        }
        *input = IOBufChain::from(head);
        return;
    }
    let Some(mut bytes) = memory.buffer((2 * len).max(4096)) else {
        parts.push_front(head);
        *input = parts;
        return;
    };
    for part in core::iter::once(head.as_slice()).chain(parts.segments()) {
        // Cannot fail: the buffer is new (unique) with room for twice the bytes.
        let copied = bytes.extend_from_slice(part);
        debug_assert!(copied.is_ok());
    }
    *input = IOBufChain::from(bytes);
}

/// Memory a core's network stack may use beside the application's: the data TCP holds
/// for paused connections (ebb-net's `max_held_bytes`, 8 MiB), out-of-order data, and
/// the driver's receive buffers.
pub const NETWORK_RESERVE_PER_CORE: usize = 16 << 20;

/// The memory a server with `settings` on `cores` cores may come to use: the items
/// (`-m`), the input it may hold ([`Server::input_limit`]) and the network's
/// [`NETWORK_RESERVE_PER_CORE`] on each core. A native node whose heap is smaller
/// refuses to start rather than fail an allocation under load.
pub fn memory_needed(settings: &Settings, cores: usize) -> usize {
    settings
        .memory_limit
        .saturating_add(input_limit(settings))
        .saturating_add(NETWORK_RESERVE_PER_CORE.saturating_mul(cores))
}

/// The free memory (in whole pages) a native node's values leave alone: as much as
/// [`Server::input_limit`] lets requests on their way hold, so that input arriving when
/// the items have filled `-m` still finds pages. The network's own buffers are pooled
/// and mostly in use from the start. Values are accounted at the allocator's sizes, so
/// `-m` is what they occupy, give or take small objects in partly used slabs (measured
/// up to a third of `-m` when large values follow small ones) — the reserve is what
/// keeps that from reaching the memory that cannot be refused; a larger one refused half
/// the stores of that workload on the main job's 128 MiB (docs/11-memcached.md).
fn value_reserve(settings: &Settings) -> usize {
    input_limit(settings)
}

/// [`Server::input_limit`] for `settings`: a quarter of `-m`, at least 4 MiB.
fn input_limit(settings: &Settings) -> usize {
    (settings.memory_limit / 4).max(4 << 20)
}

/// memcached's answer to a connection over `-c` before it closes it.
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

/// Formats the one-line start message.
pub fn describe(settings: &Settings) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "-m {} MB, -c {}, -I {} KB",
        settings.memory_limit >> 20,
        settings.max_connections,
        settings.item_size_max >> 10
    );
    s
}
