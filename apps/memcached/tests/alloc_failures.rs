//! Allocation failure under load, hosted and native: the server runs with
//! `--fail-value-memory PPM`, so that a share of its requests for value and input memory
//! fail as if the heap were exhausted, and four clients write and read checksummed values
//! of shifting sizes (small, then up to 300 KB, then small again) past `-m`. Every `set`
//! must be answered `STORED` or `SERVER_ERROR out of memory storing object`, every value
//! read back must be the last one stored under its key, the server answers after every
//! failure, and `stats outofmemory` counts exactly the refusals the clients saw.

mod common;

use common::{Client, Rng, ServerProcess, fnv1a};
use std::io::Write;
use std::time::Duration;

/// The value of `key` at `version`: `len` letters drawn from a generator seeded by both,
/// so a read can be checked byte for byte.
fn value_for(key: &str, version: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(fnv1a(key.as_bytes()) ^ version.wrapping_mul(0x9e37_79b9));
    (0..len)
        .map(|_| b'a' + (rng.next_u64() % 26) as u8)
        .collect()
}

/// What one client saw.
#[derive(Default, Debug)]
struct Seen {
    stored: u64,
    refused: u64,
    hits: u64,
    reads: u64,
}

/// One client: `sets` storage commands over its own keys, sizes by phase, each
/// followed now and then by a read of an earlier key.
fn client(port: u16, id: usize, sets: u64, large: usize) -> Seen {
    let mut c = Client::connect(port);
    let mut rng = Rng::new(0x21_0000 + id as u64);
    let mut latest: Vec<Option<(u64, usize)>> = vec![None; 64];
    let mut seen = Seen::default();
    for step in 0..sets {
        let phase = step * 3 / sets;
        let len = if phase == 1 {
            rng.range(large / 3, large)
        } else {
            rng.range(1, 1024)
        };
        let slot = rng.below(64) as usize;
        let key = format!("c{id}k{slot}");
        let reply = c.set(&key, 0, 0, &value_for(&key, step, len));
        match reply.as_str() {
            "STORED" => {
                seen.stored += 1;
                latest[slot] = Some((step, len));
            }
            "SERVER_ERROR out of memory storing object" => {
                seen.refused += 1;
                latest[slot] = None; // a failed set removes the old value
            }
            other => panic!("client {id} step {step}: set {key} ({len} B): {other:?}"),
        }
        if step % 3 == 0 {
            let probe = rng.below(64) as usize;
            let key = format!("c{id}k{probe}");
            seen.reads += 1;
            if let Some((_, data)) = c.get(&key) {
                seen.hits += 1;
                let (version, len) = latest[probe]
                    .unwrap_or_else(|| panic!("{key}: a hit on a value that was removed"));
                assert_eq!(data.len(), len, "{key} v{version}: length");
                assert!(
                    data == value_for(&key, version, len),
                    "{key} v{version}: value corrupted"
                );
            }
        }
    }
    seen
}

