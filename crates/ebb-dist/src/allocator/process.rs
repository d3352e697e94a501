//! [`ProcessNodeAllocator`]: each node's VM in a child process, `ebb run IMAGE` (the same
//! monitor and the same in-monitor forwards, behind a process boundary), for comparison
//! with the in-process backend.
//!
//! The child's stdout is the node's console; its stderr is kept for reports and says when
//! the VM is built (`ebb: running ...`, printed after the monitor bound the forwarded
//! ports), which is when `allocate` returns. A waiter thread reaps the child and
//! publishes the outcome its exit status tells: the status is all a process says, so a
//! guest that exits with the monitor's own codes (101 panic, 102/103 crash, 124 timeout)
//! is read as that. `free` sends SIGTERM (the monitor stops the VM and exits), then
//! SIGKILL if the child outlives [`FREE_BOUND`](super::FREE_BOUND).
//!
//! Not offered here: guest-to-host forwards (the `ebb` command has no option for them)
//! and a choice about passt (`ebb run --net user` starts it when installed).

use std::boxed::Box;
use std::format;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::string::{String, ToString};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;
use std::vec::Vec;

use super::{
    AllocateError, ConsoleLog, ForwardedPort, FreeError, NodeAllocator, NodeControl, NodeExit,
    NodeHandle, NodeImage, NodeNetwork, NodeOutcome, NodeSpec,
};

/// How long `allocate` waits for the child to say its VM is built.
const START_BOUND: Duration = Duration::from_secs(30);
/// Bytes of the child's stderr kept for reports (the newest).
const STDERR_KEEP: usize = 16 * 1024;
/// After SIGKILL, how long to wait for the reaper.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// Boots each node as a child `ebb run`: see the module docs.
#[derive(Debug)]
pub struct ProcessNodeAllocator {
    ebb: PathBuf,
    next: AtomicU32,
}

impl ProcessNodeAllocator {
    /// Nodes run by the `ebb` executable at `ebb`.
    pub fn new(ebb: impl Into<PathBuf>) -> ProcessNodeAllocator {
        ProcessNodeAllocator {
            ebb: ebb.into(),
            next: AtomicU32::new(0),
        }
    }
}

/// A loopback port free now (the child binds it a moment later; another program could
/// take it between, and the child then fails to start, saying so).
fn free_port() -> Result<u16, AllocateError> {
    let os = |source| AllocateError::Os {
        what: "finding a free port",
        source,
    };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(os)?;
    Ok(listener.local_addr().map_err(os)?.port())
}

