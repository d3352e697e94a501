//! `mc-load` against a real memcached (Debian's `memcached`; skipped when it is missing):
//! after a preload every get hits, nothing fails, and a small sweep draws its plot.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MC_LOAD: &str = env!("CARGO_BIN_EXE_mc-load");

struct Memcached {
    child: Child,
    addr: String,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// memcached on a port the kernel just had free, on 127.0.0.1 only.
fn memcached(test: &str) -> Option<Memcached> {
    ebb_testkit::need_tools(test, &["memcached"])?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut cmd = Command::new("memcached");
    cmd.args(["-t", "1", "-U", "0", "-m", "256", "-l", "127.0.0.1"])
        .args(["-p", &port.to_string()])
        .stdout(Stdio::null());
    if ebb_testkit::is_root() {
        cmd.args(["-u", "nobody"]); // memcached will not run as root without -u
    }
    let child = cmd.spawn().expect("spawn memcached");
    let mc = Memcached {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&mc.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "memcached did not listen on {}",
            mc.addr
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(mc)
}

fn mc_load(args: &[&str]) -> serde_json::Value {
    let out = Command::new(MC_LOAD)
        .args(args)
        .arg("--json")
        .output()
        .expect("run mc-load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mc-load {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn check(o: &serde_json::Value) {
    eprintln!("{o}");
    assert!(o["rps"].as_f64().unwrap() > 0.0, "no throughput");
    assert!(
        o["hit_ratio"].as_f64().unwrap() > 0.9,
        "hit ratio after preload"
    );
    assert_eq!(o["errors"].as_u64(), Some(0));
    assert!(o["sets"].as_u64().unwrap() > 0, "ETC also sets");
    assert!(o["p99_us"].as_f64().unwrap() >= o["p50_us"].as_f64().unwrap());
}

#[test]
fn etc_closed_and_open_loop_against_memcached() {
    let Some(mc) = memcached("etc_closed_and_open_loop_against_memcached") else {
        return;
    };
    let common = [
        "--addr",
        &mc.addr,
        "--workload",
        "etc",
        "--keys",
        "20000",
        "--conns",
        "8",
    ];
    let closed = mc_load(
        &[
            &common[..],
            &[
                "--preload",
                "--closed-loop",
                "--depth",
                "2",
                "--warmup",
                "200ms",
                "--duration",
                "1s",
            ],
        ]
        .concat(),
    );
    check(&closed);
    // Open loop, pipelined, two threads (the keys are already there).
    let open = mc_load(
        &[
            &common[..],
            &[
                "--qps",
                "4000",
                "--pipeline",
                "2",
                "--threads",
                "2",
                "--warmup",
                "200ms",
                "--duration",
                "1s",
            ],
        ]
        .concat(),
    );
    check(&open);
    // Poisson arrivals at 4000/s for 1 s: ±63 (one standard deviation); the wide bounds
    // leave room for a machine busy enough to stall memcached for a while.
    let rps = open["rps"].as_f64().unwrap();
    assert!((2000.0..6000.0).contains(&rps), "open loop achieved {rps}");
}

#[test]
fn sweep_writes_csv_and_plot() {
    let Some(mc) = memcached("sweep_writes_csv_and_plot") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("mc-load-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("a.csv");
    let svg = dir.join("p99.svg");
    let status = Command::new(MC_LOAD)
        .args(["--addr", &mc.addr, "--workload", "fixed", "--keys", "1000"])
        .args(["--conns", "4", "--preload", "--sweep", "1000,3000"])
        .args([
            "--warmup",
            "100ms",
            "--duration",
            "400ms",
            "--label",
            "test",
        ])
        .arg("--csv")
        .arg(&csv)
        .arg("--plot")
        .arg(&svg)
        .status()
        .expect("run mc-load");
    assert!(status.success());
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.lines()
            .all(|l| l.starts_with("label,") || l.starts_with("test,"))
    );
    // Redraw from two CSVs (two "servers" on one chart) without running any load.
    let other = dir.join("b.csv");
    std::fs::write(&other, text.replace("test,", "other,")).unwrap();
    let status = Command::new(MC_LOAD)
        .arg("--plot-input")
        .arg(&csv)
        .arg("--plot-input")
        .arg(&other)
        .arg("--plot")
        .arg(&svg)
        .status()
        .expect("run mc-load");
    assert!(status.success());
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("other") && drawn.contains("test"));
    let _ = std::fs::remove_dir_all(&dir);
}
