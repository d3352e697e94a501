//! `ebb-net-bench`: ebb-net against smoltcp, each as two stacks joined by an in-memory
//! link inside one thread, so the figure is the stacks' own cost per byte and per message
//! (no kernel, no device, no second core).
//!
//! ```text
//! ebb-net-bench --stack ebb|smoltcp [--checksum-offload] [--smoltcp-ack-delay default|none]
//!               stream [--bytes N] | ping-pong [--rounds N] [--size BYTES]
//! ```
//!
//! Both stacks run over the same link ([`link::BenchLink`]: the same FIFOs, the same
//! recycled receive buffers, frames counted at the link). Each run reports, for the
//! measured part only (first send to last byte checked or last echo received), the frames
//! the link carried and the heap allocations made, per round trip or per MB.
//!
//! `--smoltcp-ack-delay` chooses smoltcp's delayed ACK: `default` is smoltcp's own
//! (10 ms, with an immediate ACK once a full segment is unacknowledged), `none` sends an
//! ACK as soon as data arrives (`set_ack_delay(None)`). ebb-net always runs with
//! `delayed_ack: None`, which still sends its ACK after the application's `receive`
//! callback, so an echo carries it.
//!
//! `--checksum-offload` makes the in-memory link a trusted wire for *both* stacks: each
//! device reports that it fills and verifies every checksum (ebb-net:
//! `ChecksumCapabilities::ALL`; smoltcp: `Checksum::None` for every protocol), so neither
//! stack computes one. Without it both compute every checksum in software.
//!
//! Both harnesses do the same work: the client streams a known byte pattern which the
//! server checks byte by byte (stream), or sends a message the server echoes back, one at
//! a time (ping-pong). The clock is real; both stacks get it in the same units.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant as StdInstant;

use clap::{Parser, Subcommand, ValueEnum};

use link::LinkCounts;

mod ebb;
mod link;
mod smol;

/// The system allocator, counting allocations (`alloc` and `realloc` calls) so a run can
/// report how many it made per round trip: one relaxed add per call, the same for both
/// stacks.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are ours; the counter has no effect on memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here does) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds the rest of
        // `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Heap allocations made so far by the whole process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// What the link carried and the heap allocations made over a measured stretch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Frames, bytes, drops and receive buffers allocated, at the link.
    pub link: LinkCounts,
    /// Heap allocations by anyone (stacks, link, harness).
    pub allocations: u64,
}

/// A snapshot to take a [`Tally`] from.
#[derive(Clone, Copy)]
pub struct TallyStart {
    link: LinkCounts,
    allocations: u64,
}

impl TallyStart {
    /// Now, for `link`.
    pub fn now(link: &link::BenchLink) -> TallyStart {
        TallyStart {
            link: link.counts(),
            allocations: allocations(),
        }
    }

    /// What happened on `link` since `self`.
    pub fn tally(self, link: &link::BenchLink) -> Tally {
        Tally {
            link: link.counts().since(self.link),
            allocations: allocations() - self.allocations,
        }
    }
}

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
    /// Frames and allocations over the same stretch.
    pub tally: Tally,
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mbps = self.bytes as f64 * 8.0 / self.micros.max(1) as f64;
        let mb = self.bytes as f64 / 1e6;
        let t = &self.tally;
        write!(
            f,
            "stream bytes={} us={} mbit_s={mbps:.0} frames={} frames_per_mb={:.1} \
             dropped={} allocs={} allocs_per_mb={:.1} rx_buffers_allocated={}",
            self.bytes,
            self.micros,
            t.link.frames,
            t.link.frames as f64 / mb,
            t.link.dropped,
            t.allocations,
            t.allocations as f64 / mb,
            t.link.buffers_allocated,
        )
    }
}

/// What one ping-pong run measured.
pub struct PingPongReport {
    size: usize,
    sorted_ns: Vec<u64>,
    tally: Tally,
}

