//! Value sizes that shift under the memory limit, and the two crashes reported against the
//! native main job when large values follow small ones (the guest's heap exhausted or
//! fragmented: `guest panicked on core 0: memory allocation of 300000 bytes failed`).
//!
//! * `value_sizes_shift_*`: under `-m 32 -I 1m`, 8 connections at once write 3× `-m` of
//!   values in three phases — A: 1 B to 1 KiB, B: 100 KiB up to what `-I` admits, C: 1 B
//!   to 1 KiB again — each connection reading back a sample of the keys it wrote (recent
//!   and old). Every `set` must answer `STORED` or `SERVER_ERROR out of memory storing
//!   object`; a hit must be exactly the latest version stored under that key, a miss is
//!   fine (evicted). Afterwards the server answers, `stats` shows evictions, and (ours)
//!   the `outofmemory` counter equals the refusals the clients saw. One summary line per
//!   server with the hit rate of each phase; ours hosted, ours native on one vCPU, and
//!   memcached 1.6 for comparison. `MC_SHIFT_RESULTS=PATH` appends the summary lines to
//!   PATH (for the benchmark doc).
//! * `growing_values_after_small_ones_*`: one connection sets 1 KiB, 3 KiB, 5 KiB, ...
//!   in 2 KiB steps up to the 1 MiB item limit under distinct keys, waiting for each reply,
//!   then the whole sweep again (memory now full).
//! * `large_values_after_many_small_ones_*`: 200 MB of 10 KB values, then 400 values of
//!   300 KB, on one connection.
//!
//! Both regression tests run against the main job's configuration (128 MiB, `-m 64 -I
//! 1m`) on 2 vCPUs — one more than its default on these 2-CPU hosts, so two cores share
//! the heap as they do on a larger host — natively, and against the hosted server on 2
//! cores with the same flags.
//! Every value follows from its key (and version), so whatever comes back is checked byte
//! for byte.

mod common;

use common::{Client, Rng, ServerProcess, bounded, fnv1a};
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// memcached's reply to a store it has no memory for.
const OUT_OF_MEMORY: &str = "SERVER_ERROR out of memory storing object";

