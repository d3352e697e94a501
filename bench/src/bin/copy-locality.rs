//! `copy-locality`: how much a kernel copy's rate depends on how long ago its data was
//! touched — the native streaming echo's question (docs/benchmarks.md, "Seventh run").
//!
//! The native guest's echo moves each byte twice through the host kernel, as hosted
//! ebb-net's does: `readv` from TAP into a receive buffer, later `writev` from that buffer
//! back to TAP. Hosted does both within one pass of its loop, a few frames apart. On one
//! CPU the native monitor's I/O thread reads a whole round of frames (about one TCP
//! window) into guest memory, the guest runs, and only then are they written out: by
//! that time the bytes have left the core's 1 MiB L2.
//!
//! This reproduces the two patterns without a network: 64 KiB chunks go into a pipe, are
//! `read` into buffers taken in turn from a ring of `--buffers`, and after `--batch`
//! chunks are `write`n from those buffers into a second pipe and drained. Every byte is
//! copied by the kernel four times (two pipe writes, two pipe reads); what changes is how
//! many chunks lie between a chunk's copy in and its copy out (and, the same, between a
//! pipe page's write and read, as frames wait in a TAP's queue). Prints GB/s echoed per
//! (buffers, batch) pair, the median of `--runs`.

use std::fs::File;
use std::io::{Read, Write};
use std::time::Instant;

use clap::Parser;
use rustix::pipe::{fcntl_setpipe_size, pipe};

const CHUNK: usize = 64 * 1024;
/// Chunks sit this far apart, as large receive buffers (64 KiB and headers) do.
const STRIDE: usize = CHUNK + 4096;
/// Where in its buffer a chunk's payload starts: the virtio-net header, Ethernet, IPv4
/// and TCP headers with timestamps in front of it (12 + 14 + 20 + 32).
const PAYLOAD_OFFSET: usize = 78;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "kernel copy rate against the distance between a byte's copy in and out"
)]
struct Args {
    /// (buffers, batch) pairs, e.g. 1x1,64x16: a ring of `buffers` receive buffers,
    /// `batch` chunks read in before they are written out.
    #[arg(long, value_delimiter = ',', default_value = "1x1,4x4,16x16,64x16")]
    cases: Vec<String>,
    /// MiB echoed per run.
    #[arg(long, default_value_t = 1024)]
    mib: usize,
    /// Runs per case (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

fn parse_case(s: &str) -> Result<(usize, usize), String> {
    let (buffers, batch) = s
        .split_once('x')
        .ok_or_else(|| format!("case {s:?}: expected BUFFERSxBATCH"))?;
    let buffers: usize = buffers.parse().map_err(|e| format!("case {s:?}: {e}"))?;
    let batch: usize = batch.parse().map_err(|e| format!("case {s:?}: {e}"))?;
    if buffers == 0 || batch == 0 || batch > buffers {
        return Err(format!("case {s:?}: need 0 < batch <= buffers"));
    }
    Ok((buffers, batch))
}

/// A pipe that holds `bytes` without blocking its writer: (read end, write end).
fn roomy_pipe(bytes: usize) -> Result<(File, File), String> {
    let (r, w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    fcntl_setpipe_size(&w, bytes).map_err(|e| {
        let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size").unwrap_or_default();
        format!(
            "cannot make a pipe of {bytes} bytes ({e}); /proc/sys/fs/pipe-max-size is {}: \
             raise it or use smaller batches",
            max.trim()
        )
    })?;
    Ok((File::from(r), File::from(w)))
}

/// GB/s echoed with `buffers` receive buffers and `batch` chunks per round.
fn run(buffers: usize, batch: usize, mib: usize) -> Result<f64, String> {
    let mut ring = vec![1u8; buffers * STRIDE];
    let source = vec![2u8; CHUNK];
    let mut sink = vec![0u8; CHUNK];
    let (mut in_r, mut in_w) = roomy_pipe(batch * CHUNK)?;
    let (mut out_r, mut out_w) = roomy_pipe(batch * CHUNK)?;
    let io = |e: std::io::Error| format!("pipe: {e}");
    let rounds = (mib * 1024 * 1024).div_ceil(batch * CHUNK);
    let mut next = 0usize;
    let start = Instant::now();
    for _ in 0..rounds {
        let first = next;
        for _ in 0..batch {
            in_w.write_all(&source).map_err(io)?;
        }
        for k in 0..batch {
            let at = (first + k) % buffers * STRIDE + PAYLOAD_OFFSET;
            in_r.read_exact(&mut ring[at..at + CHUNK]).map_err(io)?;
        }
        for k in 0..batch {
            let at = (first + k) % buffers * STRIDE + PAYLOAD_OFFSET;
            out_w.write_all(&ring[at..at + CHUNK]).map_err(io)?;
        }
        for _ in 0..batch {
            out_r.read_exact(&mut sink).map_err(io)?;
        }
        next = (first + batch) % buffers;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok((rounds * batch * CHUNK) as f64 / seconds / 1e9)
}

fn main() {
    let args = Args::parse();
    let mut cases = Vec::new();
    for case in &args.cases {
        match parse_case(case) {
            Ok(c) => cases.push(c),
            Err(e) => {
                eprintln!("copy-locality: {e}");
                std::process::exit(2);
            }
        }
    }
    println!("buffers,batch,kib_per_batch,gb_per_s_median,gb_per_s_min,gb_per_s_max");
    for (buffers, batch) in cases {
        let mut rates = Vec::with_capacity(args.runs);
        for _ in 0..args.runs.max(1) {
            match run(buffers, batch, args.mib) {
                Ok(rate) => rates.push(rate),
                Err(e) => {
                    eprintln!("copy-locality: {e}");
                    std::process::exit(1);
                }
            }
        }
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!(
            "{buffers},{batch},{},{median:.2},{:.2},{:.2}",
            batch * CHUNK / 1024,
            rates[0],
            rates[rates.len() - 1]
        );
    }
}
