//! `mc-load`: a memcached load generator after mutilate (text protocol, `get`/`set`).
//!
//! * `--closed-loop` (the default without `--qps`): each connection keeps `--depth`
//!   requests outstanding.
//! * `--qps N`: open loop, Poisson arrivals; a request is sent at its scheduled time
//!   whether or not earlier ones were answered, and its latency counts from that time,
//!   so coordinated omission is not hidden (see `ebb_bench::mc_load`).
//! * `--pipeline K`: K requests per write (closed loop: refill in batches of K; open
//!   loop: each arrival is a batch of K).
//! * `--workload etc`: Facebook ETC as mutilate draws it (keys 20–70 B, values 1–1024 B,
//!   get:set 30:1, Zipf popularity `--skew`, default 0.99); `--workload fixed` with
//!   `--key-size`, `--value-size`, `--get-ratio` (uniform popularity unless `--skew`).
//! * `--preload`: sets every key once before measuring.
//! * `--sweep 10000,20000,..` or `--sweep-auto`: open-loop runs at each offered load;
//!   CSV rows (stdout or `--csv`), the highest throughput with p99 ≤ `--slo-us`, and with
//!   `--plot FILE.svg` the p99-against-throughput curve. `--plot-input A.csv` (repeated)
//!   adds earlier sweeps (other servers) to the chart; without a sweep it only draws.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ebb_bench::mc_load::{self, Config, Mode, Report};
use ebb_bench::mc_workload::{KeySize, ValueSize, Workload};
use ebb_bench::parse_duration;
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "memcached load generator (text protocol): closed or open loop, ETC or fixed workloads, sweeps and their p99 curve"
)]
struct Args {
    /// memcached address.
    #[arg(long, default_value = "127.0.0.1:11211")]
    addr: SocketAddr,
    /// Connections (over all threads).
    #[arg(long, default_value_t = 32)]
    conns: usize,
    /// Load threads, each with its share of the connections and of `--qps`.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Pin the load threads: one CPU, or a comma list (thread i on the i-th).
    #[arg(long, value_delimiter = ',')]
    pin_core: Vec<usize>,
    /// Closed loop: every connection keeps `--depth` requests outstanding.
    #[arg(long, conflicts_with = "qps")]
    closed_loop: bool,
    /// Outstanding requests per connection in closed loop.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Open loop: offered load in requests/s (Poisson arrivals).
    #[arg(long)]
    qps: Option<f64>,
    /// Requests per write (a batch).
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    #[arg(long, value_enum, default_value = "etc")]
    workload: WorkloadKind,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Zipf skew of key popularity, 0 = uniform (default: 0.99 for etc, 0 for fixed).
    #[arg(long)]
    skew: Option<f64>,
    /// fixed: key size in bytes.
    #[arg(long, default_value_t = 32)]
    key_size: usize,
    /// fixed: value size in bytes.
    #[arg(long, default_value_t = 32)]
    value_size: usize,
    /// fixed: fraction of requests that are gets.
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
    /// Set every key once before measuring.
    #[arg(long)]
    preload: bool,
    /// Unmeasured time before each window.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// Measured window.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Open-loop sweep over these offered loads (requests/s).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["qps", "closed_loop"])]
    sweep: Vec<f64>,
    /// Sweep 10 %..120 % of the closed-loop peak (measured first with `--depth 8`).
    #[arg(long, conflicts_with_all = ["qps", "closed_loop", "sweep"])]
    sweep_auto: bool,
    /// Points of `--sweep-auto`.
    #[arg(long, default_value_t = 12)]
    sweep_points: usize,
    /// Sweep CSV output (default stdout).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Name of this server/config in the CSV and the plot.
    #[arg(long, default_value = "memcached")]
    label: String,
    /// The p99 latency objective for "highest throughput within SLO", µs.
    #[arg(long, default_value_t = 500.0)]
    slo_us: f64,
    /// Draw p99 latency against achieved throughput into this SVG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// More sweep CSVs to draw (one curve per label).
    #[arg(long)]
    plot_input: Vec<PathBuf>,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    connect_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkloadKind {
    Etc,
    Fixed,
}

#[derive(Debug, Serialize)]
struct Output {
    mode: String,
    offered_qps: Option<f64>,
    rps: f64,
    gets: u64,
    sets: u64,
    hit_ratio: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    mean_us: f64,
    errors: u64,
    first_error: Option<String>,
    outstanding: u64,
    dropped: u64,
    /// Open loop: p99 of how late the client wrote a request after its scheduled time.
    send_lag_p99_us: Option<f64>,
    /// Client CPU over the window, percent of one core (all threads).
    client_cpu_pct: f64,
    requests: u64,
    duration_s: f64,
    warmup_s: f64,
    conns: usize,
    threads: usize,
    depth: Option<usize>,
    pipeline: usize,
    workload: String,
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

fn output(args: &Args, cfg: &Config, w: &Workload, r: &Report) -> Output {
    let (mode, offered, depth) = match cfg.mode {
        Mode::Closed { depth } => ("closed".to_string(), None, Some(depth)),
        Mode::Open { qps } => ("open".to_string(), Some(qps), None),
    };
    Output {
        mode,
        offered_qps: offered,
        rps: round(r.rps(), 1),
        gets: r.gets,
        sets: r.sets,
        hit_ratio: round(r.hit_ratio(), 4),
        p50_us: round(r.quantile_us(0.5), 1),
        p90_us: round(r.quantile_us(0.9), 1),
        p99_us: round(r.quantile_us(0.99), 1),
        p999_us: round(r.quantile_us(0.999), 1),
        max_us: round(r.hist.max() as f64 / 1e3, 1),
        mean_us: round(r.hist.mean() / 1e3, 1),
        errors: r.errors,
        first_error: r.first_error.clone(),
        outstanding: r.outstanding,
        dropped: r.dropped,
        send_lag_p99_us: matches!(cfg.mode, Mode::Open { .. })
            .then(|| round(r.lag.value_at_quantile(0.99) as f64 / 1e3, 1)),
        client_cpu_pct: round(100.0 * r.cpu_s / r.measured_s.max(1e-9), 1),
        requests: r.completed,
        duration_s: round(r.measured_s, 3),
        warmup_s: cfg.warmup.as_secs_f64(),
        conns: cfg.conns,
        threads: cfg.threads,
        depth,
        pipeline: cfg.pipeline,
        workload: describe(args, w),
    }
}

fn describe(args: &Args, w: &Workload) -> String {
    let pop = match &w.popularity {
        ebb_bench::mc_workload::Popularity::Uniform => "uniform".to_string(),
        ebb_bench::mc_workload::Popularity::Zipf(_) => {
            format!("zipf {}", args.skew.unwrap_or(0.99))
        }
    };
    match args.workload {
        WorkloadKind::Etc => format!("etc ({} keys, {pop})", w.keys),
        WorkloadKind::Fixed => format!(
            "fixed (key {} B, value {} B, get ratio {}, {} keys, {pop})",
            args.key_size, args.value_size, args.get_ratio, w.keys
        ),
    }
}

fn print_text(o: &Output) {
    let mode = match (o.offered_qps, o.depth) {
        (Some(q), _) => format!("open loop at {q:.0} req/s offered"),
        (None, Some(d)) => format!("closed loop, depth {d}"),
        _ => String::new(),
    };
    println!(
        "mc-load: {mode}, {} conns, {} thread(s), pipeline {}, {}",
        o.conns, o.threads, o.pipeline, o.workload
    );
    println!(
        "  throughput   {:.0} req/s ({} gets, {} sets; get hit ratio {:.4}) over {:.3} s after {:.3} s warm-up",
        o.rps, o.gets, o.sets, o.hit_ratio, o.duration_s, o.warmup_s
    );
    println!(
        "  latency (µs) p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
        o.p50_us, o.p90_us, o.p99_us, o.p999_us, o.max_us, o.mean_us
    );
    println!(
        "  errors {}  outstanding at end {}  dropped {}  client CPU {:.1} % of one core",
        o.errors, o.outstanding, o.dropped, o.client_cpu_pct
    );
    if let Some(lag) = o.send_lag_p99_us {
        println!("  send lag (µs) p99 {lag:.1} (client lateness, included in the latencies)");
    }
    if let Some(e) = &o.first_error {
        println!("  first error: {e}");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mc-load: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workload(args: &Args) -> Result<Workload, String> {
    match args.workload {
        WorkloadKind::Etc => Workload::etc(args.keys, args.skew.unwrap_or(0.99)),
        WorkloadKind::Fixed => Workload::new(
            args.keys,
            KeySize::Fixed(args.key_size),
            ValueSize::Fixed(args.value_size),
            args.get_ratio,
            args.skew.unwrap_or(0.0),
        ),
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let sweeping = !args.sweep.is_empty() || args.sweep_auto;
    if args.label.contains([',', '\n']) {
        return Err(format!(
            "--label {:?}: no commas or newlines (it is a CSV field)",
            args.label
        ));
    }
    if !sweeping && !args.plot_input.is_empty() {
        // Only draw.
        let out = args
            .plot
            .as_ref()
            .ok_or("--plot-input without a sweep needs --plot FILE.svg")?;
        plot(&args.plot_input, out, args.slo_us)?;
        return Ok(ExitCode::SUCCESS);
    }
    let w = workload(args)?;
    let mode = match args.qps {
        Some(qps) => Mode::Open { qps },
        None => Mode::Closed { depth: args.depth },
    };
    let cfg = Config {
        addr: args.addr,
        conns: args.conns,
        threads: args.threads,
        mode,
        pipeline: args.pipeline,
        warmup: args.warmup,
        duration: args.duration,
        pin: args.pin_core.clone(),
        seed: args.seed,
        connect_timeout: args.connect_timeout,
    };
    if sweeping {
        return sweep(args, cfg, &w);
    }
    let r = mc_load::run(&cfg, &w, args.preload)?;
    let o = output(args, &cfg, &w, &r);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&o).map_err(|e| format!("json: {e}"))?
        );
    } else {
        print_text(&o);
    }
    if r.completed == 0 {
        return Err(format!(
            "no request completed (is memcached at {}?)",
            args.addr
        ));
    }
    Ok(if r.errors > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

const CSV_HEADER: &str = "label,offered_qps,achieved_rps,p50_us,p90_us,p99_us,p999_us,max_us,hit_ratio,errors,outstanding,dropped,client_cpu_pct,send_lag_p99_us";

fn sweep(args: &Args, mut cfg: Config, w: &Workload) -> Result<ExitCode, String> {
    if args.preload {
        // Once, before the first point: a short closed-loop run that only preloads.
        let mut pre = cfg.clone();
        pre.mode = Mode::Closed { depth: 1 };
        pre.warmup = Duration::ZERO;
        pre.duration = Duration::from_millis(1);
        mc_load::run(&pre, w, true)?;
    }
    let loads: Vec<f64> = if args.sweep_auto {
        // The closed loop's peak with 8 outstanding per connection: past the knee for
        // a single-threaded memcached, so the sweep's top points overload it.
        let mut probe = cfg.clone();
        probe.mode = Mode::Closed {
            depth: 8.max(args.pipeline),
        };
        probe.warmup = Duration::from_millis(500);
        probe.duration = Duration::from_secs(2);
        let peak = mc_load::run(&probe, w, false)?.rps();
        eprintln!("mc-load: closed-loop peak {peak:.0} req/s; sweeping 10–120 % of it");
        let n = args.sweep_points.max(2);
        (0..n)
            .map(|i| (peak * (0.1 + 1.1 * i as f64 / (n - 1) as f64)).round())
            .collect()
    } else {
        args.sweep.clone()
    };
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    let mut best: Option<(f64, f64)> = None; // (achieved, p99) within the SLO
    let mut outs = Vec::new();
    for &qps in &loads {
        cfg.mode = Mode::Open { qps };
        let r = mc_load::run(&cfg, w, false)?;
        let o = output(args, &cfg, w, &r);
        let row = format!(
            "{},{qps:.0},{:.1},{},{},{},{},{},{},{},{},{},{},{}",
            args.label,
            o.rps,
            o.p50_us,
            o.p90_us,
            o.p99_us,
            o.p999_us,
            o.max_us,
            o.hit_ratio,
            o.errors,
            o.outstanding,
            o.dropped,
            o.client_cpu_pct,
            o.send_lag_p99_us.unwrap_or_default()
        );
        eprintln!("{row}");
        csv.push_str(&row);
        csv.push('\n');
        if o.p99_us <= args.slo_us && o.errors == 0 && best.is_none_or(|(a, _)| o.rps > a) {
            best = Some((o.rps, o.p99_us));
        }
        outs.push(o);
    }
    match &args.csv {
        Some(path) => std::fs::write(path, &csv).map_err(|e| format!("{}: {e}", path.display()))?,
        None if !args.json => print!("{csv}"),
        None => {}
    }
    let summary = match best {
        Some((rps, p99)) => format!(
            "highest throughput with p99 <= {} us: {rps:.0} req/s (p99 {p99} us)",
            args.slo_us
        ),
        None => format!("no point met p99 <= {} us", args.slo_us),
    };
    if args.json {
        #[derive(Serialize)]
        struct SweepOut<'a> {
            label: &'a str,
            slo_us: f64,
            max_rps_within_slo: Option<f64>,
            points: &'a [Output],
        }
        let s = SweepOut {
            label: &args.label,
            slo_us: args.slo_us,
            max_rps_within_slo: best.map(|b| b.0),
            points: &outs,
        };
        println!(
            "{}",
            serde_json::to_string(&s).map_err(|e| format!("json: {e}"))?
        );
    }
    eprintln!("mc-load: {summary}");
    if let Some(out) = &args.plot {
        let tmp;
        let mut inputs = args.plot_input.clone();
        let this = match &args.csv {
            Some(p) => p.clone(),
            None => {
                tmp = std::env::temp_dir().join(format!("mc-load-{}.csv", std::process::id()));
                std::fs::write(&tmp, &csv).map_err(|e| format!("{}: {e}", tmp.display()))?;
                tmp.clone()
            }
        };
        inputs.insert(0, this);
        plot(&inputs, out, args.slo_us)?;
        eprintln!("mc-load: wrote {}", out.display());
    }
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------
// Plot.

/// Per label, in order of appearance: (achieved req/s, p99 µs) sorted by offered load.
type Curves = Vec<(String, Vec<(f64, f64)>)>;

fn read_curves(inputs: &[PathBuf]) -> Result<Curves, String> {
    let mut order: Vec<String> = Vec::new();
    let mut rows: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for input in inputs {
        let text =
            std::fs::read_to_string(input).map_err(|e| format!("{}: {e}", input.display()))?;
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<&str> = lines
            .next()
            .ok_or_else(|| format!("{}: empty", input.display()))?
            .split(',')
            .collect();
        let col = |name: &str| {
            header
                .iter()
                .position(|h| *h == name)
                .ok_or_else(|| format!("no column {name} in {}", input.display()))
        };
        let (c_label, c_offered, c_rps, c_p99) = (
            col("label")?,
            col("offered_qps")?,
            col("achieved_rps")?,
            col("p99_us")?,
        );
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            if f.get(c_label) == Some(&"label") {
                continue;
            }
            let num = |c: usize| -> Result<f64, String> {
                f.get(c)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("{}: bad row {line:?}", input.display()))
            };
            let label = f[c_label].to_string();
            if !order.contains(&label) {
                order.push(label.clone());
            }
            rows.entry(label)
                .or_default()
                .push((num(c_offered)?, num(c_rps)?, num(c_p99)?));
        }
    }
    Ok(order
        .into_iter()
        .map(|label| {
            let mut pts = rows.remove(&label).unwrap_or_default();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (label, pts.into_iter().map(|(_, x, y)| (x, y)).collect())
        })
        .collect())
}

fn si_label(v: &f64) -> String {
    let v = *v;
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else {
        format!("{}", v)
    }
}

fn plot(inputs: &[PathBuf], out: &Path, slo_us: f64) -> Result<(), String> {
    use plotters::prelude::*;
    let curves = read_curves(inputs)?;
    let all = || curves.iter().flat_map(|(_, p)| p.iter());
    if all().next().is_none() {
        return Err("no sweep rows to plot".into());
    }
    let x_hi = all().map(|p| p.0).fold(0.0, f64::max);
    let y_lo = all().map(|p| p.1).fold(f64::MAX, f64::min).min(slo_us);
    let y_hi = all().map(|p| p.1).fold(0.0, f64::max).max(slo_us);
    let err = |e: &dyn std::fmt::Display| format!("plot: {e}");
    let colors = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        BLACK,
    ];
    let root = SVGBackend::new(out, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "memcached: p99 latency against achieved throughput (open loop)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_hi * 1.05, (y_lo * 0.8..y_hi * 1.25).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("achieved throughput (requests/s)")
        .y_desc("p99 latency (µs, from scheduled send)")
        .x_label_formatter(&si_label)
        .y_label_formatter(&si_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, slo_us), (x_hi * 1.05, slo_us)],
            BLACK.mix(0.4).stroke_width(1),
        ))
        .map_err(|e| err(&e))?
        .label(format!("SLO p99 = {slo_us} µs"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    for (i, (label, pts)) in curves.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