/// The value stored as version `version` of `key`, `len` bytes: it starts with
/// `key#version#len#` where that fits (so a wrong value says what it is) and goes on
/// with bytes that follow from all three.
fn value_of(key: &str, version: u32, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(fnv1a(key.as_bytes()) ^ (u64::from(version) << 40) ^ len as u64);
    let mut value = Vec::with_capacity(len + 8);
    while value.len() < len {
        value.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    value.truncate(len);
    let header = format!("{key}#{version}#{len}#");
    if header.len() <= len {
        value[..header.len()].copy_from_slice(header.as_bytes());
    }
    value
}

/// What a value that is not the expected one looks like, for the failure message.
fn describe(got: &[u8]) -> String {
    let head = &got[..got.len().min(48)];
    format!(
        "{} bytes starting {:?}",
        got.len(),
        head.escape_ascii().to_string()
    )
}

/// `set key 0 0 len` and its reply line, or why none came (the connection reset or
/// closed, or a timeout).
fn try_set(c: &mut Client, key: &str, value: &[u8]) -> Result<String, String> {
    let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    let mut stream: &TcpStream = c.stream();
    stream
        .write_all(&req)
        .map_err(|e| format!("writing the set: {e}"))?;
    c.try_line()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .map_err(|e| format!("reading the set's reply: {e}"))
}

/// `get key`: the value or `None`, or why the reply did not come.
fn try_get(c: &mut Client, key: &str) -> Result<Option<Vec<u8>>, String> {
    let mut stream: &TcpStream = c.stream();
    stream
        .write_all(format!("get {key}\r\n").as_bytes())
        .map_err(|e| format!("writing the get: {e}"))?;
    let line = c
        .try_line()
        .map_err(|e| format!("reading the get's reply: {e}"))?;
    if line == b"END" {
        return Ok(None);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let parts: Vec<&str> = line.split(' ').collect();
    if parts.len() < 4 || parts[0] != "VALUE" || parts[1] != key {
        return Err(format!("unexpected get reply {line:?}"));
    }
    let len: usize = parts[3]
        .parse()
        .map_err(|_| format!("bad length in {line:?}"))?;
    let mut data = c.read_exact_checked(len + 2)?;
    if &data[len..] != b"\r\n" {
        return Err(format!("{key}: value not ended by CRLF"));
    }
    data.truncate(len);
    let end = c.try_line().map_err(|e| format!("reading END: {e}"))?;
    if end != b"END" {
        return Err(format!(
            "{key}: {:?} after the value, not END",
            end.escape_ascii().to_string()
        ));
    }
    Ok(Some(data))
}

/// Whether the server's process has exited (a zombie not yet reaped, or gone): natively,
/// the VM after a guest panic.
fn exited(server: &ServerProcess) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", server.pid())) {
        // `pid (comm) S ...`: the state follows the last parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// A request of the test failed for want of a reply (`e`): fails the test saying whether
/// the server died (natively the VM's output, a guest panic among it, is printed as the
/// server is dropped) or the connection broke while it lives.
fn broken(server: &ServerProcess, context: &str, e: &str) -> ! {
    // A guest panic closes the connection just before the monitor exits.
    let _ = common::wait_for(Duration::from_secs(2), || exited(server));
    if exited(server) {
        let output = server.output();
        let said = output
            .lines()
            .filter(|l| l.contains("panicked") || l.starts_with("ebb:"))
            .collect::<Vec<_>>()
            .join("\n");
        panic!("{context}: {e} — {} exited:\n{said}", server.name);
    }
    panic!(
        "{context}: {e} — the connection broke though {} is up",
        server.name
    );
}

/// The one-line reply `set` gave counted as stored (true) or refused for memory (false);
/// anything else, or no reply, fails the test — with the server's fate and (natively) what
/// the VM printed when the connection broke.
fn expect_stored_or_oom(
    server: &mut ServerProcess,
    what: &str,
    key: &str,
    len: usize,
    reply: Result<String, String>,
) -> bool {
    match reply {
        Ok(line) if line == "STORED" => true,
        Ok(line) if line == OUT_OF_MEMORY => false,
        Ok(line) => panic!("{what}: set {key} ({len} bytes) answered {line:?}"),
        Err(e) => broken(server, &format!("{what}: set {key} ({len} bytes)"), &e),
    }
}

/// The server is still up: a fresh connection stores and reads a value.
fn still_serving(server: &mut ServerProcess, what: &str) {
    server.assert_alive();
    let mut c = server.client();
    let value = value_of("still:here", 1, 100);
    assert_eq!(
        try_set(&mut c, "still:here", &value),
        Ok("STORED".to_string()),
        "{what}: a fresh connection's set"
    );
    assert_eq!(
        try_get(&mut c, "still:here"),
        Ok(Some(value)),
        "{what}: a fresh connection's get"
    );
    server.assert_alive();
}

// ---------------------------------------------------------------------------------------
// Value sizes shifting over time.
// ---------------------------------------------------------------------------------------

/// `-m` for the shifting workload, in MiB: small, so it runs fast (about 30 s natively
/// through passt, 10 s hosted), yet phase B stores some 70 large values.
const SHIFT_LIMIT_MB: usize = 32;
/// `-I`.
const SHIFT_ITEM_MAX: usize = 1 << 20;
/// Connections writing at once (one thread each).
const SHIFT_CONNS: usize = 8;
/// The seed; connection `n` plays `SHIFT_SEED ^ n`.
const SHIFT_SEED: u64 = 0x51f7_5eed;

/// The three phases and the value sizes each writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// 1 B to 1 KiB.
    A,
    /// 100 KiB up to what `-I` admits.
    B,
    /// 1 B to 1 KiB again.
    C,
}

const PHASES: [Phase; 3] = [Phase::A, Phase::B, Phase::C];

impl Phase {
    /// A value size for `key` in this phase.
    fn size(self, rng: &mut Rng, key: &str) -> usize {
        match self {
            Phase::A | Phase::C => rng.range(1, 1024),
            // memcached's check: a 48-byte header, key + NUL, value + CRLF and an 8-byte
            // CAS within -I (flags 0); a few bytes of margin.
            Phase::B => rng.range(100 << 10, SHIFT_ITEM_MAX - key.len() - 64),
        }
    }

    /// Gets issued after each set in this phase (phase B has few, large sets).
    fn reads_per_set(self) -> usize {
        match self {
            Phase::A | Phase::C => 1,
            Phase::B => 8,
        }
    }
}

/// What one connection counted in one phase.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    sets: u64,
    stored: u64,
    oom: u64,
    reads: u64,
    hits: u64,
    /// Hits on a key whose latest set was refused for memory: the version before it
    /// (memcached 1.6 unlinks the old item instead; recorded, not failed).
    stale_after_oom: u64,
    value_bytes: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.sets += o.sets;
        self.stored += o.stored;
        self.oom += o.oom;
        self.reads += o.reads;
        self.hits += o.hits;
        self.stale_after_oom += o.stale_after_oom;
        self.value_bytes += o.value_bytes;
    }
}

