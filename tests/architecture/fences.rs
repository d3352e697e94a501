//! The crate graph's fences: what the monitor, the guest's driver and the apps may
//! depend on (docs/12-the-tree.md). Read from `cargo metadata`, so a new dependency that
//! crosses a fence fails here, with the edge named.

use std::collections::BTreeSet;
use std::process::Command;

/// The workspace's own crates and, for each, the workspace crates it depends on
/// (normal and build dependencies; `dev` adds dev-dependencies).
fn workspace_edges(dev: bool) -> Vec<(String, BTreeSet<String>)> {
    let root = crate::repository_root();
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| dev || d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|name| ours.contains(name))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

fn deps_of(edges: &[(String, BTreeSet<String>)], name: &str) -> BTreeSet<String> {
    edges
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no workspace crate {name}"))
        .1
        .clone()
}

/// Fails with every dependency of `name` outside `allowed`.
fn only(edges: &[(String, BTreeSet<String>)], name: &str, allowed: &[&str]) {
    let extra: Vec<String> = deps_of(edges, name)
        .into_iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "{name} depends on {extra:?}; its fence allows only {allowed:?}"
    );
}

#[test]
fn the_monitor_depends_on_no_guest_runtime_and_no_stack() {
    let edges = workspace_edges(true);
    only(
        &edges,
        "ebb-vmm",
        &[
            "ebb-abi",
            "ebb-boot",
            "ebb-core",
            "ebb-net-driver",
            "ebb-tap",
            "ebb-xdp",
            "ebb-testkit",
            "ebb-toolchain",
            "ebb-bytestream",
            "ebb-shm",
            // Tests only: the device's hostile-guest cases run again with the backend
            // behind ebb-usernet's forwarder, the backend `ebb run` gives the monitor
            // (virtio/tests/usernet.rs). The library below never depends on it.
            "ebb-usernet",
        ],
    );
    let normal = workspace_edges(false);
    only(
        &normal,
        "ebb-vmm",
        &[
            "ebb-abi",
            "ebb-boot",
            "ebb-core",
            "ebb-net-driver",
            "ebb-tap",
            "ebb-xdp",
            // The shared window is an `ebb_shm::Mapping` (that crate depends on nothing).
            "ebb-shm",
        ],
    );
}

#[test]
fn devices_depend_on_the_driver_crate_not_on_the_stack() {
    let edges = workspace_edges(false);
    only(&edges, "ebb-net-driver", &["ebb-core"]);
    // The TAP speaks the virtio-net header (IFF_VNET_HDR), whose layout is ebb-abi's.
    only(
        &edges,
        "ebb-tap",
        &["ebb-abi", "ebb-core", "ebb-net-driver"],
    );
    // The AF_XDP device: rings over libc, the program loaded with aya (not ours).
    only(&edges, "ebb-xdp", &["ebb-core", "ebb-net-driver"]);
    // The boot writers write the boot protocol, whose layout is ebb-abi's.
    only(&edges, "ebb-boot", &["ebb-abi"]);
    // The rings of a shared window: plain memory, no runtime, so the monitor, both
    // runtimes and the facade can all use them.
    only(&edges, "ebb-shm", &[]);
}

#[test]
fn apps_depend_on_the_facade_and_app_libraries_only() {
    let edges = workspace_edges(false);
    for app in [
        "echo",
        "hello",
        "httpd",
        "memcached",
        "multicore",
        "sink",
        "timer",
    ] {
        only(&edges, app, &["ebb", "ebb-bytestream"]);
    }
}

#[test]
fn runtimes_do_not_depend_on_apps_even_for_tests() {
    let edges = workspace_edges(true);
    let apps = [
        "echo",
        "hello",
        "httpd",
        "memcached",
        "multicore",
        "sink",
        "timer",
    ];
    for (name, deps) in &edges {
        if name == "ebb" || name.starts_with("ebb-") {
            let bad: Vec<&String> = deps.iter().filter(|d| apps.contains(&d.as_str())).collect();
            assert!(
                bad.is_empty(),
                "{name} depends on the apps {bad:?}: cross-crate tests live in tests/"
            );
        }
    }
}
