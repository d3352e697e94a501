//! The VM's network device as configured: its backend, offloads and fault injection,
//! the backends opened for it, and the counters line it prints.

use super::VmError;
use crate::shared::Shared;
use crate::virtio::VirtioNetDevice;
use std::sync::atomic::Ordering;

/// The VM's network device: where its frames go.
#[derive(Clone, Debug)]
pub struct VmNetwork {
    /// The host side of the guest's link.
    pub link: HostLinkConfig,
    /// The guest's MAC address.
    pub mac: [u8; 6],
    /// Seeded faults between guest and backend (`--net-faults`).
    pub faults: Option<(ebb_net_driver::FaultConfig, u64)>,
    /// Offer checksum offload and TCP segmentation offload where the backend can honour
    /// them (a TAP; an external link that says so, [`HostLinkFactory::offload`];
    /// `--net-offload off` turns both off, for comparison).
    pub offload: bool,
}

impl VmNetwork {
    /// Whether the device offers checksum offload: asked for, and a TAP backend, or an
    /// external link that takes and gives checksum states and no `--net-faults` (see
    /// `virtio::net`, "Checksum offload", for why not with passt).
    pub fn checksum_offload(&self) -> bool {
        self.device_offload().checksum
    }

    /// Whether the device offers TCP segmentation offload both ways, HOST_TSO4 on
    /// transmit and GUEST_TSO4 (large receive) on receive: with checksum offload (the TAP
    /// then has a virtio-net header to carry the request) and no `--net-faults` (the
    /// injector takes the copying path, which hands the TAP bare frames and the guest
    /// frames without the TAP's header). See `virtio::net`, "Segmentation offload".
    pub fn segmentation_offload(&self) -> bool {
        self.device_offload().tso4
    }

    /// What the device offers: [`checksum_offload`](Self::checksum_offload) and
    /// [`segmentation_offload`](Self::segmentation_offload) (both directions).
    pub fn device_offload(&self) -> crate::virtio::Offload {
        use crate::virtio::Offload;
        if !self.offload {
            return Offload::NONE;
        }
        match &self.link {
            HostLinkConfig::Tap(_) if self.faults.is_none() => Offload::CHECKSUM_AND_TSO4,
            HostLinkConfig::Tap(_) => Offload::CHECKSUM,
            // An external link's frames go through the IOBuf path, which the fault
            // injector would sit on: offloads only without it.
            HostLinkConfig::External(link) if self.faults.is_none() => {
                let offered = link.factory.offload();
                // The spec's dependencies: no segmentation without checksum offload.
                Offload {
                    checksum: offered.checksum,
                    tso4: offered.checksum && offered.tso4,
                    guest_tso4: offered.checksum && offered.guest_tso4,
                }
            }
            _ => Offload::NONE,
        }
    }
}

/// Which host link a VM's network device gets ([`VmNetwork::link`]).
#[derive(Clone, Debug)]
pub enum HostLinkConfig {
    /// A TAP device (one queue per vCPU); needs root or CAP_NET_ADMIN.
    Tap(String),
    /// passt user-mode networking with TCP port forwards; no root.
    User(Vec<crate::virtio::PortForward>),
    /// An existing interface of one queue through AF_XDP (`ebb_xdp`), one socket for
    /// every vCPU (see `virtio::host_link::open_xdp`); needs root (CAP_NET_ADMIN and
    /// CAP_BPF). Linux no longer sees what arrives on the interface: the guest owns its
    /// traffic.
    Xdp(String),
    /// A host link built by a crate the monitor does not depend on (the in-monitor port
    /// forwards of `ebb-usernet`, which need a TCP/IP stack), handed in by whoever
    /// configures the VM (`ebb run`). One link for every vCPU.
    External(ExternalLink),
}

