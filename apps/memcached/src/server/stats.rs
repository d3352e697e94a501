//! The `stats` command: the general, `settings`, `items` and `slabs` groups, by
//! memcached's names.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use ebb::net::IOBufChain;

use super::{Server, VERSION, now_unix};
use crate::protocol::{ReplyTo, Response, encode};

impl Server {
    /// `stats` with `args`: appends the replies for `to` onto `out`.
    pub(super) fn stats(&self, args: &[Vec<u8>], to: &ReplyTo, out: &mut IOBufChain) {
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