/// Where the connections wait for each other between phases. Unlike `std::sync::Barrier`
/// it can be broken: a connection that fails breaks it (on unwinding), so the others stop
/// at the next phase instead of waiting for it forever.
struct PhaseGate {
    /// (connections arrived at the current gate, its generation, broken).
    state: Mutex<(usize, u64, bool)>,
    cond: Condvar,
}

/// What a connection stopped by a broken gate panics with.
const GATE_BROKEN: &str = "another connection failed";

impl PhaseGate {
    fn new() -> PhaseGate {
        PhaseGate {
            state: Mutex::new((0, 0, false)),
            cond: Condvar::new(),
        }
    }

    /// Waits until all `SHIFT_CONNS` connections arrived; panics if the gate is broken.
    fn wait(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let generation = st.1;
        st.0 += 1;
        if st.0 == SHIFT_CONNS {
            st.0 = 0;
            st.1 += 1;
            self.cond.notify_all();
        }
        while st.1 == generation && !st.2 {
            st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        assert!(!st.2, "{GATE_BROKEN}");
    }

    fn break_it(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2 = true;
        self.cond.notify_all();
    }
}

/// Breaks the gate when its connection's thread unwinds.
struct BreakOnPanic(Arc<PhaseGate>);

impl Drop for BreakOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.break_it();
        }
    }
}

/// A key one connection wrote, as far as it knows.
struct KeyState {
    name: String,
    /// The versions tried so far (1, 2, ...), with their lengths.
    versions: Vec<usize>,
    /// The latest version stored (a number into `versions`, from 1), if any.
    stored: Option<u32>,
    /// Whether a set after `stored` was refused for memory.
    refused_since: bool,
}

/// One connection's part: writes its share of each phase, reading back a sample of its
/// keys after each set; waits for the others between phases.
fn shift_connection(
    mut c: Client,
    conn: usize,
    gate: Arc<PhaseGate>,
    label: &'static str,
) -> [Counts; 3] {
    let _break_on_panic = BreakOnPanic(gate.clone());
    let mut rng = Rng::new(SHIFT_SEED ^ conn as u64);
    let mut keys: Vec<KeyState> = Vec::new();
    let mut counts = [Counts::default(); 3];
    let per_phase = (SHIFT_LIMIT_MB << 20) / SHIFT_CONNS;
    for (p, &phase) in PHASES.iter().enumerate() {
        gate.wait();
        let n = &mut counts[p];
        while (n.value_bytes as usize) < per_phase {
            // A new key mostly, now and then a new version of one written before.
            let k = if !keys.is_empty() && rng.chance(1, 8) {
                rng.below(keys.len() as u64) as usize
            } else {
                keys.push(KeyState {
                    name: format!("shift:{conn}:{}", keys.len()),
                    versions: Vec::new(),
                    stored: None,
                    refused_since: false,
                });
                keys.len() - 1
            };
            let state = &mut keys[k];
            let len = phase.size(&mut rng, &state.name);
            state.versions.push(len);
            let version = state.versions.len() as u32;
            let value = value_of(&state.name, version, len);
            n.sets += 1;
            n.value_bytes += len as u64;
            match try_set(&mut c, &state.name, &value) {
                Ok(line) if line == "STORED" => {
                    n.stored += 1;
                    state.stored = Some(version);
                    state.refused_since = false;
                }
                Ok(line) if line == OUT_OF_MEMORY => {
                    n.oom += 1;
                    state.refused_since = true;
                }
                Ok(line) => panic!(
                    "[{label}] phase {phase:?}, connection {conn}: set {} ({len} bytes) \
                     answered {line:?}",
                    state.name
                ),
                Err(e) => panic!(
                    "[{label}] phase {phase:?}, connection {conn}: set {} ({len} bytes): {e}",
                    state.name
                ),
            }
            for _ in 0..phase.reads_per_set() {
                // Half the reads among the 32 latest keys, half among all of them.
                let r = if rng.chance(1, 2) {
                    keys.len() - 1 - rng.below(keys.len().min(32) as u64) as usize
                } else {
                    rng.below(keys.len() as u64) as usize
                };
                let state = &keys[r];
                n.reads += 1;
                let got = try_get(&mut c, &state.name).unwrap_or_else(|e| {
                    panic!(
                        "[{label}] phase {phase:?}, connection {conn}: get {}: {e}",
                        state.name
                    )
                });
                let Some(got) = got else { continue };
                let Some(version) = state.stored else {
                    panic!(
                        "[{label}] phase {phase:?}, connection {conn}: {} was never stored, \
                         yet a get returned {}",
                        state.name,
                        describe(&got)
                    );
                };
                let len = state.versions[version as usize - 1];
                if got != value_of(&state.name, version, len) {
                    panic!(
                        "[{label}] phase {phase:?}, connection {conn}: {} should be version \
                         {version} ({len} bytes), got {}",
                        state.name,
                        describe(&got)
                    );
                }
                n.hits += 1;
                if state.refused_since {
                    n.stale_after_oom += 1;
                }
            }
        }
    }
    counts
}

