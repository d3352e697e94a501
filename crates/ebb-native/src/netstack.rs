//! ebb-net over virtio-net: the native platform's part of [`ebb_netstack`], the
//! counterpart of `ebb_hosted::netstack`.
//!
//! Everything about running the stack — poll policy, timers, steering between cores, the
//! [`NetStack`] API — is platform independent and lives in `ebb-netstack`. What is native
//! is here: the queue pairs come from the virtio-net driver ([`crate::virtio`]), one per
//! core, and the TCP initial-sequence-number secret comes from `RDRAND` (the TSC mixed in
//! where the CPU lacks it).

use alloc::boxed::Box;
use alloc::vec::Vec;

use ebb_net::wire::EthernetAddress;
use ebb_netstack::{
    AddressConfig, FaultSetting, NetStack, NetStackConfig, NetStackError, SendableDevice,
};

use crate::virtio::{self, VirtioError};

/// Why [`start`] failed.
#[derive(Debug, thiserror::Error)]
pub enum VirtioStartError {
    /// The virtio-net device is missing or could not be set up.
    #[error(transparent)]
    Device(#[from] VirtioError),
    /// The stack could not start on its queue pairs.
    #[error(transparent)]
    Stack(#[from] NetStackError),
}

/// Sets up the first virtio-net device with one queue pair per core (fewer if the device
/// offers fewer) and starts ebb-net on them, from the calling core (core 0's queue pair
/// is the home core's). The MAC is the device's.
pub fn start(
    address: AddressConfig,
    faults: Option<FaultSetting>,
) -> Result<NetStack, VirtioStartError> {
    let cores = u16::try_from(ebb_core::event::num_cores()).unwrap_or(u16::MAX);
    let net = virtio::open(cores)?;
    let mac = net.mac;
    let devices: Vec<SendableDevice> = net
        .pairs
        .into_iter()
        .map(|pair| Box::new(pair) as SendableDevice)
        .collect();
    let mut config = NetStackConfig::new(address, random_seed());
    config.mac = EthernetAddress(mac);
    config.faults = faults;
    Ok(NetStack::start(devices, config)?)
}

/// Two unpredictable words for the ISN secret (RFC 6528): `RDRAND` when the CPU has it,
/// else the TSC stirred (predictable to a patient observer; said here, not hidden).
pub fn random_seed() -> [u64; 2] {
    let tsc = crate::arch::rdtsc();
    match (crate::arch::rdrand(), crate::arch::rdrand()) {
        (Some(a), Some(b)) => [a, b ^ tsc],
        _ => {
            let mixed = tsc.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            [mixed, mixed.rotate_left(29) ^ 0x6562_625f_6973_6e31]
        }
    }
}
