//! `tsc-noise`: OS noise seen by a Linux process, the peer of the native `bench_noise`
//! guest. Reads the TSC back to back for `--seconds` and records every gap between two
//! consecutive reads (`bench/src/tsc_bench.rs`, the same loop the guest runs): a gap longer
//! than the loop's own few cycles is time the OS (or the hypervisor below it) took away.
//!
//! Prints `noise: side=linux ...` (max, 99.99th and 99.9th percentile in cycles and ns,
//! gaps over 1/10/100 µs) and a `noise-log2:` histogram line. Pin it to the core the guest's
//! vCPU uses: `taskset -c 0 tsc-noise --seconds 5`.

#[path = "../tsc_bench.rs"]
mod tsc_bench;

use clap::Parser;
use std::time::Duration;
use tsc_bench::{GapHistogram, NoiseReport, host_rdtsc, host_tsc_khz, noise_loop, ns_to_cycles};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Histogram of gaps between back-to-back TSC reads (OS noise)"
)]
struct Args {
    /// How long to read the TSC.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// CPU to pin to (default: leave the affinity as it is, e.g. set by taskset).
    #[arg(long)]
    core: Option<usize>,
}

fn main() {
    let args = Args::parse();
    if let Some(core) = args.core
        && let Err(e) = ebb_bench::sys::pin_current_thread(core)
    {
        eprintln!("tsc-noise: {e}");
        std::process::exit(1);
    }
    let tsc_khz = host_tsc_khz(Duration::from_millis(100));
    let mut hist = Box::new(GapHistogram::new(tsc_khz));
    let cycles = ns_to_cycles(args.seconds.saturating_mul(1_000_000_000), tsc_khz);
    noise_loop(&host_rdtsc, cycles, &mut hist);
    println!(
        "{}",
        NoiseReport {
            side: "linux",
            seconds: args.seconds,
            tsc_khz,
            hist: &hist,
        }
    );
}
