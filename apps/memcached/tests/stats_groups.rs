//! `stats slabs`, `stats items`, `stats settings`, `stats conns`, `stats sizes` and
//! `stats detail dump` against memcached:
//! the same workload goes to Debian's memcached 1.6.18 and to our server, and each
//! group's output is compared field by field — the same names in the same order (per
//! class and per connection, whose numbers differ), the same value forms (a number, a
//! decimal, `yes`/`no`, `on`/`off`, `tcp:ADDR:PORT`, a string); the values may differ.
//! Then our values are checked against the workload: per-class counts add up to what was
//! done.
//!
//! The documented differences (`src/server/stats.rs`), and nothing else, are allowed:
//!
//! * `stats settings`: 1.6.18's `ext_*` and `slab_automove_freeratio` (extstore) and
//!   `ssl_*` (TLS) lines, build options this server does not offer, are absent here;
//!   `client_flags_size` (1.6.45, the version the server follows) is only here;
//!   `num_napi_ids` is a number here (1.6.45) and `(null)` in 1.6.18.

mod common;

use common::{Client, Ours, ServerProcess};
use std::collections::BTreeMap;
use std::time::Duration;

/// A stats group's lines, in order.
fn lines(client: &mut Client, group: &str) -> Vec<(String, String)> {
    client.send(format!("stats {group}\r\n").as_bytes());
    let mut out = Vec::new();
    loop {
        let line = client.line_str();
        if line == "END" {
            return out;
        }
        let mut parts = line.splitn(3, ' ');
        assert_eq!(parts.next(), Some("STAT"), "stats {group}: {line:?}");
        let name = parts.next().expect("a name").to_string();
        out.push((name, parts.next().unwrap_or("").to_string()));
    }
}

/// What kind of value a stat has.
fn form(value: &str) -> &'static str {
    if value.parse::<i64>().is_ok() {
        "number"
    } else if value.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && (a.to_string() + b).bytes().all(|c| c.is_ascii_digit())
    }) {
        "decimal"
    } else if value == "yes" || value == "no" {
        "yes/no"
    } else if value == "on" || value == "off" {
        "on/off"
    } else if value.starts_with("tcp:") || value.starts_with("tcp6:") {
        "address"
    } else if value.starts_with("conn_") {
        "state"
    } else {
        "string"
    }
}

/// `name form` lines, for comparing.
fn shapes(lines: &[(String, String)]) -> Vec<String> {
    lines
        .iter()
        .map(|(name, value)| format!("{name} {}", form(value)))
        .collect()
}

/// Lines of a per-class or per-connection group split by their number (`N:field` or
/// `items:N:field`): number -> `field form` lines; and the lines without a number.
fn by_number(lines: &[(String, String)]) -> (BTreeMap<u64, Vec<String>>, Vec<String>) {
    let mut numbered: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut rest = Vec::new();
    for (name, value) in lines {
        let name = name.strip_prefix("items:").unwrap_or(name);
        match name.split_once(':') {
            Some((n, field)) if n.parse::<u64>().is_ok() => numbered
                .entry(n.parse().unwrap())
                .or_default()
                .push(format!("{field} {}", form(value))),
            _ => rest.push(format!("{name} {}", form(value))),
        }
    }
    (numbered, rest)
}

/// The sum over classes of one per-class field.
fn class_sum(lines: &[(String, String)], field: &str) -> u64 {
    lines
        .iter()
        .filter(|(name, _)| name.rsplit(':').next() == Some(field) && name.contains(':'))
        .map(|(_, v)| v.parse::<u64>().expect("a number"))
        .sum()
}

