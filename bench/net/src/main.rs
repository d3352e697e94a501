//! `ebb-net-bench`: ebb-net against smoltcp, each as two stacks joined by an in-memory
//! link inside one thread, so the figure is the stacks' own cost per byte and per message
//! (no kernel, no device, no second core).
//!
//! ```text
//! ebb-net-bench --stack ebb|smoltcp [--checksum-offload] stream    [--bytes N]
//! ebb-net-bench --stack ebb|smoltcp [--checksum-offload] ping-pong [--rounds N] [--size BYTES]
//! ```
//!
//! `--checksum-offload` makes the in-memory link a trusted wire for *both* stacks: each
//! device reports that it fills and verifies every checksum (ebb-net:
//! `ChecksumCapabilities::ALL`; smoltcp: `Checksum::None` for every protocol), so neither
//! stack computes one. Without it both compute every checksum in software.
//!
//! Both harnesses do the same work: the client streams a known byte pattern which the
//! server checks byte by byte (stream), or sends a message the server echoes back, one at
//! a time (ping-pong). The clock is real; both stacks get it in the same units.

use std::fmt;
use std::time::Instant as StdInstant;

use clap::{Parser, Subcommand, ValueEnum};

mod ebb;
mod smol;

/// The benchmark's one clock.
#[derive(Clone, Copy)]
pub struct Clock(StdInstant);

impl Clock {
    fn new() -> Clock {
        Clock(StdInstant::now())
    }
    /// Nanoseconds since the clock started.
    pub fn nanos(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
    /// Microseconds since the clock started.
    pub fn micros(&self) -> u64 {
        self.nanos() / 1000
    }
}

/// The byte at `offset` of the stream both ends agree on (not a multiple of any segment
/// size, so a misplaced segment shows).
pub fn pattern_byte(offset: usize) -> u8 {
    (offset % 251) as u8
}

/// Checks received bytes against the pattern with `memcmp`-speed slice comparisons, so
/// the check costs both stacks little and the same.
pub struct PatternCheck {
    pattern: Vec<u8>,
}

impl PatternCheck {
    /// 64 KiB plus one period: any run up to 64 KiB starting anywhere in the period fits.
    fn new() -> PatternCheck {
        PatternCheck {
            pattern: (0..(64 << 10) + 251).map(pattern_byte).collect(),
        }
    }

    /// Whether `data` is the pattern from stream offset `offset` on.
    pub fn matches(&self, offset: usize, data: &[u8]) -> bool {
        data.chunks(64 << 10).enumerate().all(|(i, chunk)| {
            let start = (offset + (i << 16)) % 251;
            chunk == &self.pattern[start..start + chunk.len()]
        })
    }
}

/// What one stream run measured.
pub struct StreamReport {
    /// Bytes delivered and checked.
    pub bytes: usize,
    /// Wall time from the first send to the last byte checked.
    pub micros: u64,
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mbps = self.bytes as f64 * 8.0 / self.micros.max(1) as f64;
        write!(
            f,
            "stream bytes={} us={} mbit_s={mbps:.0}",
            self.bytes, self.micros
        )
    }
}

/// What one ping-pong run measured.
pub struct PingPongReport {
    size: usize,
    sorted_ns: Vec<u64>,
}

impl PingPongReport {
    /// Builds the report from each round trip's nanoseconds.
    pub fn new(size: usize, mut round_trips: Vec<u64>) -> PingPongReport {
        round_trips.sort_unstable();
        PingPongReport {
            size,
            sorted_ns: round_trips,
        }
    }

    fn percentile(&self, p: f64) -> u64 {
        let n = self.sorted_ns.len();
        if n == 0 {
            return 0;
        }
        self.sorted_ns[((n as f64 * p) as usize).min(n - 1)]
    }
}

impl fmt::Display for PingPongReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total: u64 = self.sorted_ns.iter().sum();
        let rounds = self.sorted_ns.len();
        let per_s = rounds as f64 * 1e9 / total.max(1) as f64;
        write!(
            f,
            "pingpong size={} rounds={rounds} round_trips_s={per_s:.0} p50_ns={} p99_ns={}",
            self.size,
            self.percentile(0.50),
            self.percentile(0.99)
        )
    }
}

/// What to run.
#[derive(Subcommand, Clone, Debug)]
pub enum Workload {
    /// Bulk transfer, client to server.
    Stream {
        /// Bytes to transfer.
        #[arg(long, default_value_t = 100 << 20)]
        bytes: usize,
    },
    /// Request/response, one message in flight.
    PingPong {
        /// Round trips.
        #[arg(long, default_value_t = 100_000)]
        rounds: usize,
        /// Message size in bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum Stack {
    Ebb,
    Smoltcp,
}

#[derive(Parser, Debug)]
#[command(about = "ebb-net against smoltcp over an in-memory link, in one thread")]
struct Args {
    /// Which stack runs both ends.
    #[arg(long, value_enum)]
    stack: Stack,
    /// The link is a trusted wire: neither stack computes checksums (both stacks alike).
    #[arg(long)]
    checksum_offload: bool,
    #[command(subcommand)]
    workload: Workload,
}

fn main() {
    let args = Args::parse();
    let clock = Clock::new();
    let offload = args.checksum_offload;
    let line = match args.stack {
        Stack::Ebb => ebb::run(&args.workload, &clock, offload),
        Stack::Smoltcp => smol::run(&args.workload, &clock, offload),
    };
    let checksums = if offload { "offload" } else { "software" };
    println!("stack={:?} checksums={checksums} {line}", args.stack);
}
