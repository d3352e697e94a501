//! Helpers shared by the integration tests that run the server as a process: start it
//! hosted (or Debian's memcached) on a free port, or natively — the image booted under KVM
//! by `ebb run` with user-mode networking (passt) and a free host port forwarded to the
//! guest's port 11211 — and kill it on drop; a tiny text-protocol client over `TcpStream`
//! with timeouts, a seeded RNG and a checksum.
//!
//! Each test file includes this with `mod common;` and uses part of it.
//!
//! ## The native server
//!
//! The `ebb` command is not built for this package's tests (`CARGO_BIN_EXE_ebb` exists in
//! ebb-cli's own tests only), so the test binary is the `ebb` command itself: ebb-cli is a
//! dev-dependency, and [`ebb_command`] — a test that does nothing in a normal run — runs
//! `ebb` with the arguments in `EBB_MEMCACHED_TESTS_EBB` when the binary is re-executed
//! with that variable set (`TEST_BINARY --exact common::ebb_command --nocapture`). So the
//! monitor is always the one of this checkout, built with the tests, and nothing else has
//! to be built for the host. The image is built once per test binary by `ebb build
//! --native memcached` into a target directory of its own (`target/ebb-apps`, shared with
//! ebb-cli's tests: the workspace's own is locked by the `cargo test` running us).

#![allow(dead_code)]

use ebb_testkit::{Capability, Run, for_nested_cargo};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Everything a native server printed (the guest's console, `ebb`'s and the monitor's
/// lines), in the order it came.
type Output = Arc<Mutex<String>>;

/// A started server process: its pid, the pids of its children to kill with it (the
/// native server's passt), and its output when it is kept.
struct Started {
    thread: ThreadId,
    pid: u32,
    children: Vec<u32>,
    output: Option<Output>,
}

/// The server processes alive, by the thread that started them: when [`bounded`] gives
/// up on a thread it kills that thread's servers (their `Drop` will never run).
static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

fn register(pid: u32, children: Vec<u32>, output: Option<Output>) {
    let thread = std::thread::current().id();
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Started {
            thread,
            pid,
            children,
            output,
        });
}

fn unregister(pid: u32) {
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|s| s.pid != pid);
}