fn percent(num: u64, den: u64) -> String {
    if den == 0 {
        "-".to_string()
    } else {
        format!("{:.0}%", 100.0 * num as f64 / den as f64)
    }
}

/// Runs the shifting workload against `server`, checks it and prints (and records) the
/// summary line labelled `label`.
fn value_sizes_shift(mut server: ServerProcess, label: &'static str, ours: bool) {
    let start = Instant::now();
    let gate = Arc::new(PhaseGate::new());
    let threads: Vec<_> = (0..SHIFT_CONNS)
        .map(|conn| {
            let c = server.client();
            let gate = gate.clone();
            std::thread::spawn(move || shift_connection(c, conn, gate, label))
        })
        .collect();
    let mut phases = [Counts::default(); 3];
    let mut failure = None;
    for t in threads {
        match t.join() {
            Ok(counts) => {
                for (total, c) in phases.iter_mut().zip(counts.iter()) {
                    total.add(c);
                }
            }
            // A failure to report: not one stopped by the broken gate, unless all were.
            Err(e) => {
                let stopped = e
                    .downcast_ref::<String>()
                    .is_some_and(|m| m.contains(GATE_BROKEN));
                if failure
                    .as_ref()
                    .is_none_or(|&(_, was_stopped)| was_stopped && !stopped)
                {
                    failure = Some((e, stopped));
                }
            }
        }
    }
    if let Some((e, _)) = failure {
        // The connection's own message, and whether the server died under it.
        let _ = common::wait_for(Duration::from_secs(2), || exited(&server));
        if exited(&server) {
            let message = e.downcast_ref::<String>().cloned().unwrap_or_default();
            broken(&server, &message, "no reply");
        }
        std::panic::resume_unwind(e);
    }
    let elapsed = start.elapsed();
    still_serving(&mut server, label);
    let mut c = server.client();
    let stats = c.stats("");
    let stat = |name: &str| -> Option<u64> { stats.get(name).and_then(|v| v.parse().ok()) };
    let evictions = stat("evictions").expect("stats: evictions");
    // Ours counts `outofmemory` among the general stats too; memcached only per slab
    // class (`stats items`).
    let outofmemory: u64 = match stat("outofmemory") {
        Some(n) => n,
        None => c
            .stats("items")
            .iter()
            .filter(|(k, _)| k.ends_with(":outofmemory"))
            .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
            .sum(),
    };
    let items = stat("curr_items").expect("stats: curr_items");
    let bytes = stat("bytes").expect("stats: bytes");
    // Natively ours also reports its heap.
    let heap = match (stat("heap_bytes"), stat("heap_free_bytes")) {
        (Some(all), Some(free)) => format!(", heap {} of {} MiB free", free >> 20, all >> 20),
        _ => String::new(),
    };
    let mut total = Counts::default();
    for p in &phases {
        total.add(p);
    }
    let [a, b, cc] = &phases;
    let line = format!(
        "shifting sizes [{label}] (-m {SHIFT_LIMIT_MB} -I 1m, {SHIFT_CONNS} connections, \
         {} MiB of values): sets {} (A {} B {} C {}) stored {} oom {} (A {} B {} C {}), \
         reads {} hits {} (A {} B {} C {}; stale after oom {}), evictions {evictions}, \
         stats outofmemory {outofmemory}, {items} items of {} KiB left{heap}, {:.1} s",
        total.value_bytes >> 20,
        total.sets,
        a.sets,
        b.sets,
        cc.sets,
        total.stored,
        total.oom,
        a.oom,
        b.oom,
        cc.oom,
        total.reads,
        total.hits,
        percent(a.hits, a.reads),
        percent(b.hits, b.reads),
        percent(cc.hits, cc.reads),
        total.stale_after_oom,
        bytes >> 10,
        elapsed.as_secs_f64()
    );
    println!("{line}");
    if let Ok(path) = std::env::var("MC_SHIFT_RESULTS") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("MC_SHIFT_RESULTS={path}: {e}"));
        writeln!(file, "{line}").expect("append to MC_SHIFT_RESULTS");
    }
    assert_eq!(total.stored + total.oom, total.sets);
    assert!(
        total.value_bytes >= 3 * (SHIFT_LIMIT_MB << 20) as u64,
        "wrote less than 3x -m"
    );
    assert!(evictions > 0, "[{label}] no evictions counted");
    assert!(total.hits > 0, "[{label}] no read ever hit");
    if ours {
        assert_eq!(
            outofmemory, total.oom,
            "[{label}] stats outofmemory and the refusals the clients saw differ"
        );
    }
    server.assert_alive();
}