/// The workload, the same for both servers: items in four sizes, hits and misses,
/// deletes, incr/decr, cas hit and mismatch, touch. Returns the successful stores.
fn workload(c: &mut Client) -> u64 {
    let mut stored = 0;
    for (i, size) in [10usize, 500, 5000, 100_000].into_iter().enumerate() {
        for k in 0..5 {
            let value = vec![b'a' + i as u8; size];
            assert_eq!(c.set(&format!("k{i}-{k}"), 0, 0, &value), "STORED");
            stored += 1;
        }
    }
    for k in 0..5 {
        assert!(c.get(&format!("k0-{k}")).is_some());
    }
    assert!(c.get("k1-0").is_some());
    assert!(c.get("absent").is_none());
    assert_eq!(c.cmd("delete k2-0"), "DELETED");
    assert_eq!(c.set("n", 0, 100, b"41"), "STORED");
    stored += 1;
    assert_eq!(c.cmd("incr n 1"), "42");
    assert_eq!(c.cmd("decr n 2"), "40");
    c.send(b"gets k0-1\r\n");
    let header = c.line_str();
    let cas: u64 = header.rsplit(' ').next().unwrap().parse().unwrap();
    c.line_str();
    assert_eq!(c.line_str(), "END");
    assert_eq!(
        c.cmd(&format!("cas k0-1 0 0 1 {}\r\nx", cas + 1000)),
        "EXISTS"
    );
    assert_eq!(c.cmd(&format!("cas k0-1 0 0 1 {cas}\r\ny")), "STORED");
    stored += 1;
    assert_eq!(c.cmd("touch k1-1 1000"), "TOUCHED");
    stored
}

#[test]
fn stats_groups_have_memcacheds_names_and_forms() {
    stats_groups(
        "stats_groups_have_memcacheds_names_and_forms",
        Ours::Hosted(1),
    );
}

#[test]
fn stats_groups_have_memcacheds_names_and_forms_natively() {
    stats_groups(
        "stats_groups_have_memcacheds_names_and_forms_natively",
        Ours::Native(1),
    );
}