fn kill_pid(pid: u32) {
    let _ = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// Asks the monitor of a native server (`ebb run`, pid `pid`) for its network and exit
/// counters (SIGUSR1: one `ebb-vmm: virtio-net: ...` line on its stderr), and gives it a
/// moment to print them: after a failure they tell a stuck guest (no exits, frames
/// waiting) from a stuck network.
fn ask_counters(pid: u32) {
    let asked = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .stderr(Stdio::null())
        .status();
    if asked.is_ok_and(|s| s.success()) {
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Kills the servers `thread` started; what the native ones among them printed.
fn kill_started_by(thread: ThreadId) -> String {
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    let mut outputs = String::new();
    for s in started.iter().filter(|s| s.thread == thread) {
        if s.output.is_some() {
            ask_counters(s.pid);
        }
        kill_pid(s.pid);
        for &child in &s.children {
            kill_pid(child);
        }
        if let Some(output) = &s.output {
            let output = output.lock().unwrap_or_else(|e| e.into_inner());
            outputs.push_str(&format!(
                "\n--- output of ebb run (pid {}) ---\n{output}",
                s.pid
            ));
        }
    }
    started.retain(|s| s.thread != thread);
    outputs
}

/// How long any single read or write of a test client may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A port nobody listens on right now (the OS's choice; a race with other processes is
/// possible, so starting retries).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// A server process on 127.0.0.1, killed when dropped: ours hosted, ours native (`ebb
/// run` booting the image, with passt forwarding the port) or Debian's memcached.
pub struct ServerProcess {
    child: Child,
    /// The port it listens on (natively: the host's end of the forward).
    pub port: u16,
    /// What it is, for messages.
    pub name: &'static str,
    /// Natively: the processes `ebb run` started (passt), killed with it.
    children: Vec<u32>,
    /// Natively: everything `ebb run` printed.
    output: Option<Output>,
    /// Whether a panic message already carried the output.
    output_shown: bool,
}

impl ServerProcess {
    /// Our server (`EBB_CPUS=1 memcached -p PORT ARGS...`), once it printed its banner.
    pub fn ours(args: &[&str]) -> ServerProcess {
        Self::ours_on(1, args)
    }

    /// Our server on `cores` cores (`EBB_CPUS=cores`).
    pub fn ours_on(cores: usize, args: &[&str]) -> ServerProcess {
        Self::ours_with_cpus_env(Some(cores), args)
    }

    /// Our server with `EBB_CPUS=cores`, or without `EBB_CPUS` at all for `None` (then
    /// `-t` in `args`, or every CPU, sets the cores).
    pub fn ours_with_cpus_env(cores: Option<usize>, args: &[&str]) -> ServerProcess {
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut command = Command::new(env!("CARGO_BIN_EXE_memcached"));
            match cores {
                Some(cores) => command.env("EBB_CPUS", cores.to_string()),
                None => command.env_remove("EBB_CPUS"),
            };
            let mut child = command
                .arg("-p")
                .arg(port.to_string())
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn our memcached");
            let stdout = child.stdout.take().expect("stdout piped");
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                for line in lines.by_ref() {
                    let Ok(line) = line else { break };
                    let ready = line.starts_with("memcached: listening on");
                    let _ = tx.send(line);
                    if ready {
                        break;
                    }
                }
                // Keep draining so the server never blocks on a full pipe.
                for _ in lines {}
            });
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(line) if line.starts_with("memcached: listening on") => {
                        register(child.id(), Vec::new(), None);
                        return ServerProcess {
                            child,
                            port,
                            name: "ours",
                            children: Vec::new(),
                            output: None,
                            output_shown: false,
                        };
                    }
                    Ok(line) => last_err = line,
                    Err(_) => {
                        let _ = child.kill();
                        let status = child.wait();
                        last_err = format!("no banner within 30 s ({status:?}): {last_err}");
                        break;
                    }
                }
            }
        }
        panic!("our memcached did not start: {last_err}");
    }

    /// Debian's memcached (`memcached -p PORT -U 0 -t 1 -l 127.0.0.1 ARGS...`, as
    /// `nobody` when we are root), once it accepts connections.
    pub fn reference(args: &[&str]) -> ServerProcess {
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new("memcached");
            cmd.args([
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "1",
                "-l",
                "127.0.0.1",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
            if ebb_testkit::is_root() {
                cmd.args(["-u", "nobody"]);
            }
            let mut child = cmd.spawn().expect("spawn memcached");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // port taken, most likely: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    register(child.id(), Vec::new(), None);
                    return ServerProcess {
                        child,
                        port,
                        name: "memcached 1.6.18",
                        children: Vec::new(),
                        output: None,
                        output_shown: false,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("Debian's memcached did not start");
    }

    /// Our server booted natively under `ebb run` (user-mode networking through passt, a
    /// free host port on 127.0.0.1 forwarded to the guest's port 11211), with `cpus`
    /// vCPUs, guest memory `mem` (e.g. `Some("256M")`; `None` = ebb's default) and the
    /// server's own flags `args` (e.g. `&["-m", "16"]`). Waits for `memcached: listening
    /// on`. `None` when the test was skipped (no usable /dev/kvm, or passt missing):
    /// recorded through [`ebb_testkit::skip`] with the capability, which becomes a failure
    /// when `EBB_REQUIRE` names it.
    pub fn native(
        test: &str,
        cpus: usize,
        mem: Option<&str>,
        args: &[&str],
    ) -> Option<ServerProcess> {
        Self::native_with(test, Some(cpus), mem, args)
    }

    /// Our server booted natively by `ebb run memcached` (the app by name, so `ebb` reads
    /// its manifest) without `--cpus`: the vCPUs are what `ebb run` chooses (the app's
    /// `-t` in `args`). Otherwise as [`ServerProcess::native`].
    pub fn native_by_app_name(test: &str, args: &[&str]) -> Option<ServerProcess> {
        Self::native_with(test, None, None, args)
    }

    fn native_with(
        test: &str,
        cpus: Option<usize>,
        mem: Option<&str>,
        args: &[&str],
    ) -> Option<ServerProcess> {
        if let Err(e) = ebb_vmm::kvm_usable() {
            return ebb_testkit::skip(test, Capability::Kvm, &format!("/dev/kvm unusable: {e}"));
        }
        ebb_testkit::need_tools(test, &["passt"])?;
        let image = native_image();
        let name: &'static str = Box::leak(
            match cpus {
                Some(1) => "ours (native, 1 vCPU)".to_string(),
                Some(cpus) => format!("ours (native, {cpus} vCPUs)"),
                None => "ours (native, by ebb run memcached)".to_string(),
            }
            .into_boxed_str(),
        );
        let mut failures = String::new();
        for _ in 0..5 {
            let port = free_port();
            // By name, ebb builds the app (already built: `native_image`) and reads its
            // manifest; by path, it boots the image as it is.
            let target = match cpus {
                Some(_) => image.display().to_string(),
                None => "memcached".to_string(),
            };
            let mut ebb_args = vec!["run".to_string(), target, "--native".to_string()];
            if let Some(cpus) = cpus {
                ebb_args.extend(["--cpus".to_string(), cpus.to_string()]);
            }
            ebb_args.extend([
                // A net under a test process that dies without dropping its servers.
                "--timeout".to_string(),
                NATIVE_TIMEOUT.as_secs().to_string(),
                "--net".to_string(),
                "user".to_string(),
                "-p".to_string(),
                format!("127.0.0.1:{port}:11211"),
            ]);
            if let Some(mem) = mem {
                ebb_args.extend(["--mem".to_string(), mem.to_string()]);
            }
            ebb_args.push("--".to_string());
            ebb_args.extend(args.iter().map(|a| a.to_string()));
            let mut child = ebb_command_process(&ebb_args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start ebb run (this test binary re-executed)");
            let output: Output = Arc::default();
            keep_lines(child.stdout.take().expect("stdout piped"), &output);
            keep_lines(child.stderr.take().expect("stderr piped"), &output);
            let started = Instant::now();
            let outcome = loop {
                if output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains("memcached: listening on")
                {
                    break Ok(());
                }
                if let Ok(Some(status)) = child.try_wait() {
                    // The output may still be on its way: let the readers finish.
                    std::thread::sleep(Duration::from_millis(200));
                    break Err(format!("ebb run exited before the banner: {status}"));
                }
                if started.elapsed() > NATIVE_START_TIMEOUT {
                    break Err(format!("no banner within {NATIVE_START_TIMEOUT:?}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match outcome {
                Ok(()) => {
                    let children = descendants(child.id());
                    register(child.id(), children.clone(), Some(output.clone()));
                    return Some(ServerProcess {
                        child,
                        port,
                        name,
                        children,
                        output: Some(output),
                        output_shown: false,
                    });
                }
                Err(why) => {
                    for pid in descendants(child.id()) {
                        kill_pid(pid);
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    let printed = output.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    // Someone took the port between `free_port` and passt: another one.
                    let port_taken = printed.contains("in use by another program");
                    failures.push_str(&format!("--- {why}:\n{printed}"));
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        panic!("{test}: {name} did not start:\n{failures}");
    }

    /// The process id (for `/proc`; natively, `ebb run`'s: the monitor's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything a native server printed so far (the guest's console, `ebb`'s and the
    /// monitor's lines: a guest's panic report among them); empty for the others.
    pub fn output(&self) -> String {
        self.output
            .as_ref()
            .map(|o| o.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }

    /// Panics if the process has exited (natively: the VM, e.g. after a guest panic, with
    /// everything it printed).
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            if self.output.is_some() {
                // The last lines (the monitor's report) may still be in the pipe.
                std::thread::sleep(Duration::from_millis(200));
                self.output_shown = true;
                panic!(
                    "{} exited: {status}\n--- output of ebb run ---\n{}",
                    self.name,
                    self.output()
                );
            }
            panic!("{} exited: {status}", self.name);
        }
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(self.port)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let failed = self.output.is_some() && std::thread::panicking();
        if failed && matches!(self.child.try_wait(), Ok(None)) {
            ask_counters(self.child.id());
        }
        unregister(self.child.id());
        // passt would go when the monitor's end of its socket closes (`-1`); it is killed
        // rather than trusted to.
        for &pid in &self.children {
            kill_pid(pid);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if failed && !self.output_shown {
            // The test failed: what the VM said may be why (a guest panic).
            std::thread::sleep(Duration::from_millis(100));
            eprintln!(
                "--- output of ebb run for {} ---\n{}",
                self.name,
                self.output()
            );
        }
    }
}

/// Which of our servers a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ours {
    /// Hosted, on this many cores.
    Hosted(usize),
    /// Natively under `ebb run`, on this many vCPUs (guest memory: ebb's default).
    Native(usize),
}

impl Ours {
    /// Starts it with the server flags `args`; `None` when `test` was skipped (natively
    /// only: see [`ServerProcess::native`]).
    pub fn start(self, test: &str, args: &[&str]) -> Option<ServerProcess> {
        match self {
            Ours::Hosted(cores) => Some(ServerProcess::ours_on(cores, args)),
            Ours::Native(cpus) => ServerProcess::native(test, cpus, None, args),
        }
    }

    /// Whether it is the native server.
    pub fn is_native(self) -> bool {
        matches!(self, Ours::Native(_))
    }

    /// Its cores or vCPUs.
    pub fn cores(self) -> usize {
        match self {
            Ours::Hosted(n) | Ours::Native(n) => n,
        }
    }
}

/// How long `ebb run` may run natively: longer than any test (a net under a test process
/// that dies without dropping its servers).
const NATIVE_TIMEOUT: Duration = Duration::from_secs(900);
/// From `ebb run` to the server's banner (the image is built; two VMs booting on a loaded
/// 2-CPU machine take a few seconds).
const NATIVE_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The variable that turns this test binary into the `ebb` command (see [`ebb_command`]):
/// its arguments, one per line.
const EBB_ARGS_ENV: &str = "EBB_MEMCACHED_TESTS_EBB";

/// Not a test: the `ebb` command, run when this binary is re-executed with
/// `EBB_MEMCACHED_TESTS_EBB` set (see [`ebb_command_process`]); ends the process with
/// `ebb`'s exit code. In a normal test run it does nothing.
#[test]
fn ebb_command() {
    let Ok(args) = std::env::var(EBB_ARGS_ENV) else {
        return;
    };
    let args = std::iter::once("ebb").chain(args.split('\n'));
    let code = match <ebb_cli::Cli as clap::Parser>::try_parse_from(args) {
        Ok(cli) => match cli.execute() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ebb: error: {e}");
                ebb_cli::EXIT_CLI_ERROR
            }
        },
        Err(e) => {
            eprintln!("{e}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// This test binary re-executed as `ebb ARGS...` with the image target directory and the
/// workspace's manifest, without the variables that would mislead a nested cargo.
fn ebb_command_process(args: &[String]) -> Command {
    let mut all = vec![
        "--target-dir".to_string(),
        apps_target_dir().display().to_string(),
        "--manifest-path".to_string(),
        workspace_root().join("Cargo.toml").display().to_string(),
    ];
    all.extend(args.iter().cloned());
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    // `--nocapture`: `ebb` prints with `println!`, which the harness would capture and the
    // exit would lose.
    cmd.args([
        "--exact",
        "common::ebb_command",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(EBB_ARGS_ENV, all.join("\n"));
    for_nested_cargo(&mut cmd);
    cmd
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The apps' own target directory (the one ebb-cli's tests use).
fn apps_target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("../ebb-apps")
}

/// When each thread started waiting for the native image, and when it got it: [`bounded`]
/// does not count that time (on a clean checkout the first build takes a minute or more,
/// more than some tests are given).
static IMAGE_WAITS: Mutex<Vec<(ThreadId, Instant, Option<Instant>)>> = Mutex::new(Vec::new());

/// How long `thread` has waited for the native image so far.
fn image_wait(thread: ThreadId) -> Duration {
    let now = Instant::now();
    IMAGE_WAITS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(t, _, _)| *t == thread)
        .map(|&(_, from, to)| to.unwrap_or(now).saturating_duration_since(from))
        .sum()
}

/// The native memcached image, built once per test binary (`ebb build --native
/// memcached`); panics if the build fails.
fn native_image() -> PathBuf {
    let me = std::thread::current().id();
    let from = Instant::now();
    let waits = || IMAGE_WAITS.lock().unwrap_or_else(|e| e.into_inner());
    waits().push((me, from, None));
    let image = build_native_image();
    for wait in waits().iter_mut() {
        if wait.0 == me && wait.1 == from {
            wait.2 = Some(Instant::now());
        }
    }
    image.unwrap_or_else(|e| panic!("{e}"))
}

fn build_native_image() -> Result<PathBuf, String> {
    static IMAGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let started = Instant::now();
            let run = Run::of(
                ebb_command_process(&[
                    "build".to_string(),
                    "--native".to_string(),
                    "memcached".to_string(),
                ])
                .stdin(Stdio::null()),
            );
            // The path is the last word of its line: the harness's `test ... ` may be
            // before it on the same line.
            let path = run
                .stdout
                .lines()
                .filter_map(|l| l.split_whitespace().last())
                .rfind(|word| word.ends_with("/memcached"))
                .map(PathBuf::from);
            match path {
                Some(path) if run.code == 0 && path.is_file() => {
                    println!(
                        "native memcached image {} ready in {:?}",
                        path.display(),
                        started.elapsed()
                    );
                    Ok(path)
                }
                _ => Err(format!("ebb build --native memcached: {run:?}")),
            }
        })
        .clone()
}

/// Reads `pipe` line by line on a thread of its own into `output`.
fn keep_lines(pipe: impl Read + Send + 'static, output: &Output) {
    let output = output.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let mut output = output.lock().unwrap_or_else(|e| e.into_inner());
                    output.push_str(&text);
                    if !text.ends_with('\n') {
                        output.push('\n');
                    }
                }
            }
        }
    });
}

/// The processes below `pid` (from each process's parent in `/proc/N/stat`).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                parents.push((child, ppid));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, ppid) in &parents {
            if ppid == parent && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// A text-protocol client: a `TcpStream` with timeouts and a read buffer.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        Self::from_stream(stream)
    }

    /// Wraps a connected stream (sets the timeouts and TCP_NODELAY).
    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            reader: BufReader::with_capacity(256 << 10, stream),
        }
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    /// Writes all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write");
    }

    /// Shuts down the sending side (the server sees end of input).
    pub fn shutdown_write(&self) {
        self.stream().shutdown(Shutdown::Write).expect("shutdown");
    }

    /// One line without its `"\r\n"` (panics at end of input or on timeout).
    pub fn line(&mut self) -> Vec<u8> {
        self.try_line()
            .unwrap_or_else(|e| panic!("reading a reply line: {e}"))
    }

    /// One line without its `"\r\n"`, or why none came.
    pub fn try_line(&mut self) -> std::io::Result<Vec<u8>> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("incomplete line {:?}", line.escape_ascii().to_string()),
            ));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    /// One line as a string.
    pub fn line_str(&mut self) -> String {
        String::from_utf8_lossy(&self.line()).into_owned()
    }

    /// Exactly `n` bytes.
    pub fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        self.reader.read_exact(&mut buf).expect("read data");
        buf
    }

    /// Exactly `n` bytes, or why not.
    pub fn read_exact_checked(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0; n];
        self.reader
            .read_exact(&mut buf)
            .map_err(|e| format!("reading {n} bytes: {e}"))?;
        Ok(buf)
    }

    /// Reads until the server closes; what came before the close.
    pub fn read_to_end(&mut self) -> std::io::Result<Vec<u8>> {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest)?;
        Ok(rest)
    }

    /// Sends one line (adds `"\r\n"`) and returns the one-line reply.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes());
        self.line_str()
    }

    /// `set` and its one-line reply.
    pub fn set(&mut self, key: &str, flags: u32, exptime: i64, value: &[u8]) -> String {
        let mut req = format!("set {key} {flags} {exptime} {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.send(&req);
        self.line_str()
    }

    /// Reads the `VALUE` blocks and the `END` of a get reply: (key, flags, value) each.
    pub fn read_values(&mut self) -> Vec<(String, u32, Vec<u8>)> {
        let mut values = Vec::new();
        loop {
            let line = self.line_str();
            if line == "END" {
                return values;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            assert!(
                parts.len() >= 4 && parts[0] == "VALUE",
                "unexpected get reply line {line:?}"
            );
            let len: usize = parts[3].parse().expect("VALUE length");
            let mut data = self.read_exact(len + 2);
            assert_eq!(
                &data[len..],
                b"\r\n",
                "value of {} not ended by CRLF",
                parts[1]
            );
            data.truncate(len);
            values.push((parts[1].to_string(), parts[2].parse().unwrap(), data));
        }
    }

    /// `get key`: the value and flags, or `None`.
    pub fn get(&mut self, key: &str) -> Option<(u32, Vec<u8>)> {
        self.send(format!("get {key}\r\n").as_bytes());
        let mut values = self.read_values();
        assert!(values.len() <= 1, "one key, {} values", values.len());
        values.pop().map(|(k, flags, data)| {
            assert_eq!(k, key);
            (flags, data)
        })
    }

    /// `stats [group]` as a map.
    pub fn stats(&mut self, group: &str) -> HashMap<String, String> {
        let line = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.send(line.as_bytes());
        let mut map = HashMap::new();
        loop {
            let line = self.line_str();
            if line == "END" {
                return map;
            }
            let mut parts = line.splitn(3, ' ');
            assert_eq!(parts.next(), Some("STAT"), "stats line {line:?}");
            let name = parts.next().expect("stat name").to_string();
            map.insert(name, parts.next().unwrap_or("").to_string());
        }
    }

    /// One general statistic as a number.
    pub fn stat(&mut self, name: &str) -> u64 {
        let stats = self.stats("");
        stats
            .get(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
            .parse()
            .unwrap_or_else(|_| panic!("stat {name} is not a number"))
    }
}

/// A small seeded RNG (SplitMix64): tests replay from their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// FNV-1a, 64 bits: the checksum values carry.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `f` on a thread and panics if it takes longer than `limit` (a hung server must
/// fail the test, not hang it), killing the servers that thread started. Time spent
/// waiting for the native image to be built does not count.
pub fn bounded<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let worker = handle.thread().id();
    loop {
        let deadline = started + limit + image_wait(worker);
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(v) => {
                let _ = handle.join();
                return v;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the thread sent nothing but returned"),
            },
            // Still within the limit once the wait for the image is added: wait on.
            Err(mpsc::RecvTimeoutError::Timeout)
                if Instant::now() < started + limit + image_wait(worker) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let outputs = kill_started_by(worker);
                panic!("{what}: not done within {limit:?}{outputs}")
            }
        }
    }
}
