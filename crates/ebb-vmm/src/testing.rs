//! A guest without KVM, for unit tests of the trust boundary: plain host memory behind a
//! [`GuestMem`], the console rings a real layout puts in it, a [`Shared`] VM state, and a
//! kick eventfd — everything the hypercall handler and the console drainer touch, which a
//! test then fills with whatever a hostile guest could write.

use crate::abi_error::AbiError;
use crate::console::Console;
use crate::guest::GuestMem;
use crate::hypercall::{self, Caller, Step};
use crate::layout::Layout;
use crate::shared::Shared;
use ebb_abi::IMAGE_BASE;
use std::io::Write;
use std::sync::{Arc, Mutex};
use vm_memory::{GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

/// Guest memory of every fake guest: 8 MiB.
pub const MEM_SIZE: u64 = 8 << 20;

/// Console output collected in memory.
#[derive(Clone, Default)]
pub struct Collected(pub Arc<Mutex<Vec<u8>>>);

impl Write for Collected {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A VM's state over host memory, with `cpus` cores.
pub struct FakeGuest {
    pub shared: Shared,
    pub layout: Layout,
    pub kick: EventFd,
    pub console_out: Collected,
}

impl FakeGuest {
    pub fn new(cpus: u32) -> FakeGuest {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)])
            .expect("host memory for the fake guest");
        let mem = GuestMem::new(mem, MEM_SIZE);
        let layout = Layout::new(MEM_SIZE, cpus, IMAGE_BASE, IMAGE_BASE + 0x1000, 0)
            .expect("a layout for the fake guest");
        let console_out = Collected::default();
        let console = Console::new(&mem, &layout, Box::new(console_out.clone()))
            .expect("console rings inside guest memory");
        FakeGuest {
            shared: Shared::new(mem, console, cpus),
            layout,
            kick: EventFd::new(0).expect("an eventfd"),
            console_out,
        }
    }

    pub fn mem(&self) -> &GuestMem {
        &self.shared.mem
    }

    /// The hypercall with its argument block at `value`, made by `core`.
    pub fn call(&self, core: u32, value: u32) -> Result<Step, AbiError> {
        hypercall::handle(
            &Caller {
                shared: &self.shared,
                core,
                kick: &self.kick,
            },
            value,
        )
    }

    /// What the console has printed so far, as text.
    pub fn printed(&self) -> String {
        String::from_utf8_lossy(&self.console_out.0.lock().expect("not poisoned")).into_owned()
    }
}
