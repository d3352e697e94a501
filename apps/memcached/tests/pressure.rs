//! Memory pressure: with `-m 8`, write more than twice that in values of random sizes
//! (100 B to 100 KB), each derived from its key and carrying a checksum, then read every
//! key back. Misses are allowed (eviction); a hit must be exactly the value written.
//! `stats` must show evictions, `bytes` within `limit_maxbytes`, items left; the server
//! must still answer afterwards. Hosted on one and two cores, and natively (under KVM,
//! through passt) on one and two vCPUs.

mod common;

use common::{Ours, Rng, ServerProcess, fnv1a};
use std::time::{Duration, Instant};

const LIMIT_MB: usize = 8;
/// How much is written: 2.5 times the limit.
const WRITE_BYTES: usize = LIMIT_MB * (5 << 20) / 2;

/// The value of `key`: its length (100..=100_000) and contents follow from the key; the
/// first 8 bytes are the FNV-1a of the rest.
fn value_of(key: &str) -> Vec<u8> {
    let mut rng = Rng::new(fnv1a(key.as_bytes()));
    let len = rng.range(100, 100_000);
    let rest = rng.bytes(len - 8);
    let mut value = fnv1a(&rest).to_le_bytes().to_vec();
    value.extend_from_slice(&rest);
    value
}

/// Checks a value read back for `key`: the checksum, then the exact bytes.
fn check(key: &str, got: &[u8]) {
    assert!(got.len() >= 8, "{key}: a hit of {} bytes", got.len());
    let sum = u64::from_le_bytes(got[..8].try_into().unwrap());
    assert_eq!(
        sum,
        fnv1a(&got[8..]),
        "{key}: checksum mismatch ({} bytes)",
        got.len()
    );
    let want = value_of(key);
    assert_eq!(got.len(), want.len(), "{key}: length");
    assert!(got == want.as_slice(), "{key}: contents differ");
}

#[test]
fn eviction_keeps_values_intact() {
    pressure("eviction_keeps_values_intact", Ours::Hosted(1));
}

/// The same with two cores serving and two clients writing at once.
#[test]
fn eviction_keeps_values_intact_on_two_cores() {
    pressure("eviction_keeps_values_intact_on_two_cores", Ours::Hosted(2));
}

#[test]
fn eviction_keeps_values_intact_natively() {
    pressure("eviction_keeps_values_intact_natively", Ours::Native(1));
}

#[test]
fn eviction_keeps_values_intact_natively_on_two_vcpus() {
    let test = "eviction_keeps_values_intact_natively_on_two_vcpus";
    pressure(test, Ours::Native(2));
}

/// Writes `WRITE_BYTES / writers` on each of `writers` connections at once; the keys.
fn write_all(server: &ServerProcess, writers: usize) -> (Vec<String>, usize) {
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let mut keys = Vec::new();
                let mut written = 0;
                while written < WRITE_BYTES / writers {
                    let key = format!("pressure:{}", keys.len() * writers + w);
                    let value = value_of(&key);
                    let flags = (keys.len() * writers + w) as u32;
                    assert_eq!(c.set(&key, flags, 0, &value), "STORED", "set {key}");
                    written += value.len();
                    keys.push(key);
                }
                (keys, written)
            })
        })
        .collect();
    let mut keys = Vec::new();
    let mut written = 0;
    for h in handles {
        let (k, n) = h.join().expect("writer");
        keys.extend(k);
        written += n;
    }
    keys.sort_by_key(|k| k["pressure:".len()..].parse::<usize>().unwrap());
    (keys, written)
}

/// Two and a half times `-m 8` written by one client per core, then read back.
fn pressure(test: &'static str, ours: Ours) {
    common::bounded(test, Duration::from_secs(180), move || {
        let start = Instant::now();
        let cores = ours.cores();
        let Some(mut server) = ours.start(test, &["-m", &LIMIT_MB.to_string()]) else {
            return;
        };
        let mut c = server.client();
        let (keys, written) = write_all(&server, cores);
        let (mut hits, mut misses) = (0, 0);
        for key in &keys {
            let number: u32 = key["pressure:".len()..].parse().unwrap();
            match c.get(key) {
                Some((flags, got)) => {
                    assert_eq!(flags, number, "{key}: flags");
                    check(key, &got);
                    hits += 1;
                }
                None => misses += 1,
            }
        }
        let stats = c.stats("");
        let stat = |name: &str| -> u64 {
            stats
                .get(name)
                .unwrap_or_else(|| panic!("no stat {name}"))
                .parse()
                .unwrap()
        };
        println!(
            "{}: wrote {} values ({written} bytes): {hits} hits, {misses} misses; evictions {}, bytes {}, limit {}, curr_items {} ({:?})",
            server.name,
            keys.len(),
            stat("evictions"),
            stat("bytes"),
            stat("limit_maxbytes"),
            stat("curr_items"),
            start.elapsed()
        );
        assert!(
            misses > 0,
            "{written} bytes into {LIMIT_MB} MB and no key missing"
        );
        assert!(hits > 0, "nothing survived");
        assert!(stat("evictions") > 0, "no evictions counted");
        assert_eq!(stat("limit_maxbytes"), (LIMIT_MB << 20) as u64);
        assert!(
            stat("bytes") <= stat("limit_maxbytes"),
            "bytes over the limit"
        );
        assert!(stat("curr_items") > 0, "no items left");
        assert_eq!(stat("curr_items"), hits, "curr_items and the hits differ");
        // Still serving.
        assert_eq!(c.set("after", 5, 0, b"still here"), "STORED");
        assert_eq!(c.get("after"), Some((5, b"still here".to_vec())));
        let mut other = server.client();
        assert_eq!(other.get("after"), Some((5, b"still here".to_vec())));
        server.assert_alive();
    });
}
