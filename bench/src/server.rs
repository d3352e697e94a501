//! A server process under test: started, its listening address read from its banner,
//! killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// A running server, killed (and reaped) on drop.
pub struct ServerProcess {
    child: Child,
    /// The address from the server's banner.
    pub addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `program args`, reads its first stdout line, which must start with `banner`
    /// followed by the listening address (anything after the address is ignored), e.g.
    /// `echo: listening on 127.0.0.1:7000 (2 cores)`.
    ///
    /// # Panics
    ///
    /// If the program cannot start or prints something else (it is a test helper).
    pub fn spawn(program: &str, args: &[&str], banner: &str) -> ServerProcess {
        Self::spawn_with_env(program, args, &[], banner)
    }

    /// As [`ServerProcess::spawn`], with `env` (name, value) pairs added to the server's
    /// environment (an Ebbflow app's core count is `EBB_CPUS`).
    pub fn spawn_with_env(
        program: &str,
        args: &[&str],
        env: &[(&str, &str)],
        banner: &str,
    ) -> ServerProcess {
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("no banner from {program}: {e}"));
        let addr = line
            .trim()
            .strip_prefix(banner)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("unexpected banner from {program}: {line:?}"));
        ServerProcess { child, addr }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
