//! Finding the Ebbflow workspace and its apps.
//!
//! The workspace root is the first directory, from the current one upwards, holding a
//! `Cargo.toml` with a `[workspace]` table *and* an `apps/` directory (the second
//! condition skips a member crate's own workspace, such as `tests/guests`), or the parent
//! of `--manifest-path`. An app is a package directly under `apps/`; its name is the
//! `name` of its manifest's `[package]` table.
//!
//! A network app says so in its manifest, with the host ports `ebb run` forwards to it
//! by default:
//!
//! ```toml
//! [package.metadata.ebb]
//! network = true
//! publish = ["8080:80"]   # [ADDR:]HOST:GUEST, as -p takes them
//! try = "curl http://127.0.0.1:8080/"   # printed by `ebb run` once it starts the app
//! cores_flags = ["-t", "--threads"]     # the app's own flag for its core count
//! ```
//!
//! A distributed application's front end says `front_end = true`: `ebb run` runs it
//! hosted, with `EBB_NODE_IMAGE` naming its own native build, which its nodes boot.
//!
//! `cores_flags` names the app's flag that sets how many cores it serves on (memcached's
//! `-t N`): when `ebb run` is not given `--cpus`, it boots that many vCPUs (or starts
//! that many hosted cores), as [`cores_from_args`] reads them from the app's arguments.

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
        let mut apps: Vec<String> = self.manifests().into_iter().map(|m| m.name).collect();
        apps.sort();
        apps
    }

    /// Every readable app manifest under `apps/`.
    fn manifests(&self) -> Vec<AppManifest> {
        let Ok(entries) = std::fs::read_dir(self.apps_dir()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| std::fs::read_to_string(entry.path().join("Cargo.toml")).ok())
            .filter_map(|manifest| AppManifest::parse(&manifest))
            .collect()
    }

    /// What `name`'s manifest says about its network (an app without the table, or one
    /// that cannot be read, has none).
    pub fn app_network(&self, name: &str) -> Result<AppNetwork, CliError> {
        match self.manifests().into_iter().find(|m| m.name == name) {
            Some(m) => m.network.map_err(|reason| CliError::BadAppMetadata {
                app: name.to_string(),
                reason,
            }),
            None => Ok(AppNetwork::default()),
        }
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

/// An app's network, from `[package.metadata.ebb]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppNetwork {
    /// The app serves or uses a network: `ebb run` gives it one by default.
    pub network: bool,
    /// Host ports forwarded to it by default (`--net user`).
    pub publish: Vec<ebb_vmm::virtio::PortForward>,
    /// A command to try once it runs (`try`), printed by `ebb run`.
    pub hint: Option<String>,
    /// The app's flags that set its core count (`cores_flags`), e.g. `-t`, `--threads`.
    pub cores_flags: Vec<String>,
    /// The app is a distributed application's front end (`front_end = true`): `ebb run`
    /// runs it hosted and hands it its own native build, the image its nodes boot.
    pub front_end: bool,
}

/// The core count the app's `args` ask for through one of its `flags` (the last one
/// given wins, as getargs-style parsers take it): `-t N`, `-tN` (a one-letter flag),
/// `--threads N`, `--threads=N`. Returns the count and the flag as given, for the start
/// line; `None` when no flag is there or its value is not a count from 1 to 255 (the app
/// then reports it).
pub fn cores_from_args(flags: &[String], args: &[String]) -> Option<(u32, String)> {
    let mut found = None;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        for flag in flags {
            let value = if word == flag {
                words.clone().next().map(String::as_str)
            } else if flag.starts_with("--") {
                word.strip_prefix(flag.as_str())
                    .and_then(|v| v.strip_prefix('='))
            } else if flag.len() == 2 {
                word.strip_prefix(flag.as_str()).filter(|v| !v.is_empty())
            } else {
                None
            };
            if let Some(value) = value {
                found = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=255).contains(n))
                    .map(|n| (n, format!("{flag} {value}")));
            }
        }
    }
    found
}

/// What `ebb` reads from an app's `Cargo.toml`.
struct AppManifest {
    name: String,
    network: Result<AppNetwork, String>,
}

impl AppManifest {
    /// `None` when the text is not TOML or has no `package.name` string.
    fn parse(manifest: &str) -> Option<AppManifest> {
        let table: toml::Table = manifest.parse().ok()?;
        let package = table.get("package")?.as_table()?;
        let name = package.get("name")?.as_str()?.to_string();
        let network = match package.get("metadata").and_then(|m| m.get("ebb")) {
            None => Ok(AppNetwork::default()),
            Some(ebb) => parse_network(ebb),
        };
        Some(AppManifest { name, network })
    }
}

