//! `memcached`: a memcached-compatible cache server on Ebbflow, one source for both
//! runtimes (see the library for the protocol, the store and the connection handler).
//!
//! memcached's flags where they make sense: `-p PORT` (11211), `-l ADDR` (hosted, Linux
//! sockets: the address to listen on, default 127.0.0.1), `-U 0` (UDP is not offered:
//! only 0 is accepted), `-m MB` (64), `-c CONNS` (1024), `-I SIZE` (1m; k/m suffixes),
//! `-M` (no eviction: errors when full), `-t N` (the cores serving: hosted the runtime
//! starts with N cores — an `EBB_CPUS` that says otherwise is refused; natively the
//! vCPUs are the cores, which `ebb run memcached -- -t N` sets when `--cpus` is not
//! given, and a `-t` that differs from them is refused), `-v`/`-vv`.
//! Plus `ebb::net`'s network options (`--tap NAME --ip A/P` hosted; `--ip` natively), and
//! `--fail-value-memory PPM` for soak tests: that many requests per million for value
//! memory fail as if the heap were exhausted (the server must answer them all the same),
//! and hosted `--fail-allocations-over BYTES`: every allocation larger than that fails
//! from then on (a request's large allocations must all be fallible).
//!
//! Prints `memcached: listening on ADDR (BACKEND, N cores; -m ...)` when ready.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use core::time::Duration;

use ebb::net::{self, IOBuf, NetConfig, TcpConnection};
use memcached::server::{Server, Settings, TOO_MANY_CONNECTIONS};

#[cfg(all(not(target_os = "none"), feature = "ebb-allocator"))]
#[global_allocator]
static GLOBAL: memcached::alloc_cap::Capped<ebb::mem::HostedAllocator> =
    memcached::alloc_cap::Capped::new(ebb::mem::HostedAllocator::new(ebb::mem::MmapSource::new()));

const USAGE: &str = "usage: memcached [-p PORT] [-l ADDR] [-U 0] [-m MB] [-c CONNS] [-I SIZE] [-M] [-t N] [-v] [--fail-value-memory PPM] [--fail-allocations-over BYTES] [network options]";

/// What each flag does (`--help`).
const FLAGS_HELP: &str = "memcached's flags:
  -p PORT             TCP port (default 11211)
  -l ADDR             hosted, Linux sockets: the address to listen on (default 127.0.0.1)
  -U 0                UDP is not offered: only 0 is accepted
  -m MB               item memory (default 64)
  -c CONNS            most open connections (default 1024)
  -I SIZE             largest item, bytes or with k/m (default 1m)
  -M                  refuse stores when full instead of evicting
  -t N                cores serving (default: every CPU hosted, the vCPUs natively);
                      hosted the runtime starts N cores (EBB_CPUS, if set, must agree);
                      natively `ebb run memcached -- -t N` boots N vCPUs unless --cpus
                      says otherwise
  -v                  more output (-vv: more still)
  --fail-value-memory PPM, --fail-allocations-over BYTES   fault injection for tests";