impl PingPongReport {
    /// Builds the report from each round trip's nanoseconds and what the link carried
    /// and the heap allocations made from the first send to the last echo.
    pub fn new(size: usize, mut round_trips: Vec<u64>, tally: Tally) -> PingPongReport {
        round_trips.sort_unstable();
        PingPongReport {
            size,
            sorted_ns: round_trips,
            tally,
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
        let per_trip = |n: u64| n as f64 / rounds.max(1) as f64;
        let t = &self.tally;
        write!(
            f,
            "pingpong size={} rounds={rounds} round_trips_s={per_s:.0} p50_ns={} p99_ns={} \
             frames={} frames_per_round_trip={:.3} dropped={} allocs={} \
             allocs_per_round_trip={:.3} rx_buffers_allocated={}",
            self.size,
            self.percentile(0.50),
            self.percentile(0.99),
            t.link.frames,
            per_trip(t.link.frames),
            t.link.dropped,
            t.allocations,
            per_trip(t.allocations),
            t.link.buffers_allocated,
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

/// smoltcp's delayed ACK.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckDelay {
    /// smoltcp's default: 10 ms, an immediate ACK once a full segment is unacknowledged.
    Default,
    /// `set_ack_delay(None)`: an ACK as soon as data arrives.
    None,
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
    /// smoltcp's delayed ACK (ignored for ebb-net, which never delays its ACK past the
    /// application's `receive` callback).
    #[arg(long, value_enum, default_value_t = AckDelay::Default)]
    smoltcp_ack_delay: AckDelay,
    #[command(subcommand)]
    workload: Workload,
}

fn main() {
    let args = Args::parse();
    let clock = Clock::new();
    let offload = args.checksum_offload;
    let checksums = if offload { "offload" } else { "software" };
    let (stack, line) = match args.stack {
        Stack::Ebb => ("ebb".to_string(), ebb::run(&args.workload, &clock, offload)),
        Stack::Smoltcp => (
            format!("smoltcp ack_delay={:?}", args.smoltcp_ack_delay).to_lowercase(),
            smol::run(&args.workload, &clock, offload, args.smoltcp_ack_delay),
        ),
    };
    println!("stack={stack} checksums={checksums} {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frame counts the docs report, per extra round trip (the run's ends, such as
    /// ebb-net's last handshake ACK and its pure ACK of the last echo, cancel out): ebb-net's
    /// echo carries the ACK (2 frames per round trip), smoltcp's does with its default
    /// delayed ACK and does not without it (a pure ACK each way: 4).
    #[test]
    fn frames_per_round_trip_are_counted_at_the_link() {
        let clock = Clock::new();
        let frames = |run: &dyn Fn(usize) -> PingPongReport| {
            let (one, many) = (run(1), run(201));
            assert_eq!(many.sorted_ns.len(), 201);
            assert_eq!(many.tally.link.dropped, 0, "{many}");
            many.tally.link.frames - one.tally.link.frames
        };
        let ebb = frames(&|n| ebb::ping_pong(n, 64, &clock, false));
        let delayed = frames(&|n| smol::ping_pong(n, 64, &clock, false, AckDelay::Default));
        let eager = frames(&|n| smol::ping_pong(n, 64, &clock, false, AckDelay::None));
        assert_eq!((ebb, delayed, eager), (400, 400, 800));
    }

    /// Both stacks stream through the same link without a drop, in MSS-sized frames.
    #[test]
    fn streams_cross_the_shared_link_without_drops() {
        let clock = Clock::new();
        let bytes = 1 << 20;
        for report in [
            ebb::stream(bytes, &clock, false),
            smol::stream(bytes, &clock, false, AckDelay::Default),
        ] {
            let link = report.tally.link;
            assert_eq!(link.dropped, 0, "{report}");
            // At least one frame per 1460-byte segment, and ACKs for at most every one.
            let segments = bytes.div_ceil(1460) as u64;
            assert!(
                (segments..=2 * segments + 4).contains(&link.frames),
                "{report}"
            );
        }
    }
}
