//! A veth pair for tests (and bench scripts' Rust drivers) that put an AF_XDP device on
//! one end and Linux on the other: one end stays in this namespace for the device, the
//! peer goes into a namespace of its own with an address.
//!
//! What AF_XDP on veth needs, done here once (docs/notes/af-xdp-research.md, section 3):
//! * **one queue each way** (`numtxqueues 1 numrxqueues 1`): an AF_XDP socket is bound
//!   to one queue, and frames on another queue would bypass it;
//! * **the peer's transmit checksum offload off** (`ethtool -K PEER tx-checksumming
//!   off`): Linux's local senders leave TCP/UDP checksums partial on veth, and XDP does
//!   not say so, so the device would see frames with wrong checksums;
//! * **torn down on drop**: deleting the device end deletes the pair and with it any XDP
//!   program left attached (a crashed test's bpf_link is gone with its process anyway).

use std::process::{Command, Stdio};

use crate::netns::{Netns, ip, namespace, unique_name};

/// What a veth pair test needs: root, `ip`, `ethtool` and the programs in `tools`; the
/// skip for the first one missing otherwise.
pub fn need_veth(test: &str, tools: &[&str]) -> Option<()> {
    crate::need_root(test, "a veth pair and a network namespace")?;
    crate::need_tools(test, &["ip", "ethtool"])?;
    crate::need_tools(test, tools)
}

/// A veth pair: [`device`](Self::device) here (up, no address), [`peer`](Self::peer) in
/// [`ns`](Self::ns) with `peer_cidr`. Deleted on drop.
pub struct VethPair {
    /// The end for the AF_XDP device, in this namespace.
    pub device: String,
    /// The Linux end, in `ns`.
    pub peer: String,
    /// The peer's namespace (deleted on drop, after the pair).
    pub ns: Netns,
}

impl VethPair {
    /// Makes the pair with names from `prefix` (at most 6 bytes: interface names have
    /// at most 15), the peer at `peer_cidr` (e.g. `10.9.0.1/24`) in a new namespace. A
    /// failure is `test`'s failure (the capability was checked by [`need_veth`]).
    pub fn create(test: &str, prefix: &str, peer_cidr: &str) -> VethPair {
        let device = unique_name(&format!("{prefix}d"));
        let peer = unique_name(&format!("{prefix}p"));
        let ns = namespace(test, unique_name(&format!("{prefix}n")));
        ip(&[
            "link",
            "add",
            &device,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
        ]);
        let pair = VethPair { device, peer, ns };
        pair.ns.adopt(&pair.peer, peer_cidr);
        let ethtool = pair
            .ns
            .exec(&["ethtool", "-K", &pair.peer, "tx-checksumming", "off"])
            .output()
            .expect("run ethtool");
        assert!(
            ethtool.status.success(),
            "{test}: ethtool -K {} tx-checksumming off: {}",
            pair.peer,
            String::from_utf8_lossy(&ethtool.stderr)
        );
        ip(&["link", "set", &pair.device, "up"]);
        pair
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both, and any XDP program on them.
        let _ = Command::new("ip")
            .args(["link", "del", &self.device])
            .stderr(Stdio::null())
            .status();
    }
}
