//! The output of a process under test, line by line: read on a thread of its own so a
//! test can wait for a line with a timeout, and keep everything seen for its failure
//! message.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lines of a pipe, and everything read so far.
pub struct Lines {
    rx: Receiver<String>,
    seen: String,
    _reader: JoinHandle<()>,
}

impl Lines {
    /// Starts reading `pipe` (a child's stdout or stderr) on a thread.
    pub fn spawn(pipe: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: String::new(),
            _reader: reader,
        }
    }

    /// Waits at most `timeout` for a line containing `needle` (lines before it are kept
    /// in [`seen`](Self::seen)); returns it.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(needle) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("no {needle:?} within {timeout:?}"));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("the output ended before {needle:?}"));
                }
            }
        }
    }

    /// Takes whatever arrives until the pipe closes or `quiet` passes without a line.
    pub fn drain(&mut self, quiet: Duration) {
        while let Ok(line) = self.rx.recv_timeout(quiet) {
            self.seen.push_str(&line);
            self.seen.push('\n');
        }
    }

    /// Every line read so far.
    pub fn seen(&self) -> &str {
        &self.seen
    }
}
