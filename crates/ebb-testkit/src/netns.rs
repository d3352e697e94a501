//! Network namespaces and TAP devices for tests that talk to Ebbflow from Linux: what a
//! test needs from the machine (root, `/dev/net/tun`, `ip`, tools — a missing one is a
//! skip through [`crate::skip`]; anything else that fails is a failure), `ip` commands,
//! and a namespace deleted on drop.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{Capability, skip};

/// `Some(())` when this machine can give `test` a network namespace and a TAP device —
/// root, `/dev/net/tun`, `ip` and every program in `tools`; otherwise the skip for the
/// first capability missing.
pub fn need_namespace_and_tap(test: &str, tools: &[&str]) -> Option<()> {
    crate::need_root(test, "a network namespace and a TAP device")?;
    if !std::path::Path::new("/dev/net/tun").exists() {
        return skip(test, Capability::Tap, "/dev/net/tun does not exist");
    }
    crate::need_tools(test, &["ip"])?;
    crate::need_tools(test, tools)
}

/// Creates namespace `name` for `test`; a failure is the test's failure (the capability
/// was checked by [`need_namespace_and_tap`]).
pub fn namespace(test: &str, name: String) -> Netns {
    Netns::create(name).unwrap_or_else(|e| panic!("{test}: {e}"))
}

/// Runs `ip ARGS`, panicking with its output if it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A name unique to this process and call: `{prefix}{pid}{n}` (keep the prefix short,
/// interface names have at most 15 bytes).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}{n}", std::process::id())
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates namespace `name` (with its loopback up), or says why it cannot.
    pub fn create(name: String) -> Result<Netns, String> {
        let created = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        if !created.status.success() {
            return Err(format!(
                "cannot create a network namespace: {}",
                String::from_utf8_lossy(&created.stderr).trim()
            ));
        }
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        Ok(ns)
    }

    /// Moves interface `dev` into the namespace, gives it `cidr` and brings it up.
    pub fn adopt(&self, dev: &str, cidr: &str) {
        adopt(&self.name, dev, cidr);
    }

    /// `ip netns exec NS args...`
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// Moves interface `dev` into namespace `ns`, gives it `cidr` and brings it up.
pub fn adopt(ns: &str, dev: &str, cidr: &str) {
    ip(&["link", "set", dev, "netns", ns]);
    ip(&["-n", ns, "addr", "add", cidr, "dev", dev]);
    ip(&["-n", ns, "link", "set", dev, "up"]);
}
