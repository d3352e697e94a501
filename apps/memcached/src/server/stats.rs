//! The `stats` command: the general, `settings`, `items`, `slabs` and `conns` groups,
//! by memcached's names, in memcached 1.6.45's order and value forms (numbers, `yes`/`no`,
//! `on`/`off`, strings).
//!
//! # What the values mean here
//!
//! Our store's size classes (`store::classes`: ebb-mem's allocation rounding steps)
//! play memcached's slab classes in `stats slabs` and `stats items`. Approximations, each
//! because the store does not have what memcached measures:
//!
//! * `chunks_per_page`, `total_pages`, `total_chunks`, `free_chunks`: memcached's 1 MiB
//!   slab pages cut into chunks; the store's items are not in pages of their own, so a
//!   class is reported as if its items filled 1 MiB pages of its chunk size (`total_pages`
//!   is the pages its items need, `free_chunks` what is left in the last one), and
//!   `total_malloced` is the bytes accounted to items (`-m`'s measure), not pages taken.
//! * `items:N:number_hot`/`number_warm`/`age_hot`/`age_warm`/`moves_*`/`hits_to_hot`/
//!   `hits_to_warm`/`hits_to_temp`/`evicted_active` are 0 and every item is counted
//!   cold: the store has one CLOCK ring, not memcached's segmented LRU (as memcached
//!   with `lru_segmented` off keeps every item in its cold LRU). `hits_to_cold` is the
//!   class's `get_hits`; `direct_reclaims` its evictions and reclaims (every one is made
//!   by the writer that needed the room).
//! * `items:N:age` is the age of the class's oldest item since it was *stored* (CLOCK has
//!   no tail and items keep no access time: a read writes nothing); `evicted_time` the
//!   age since stored of the class's last evicted item (memcached: since last access).
//! * `tailrepairs`, `crawler_reclaimed`, `crawler_items_checked`, `lrutail_reflocked` are
//!   0: no reference leaks to repair; the idle sweep that removes expired items is not
//!   memcached's crawler and is counted in `reclaimed`/`expired_unfetched` instead.
//! * `stats settings` reports what this server does: `-m`, `-c`, `-p`, `-I`, `-t`, `-M`,
//!   `-v` as given, `inter` the address listened on, `read_buf_mem_limit` the bound on
//!   input held ([`Server::input_limit`]), `slab_chunk_max` the piece values are copied
//!   into (`store::VALUE_PIECE`), `hash_algorithm` `foldhash`, `growth_factor` 1.25 and
//!   `chunk_size` 8 (the allocator's small classes grow by 1.25 from 8 bytes, then
//!   double), `lru_segmented no`, `dump_enabled no` (no `lru_crawler metadump`),
//!   `slab_reassign no`/`slab_automove 0` (no slabs to move), `worker_logbuf_size` and
//!   `watcher_logbuf_size` 0 (no `watch` logger); the other fields are memcached's
//!   defaults for features it has and this server does not (`detail_enabled no`,
//!   `auth_enabled_sasl no`, the LRU percentages, ...).
//! * `stats settings` has no `ext_*` nor `ssl_*` lines: like a memcached built without
//!   extstore and TLS (`--disable-extstore`, no `--enable-tls`), which this server does
//!   not offer. `client_flags_size` is 1.6.45's (1.6.18 has none); `num_napi_ids` is
//!   1.6.45's number (1.6.18 printed `(null)`).
//! * `stats conns`: connections are numbered in accept order (memcached: by file
//!   descriptor), the listener is 0; the asking connection is `conn_parse_cmd`, one
//!   waiting for its replies to leave `conn_mwrite`, the others `conn_read` (as
//!   memcached shows an idle one).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};

use ebb::net::IOBufChain;

use super::{ConnEntry, Server, VERSION, now_unix};
use crate::protocol::{ReplyTo, Response, encode};
use crate::store::{ClassCounter, ClassStats, VALUE_PIECE};

/// memcached's slab page: what `chunks_per_page` divides.
const SLAB_PAGE: usize = 1 << 20;

/// A stats group's lines: name, value.
type Lines = Vec<(String, String)>;