/// Items the expiry sweep removes per round (one round every [`SWEEP_EVERY`]).
const SWEEP_BUDGET: usize = 256;
/// How often a core sweeps expired items.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// `-I`: bytes, or with a k/m suffix (memcached's units: 1k = 1024).
fn parse_size(s: &str) -> Option<usize> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        _ => (s, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// memcached's short options that take a value (the rest of the word, or the next word).
const SHORT_WITH_VALUE: &str = "plUmcIt";

/// The core count `-t N` (`--threads N`) asks for, read before the runtime starts
/// (`ebb::main!(app_main, cores = requested_cores)`): the last `-t` on the command line,
/// in any form getargs accepts (`-t 2`, `-t2`, `-Mt 2`, `--threads 2`, `--threads=2`).
/// `None` when there is none or it is not a count: [`parse_options`] reports that.
fn requested_cores(args: &[String]) -> Option<usize> {
    let mut found = None;
    let mut words = args.iter().map(String::as_str);
    while let Some(word) = words.next() {
        let value = if word == "--" {
            break;
        } else if word == "--threads" {
            words.next()
        } else if let Some(value) = word.strip_prefix("--threads=") {
            Some(value)
        } else if let Some(long) = word.strip_prefix("--") {
            // A long option's value is its own word unless given with '='.
            if !long.contains('=') && LONG_WITH_VALUE.contains(&long) {
                words.next();
            }
            None
        } else if let Some(shorts) = word.strip_prefix('-') {
            // A cluster of short flags: the first that takes a value takes the rest.
            match shorts.find(|c| SHORT_WITH_VALUE.contains(c)) {
                Some(at) => {
                    let rest = &shorts[at + 1..];
                    let value = if rest.is_empty() {
                        words.next()
                    } else {
                        Some(rest)
                    };
                    value.filter(|_| shorts[at..].starts_with('t'))
                }
                None => None,
            }
        } else {
            None
        };
        if let Some(value) = value {
            found = value.parse::<usize>().ok().filter(|&n| n > 0);
        }
    }
    found
}

/// The long options that take a value as the next word (memcached's and the fault
/// injection's; ebb::net's own options never look like `-t`).
const LONG_WITH_VALUE: &[&str] = &[
    "port",
    "listen",
    "udp-port",
    "memory-limit",
    "conn-limit",
    "max-item-size",
    "fail-allocations-over",
    "fail-value-memory",
];

fn parse_options() -> Result<(Settings, NetConfig), String> {
    #[allow(unused_mut)] // -l changes it hosted only
    let (mut net, rest) = NetConfig::from_args(&ebb::args()).map_err(|e| e.to_string())?;
    let mut settings = Settings {
        threads: ebb::num_cores(),
        ..Settings::default()
    };
    let mut threads = None;
    let mut opts = getargs::Options::new(rest.iter().map(String::as_str));
    while let Some(opt) = opts.next_opt().map_err(|e| e.to_string())? {
        let mut value = |what: &str| {
            opts.value()
                .map_err(|_| format!("{what} needs a value\n{USAGE}"))
        };
        let bad = |what: &str, v: &str| format!("bad {what} {v:?}\n{USAGE}");
        match opt {
            getargs::Opt::Short('p') | getargs::Opt::Long("port") => {
                let v = value("-p")?;
                settings.port = v.parse().map_err(|_| bad("-p", v))?;
            }
            getargs::Opt::Short('l') | getargs::Opt::Long("listen") => {
                let v = value("-l")?;
                let addr: core::net::IpAddr = v.parse().map_err(|_| bad("-l", v))?;
                #[cfg(not(target_os = "none"))]
                if let net::Backend::LinuxSockets { addr: listen } = &mut net.backend {
                    *listen = addr;
                }
                #[cfg(target_os = "none")]
                let _ = addr; // natively ebb-net listens on its own address (--ip)
            }
            getargs::Opt::Short('U') | getargs::Opt::Long("udp-port") => {
                let v = value("-U")?;
                if v != "0" {
                    return Err(format!("-U {v}: UDP is not offered (only -U 0)"));
                }
            }
            getargs::Opt::Short('m') | getargs::Opt::Long("memory-limit") => {
                let v = value("-m")?;
                let mb: usize = v.parse().map_err(|_| bad("-m", v))?;
                settings.memory_limit = mb.checked_mul(1 << 20).ok_or_else(|| bad("-m", v))?;
            }
            getargs::Opt::Short('c') | getargs::Opt::Long("conn-limit") => {
                let v = value("-c")?;
                settings.max_connections = v.parse().map_err(|_| bad("-c", v))?;
            }
            getargs::Opt::Short('I') | getargs::Opt::Long("max-item-size") => {
                let v = value("-I")?;
                let size = parse_size(v).ok_or_else(|| bad("-I", v))?;
                // memcached's bounds: at least 1k, at most 1 GiB (and half of -m, checked
                // below once -m is known).
                if !(1024..=(1 << 30)).contains(&size) {
                    return Err(format!("-I {v}: the item size must be from 1k to 1024m"));
                }
                settings.item_size_max = size;
            }
            getargs::Opt::Short('M') | getargs::Opt::Long("disable-evictions") => {
                settings.evict = false
            }
            getargs::Opt::Short('t') | getargs::Opt::Long("threads") => {
                let v = value("-t")?;
                let n = v.parse::<usize>().ok().filter(|&n| n > 0);
                threads = Some(n.ok_or_else(|| bad("-t", v))?);
            }
            getargs::Opt::Long("fail-allocations-over") => {
                let v = value("--fail-allocations-over")?;
                let bytes: usize = v.parse().map_err(|_| bad("--fail-allocations-over", v))?;
                #[cfg(all(not(target_os = "none"), feature = "ebb-allocator"))]
                GLOBAL.set_cap(bytes);
                #[cfg(not(all(not(target_os = "none"), feature = "ebb-allocator")))]
                return Err(format!(
                    "--fail-allocations-over {bytes}: only hosted, with ebb-mem's allocator"
                ));
            }
            getargs::Opt::Long("fail-value-memory") => {
                let v = value("--fail-value-memory")?;
                settings.fail_value_memory =
                    v.parse().map_err(|_| bad("--fail-value-memory", v))?;
            }
            getargs::Opt::Short('v') => settings.verbosity += 1,
            getargs::Opt::Long("help") | getargs::Opt::Short('h') => {
                return Err(format!("{USAGE}\n{FLAGS_HELP}\n{}", net::OPTIONS_HELP));
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if let Some(extra) = opts.next_positional() {
        return Err(format!("unexpected argument {extra:?}\n{USAGE}"));
    }
    // Hosted the runtime started with -t's cores (requested_cores); natively the vCPUs
    // are fixed, and ebb run boots -t's count unless --cpus said otherwise.
    if let Some(t) = threads
        && t != ebb::num_cores()
    {
        return Err(format!(
            "-t {t}: this node has {} cores ({})",
            ebb::num_cores(),
            if cfg!(target_os = "none") {
                "its vCPUs: boot it with ebb run --cpus N, or leave --cpus out and ebb run boots -t's count"
            } else {
                "the runtime started before -t was read: give -t as -t N, -tN or --threads N"
            }
        ));
    }
    if settings.item_size_max > settings.memory_limit / 2 {
        return Err(format!(
            "-I {}: the item size may be at most half of -m ({} MB)",
            settings.item_size_max,
            settings.memory_limit >> 20
        ));
    }
    if let Some(total) = ebb::memory_total() {
        let needed = memcached::server::memory_needed(&settings, ebb::num_cores());
        if needed > total {
            return Err(format!(
                "-m {} MB does not fit in this node's {} MiB: items, a quarter as much again \
                 for requests on their way and {} MiB for the network need {} MiB; give the VM \
                 more memory (ebb run --mem {}M) or lower -m",
                settings.memory_limit >> 20,
                total >> 20,
                (memcached::server::NETWORK_RESERVE_PER_CORE * ebb::num_cores()) >> 20,
                needed >> 20,
                // What is needed, plus room for the image and the runtime, in 64 MiB.
                (needed + (32 << 20)).div_ceil(64 << 20) * 64,
            ));
        }
    }
    Ok((settings, net))
}

/// On every core: every [`SWEEP_EVERY`], remove up to [`SWEEP_BUDGET`] expired items.
///
/// A task asleep on the core's timer heap, not an idle handler: idle handlers run at
/// every iteration of the event loop — once per request on a core serving one connection
/// — and this one read the clock each time to find that 100 ms had not passed yet. (A
/// request finds its item expired by itself; the sweep only returns the memory early.)
async fn start_sweeping(server: &Arc<Server>) {
    for core in 0..ebb::num_cores() {
        let server = server.clone();
        let _ = ebb::run_on(ebb::CoreId(core as u32), move || {
            let _detached = ebb::spawn_local(async move {
                loop {
                    ebb::sleep(SWEEP_EVERY).await;
                    server.sweep(SWEEP_BUDGET);
                }
            });
        })
        .await;
    }
}

async fn app_main() -> i32 {
    let (settings, net) = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            ebb::eprintln!("memcached: {e}");
            return 2;
        }
    };
    let port = settings.port;
    let verbose = settings.verbosity > 0;
    let Some(server) = Server::new(settings) else {
        ebb::eprintln!("memcached: not on an Ebbflow core");
        return 1;
    };
    let server = Arc::new(server);
    let network = match net::start(net).await {
        Ok(network) => network,
        Err(e) => {
            ebb::eprintln!("memcached: cannot start the network: {e}");
            return 1;
        }
    };
    start_sweeping(&server).await;
    let accepting = server.clone();
    let listener = network
        .listen(port, move |conn| {
            match accepting.accept(conn.peer_addr(), conn.local_addr()) {
                Some(handler) => {
                    if verbose {
                        ebb::eprintln!(
                            "<{} new connection on core {}",
                            conn.peer_addr(),
                            ebb::core_id().0
                        );
                    }
                    conn.set_handler(handler)
                }
                None => {
                    let _ = conn.send(IOBuf::from_static(TOO_MANY_CONNECTIONS).into());
                    conn.close();
                }
            }
        })
        .await;
    let listener = match listener {
        Ok(listener) => listener,
        Err(e) => {
            ebb::eprintln!("memcached: cannot listen on port {port}: {e}");
            return 1;
        }
    };
    server.conns.set_listener(listener.local_addr());
    let cores = ebb::num_cores();
    ebb::println!(
        "memcached: listening on {} ({network}, {cores} core{}; {})",
        listener.local_addr(),
        if cores == 1 { "" } else { "s" },
        memcached::server::describe(&server.settings)
    );
    core::future::pending::<i32>().await
}

ebb::main!(app_main, cores = requested_cores);

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn cores(line: &str) -> Option<usize> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        requested_cores(&args)
    }

    #[test]
    fn t_is_found_in_every_form_getargs_accepts() {
        assert_eq!(cores(""), None);
        assert_eq!(cores("-p 11211 -m 64"), None);
        assert_eq!(cores("-t 1"), Some(1));
        assert_eq!(cores("-t3"), Some(3));
        assert_eq!(cores("-Mt 2"), Some(2));
        assert_eq!(cores("-vvt2"), Some(2));
        assert_eq!(cores("--threads 4"), Some(4));
        assert_eq!(cores("--threads=4"), Some(4));
        assert_eq!(
            cores("-t 1 -t 2"),
            Some(2),
            "the last one wins, as in parse_options"
        );
        // Values of other options are not -t.
        assert_eq!(cores("-p -t"), None);
        assert_eq!(cores("-m 1 -l 127.0.0.1"), None);
        assert_eq!(cores("--port -t -m 8"), None);
        assert_eq!(cores("-pt 1"), None, "-p takes 't' as its value");
        // Not a count: parse_options reports it.
        assert_eq!(cores("-t 0"), None);
        assert_eq!(cores("-t x"), None);
        assert_eq!(cores("-- -t 1"), None);
    }
}