/// The flags of the shifting workload's server.
fn shift_args() -> [String; 4] {
    [
        "-m".into(),
        SHIFT_LIMIT_MB.to_string(),
        "-I".into(),
        "1m".into(),
    ]
}

/// [`shift_args`] as the servers take them.
fn shift_args_str(args: &[String; 4]) -> [&str; 4] {
    [&args[0], &args[1], &args[2], &args[3]]
}

#[test]
fn value_sizes_shift_hosted() {
    bounded("value_sizes_shift_hosted", Duration::from_secs(300), || {
        value_sizes_shift(
            ServerProcess::ours_on(1, &shift_args_str(&shift_args())),
            "ours hosted",
            true,
        );
    });
}

#[test]
fn value_sizes_shift_natively() {
    let test = "value_sizes_shift_natively";
    bounded(test, Duration::from_secs(600), move || {
        // The default guest memory (128 MiB for one vCPU) holds this -m.
        let args = shift_args();
        let Some(server) = ServerProcess::native(test, 1, None, &shift_args_str(&args)) else {
            return;
        };
        value_sizes_shift(server, "ours native, 1 vCPU", true);
    });
}

#[test]
fn value_sizes_shift_memcached() {
    let test = "value_sizes_shift_memcached";
    if ebb_testkit::need_tools(test, &["memcached"]).is_none() {
        return;
    }
    bounded(test, Duration::from_secs(300), || {
        value_sizes_shift(
            ServerProcess::reference(&shift_args_str(&shift_args())),
            "memcached 1.6",
            false,
        );
    });
}

// ---------------------------------------------------------------------------------------
// The reported crashes: large values after small ones, the main job's configuration.
// ---------------------------------------------------------------------------------------

/// The largest value under the default `-I 1m` for `key` (flags 0), as memcached counts.
fn item_limit_value(key: &str) -> usize {
    (1 << 20) - 48 - key.len() - 1 - 2 - 8
}

/// Reads `keys` (key, length) back: a hit must be the value stored; (hits, misses).
fn read_back(
    server: &mut ServerProcess,
    c: &mut Client,
    what: &str,
    keys: &[(String, usize)],
) -> (usize, usize) {
    let (mut hits, mut misses) = (0, 0);
    for (key, len) in keys {
        match try_get(c, key) {
            Ok(Some(got)) => {
                assert!(
                    got == value_of(key, 1, *len),
                    "{what}: {key} should be {len} bytes, got {}",
                    describe(&got)
                );
                hits += 1;
            }
            Ok(None) => misses += 1,
            Err(e) => broken(server, &format!("{what}: get {key}"), &e),
        }
    }
    (hits, misses)
}

/// (a) `set` 1 KiB, 3 KiB, 5 KiB, ... up to the item limit under distinct keys on one
/// connection, each reply awaited; then the whole sweep again (new keys, memory full).
fn growing_values_after_small_ones(mut server: ServerProcess, what: &str) {
    let start = Instant::now();
    let mut c = server.client();
    for sweep in 0..2 {
        let (mut stored, mut oom) = (0, 0);
        let mut written = Vec::new();
        let mut len = 1024;
        loop {
            let key = format!("grow:{sweep}:{len}");
            if len > item_limit_value(&key) {
                break;
            }
            let value = value_of(&key, 1, len);
            let reply = try_set(&mut c, &key, &value);
            if expect_stored_or_oom(&mut server, what, &key, len, reply) {
                stored += 1;
                written.push((key, len));
            } else {
                oom += 1;
            }
            len += 2048;
        }
        // The latest dozen and every 32nd stored value.
        let sample: Vec<_> = written
            .iter()
            .enumerate()
            .filter(|&(i, _)| i % 32 == 0 || i + 12 >= written.len())
            .map(|(_, k)| k.clone())
            .collect();
        let (hits, misses) = read_back(&mut server, &mut c, what, &sample);
        println!(
            "{what}: sweep {}: {} sets, {stored} stored, {oom} out of memory; read back {} \
             of them: {hits} hits, {misses} misses ({:.1} s)",
            sweep + 1,
            stored + oom,
            sample.len(),
            start.elapsed().as_secs_f64()
        );
        assert_eq!(stored + oom, 512, "{what}: the sweep's length");
    }
    still_serving(&mut server, what);
    println!("{what}: done in {:.1} s", start.elapsed().as_secs_f64());
}

