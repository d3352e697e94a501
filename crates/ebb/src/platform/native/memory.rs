//! What `ebb::mem` holds natively: the allocator and its rounding. `ebb-native` installs
//! the general-purpose allocator as the image's `#[global_allocator]` over the VM's
//! memory, so there is no page source for an app to choose.

pub use ebb_mem::{GeneralPurposeAllocator, allocation_size};
