//! `pthread-pingpong`: context-switch cost of two OS threads pinned to one core.
//!
//! Prints e.g. `pthread-pingpong: condvar core=1 rounds=200000 switches=400000 ns/switch=1234.5`.

use clap::{Parser, ValueEnum};
use ebb_bench::pingpong::{Handoff, pthread_pingpong_with};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Method {
    /// Mutex<bool> + Condvar (pthread mutex/condvar equivalent).
    Condvar,
    /// std::thread::park / unpark.
    Park,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Two OS threads on one core ping-pong via a futex-based hand-off"
)]
struct Args {
    /// Round trips (each = 2 context switches).
    #[arg(long, default_value_t = 200_000)]
    rounds: u64,
    /// Hand-off primitive.
    #[arg(long, value_enum, default_value_t = Method::Condvar)]
    method: Method,
    /// CPU to pin both threads to (default: the last CPU).
    #[arg(long)]
    core: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn main() {
    let args = Args::parse();
    let (handoff, name) = match args.method {
        Method::Condvar => (Handoff::Condvar, "condvar"),
        Method::Park => (Handoff::Park, "park"),
    };
    let r = pthread_pingpong_with(args.rounds.max(1), handoff, args.core);
    let core = r
        .core
        .map_or_else(|| "unpinned".to_string(), |c| c.to_string());
    if r.core.is_none() {
        eprintln!(
            "pthread-pingpong: warning: could not pin threads; figure is not a same-core switch cost"
        );
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "method": name,
                "core": r.core,
                "rounds": r.rounds,
                "switches": r.switches(),
                "ns_per_switch": (r.ns_per_switch() * 10.0).round() / 10.0,
            })
        );
    } else {
        println!(
            "pthread-pingpong: {name} core={core} rounds={} switches={} ns/switch={:.1}",
            r.rounds,
            r.switches(),
            r.ns_per_switch()
        );
    }
}
