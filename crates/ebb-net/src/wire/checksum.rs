//! The internet checksum (RFC 1071) and who handles it.
//!
//! Both are the device layer's, re-exported here for the parsers and emitters. The sum
//! ([`ebb_net_driver::checksum`]): [`data`] computes the folded sum (not yet
//! complemented) of a slice; sums of pieces [`combine`] into the sum of their
//! concatenation (each piece but the last must have even length); [`pseudo_header`] is
//! the IPv4 pseudo-header sum that TCP and UDP include. The value written into a header
//! is `!sum`. A buffer whose stored checksum is correct sums to `0xffff`.
//!
//! [`ChecksumCapabilities`] is what the device does with each protocol's checksum;
//! `parse` verifies and `emit` fills what it does not
//! ([`ChecksumOffload::software_verifies`] and its siblings). The default is software
//! for everything; [`ChecksumCapabilities::ALL`] skips every checksum (a device that
//! offloads them all, or a test or fuzzer that wants to reach past checksums).

pub use ebb_net_driver::checksum::{combine, data, pseudo_header};
pub use ebb_net_driver::{ChecksumCapabilities, ChecksumOffload};
