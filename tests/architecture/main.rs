//! The tree's shape, checked (docs/12-the-tree.md): the fences of the crate graph (what the
//! monitor, the devices and the apps may depend on) and no import circles between the
//! files of any crate. These read the sources and `cargo metadata`; they build nothing.

mod fences;
mod imports;

use std::path::PathBuf;

/// The repository this test package sits in.
fn repository_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}