/// Builds a host link for [`HostLinkConfig::External`] when the VM opens its backends
/// (in `Vm::new`, before the I/O thread starts; the link then moves to that thread).
pub trait HostLinkFactory: Send + Sync {
    /// Opens the link for a guest whose MAC address is `guest_mac`.
    fn open(
        &self,
        guest_mac: [u8; 6],
    ) -> Result<Box<dyn crate::virtio::HostLink>, crate::virtio::HostLinkError>;

    /// The faults of `--net-faults` the link survives, as (toward the guest, from it).
    /// Default: all of them both ways.
    fn faults(
        &self,
        faults: ebb_net_driver::FaultConfig,
    ) -> (ebb_net_driver::FaultConfig, ebb_net_driver::FaultConfig) {
        (faults, faults)
    }

    /// The offloads the link honours on the device's IOBuf path (`virtio::net`,
    /// "Checksum offload" and "Segmentation offload"): `checksum`, it takes frames
    /// marked `FrameChecksum::Partial` (completing or trusting them) and may hand over
    /// such frames; `tso4`, it takes TCPv4 frames longer than the MTU, each to be cut as
    /// `ebb_net_driver::Segmentation::of` says for MTU 1500 (or taken whole by a
    /// receiver that can); `guest_tso4`, it may hand over such frames while
    /// [`HostLink::set_large_receive`](crate::virtio::HostLink::set_large_receive) is on.
    /// Offered only without `--net-faults`. Default: none.
    fn offload(&self) -> crate::virtio::Offload {
        crate::virtio::Offload::NONE
    }
}

/// A [`HostLinkFactory`] shared by the configuration's clones, named for `Debug`.
#[derive(Clone)]
pub struct ExternalLink {
    /// What the link is, for messages and `Debug`.
    pub name: String,
    /// What opens it.
    pub factory: std::sync::Arc<dyn HostLinkFactory>,
}

impl std::fmt::Debug for ExternalLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ExternalLink").field(&self.name).finish()
    }
}

/// One line of the counters of `net` and of the VM's exits, printed at the VM's end and
/// on SIGUSR1 (so a benchmark or test can take the difference over a steady phase).
pub fn net_summary(net: &VirtioNetDevice, shared: &Shared) -> String {
    let s = &net.stats;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    // With `--net-faults`: what the injector did, `rx_` toward the guest, `tx_` from it.
    let faults = s
        .faults
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .map(|f| {
            let mut out = String::new();
            for (dir, c) in [("rx", f.rx), ("tx", f.tx)] {
                out.push_str(&format!(
                    " {dir}_fault_seen={} {dir}_fault_dropped={} {dir}_fault_reordered={} \
                     {dir}_fault_duplicated={} {dir}_fault_corrupted={}",
                    c.seen, c.dropped, c.reordered, c.duplicated, c.corrupted
                ));
            }
            out
        })
        .unwrap_or_default();
    // Checksum and segmentation offload: what was offered and negotiated (1 or 0), and
    // how many frames used it.
    use ebb_abi::virtio::features::{NET_CSUM, NET_GUEST_CSUM, NET_GUEST_TSO4, NET_HOST_TSO4, bit};
    let has = |bits: u64, b| u8::from(bits & bit(b) != 0);
    let (offered, negotiated) = (net.offered(), net.features().unwrap_or(0));
    let csum = format!(
        " csum_offered={} csum={} guest_csum={} tso4_offered={} tso4={} \
         guest_tso4_offered={} guest_tso4={} tx_csum_partial={} tx_gso={} rx_gso={} \
         rx_csum_partial={} rx_csum_valid={}",
        has(offered, NET_CSUM),
        has(negotiated, NET_CSUM),
        has(negotiated, NET_GUEST_CSUM),
        has(offered, NET_HOST_TSO4),
        has(negotiated, NET_HOST_TSO4),
        has(offered, NET_GUEST_TSO4),
        has(negotiated, NET_GUEST_TSO4),
        get(&s.tx_csum_partial),
        get(&s.tx_gso),
        get(&s.rx_gso),
        get(&s.rx_csum_partial),
        get(&s.rx_csum_valid),
    );
    format!(
        "ebb-vmm: virtio-net: tx_frames={} rx_frames={} rx_dropped={} tx_dropped={} exits={} \
         mmio_exits={} kicks={} wakeups={} guest_turns={} guest_turns_expired={} io_real_time={}\
         {csum}{faults}{}",
        get(&s.tx_frames),
        get(&s.rx_frames),
        get(&s.rx_dropped),
        get(&s.tx_dropped),
        shared.exits.load(Ordering::Relaxed),
        get(&s.mmio_exits),
        get(&s.kicks),
        get(&s.wakes),
        get(&s.guest_turns),
        get(&s.guest_turns_expired),
        u8::from(s.io_real_time.load(Ordering::Relaxed)),
        net.broken()
            .map(|b| format!(" broken: {b}"))
            .unwrap_or_default(),
    )
}

