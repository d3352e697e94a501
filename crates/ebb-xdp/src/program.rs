//! The XDP program that steers an interface's frames to our socket: the committed object
//! `bpf/redirect.o` (source `bpf/redirect.c`, rebuilt by `bpf/build.sh`), loaded with aya
//! and attached through a bpf_link, so it goes away when the process does.

use std::os::fd::BorrowedFd;

use aya::Ebpf;
use aya::maps::XskMap;
use aya::programs::{Xdp, XdpMode};

/// The compiled program (`clang -O2 -g -target bpf -c redirect.c`).
pub const OBJECT: &[u8] = include_bytes!("../bpf/redirect.o");
/// The program's name in [`OBJECT`].
pub const PROGRAM_NAME: &str = "xsk_redirect";
/// The XSKMAP's name in [`OBJECT`]: queue index → socket.
pub const MAP_NAME: &str = "xsks";

/// Why the program could not be loaded or attached: aya's message, and whether the
/// kernel said "not permitted".
#[derive(Debug)]
pub(crate) struct ProgramError {
    pub message: String,
    pub permission: bool,
}

fn failed(what: &str, e: impl std::fmt::Display + std::fmt::Debug) -> ProgramError {
    let message = format!("{what}: {e}");
    let debug = format!("{e:?}");
    let permission = debug.contains("code: 1,")
        || debug.contains("PermissionDenied")
        || debug.contains("Operation not permitted");
    ProgramError {
        message,
        permission,
    }
}

/// The loaded program, attached to an interface; detached on drop.
pub(crate) struct AttachedProgram {
    // Dropping the `Ebpf` drops the program and with it the link (detach).
    _bpf: Ebpf,
    sockets: XskMap<aya::maps::MapData>,
    /// Attached in driver (native) mode; otherwise generic (skb) mode.
    pub native: bool,
}

impl std::fmt::Debug for AttachedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachedProgram")
            .field("native", &self.native)
            .finish()
    }
}

impl AttachedProgram {
    /// Loads the program and attaches it to `interface`, in driver mode if the driver
    /// has XDP support (veth does), else in generic mode.
    pub fn attach(interface: &str) -> Result<Self, ProgramError> {
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| failed("loading the XDP object", e))?;
        let program: &mut Xdp = bpf
            .program_mut(PROGRAM_NAME)
            .ok_or_else(|| failed("XDP object", "no program xsk_redirect"))?
            .try_into()
            .map_err(|e| failed("XDP object", e))?;
        program
            .load()
            .map_err(|e| failed("loading the XDP program", e))?;
        let native = match program.attach(interface, XdpMode::Driver) {
            Ok(_) => true,
            Err(driver) => {
                program.attach(interface, XdpMode::Skb).map_err(|generic| {
                    failed(
                        "attaching the XDP program",
                        format!("driver mode: {driver}; generic mode: {generic:?}"),
                    )
                })?;
                false
            }
        };
        let map = bpf
            .take_map(MAP_NAME)
            .ok_or_else(|| failed("XDP object", "no map xsks"))?;
        let sockets = XskMap::try_from(map).map_err(|e| failed("XDP object", e))?;
        Ok(Self {
            _bpf: bpf,
            sockets,
            native,
        })
    }

    /// Sends queue `queue`'s frames to `socket`.
    pub fn bind(&mut self, queue: u32, socket: BorrowedFd<'_>) -> Result<(), ProgramError> {
        self.sockets
            .set(queue, socket, 0)
            .map_err(|e| failed("filling the XSKMAP", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rebuilt object that lost the names the device looks up is noticed here, without
    /// root (parsing only, no kernel).
    #[test]
    fn program_object_holds_the_expected_names() {
        let object = aya_obj_names(OBJECT);
        assert!(object.contains(&PROGRAM_NAME.to_string()), "{object:?}");
        assert!(object.contains(&MAP_NAME.to_string()), "{object:?}");
    }

    /// The symbol names of an ELF64 little-endian object (enough of ELF to read
    /// `.symtab`).
    fn aya_obj_names(elf: &[u8]) -> Vec<String> {
        let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
        let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(u16_at(18), 247, "machine is not BPF");
        let (shoff, shentsize, shnum) = (u64_at(40), u16_at(58), u16_at(60));
        let section = |i: usize| shoff + i * shentsize;
        let mut names = Vec::new();
        for i in 0..shnum {
            let sh = section(i);
            if u32_at(sh + 4) != 2 {
                continue; // not SHT_SYMTAB
            }
            let (off, size, link, entsize) = (
                u64_at(sh + 24),
                u64_at(sh + 32),
                u32_at(sh + 40),
                u64_at(sh + 56),
            );
            let strtab = u64_at(section(link) + 24);
            for s in (off..off + size).step_by(entsize) {
                let name = strtab + u32_at(s);
                let end = elf[name..].iter().position(|&b| b == 0).unwrap();
                names.push(String::from_utf8_lossy(&elf[name..name + end]).into_owned());
            }
        }
        names
    }
}
