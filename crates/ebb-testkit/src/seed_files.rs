//! Checked-in fuzz seeds kept equal to the bytes a test generates.
//!
//! Each fuzz project's seed test builds its seeds in code (so a seed says what it is
//! for) and calls [`check`] or [`check_exactly`] with them: the files under `seeds/`
//! must hold exactly those bytes, and `WRITE_SEEDS=1 cargo test` rewrites them. The fuzz
//! projects are workspaces of their own, so they include this file by path
//! (`#[path = ".../ebb-testkit/src/seed_files.rs"] mod seed_files;`) rather than
//! depending on the crate: it uses `std` only.

// A fuzz project that includes this file uses one of the two checks.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Whether `WRITE_SEEDS` asks for the files to be (re)written.
fn writing() -> bool {
    std::env::var_os("WRITE_SEEDS").is_some()
}

/// Checks that each seed's file under `dir` (its name may hold a subdirectory, such as
/// `target/name`) holds its bytes; with `WRITE_SEEDS` set, writes them first. Panics
/// naming the first missing or stale file.
pub fn check<N: AsRef<Path>, B: AsRef<[u8]>>(dir: &Path, seeds: impl IntoIterator<Item = (N, B)>) {
    let write = writing();
    for (name, bytes) in seeds {
        let path = dir.join(name);
        let bytes = bytes.as_ref();
        if write {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
            }
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (WRITE_SEEDS=1 cargo test writes it)",
                path.display()
            )
        });
        assert!(
            on_disk == bytes,
            "{} is stale (WRITE_SEEDS=1 cargo test rewrites it)",
            path.display()
        );
    }
}

/// [`check`], and `dir` holds no other file (with `WRITE_SEEDS` set it is emptied first).
pub fn check_exactly<N: AsRef<Path>, B: AsRef<[u8]>>(
    dir: &Path,
    seeds: impl IntoIterator<Item = (N, B)>,
) {
    if writing() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let seeds: Vec<(N, B)> = seeds.into_iter().collect();
    let mut names: Vec<_> = seeds
        .iter()
        .map(|(n, _)| n.as_ref().to_path_buf())
        .collect();
    check(dir, seeds);
    let mut on_disk: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.map(|e| PathBuf::from(e.file_name())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    on_disk.sort();
    names.sort();
    assert_eq!(
        on_disk,
        names,
        "{} holds other files (WRITE_SEEDS=1 cargo test rewrites it)",
        dir.display()
    );
}