/// The faults of `--net-faults` that passt survives, as (toward the guest, toward passt).
///
/// passt (Debian's 0.0~git20230309) never sends a pure ACK again once it has sent it, and
/// answers a retransmission of data it already acknowledged with nothing (RFC 9293 says
/// it must acknowledge it): a dropped — or corrupted, which the guest's checksum turns
/// into dropped — ACK on its way to the guest stalls that connection for good, whatever
/// the guest does. And passt does not verify the checksums of frames from the guest, so a
/// corrupted one reaches the host socket corrupted. So toward the guest only reordering
/// and duplication are made, toward passt drops too, corruption nowhere (a warning says
/// so). The TAP backend gets every fault both ways: Linux repairs all of them.
fn passt_faults(
    faults: ebb_net_driver::FaultConfig,
) -> (ebb_net_driver::FaultConfig, ebb_net_driver::FaultConfig) {
    use ebb_net_driver::Probability;
    if faults.drop.is_possible() || faults.corrupt.is_possible() {
        log::warn!(
            "--net user: passt cannot recover a frame lost on its way to the guest, nor \
             check one corrupted on its way to it: drops are made toward passt only, \
             corruption not at all (use --net tap for both)"
        );
    }
    let rx = faults
        .with_drop(Probability::NEVER)
        .with_corrupt(Probability::NEVER);
    let tx = faults.with_corrupt(Probability::NEVER);
    (rx, tx)
}

/// Opens the backends of `net`: one TAP queue per vCPU, one AF_XDP socket, one passt, or
/// one external link.
pub(super) fn open_backends(
    net: &VmNetwork,
    cpus: u32,
) -> Result<Vec<Box<dyn crate::virtio::HostLink>>, VmError> {
    use crate::virtio::host_link::{Passt, open_tap, open_xdp};
    let mut backends: Vec<Box<dyn crate::virtio::HostLink>> = match &net.link {
        HostLinkConfig::Tap(name) => open_tap(name, cpus as usize, net.checksum_offload())?
            .into_iter()
            .map(|tap| Box::new(tap) as Box<dyn crate::virtio::HostLink>)
            .collect(),
        HostLinkConfig::User(forwards) => vec![Box::new(Passt::start(forwards, net.mac)?)],
        HostLinkConfig::Xdp(interface) => vec![Box::new(open_xdp(interface)?)],
        HostLinkConfig::External(link) => vec![link.factory.open(net.mac)?],
    };
    if let Some((faults, seed)) = net.faults {
        let (rx_faults, tx_faults) = match &net.link {
            HostLinkConfig::Tap(_) | HostLinkConfig::Xdp(_) => (faults, faults),
            HostLinkConfig::User(_) => passt_faults(faults),
            HostLinkConfig::External(link) => link.factory.faults(faults),
        };
        backends = backends
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                Box::new(
                    ebb_net_driver::FaultInjector::new(b, seed.wrapping_add(i as u64))
                        .with_rx_faults(rx_faults)
                        .with_tx_faults(tx_faults),
                ) as Box<dyn crate::virtio::HostLink>
            })
            .collect();
    }
    Ok(backends)
}
