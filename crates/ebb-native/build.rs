//! Puts `ebb-native.ld` on the linker search path of every crate that links ebb-native
//! for the bare-metal target, so a guest binary links with `-C link-arg=-Tebb-native.ld`
//! (set in the repository's `.cargo/config.toml` for `x86_64-unknown-none`).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=ebb-native.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("none") {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::copy("ebb-native.ld", out.join("ebb-native.ld")).expect("copy linker script");
    println!("cargo:rustc-link-search={}", out.display());
}