/// Runs the clients against `server` and checks what it counted; `injected`: failures
/// are injected, so some sets must have been refused.
fn soak(mut server: ServerProcess, sets: u64, large: usize, what: &'static str, injected: bool) {
    let port = server.port;
    let name = server.name;
    let seen: Vec<Seen> = common::bounded(what, Duration::from_secs(300), move || {
        let clients: Vec<_> = (0..4)
            .map(|id| std::thread::spawn(move || client(port, id, sets, large)))
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    server.assert_alive();
    let mut c = server.client();
    // Injection is still on: this set, too, may be refused (2% of the time), and a
    // refusal is counted like the clients' ones. Fifty refusals in a row would not be luck.
    let mut refused_after = 0;
    loop {
        match c.set("after", 0, 0, b"still here").as_str() {
            "STORED" => break,
            "SERVER_ERROR out of memory storing object" if refused_after < 50 => refused_after += 1,
            other => panic!("set after the soak ({refused_after} refusals): {other:?}"),
        }
    }
    assert_eq!(c.get("after"), Some((0, b"still here".to_vec())));
    let stats = c.stats("");
    let stat = |n: &str| -> u64 { stats[n].parse().unwrap() };
    let refused: u64 = seen.iter().map(|s| s.refused).sum::<u64>() + refused_after;
    let stored: u64 = seen.iter().map(|s| s.stored).sum();
    let (hits, reads): (u64, u64) = seen
        .iter()
        .fold((0, 0), |a, s| (a.0 + s.hits, a.1 + s.reads));
    println!(
        "{what} [{name}]: sets {} stored {stored} refused {refused}, reads {reads} hits {hits}, \
         evictions {}, outofmemory {}",
        stored + refused,
        stat("evictions"),
        stat("outofmemory")
    );
    assert!(
        !injected || refused > refused_after,
        "no injected failure reached a client"
    );
    assert_eq!(stat("outofmemory"), refused, "stats outofmemory");
    assert!(stat("evictions") > 0, "-m was never full");
    assert!(hits > 0);
}

/// 2% of value and input memory requests fail.
const FAIL_PPM: &str = "20000";

#[test]
fn injected_allocation_failures_cost_requests_not_the_server() {
    let server = ServerProcess::ours_on(2, &["-m", "8", "--fail-value-memory", FAIL_PPM]);
    soak(server, 600, 300_000, "allocation failures hosted", true);
}

#[test]
fn injected_allocation_failures_cost_requests_not_the_server_natively() {
    let Some(server) = ServerProcess::native(
        "injected_allocation_failures_cost_requests_not_the_server_natively",
        2,
        None,
        &["-m", "8", "--fail-value-memory", FAIL_PPM],
    ) else {
        return;
    };
    soak(server, 300, 300_000, "allocation failures natively", true);
}

/// Hosted, every allocation over 64 KiB fails from the start of serving
/// (`--fail-allocations-over`): values up to 1 MB, a value trickled in 200-byte writes
/// (its input compacted, into a buffer of twice its size), `incr` on a 1 MB number, a
/// get of 200 keys of a 1 MB value and a get line of 15,000 keys must all be served or
/// refused with an answer. An infallible allocation that large anywhere on their
/// way would abort the server. (64 KiB: the hosted socket layer's largest read buffer,
/// an allocation the runtime makes before any request is known.)
#[test]
fn a_request_s_large_allocations_are_all_fallible() {
    let mut server = ServerProcess::ours_on(2, &["-m", "8", "--fail-allocations-over", "65536"]);
    let port = server.port;
    let trickled = common::bounded("trickled value", Duration::from_secs(120), move || {
        let mut c = Client::connect(port);
        let value = value_for("trickled", 1, 100_000);
        c.send(format!("set trickled 0 0 {}\r\n", value.len()).as_bytes());
        for part in value.chunks(200) {
            c.stream().write_all(part).expect("write");
            std::thread::sleep(Duration::from_micros(200));
        }
        c.send(b"\r\n");
        let reply = c.line_str();
        assert!(
            reply == "STORED" || reply == "SERVER_ERROR out of memory reading request",
            "trickled set: {reply:?}"
        );
        reply
    });
    println!("trickled 100 KB set: {trickled}");
    server.assert_alive();
    common::bounded("large replies", Duration::from_secs(120), move || {
        let mut c = Client::connect(port);
        // incr on a 1 MB number (a digit and spaces, as memcached allows): the result is
        // padded to the old length without a 1 MB allocation.
        let mut number = b"1".to_vec();
        number.resize(1_000_000, b' ');
        assert_eq!(c.set("number", 0, 0, &number), "STORED");
        assert_eq!(c.cmd("incr number 1"), "2");
        let (_, got) = c.get("number").expect("the number");
        assert_eq!((got.len(), got[0], got[1]), (1_000_000, b'2', b' '));
        // One get of 200 keys of a 1 MB value: 200 MB of reply, built a piece at a time.
        let value = value_for("big", 1, 1_000_000);
        assert_eq!(c.set("big", 0, 0, &value), "STORED");
        let line = format!("get{}\r\n", " big".repeat(200));
        c.send(line.as_bytes());
        let values = c.read_values();
        assert_eq!(values.len(), 200);
        assert!(values.iter().all(|(_, _, v)| *v == value));
        // A 30 KB get line of one-byte keys: its key list is larger than the cap.
        let line = format!("get{}\r\n", " x".repeat(15_000));
        c.send(line.as_bytes());
        let reply = c.line_str();
        assert!(
            reply == "END" || reply == "SERVER_ERROR out of memory writing get response",
            "long get line: {reply:?}"
        );
        assert_eq!(c.cmd("version").split(' ').next(), Some("VERSION"));
    });
    server.assert_alive();
    soak(
        server,
        300,
        1_000_000,
        "allocations over 64 KiB fail, hosted",
        false,
    );
}