fn parse_network(ebb: &toml::Value) -> Result<AppNetwork, String> {
    let network = match ebb.get("network") {
        None => false,
        Some(v) => v.as_bool().ok_or("`network` must be true or false")?,
    };
    let publish = match ebb.get("publish") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .ok_or("`publish` must be a list of \"[ADDR:]HOST:GUEST\" strings")?
            .iter()
            .map(|p| {
                p.as_str()
                    .ok_or_else(|| format!("`publish` entry {p} is not a string"))?
                    .parse()
            })
            .collect::<Result<_, String>>()?,
    };
    let hint = match ebb.get("try") {
        None => None,
        Some(v) => Some(v.as_str().ok_or("`try` must be a string")?.to_string()),
    };
    let cores_flags = match ebb.get("cores_flags") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .ok_or("`cores_flags` must be a list of flags such as \"-t\"")?
            .iter()
            .map(|f| match f.as_str() {
                Some(f) if f.starts_with('-') && f.len() >= 2 => Ok(f.to_string()),
                _ => Err(format!("`cores_flags` entry {f} is not a flag")),
            })
            .collect::<Result<_, String>>()?,
    };
    let front_end = match ebb.get("front_end") {
        None => false,
        Some(v) => v.as_bool().ok_or("`front_end` must be true or false")?,
    };
    Ok(AppNetwork {
        network,
        publish,
        hint,
        cores_flags,
        front_end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_give_names_and_networks() {
        let name = |m: &str| AppManifest::parse(m).map(|m| m.name);
        let manifest = "[workspace]\n\n[package]\nversion = \"1\"\n name = \"hello\" \n[dependencies]\nname = \"x\"\n";
        assert_eq!(name(manifest).as_deref(), Some("hello"));
        assert_eq!(name("[dependencies]\nname = \"x\"\n"), None);
        assert_eq!(name("[package]\nname.workspace = true\n"), None);
        let net = |m: &str| AppManifest::parse(m).expect("parses").network;
        assert_eq!(net("[package]\nname = \"a\"\n"), Ok(AppNetwork::default()));
        let web = net("[package]\nname = \"w\"\n[package.metadata.ebb]\nnetwork = true\npublish = [\"8080:80\", \"0.0.0.0:1:2\"]\n")
            .expect("valid");
        assert!(web.network);
        assert_eq!(web.publish.len(), 2);
        assert_eq!(web.publish[1].host_port, 1);
        assert!(
            net("[package]\nname = \"b\"\n[package.metadata.ebb]\npublish = [\"80\"]\n").is_err()
        );
        assert!(net("[package]\nname = \"b\"\n[package.metadata.ebb]\nnetwork = 1\n").is_err());
        let flags = net("[package]\nname = \"m\"\n[package.metadata.ebb]\ncores_flags = [\"-t\", \"--threads\"]\n")
            .expect("valid");
        assert_eq!(flags.cores_flags, ["-t", "--threads"]);
        assert!(
            net("[package]\nname = \"b\"\n[package.metadata.ebb]\ncores_flags = [\"t\"]\n")
                .is_err()
        );
        let front = net("[package]\nname = \"c\"\n[package.metadata.ebb]\nfront_end = true\n")
            .expect("valid");
        assert!(front.front_end && !front.network);
        assert!(net("[package]\nname = \"c\"\n[package.metadata.ebb]\nfront_end = 1\n").is_err());
    }

    #[test]
    fn the_apps_core_flag_is_read_in_every_form() {
        let flags = ["-t".to_string(), "--threads".to_string()];
        let cores = |line: &str| {
            let args: Vec<String> = line.split_whitespace().map(String::from).collect();
            cores_from_args(&flags, &args)
        };
        assert_eq!(cores(""), None);
        assert_eq!(cores("-m 64"), None);
        assert_eq!(cores("-t 1"), Some((1, "-t 1".to_string())));
        assert_eq!(cores("-t3 -m 8"), Some((3, "-t 3".to_string())));
        assert_eq!(cores("--threads 2"), Some((2, "--threads 2".to_string())));
        assert_eq!(cores("--threads=4"), Some((4, "--threads 4".to_string())));
        assert_eq!(cores("-t 1 -t 2"), Some((2, "-t 2".to_string())));
        assert_eq!(cores("-t 0"), None);
        assert_eq!(cores("-t x"), None);
        assert_eq!(cores("-t 256"), None);
        assert_eq!(cores_from_args(&[], &["-t".into(), "1".into()]), None);
    }

    #[test]
    fn finds_this_repository_and_its_apps() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let ws = Workspace::find_from(here).expect("the repository is an Ebbflow workspace");
        assert!(here.starts_with(&ws.root));
        let apps = ws.apps();
        for app in ["echo", "hello", "httpd", "multicore", "sink", "timer"] {
            assert!(apps.iter().any(|a| a == app), "{app} missing from {apps:?}");
        }
        assert!(ws.app_network("httpd").expect("httpd's metadata").network);
        assert!(!ws.app_network("hello").expect("hello's metadata").network);
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