/// Values of the first phase of (b): 20,000 of 10 KB (200 MB, about 3x `-m 64`).
const SMALL_COUNT: usize = 20_000;
const SMALL_LEN: usize = 10_000;
/// Then 400 of 300 KB.
const LARGE_COUNT: usize = 400;
const LARGE_LEN: usize = 300_000;

/// (b) 200 MB of 10 KB values under distinct keys, then 400 values of 300 KB, on one
/// connection; every set stored or refused for memory; a sample read back intact.
fn large_values_after_many_small_ones(mut server: ServerProcess, what: &str) {
    let start = Instant::now();
    let mut c = server.client();
    let mut sample = Vec::new();
    for (phase, count, len) in [
        ("small", SMALL_COUNT, SMALL_LEN),
        ("large", LARGE_COUNT, LARGE_LEN),
    ] {
        let phase_start = Instant::now();
        let (mut stored, mut oom) = (0, 0);
        let mut written = Vec::new();
        for i in 0..count {
            let key = format!("{phase}:{i}");
            let value = value_of(&key, 1, len);
            let reply = try_set(&mut c, &key, &value);
            if expect_stored_or_oom(&mut server, what, &key, len, reply) {
                stored += 1;
                written.push((key, len));
            } else {
                oom += 1;
            }
        }
        println!(
            "{what}: {count} {phase} sets of {len} bytes: {stored} stored, {oom} out of \
             memory ({:.1} s)",
            phase_start.elapsed().as_secs_f64()
        );
        // The latest 20 and 40 more spread over the phase.
        let step = (written.len() / 40).max(1);
        sample.extend(
            written
                .iter()
                .enumerate()
                .filter(|&(i, _)| i % step == 0 || i + 20 >= written.len())
                .map(|(_, k)| k.clone()),
        );
    }
    let (hits, misses) = read_back(&mut server, &mut c, what, &sample);
    println!(
        "{what}: read back {} values: {hits} hits, {misses} misses",
        sample.len()
    );
    still_serving(&mut server, what);
    println!("{what}: done in {:.1} s", start.elapsed().as_secs_f64());
}

/// The main job's configuration natively on 2 vCPUs (see the module docs), 128 MiB, the
/// server's defaults (`-m 64 -I 1m`).
fn main_job(test: &str) -> Option<ServerProcess> {
    ServerProcess::native(test, 2, None, &[])
}

#[test]
fn growing_values_after_small_ones_natively() {
    let test = "growing_values_after_small_ones_natively";
    bounded(test, Duration::from_secs(600), move || {
        let Some(server) = main_job(test) else { return };
        growing_values_after_small_ones(server, "growing values [ours native, main job]");
    });
}

#[test]
fn large_values_after_many_small_ones_natively() {
    let test = "large_values_after_many_small_ones_natively";
    bounded(test, Duration::from_secs(600), move || {
        let Some(server) = main_job(test) else { return };
        large_values_after_many_small_ones(server, "large after small [ours native, main job]");
    });
}

#[test]
fn growing_values_after_small_ones_hosted() {
    bounded(
        "growing_values_after_small_ones_hosted",
        Duration::from_secs(300),
        || {
            growing_values_after_small_ones(
                ServerProcess::ours_on(2, &[]),
                "growing values [ours hosted, 2 cores, -m 64]",
            )
        },
    );
}

#[test]
fn large_values_after_many_small_ones_hosted() {
    bounded(
        "large_values_after_many_small_ones_hosted",
        Duration::from_secs(300),
        || {
            large_values_after_many_small_ones(
                ServerProcess::ours_on(2, &[]),
                "large after small [ours hosted, 2 cores, -m 64]",
            )
        },
    );
}