fn stats_groups(test: &str, which: Ours) {
    if ebb_testkit::need_tools(test, &["memcached"]).is_none() {
        return;
    }
    let reference = ServerProcess::reference(&[]);
    let Some(ours) = which.start(test, &["-t", "1"]) else {
        return;
    };
    let mut groups = Vec::new();
    let mut stores = Vec::new();
    // Each server: the workload, one more idle connection, then every group.
    let mut idle = Vec::new();
    for server in [&reference, &ours] {
        let mut c = server.client();
        stores.push(workload(&mut c));
        let mut other = server.client();
        assert_eq!(other.cmd("version").split(' ').next(), Some("VERSION"));
        idle.push(other);
        let group: BTreeMap<&str, Vec<(String, String)>> = [
            "slabs",
            "items",
            "settings",
            "conns",
            "sizes",
            "detail dump",
        ]
        .into_iter()
        .map(|g| (g, lines(&mut c, g)))
        .collect();
        groups.push(group);
        assert_eq!(c.cmd("stats detail off"), "OK", "stats detail off");
    }
    let (theirs, ours_groups) = (&groups[0], &groups[1]);

    // settings: the same lines in the same order, but for the documented differences.
    let documented_1_6_18_only = |name: &str| {
        name.starts_with("ext_") || name == "slab_automove_freeratio" || name.starts_with("ssl_")
    };
    let their_settings: Vec<(String, String)> = theirs["settings"]
        .iter()
        .filter(|(n, _)| !documented_1_6_18_only(n))
        .map(|(n, v)| match n.as_str() {
            // 1.6.45 prints this count with %d; 1.6.18 printed a null string.
            "num_napi_ids" => (n.clone(), "0".to_string()),
            _ => (n.clone(), v.clone()),
        })
        .collect();
    let mut our_settings = ours_groups["settings"].clone();
    assert_eq!(
        our_settings.pop().map(|(n, v)| (n, form(&v))),
        Some(("client_flags_size".to_string(), "number")),
        "1.6.45's last setting"
    );
    assert_eq!(
        shapes(&our_settings),
        shapes(&their_settings),
        "stats settings"
    );
    assert!(
        theirs["settings"]
            .iter()
            .any(|(n, _)| n.starts_with("ext_"))
            && theirs["settings"]
                .iter()
                .any(|(n, _)| n.starts_with("ssl_")),
        "the reference has the extstore and TLS blocks this test leaves out"
    );

    // slabs and items: per class the same fields in the same order; then the totals.
    for group in ["slabs", "items"] {
        let (their_classes, their_rest) = by_number(&theirs[group]);
        let (our_classes, our_rest) = by_number(&ours_groups[group]);
        assert!(!our_classes.is_empty(), "stats {group}: no class");
        let their_fields = their_classes.values().next().expect("a class");
        for (id, fields) in &our_classes {
            assert_eq!(fields, their_fields, "stats {group}, our class {id}");
        }
        for (id, fields) in &their_classes {
            assert_eq!(fields, their_fields, "stats {group}, their class {id}");
        }
        assert_eq!(
            our_rest, their_rest,
            "stats {group}: the lines after the classes"
        );
    }

    // sizes (off by default in both) and the per-prefix detail (off): the same lines.
    for group in ["sizes", "detail dump"] {
        assert_eq!(ours_groups[group], theirs[group], "stats {group}");
    }

    // conns: the listener, then each connection with the same fields; the asking
    // connection is parsing its command, the listener listening.
    let (their_conns, their_rest) = by_number(&theirs["conns"]);
    let (our_conns, our_rest) = by_number(&ours_groups["conns"]);
    assert!(their_rest.is_empty() && our_rest.is_empty());
    let kinds = |conns: &BTreeMap<u64, Vec<String>>| {
        let mut k: Vec<Vec<String>> = conns.values().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(kinds(&our_conns), kinds(&their_conns), "stats conns");
    let states = |lines: &[(String, String)]| {
        let mut s: Vec<String> = lines
            .iter()
            .filter(|(n, _)| n.ends_with(":state"))
            .map(|(_, v)| v.clone())
            .collect();
        s.sort();
        s
    };
    assert_eq!(
        states(&ours_groups["conns"]),
        states(&theirs["conns"]),
        "connection states"
    );

    // Our values follow the workload (and so do memcached's, where it counts alike).
    let slabs = &ours_groups["slabs"];
    let items = &ours_groups["items"];
    for (field, expected) in [
        ("used_chunks", 20 - 1 + 1),
        ("get_hits", 6 + 1),
        ("delete_hits", 1),
        ("incr_hits", 1),
        ("decr_hits", 1),
        ("cas_hits", 1),
        ("cas_badval", 1),
        ("touch_hits", 1),
    ] {
        assert_eq!(class_sum(slabs, field), expected, "ours: slabs {field}");
        // memcached's used_chunks may still hold a replaced item's chunk for a moment
        // (a reference in flight; seen under load): its items number is exact.
        if field != "used_chunks" {
            let theirs = class_sum(&theirs["slabs"], field);
            assert_eq!(theirs, expected, "memcached: slabs {field}");
        }
    }
    assert_eq!(
        class_sum(slabs, "cmd_set"),
        stores[1],
        "ours: slabs cmd_set"
    );
    assert_eq!(class_sum(items, "number"), 20, "ours: items number");
    assert_eq!(
        class_sum(&theirs["items"], "number"),
        20,
        "memcached: items number"
    );
    assert_eq!(
        class_sum(items, "hits_to_cold"),
        7,
        "ours: items hits_to_cold"
    );
    // Four sizes: as many classes, give or take how values arrived (a value kept in
    // its receive buffers is accounted what they occupy).
    let (our_classes, _) = by_number(items);
    assert!((3..=6).contains(&our_classes.len()), "{items:?}");
    let settings: BTreeMap<&str, &str> = ours_groups["settings"]
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(settings["num_threads"], "1");
    assert_eq!(settings["maxbytes"], "67108864");
    if which.is_native() {
        // The guest's own port and address, behind passt's forward.
        assert_eq!(settings["tcpport"], "11211");
        assert_eq!(settings["inter"], "10.0.2.15");
    } else {
        assert_eq!(settings["tcpport"], ours.port.to_string());
        assert_eq!(settings["inter"], "127.0.0.1");
    }
    assert_eq!(our_conns.len(), 3, "the listener and two connections");
    // A connection that closes leaves the list.
    drop(idle);
    let mut c = ours.client();
    let listed = |c: &mut Client| by_number(&lines(c, "conns")).0.len();
    assert!(
        common::wait_for(Duration::from_secs(10), || listed(&mut c) == 2),
        "the closed connection is still listed: {:?}",
        lines(&mut c, "conns")
    );
}