impl Server {
    /// `stats` with `args`, asked by the connection `asking`: appends the replies for
    /// `to` onto `out`.
    pub(super) fn stats(
        &self,
        args: &[Vec<u8>],
        asking: &ConnEntry,
        to: &ReplyTo,
        out: &mut IOBufChain,
    ) {
        let group = args.first().map(Vec::as_slice).unwrap_or(b"");
        let lines: Option<Lines> = match group {
            b"" => Some(self.general_stats()),
            b"settings" => Some(self.settings_stats()),
            b"items" => Some(self.items_stats()),
            b"slabs" => Some(self.slabs_stats()),
            b"conns" => Some(self.conns_stats(asking)),
            // Item size histograms are memcached's `-o track_sizes`, off by default, as
            // here (`track_sizes no` in the settings): its answer when they are off.
            b"sizes" => Some(alloc::vec![(
                String::from("sizes_status"),
                String::from("disabled")
            )]),
            // Per-prefix detail is off (`detail_enabled no`): its dump is empty, and
            // turning it off again is done. Turning it on is not offered (no such
            // counters are kept): that stays an unknown request.
            b"detail" => match args.get(1).map(Vec::as_slice) {
                Some(b"dump") => Some(Vec::new()),
                Some(b"off") => {
                    encode(to, &Response::Ok, out);
                    return;
                }
                _ => None,
            },
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

    fn general_stats(&self) -> Lines {
        let s = self.store.stats();
        let c = &self.connections;
        let now = now_unix();
        let load = |a: &AtomicU64| format!("{}", a.load(Ordering::Relaxed));
        let mut v = Lines::new();
        let mut put = |name: &str, value: String| v.push((name.into(), value));
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

    /// `stats settings`: memcached 1.6.45's `process_stat_settings`, in its order,
    /// without the extstore and TLS blocks (see the module docs).
    fn settings_stats(&self) -> Lines {
        let st = &self.settings;
        let yes_no = |b: bool| String::from(if b { "yes" } else { "no" });
        let inter = self
            .conns
            .listener()
            .map_or_else(|| String::from("NULL"), |a| format!("{}", a.ip()));
        let mut v = Lines::new();
        let mut put = |name: &str, value: String| v.push((name.into(), value));
        put("maxbytes", format!("{}", st.memory_limit));
        put("maxconns", format!("{}", st.max_connections));
        put("tcpport", format!("{}", st.port));
        put("udpport", String::from("0"));
        put("inter", inter);
        put("verbosity", format!("{}", st.verbosity));
        put("oldest", String::from("0"));
        put(
            "evictions",
            String::from(if st.evict { "on" } else { "off" }),
        );
        put("domain_socket", String::from("NULL"));
        put("umask", String::from("700"));
        put("shutdown_command", yes_no(false));
        put("growth_factor", String::from("1.25"));
        put("chunk_size", String::from("8"));
        put("num_threads", format!("{}", st.threads));
        put("num_threads_per_udp", format!("{}", st.threads));
        put("stat_key_prefix", String::from(":"));
        put("detail_enabled", yes_no(false));
        put("reqs_per_event", String::from("20"));
        put("cas_enabled", yes_no(true));
        put("tcp_backlog", String::from("1024"));
        put("binding_protocol", String::from("auto-negotiate"));
        put("auth_enabled_sasl", yes_no(false));
        put("auth_enabled_ascii", yes_no(false));
        put("item_size_max", format!("{}", st.item_size_max));
        // Over -c a connection is refused at once with memcached's error line.
        put("maxconns_fast", yes_no(true));
        put("hashpower_init", String::from("0"));
        put("slab_reassign", yes_no(false));
        put("slab_automove", String::from("0"));
        put("slab_automove_ratio", String::from("0.80"));
        put("slab_automove_window", String::from("30"));
        put("slab_chunk_max", format!("{VALUE_PIECE}"));
        // The per-core idle sweep of expired items.
        put("lru_crawler", yes_no(true));
        put("lru_crawler_sleep", String::from("100"));
        put("lru_crawler_tocrawl", String::from("0"));
        put("tail_repair_time", String::from("0"));
        put("flush_enabled", yes_no(true));
        put("dump_enabled", yes_no(false));
        put("hash_algorithm", String::from("foldhash"));
        put("lru_maintainer_thread", yes_no(true));
        put("lru_segmented", yes_no(false));
        put("hot_lru_pct", String::from("20"));
        put("warm_lru_pct", String::from("40"));
        put("hot_max_factor", String::from("0.20"));
        put("warm_max_factor", String::from("2.00"));
        put("temp_lru", yes_no(false));
        put("temporary_ttl", String::from("61"));
        put("idle_timeout", String::from("0"));
        put("watcher_logbuf_size", String::from("0"));
        put("worker_logbuf_size", String::from("0"));
        put("read_buf_mem_limit", format!("{}", self.input_limit));
        put("track_sizes", yes_no(false));
        put("inline_ascii_response", yes_no(false));
        put("num_napi_ids", String::from("0"));
        put("memory_file", String::from("(null)"));
        put("client_flags_size", format!("{}", size_of::<u32>()));
        v
    }

    /// `stats items`: memcached's `item_stats` per class holding items, with
    /// `lru_maintainer_thread` on (its default).
    fn items_stats(&self) -> Lines {
        let mut v = Lines::new();
        for class in self.store.class_stats(now_unix()) {
            if class.items == 0 {
                continue; // as memcached: only classes holding items
            }
            let id = class.id;
            let mut put =
                |name: &str, value: u64| v.push((format!("items:{id}:{name}"), format!("{value}")));
            let get = |c: ClassCounter| class.get(c);
            put("number", class.items);
            put("number_hot", 0);
            put("number_warm", 0);
            put("number_cold", class.items);
            put("age_hot", 0);
            put("age_warm", 0);
            put("age", u64::from(class.age));
            put("mem_requested", class.bytes);
            put("evicted", get(ClassCounter::Evicted));
            put("evicted_nonzero", get(ClassCounter::EvictedNonzero));
            put("evicted_time", u64::from(class.evicted_time));
            put("outofmemory", get(ClassCounter::OutOfMemory));
            put("tailrepairs", 0);
            put("reclaimed", get(ClassCounter::Reclaimed));
            put("expired_unfetched", get(ClassCounter::ExpiredUnfetched));
            put("evicted_unfetched", get(ClassCounter::EvictedUnfetched));
            put("evicted_active", 0);
            put("crawler_reclaimed", 0);
            put("crawler_items_checked", 0);
            put("lrutail_reflocked", 0);
            put("moves_to_cold", 0);
            put("moves_to_warm", 0);
            put("moves_within_lru", 0);
            put(
                "direct_reclaims",
                get(ClassCounter::Evicted).wrapping_add(get(ClassCounter::Reclaimed)),
            );
            put("hits_to_hot", 0);
            put("hits_to_warm", 0);
            put("hits_to_cold", get(ClassCounter::GetHits));
            put("hits_to_temp", 0);
        }
        v
    }

    /// `stats slabs`: memcached's `do_slabs_stats` per class that holds or has held
    /// items, then `active_slabs` and `total_malloced`.
    fn slabs_stats(&self) -> Lines {
        let classes: Vec<ClassStats> = self.store.class_stats(now_unix());
        let mut v = Lines::new();
        let mut malloced = 0u64;
        for class in &classes {
            let id = class.id;
            let mut put =
                |name: &str, value: u64| v.push((format!("{id}:{name}"), format!("{value}")));
            let per_page = (SLAB_PAGE / class.chunk_size.max(1)).max(1) as u64;
            let pages = class.items.div_ceil(per_page);
            let get = |c: ClassCounter| class.get(c);
            put("chunk_size", class.chunk_size as u64);
            put("chunks_per_page", per_page);
            put("total_pages", pages);
            put("total_chunks", pages * per_page);
            put("used_chunks", class.items);
            put("free_chunks", pages * per_page - class.items);
            put("free_chunks_end", 0);
            put("get_hits", get(ClassCounter::GetHits));
            put("cmd_set", get(ClassCounter::CmdSet));
            put("delete_hits", get(ClassCounter::DeleteHits));
            put("incr_hits", get(ClassCounter::IncrHits));
            put("decr_hits", get(ClassCounter::DecrHits));
            put("cas_hits", get(ClassCounter::CasHits));
            put("cas_badval", get(ClassCounter::CasBadval));
            put("touch_hits", get(ClassCounter::TouchHits));
            malloced += class.bytes;
        }
        v.push(("active_slabs".into(), format!("{}", classes.len())));
        v.push(("total_malloced".into(), format!("{malloced}")));
        v
    }

    /// `stats conns`: memcached's `process_stats_conns` — the listener, then every open
    /// connection, by number.
    fn conns_stats(&self, asking: &ConnEntry) -> Lines {
        let now = now_unix();
        let mut v = Lines::new();
        if let Some(listener) = self.conns.listener() {
            v.push(("0:addr".into(), conn_addr(listener)));
            v.push(("0:state".into(), "conn_listening".into()));
            v.push((
                "0:secs_since_last_cmd".into(),
                format!("{}", now.saturating_sub(self.started)),
            ));
        }
        for conn in self.conns.snapshot() {
            let id = conn.id;
            let state = if conn.id == asking.id {
                "conn_parse_cmd"
            } else if conn.paused.load(Ordering::Relaxed) {
                "conn_mwrite"
            } else {
                "conn_read" // as memcached shows a connection waiting for requests
            };
            let idle = now.saturating_sub(conn.last_cmd.load(Ordering::Relaxed));
            v.push((format!("{id}:addr"), conn_addr(conn.peer)));
            v.push((format!("{id}:listen_addr"), conn_addr(conn.local)));
            v.push((format!("{id}:state"), state.into()));
            v.push((format!("{id}:secs_since_last_cmd"), format!("{idle}")));
        }
        v
    }
}

/// An address as memcached's `conn_to_str` writes it: `tcp:1.2.3.4:11211`,
/// `tcp6:[::1]:11211`.
fn conn_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("tcp:{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("tcp6:[{}]:{}", a.ip(), a.port()),
    }
}
