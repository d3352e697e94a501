//! The `image` target's seeds: minimal valid images (one segment; code and a larger BSS;
//! two segments) and near misses the loader must refuse (entry outside every segment, a
//! segment below the image base, a segment that does not fit the guest). Each is checked
//! against the loader here, so the seeds stay meaningful; `seed_files_are_current`
//! checks `seeds/image/` holds exactly these bytes, `WRITE_SEEDS=1 cargo test` rewrites
//! them.

use ebb_vmm_fuzz::{MEM_SIZE, elf, guest_memory, load};
use std::path::PathBuf;

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

const BASE: u64 = 0x20_0000; // IMAGE_BASE
const CODE: &[u8] = &[0x90, 0x90, 0xeb, 0xfe]; // nop; nop; jmp .

fn seeds() -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        ("one-segment", elf(BASE, &[(BASE, CODE, 4)]), true),
        ("code-and-bss", elf(BASE + 2, &[(BASE, CODE, 0x3000)]), true),
        (
            "two-segments",
            elf(BASE, &[(BASE, CODE, 4), (BASE + 0x1000, b"data", 0x2000)]),
            true,
        ),
        ("entry-outside", elf(BASE + 0x10, &[(BASE, CODE, 4)]), false),
        ("below-base", elf(0x1000, &[(0x1000, CODE, 4)]), false),
        ("too-big", elf(BASE, &[(BASE, CODE, MEM_SIZE)]), false),
    ]
}

#[test]
fn seeds_load_or_are_refused_as_intended() {
    for (name, bytes, valid) in seeds() {
        let mem = guest_memory();
        let loaded = load(&bytes, &mem);
        assert_eq!(loaded.is_ok(), valid, "{name}: {loaded:?}");
        if valid {
            let mut code = [0u8; 4];
            code.copy_from_slice(&mem.read_bytes(BASE, 4).expect("loaded")[..]);
            assert_eq!(&code, CODE, "{name}: the code is in guest memory");
        }
    }
}

#[test]
fn seed_files_are_current() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/image");
    seed_files::check(
        &dir,
        seeds().into_iter().map(|(name, bytes, _)| (name, bytes)),
    );
}