impl NodeAllocator for ProcessNodeAllocator {
    fn allocate(&self, spec: NodeSpec) -> Result<NodeHandle, AllocateError> {
        if spec.shared_window != 0 {
            return Err(AllocateError::Unsupported(
                "a child `ebb run` cannot share its guest memory with this process: use \
                 LocalNodeAllocator"
                    .to_string(),
            ));
        }
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("process-node{index}");
        let mut cmd = Command::new(&self.ebb);
        cmd.args(["run", "--native", "--cpus"])
            .arg(spec.cpus.to_string())
            .arg("--mem")
            .arg(spec.memory.to_string());
        if let Some(t) = spec.timeout {
            cmd.arg("--timeout").arg(format!("{}", t.as_secs_f64()));
        }
        let mut forwards = Vec::new();
        match &spec.network {
            NodeNetwork::None => {
                cmd.args(["--net", "none"]);
            }
            NodeNetwork::User {
                forwards: ports,
                guest_forwards,
                outbound: _,
            } => {
                if !guest_forwards.is_empty() {
                    return Err(AllocateError::Unsupported(
                        "a child `ebb run` has no guest-to-host forwards: use \
                         LocalNodeAllocator"
                            .to_string(),
                    ));
                }
                cmd.args(["--net", "user"]);
                for &guest_port in ports {
                    let host = SocketAddrV4::new(Ipv4Addr::LOCALHOST, free_port()?);
                    cmd.arg("-p")
                        .arg(format!("{}:{}:{guest_port}", host.ip(), host.port()));
                    forwards.push(ForwardedPort { guest_port, host });
                }
            }
            NodeNetwork::Tap(device) => {
                cmd.arg("--net").arg(format!("tap={device}"));
            }
        }
        let (image, temporary) = match &spec.image {
            NodeImage::Path(path) => (path.clone(), None),
            NodeImage::Bytes(bytes) => {
                let path = std::env::temp_dir()
                    .join(format!("ebb-dist-{}-{name}.image", std::process::id()));
                std::fs::write(&path, bytes).map_err(|source| AllocateError::Os {
                    what: "writing the image for the child",
                    source,
                })?;
                (path.clone(), Some(path))
            }
        };
        cmd.arg(&image).arg("--").args(&spec.args);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| AllocateError::Os {
                what: "spawning `ebb run`",
                source,
            })?;
        let pid = child.id();
        let console = ConsoleLog::default();
        let stderr_kept = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let console_thread = {
            let console = console.clone();
            let tee = spec.console_to_stdout;
            std::thread::spawn(move || {
                let Some(mut out) = stdout else { return };
                let mut buf = [0u8; 4096];
                while let Ok(n) = out.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    console.append(&buf[..n]);
                    if tee {
                        use std::io::Write;
                        let _ = std::io::stdout().write_all(&buf[..n]);
                    }
                }
            })
        };
        let stderr_thread = {
            let kept = stderr_kept.clone();
            std::thread::spawn(move || {
                let Some(err) = stderr else { return };
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if line.starts_with("ebb: running") {
                        let _ = ready_tx.send(());
                    }
                    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    kept.push_str(&line);
                    kept.push('\n');
                    if kept.len() > STDERR_KEEP {
                        let cut = kept.len() - STDERR_KEEP;
                        let cut = (cut..kept.len())
                            .find(|&i| kept.is_char_boundary(i))
                            .unwrap_or(kept.len());
                        kept.drain(..cut);
                    }
                }
            })
        };
        let exit = NodeExit::default();
        let stopped = Arc::new(AtomicBool::new(false));
        let reaper = {
            let exit = exit.clone();
            let stopped = stopped.clone();
            let stderr_kept = stderr_kept.clone();
            std::thread::spawn(move || {
                let status = child.wait();
                let _ = stderr_thread.join();
                let _ = console_thread.join();
                let report = stderr_kept
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                exit.publish(outcome_of(status, stopped.load(Ordering::SeqCst), report));
            })
        };
        let mut control = ProcessControl {
            pid,
            stopped,
            exit: exit.clone(),
            reaper: Some(reaper),
            temporary,
        };
        if ready_rx.recv_timeout(START_BOUND).is_err() {
            // The child ended first (or hangs): say why, from its stderr.
            control.stop();
            let _ = control.release(super::FREE_BOUND);
            let said = stderr_kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            return Err(match exit.outcome() {
                Some(_) => AllocateError::Vm(said.trim().to_string()),
                None => AllocateError::StartTimeout(START_BOUND),
            });
        }
        Ok(NodeHandle {
            name,
            forwards,
            exit,
            console,
            shared_window: None,
            control: Some(Box::new(control)),
        })
    }
}

/// The outcome a child's exit status tells (see the module docs).
fn outcome_of(
    status: std::io::Result<std::process::ExitStatus>,
    stopped: bool,
    report: String,
) -> NodeOutcome {
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(s) => s,
        Err(e) => return NodeOutcome::Lost(format!("cannot wait for `ebb run`: {e}")),
    };
    match (status.code(), status.signal()) {
        (Some(101), _) => NodeOutcome::Panicked(report),
        (Some(102 | 103), _) => NodeOutcome::Crashed(report),
        (Some(1), _) if report.contains("monitor error") => NodeOutcome::Crashed(report),
        (Some(124), _) => NodeOutcome::TimedOut,
        (Some(143), _) | (None, Some(_)) if stopped => NodeOutcome::Freed,
        (Some(code), _) => NodeOutcome::Exited(code as u32),
        (None, signal) => NodeOutcome::Lost(format!(
            "`ebb run` was killed by signal {}",
            signal.unwrap_or(0)
        )),
    }
}

/// Stops a child node and reaps it.
struct ProcessControl {
    pid: u32,
    stopped: Arc<AtomicBool>,
    exit: NodeExit,
    reaper: Option<JoinHandle<()>>,
    /// An image file written for the child, removed on release.
    temporary: Option<PathBuf>,
}

impl ProcessControl {
    fn signal(&self, signal: rustix::process::Signal) {
        if self.exit.outcome().is_some() {
            return; // reaped: the pid may be another process's now
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

impl NodeControl for ProcessControl {
    fn stop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.signal(rustix::process::Signal::TERM);
    }

    fn release(&mut self, bound: Duration) -> Result<(), FreeError> {
        let mut result = Ok(());
        if self.exit.wait(bound).is_none() {
            self.signal(rustix::process::Signal::KILL);
            if self.exit.wait(KILL_GRACE).is_none() {
                result = Err(FreeError::Timeout(bound));
            }
        }
        if result.is_ok()
            && let Some(reaper) = self.reaper.take()
        {
            let _ = reaper.join();
        }
        if let Some(path) = self.temporary.take() {
            let _ = std::fs::remove_file(path);
        }
        result
    }
}
