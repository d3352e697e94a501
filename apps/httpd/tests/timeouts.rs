//! Timeouts: the [`Watchdog`]'s decisions over the scripted connection in
//! `common/conn.rs` (explicit times), then the real server (hosted, Linux sockets) ending
//! an idle connection and a slow request head, however slowly its bytes keep coming
//! (`ebb_testkit::http_timeouts`, which `ebb-cli`'s tests run against httpd natively).

#[path = "common/conn.rs"]
mod conn;

use conn::Conn;
use ebb::Instant;
use httpd::{Expired, Http, Timeouts, Watchdog};
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn timeouts() -> Timeouts {
    Timeouts {
        idle: Duration::from_millis(1000),
        head: Duration::from_millis(300),
    }
}

#[test]
fn a_connection_without_progress_is_idle_and_progress_keeps_it() {
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    let mut dog = Watchdog::new(http.activity(), timeouts(), at(0));
    assert_eq!(dog.check(at(999)), None);
    // A request and its answer: progress, and no head is waiting.
    assert!(conn.converse(&mut http, &[GET], false));
    assert_eq!(dog.check(at(999)), None, "progress did not count");
    assert_eq!(
        dog.check(at(1998)),
        None,
        "the clock did not restart at the progress"
    );
    assert_eq!(dog.check(at(2000)), Some(Expired::Idle));
}

#[test]
fn a_client_reading_a_long_answer_slowly_makes_progress() {
    // Each read takes what is queued (a 256 KiB chunk of the body), 0.9 s apart: 20
    // reads of a 100 MB answer, each within the idle timeout of the one before.
    let conn = Conn::new(1024);
    let mut http = Http::default();
    let mut dog = Watchdog::new(http.activity(), timeouts(), at(0));
    conn.deliver(
        &mut http,
        &[b"GET /bytes/100000000 HTTP/1.1\r\nHost: x\r\n\r\n"],
    );
    for step in 1..=20 {
        assert!(
            conn.client_reads(&mut http),
            "no window event owed at read {step}"
        );
        assert_eq!(
            dog.check(at(step * 900)),
            None,
            "a reading client timed out"
        );
    }
}

#[test]
fn a_head_trickling_in_times_out_although_its_bytes_keep_coming() {
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    let mut dog = Watchdog::new(http.activity(), timeouts(), at(0));
    // A whole request first: its answer, then the next head, a byte every 100 ms.
    assert!(conn.converse(&mut http, &[GET], false));
    let slow = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut now = 0;
    let mut expired = None;
    for byte in slow.chunks(1) {
        now += 100;
        conn.deliver(&mut http, &[byte]);
        expired = dog.check(at(now));
        if expired.is_some() {
            break;
        }
    }
    assert_eq!(expired, Some(Expired::Head));
    assert!(
        (400..=500).contains(&now),
        "a 300 ms head timed out at {now} ms"
    );
    assert_eq!(
        conn.statuses(),
        vec![200],
        "the first request was not answered"
    );
}

#[test]
fn each_head_gets_its_own_time_and_a_complete_one_ends_the_count() {
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    let mut dog = Watchdog::new(http.activity(), timeouts(), at(0));
    let (first, rest) = GET.split_at(10);
    conn.deliver(&mut http, &[first]);
    assert_eq!(dog.check(at(100)), None);
    // It completes at 250 ms, and the next head begins at once in the same segment.
    let mut both = rest.to_vec();
    both.extend_from_slice(&GET[..10]);
    conn.deliver(&mut http, &[&both]);
    assert_eq!(dog.check(at(250)), None);
    assert_eq!(
        dog.check(at(500)),
        None,
        "the second head was timed from the first's start"
    );
    assert_eq!(dog.check(at(550)), Some(Expired::Head));
    // A connection that closed is never timed out.
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    let mut dog = Watchdog::new(http.activity(), timeouts(), at(0));
    conn.deliver(&mut http, &[first]);
    ebb::net::TcpHandler::closed(&mut http, ebb::net::CloseReason::Reset);
    assert_eq!(dog.check(at(10_000)), None);
}

#[test]
fn timeouts_are_read_from_the_command_line() {
    let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let (t, rest) =
        Timeouts::from_args(&args("--port 9 --idle-timeout 1.5 --head-timeout=0.25 -x"))
            .expect("good options");
    assert_eq!(t.idle, Duration::from_millis(1500));
    assert_eq!(t.head, Duration::from_millis(250));
    assert_eq!(rest, args("--port 9 -x"));
    assert_eq!(
        Timeouts::from_args(&[]).expect("none").0,
        Timeouts::default()
    );
    for bad in [
        "--idle-timeout",
        "--idle-timeout 0",
        "--head-timeout -1",
        "--head-timeout x",
        "--idle-timeout inf",
    ] {
        assert!(Timeouts::from_args(&args(bad)).is_err(), "{bad:?} accepted");
    }
}

// ===== the real server =====

/// The hosted server on a free port with `args`; its port.
fn server(args: &[&str]) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_httpd"))
        .args(["--port", "0"])
        .args(args)
        .env("EBB_CPUS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("httpd starts");
    let mut out = child.stdout.take().expect("its stdout");
    let mut line = Vec::new();
    let mut byte = [0u8];
    while out.read(&mut byte).expect("its stdout") == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let port = line
        .split_whitespace()
        .find_map(|w| w.rsplit_once(':').and_then(|(_, p)| p.parse().ok()))
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

#[test]
fn the_server_closes_an_idle_connection_and_answers_a_slow_head_with_408() {
    let (mut child, port) = server(&["--idle-timeout", "0.4", "--head-timeout", "0.3"]);
    let checked =
        ebb_testkit::http_timeouts::check(([127, 0, 0, 1], port).into(), Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = checked {
        panic!("{e}");
    }
}
