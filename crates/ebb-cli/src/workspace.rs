//! Finding the Ebbflow workspace and its apps.
//!
//! The workspace root is the first directory, from the current one upwards, holding a
//! `Cargo.toml` with a `[workspace]` table *and* an `apps/` directory (the second
//! condition skips a member crate's own workspace, such as `tests/guests`), or the parent
//! of `--manifest-path`. An app is a package directly under `apps/`; its name is the
//! `name` of its manifest's `[package]` table.

use crate::error::CliError;
use std::path::{Path, PathBuf};

/// An Ebbflow workspace.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The directory holding the workspace's `Cargo.toml`.
    pub root: PathBuf,
}

impl Workspace {
    /// Finds the workspace from `start` upwards.
    pub fn find_from(start: &Path) -> Result<Workspace, CliError> {
        start
            .ancestors()
            .find(|dir| is_workspace_root(dir))
            .map(|dir| Workspace {
                root: dir.to_path_buf(),
            })
            .ok_or_else(|| CliError::NoWorkspace {
                start: start.to_path_buf(),
            })
    }

    /// The workspace whose manifest is `manifest`.
    pub fn from_manifest(manifest: &Path) -> Result<Workspace, CliError> {
        let bad = |reason: &str| CliError::BadManifestPath {
            path: manifest.to_path_buf(),
            reason: reason.to_string(),
        };
        if manifest.file_name().is_none_or(|name| name != "Cargo.toml") {
            return Err(bad("not a path to a Cargo.toml"));
        }
        let manifest = manifest
            .canonicalize()
            .map_err(|e| bad(&format!("cannot open it: {e}")))?;
        let root = manifest
            .parent()
            .ok_or_else(|| bad("has no parent directory"))?;
        if !is_workspace_root(root) {
            return Err(bad(
                "not an Ebbflow workspace (a Cargo.toml with [workspace] next to apps/)",
            ));
        }
        Ok(Workspace {
            root: root.to_path_buf(),
        })
    }

    /// The workspace's `Cargo.toml`.
    pub fn manifest(&self) -> PathBuf {
        self.root.join("Cargo.toml")
    }

    /// The `apps/` directory.
    pub fn apps_dir(&self) -> PathBuf {
        self.root.join("apps")
    }

    /// The apps' package names, sorted (unreadable entries are skipped).
    pub fn apps(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.apps_dir()) else {
            return Vec::new();
        };
        let mut apps: Vec<String> = entries
            .flatten()
            .filter_map(|entry| std::fs::read_to_string(entry.path().join("Cargo.toml")).ok())
            .filter_map(|manifest| package_name(&manifest))
            .collect();
        apps.sort();
        apps
    }

    /// Checks that `name` is one of the apps.
    pub fn require_app(&self, name: &str) -> Result<(), CliError> {
        let known = self.apps();
        if known.iter().any(|app| app == name) {
            Ok(())
        } else {
            Err(CliError::UnknownApp {
                name: name.to_string(),
                apps_dir: self.apps_dir(),
                known,
            })
        }
    }
}

fn is_workspace_root(dir: &Path) -> bool {
    dir.join("apps").is_dir()
        && std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|manifest| manifest.lines().any(|l| l.trim() == "[workspace]"))
}

/// The `name` in a manifest's `[package]` table. A line-level reading of the TOML that
/// handles what `cargo new` writes (`name = "x"` on its own line), which is all `apps/`
/// holds.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() == "name" {
            let value = value.trim();
            return value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_parse() {
        let manifest = "[workspace]\nname = \"no\"\n\n[package]\nversion = \"1\"\n name = \"hello\" \n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("hello"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
        assert_eq!(package_name("[package]\nname.workspace = true\n"), None);
    }

    #[test]
    fn finds_this_repository_and_its_apps() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let ws = Workspace::find_from(here).expect("the repository is an Ebbflow workspace");
        assert!(here.starts_with(&ws.root));
        let apps = ws.apps();
        for app in ["echo", "hello", "multicore", "timer"] {
            assert!(apps.iter().any(|a| a == app), "{app} missing from {apps:?}");
        }
        assert!(ws.require_app("hello").is_ok());
        let err = ws.require_app("nope").unwrap_err().to_string();
        assert!(
            err.contains("unknown app \"nope\"") && err.contains("hello"),
            "{err}"
        );
        let from_manifest = Workspace::from_manifest(&ws.manifest()).expect("manifest");
        assert_eq!(from_manifest.root, ws.root.canonicalize().expect("root"));
        assert!(Workspace::from_manifest(&here.join("Cargo.toml")).is_err());
        assert!(Workspace::find_from(Path::new("/")).is_err());
    }
}
