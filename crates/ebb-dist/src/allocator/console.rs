//! A node's console kept in memory, bounded: the monitor's console sink (local nodes) or
//! a child's stdout (process nodes) writes here.

use std::string::String;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use std::vec::Vec;

/// Bytes of a node's console kept (the newest); older output is dropped.
pub const CONSOLE_KEEP: usize = 64 * 1024;

#[derive(Default)]
struct Log {
    bytes: Vec<u8>,
    /// Bytes dropped from the front so far.
    dropped: u64,
}

/// A node's console output, the newest [`CONSOLE_KEEP`] bytes. Cheap to clone.
#[derive(Clone, Default)]
pub struct ConsoleLog {
    shared: Arc<(Mutex<Log>, Condvar)>,
}

impl std::fmt::Debug for ConsoleLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleLog").finish_non_exhaustive()
    }
}

impl ConsoleLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn append(&self, data: &[u8]) {
        let mut log = self.lock();
        log.bytes.extend_from_slice(data);
        if log.bytes.len() > CONSOLE_KEEP {
            let excess = log.bytes.len() - CONSOLE_KEEP;
            log.bytes.drain(..excess);
            log.dropped += excess as u64;
        }
        drop(log);
        self.shared.1.notify_all();
    }

    /// What is kept, as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock().bytes).into_owned()
    }

    /// Waits up to `timeout` until the kept output contains `needle`.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let needle = needle.as_bytes();
        let mut log = self.lock();
        loop {
            if log.bytes.windows(needle.len().max(1)).any(|w| w == needle) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            log = self
                .shared
                .1
                .wait_timeout(log, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A writer appending here (and to stdout when `tee`), for the monitor's console.
    pub(crate) fn sink(&self, tee: bool) -> ConsoleSink {
        ConsoleSink {
            log: self.clone(),
            tee,
        }
    }
}

/// See [`ConsoleLog::sink`].
pub(crate) struct ConsoleSink {
    log: ConsoleLog,
    tee: bool,
}

impl std::io::Write for ConsoleSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.log.append(buf);
        if self.tee {
            let _ = std::io::stdout().write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.tee {
            let _ = std::io::stdout().flush();
        }
        Ok(())
    }
}
