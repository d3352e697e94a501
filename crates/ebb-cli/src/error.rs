//! Everything `ebb` can fail at, as one error type; the doc comment of each variant is its
//! meaning and the `#[error]` text is what the user reads after `ebb: error: `.

use std::path::PathBuf;

pub use ebb_toolchain::NATIVE_TARGET;

/// Why an `ebb` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No workspace with an `apps/` directory above the current directory.
    #[error(
        "no Ebbflow workspace (a Cargo.toml with [workspace] next to an apps/ directory) in \
         {} or above it; give one with --manifest-path",
        start.display()
    )]
    NoWorkspace {
        /// Where the search started.
        start: PathBuf,
    },
    /// `--manifest-path` does not name an Ebbflow workspace's `Cargo.toml`.
    #[error("--manifest-path {}: {reason}", path.display())]
    BadManifestPath {
        /// The path given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The app is neither a package under `apps/` nor an existing file.
    #[error(
        "unknown app {name:?} (and no file by that name): the apps under {} are: {}",
        apps_dir.display(),
        if known.is_empty() { "none".to_string() } else { known.join(", ") }
    )]
    UnknownApp {
        /// The name given.
        name: String,
        /// The workspace's `apps/` directory.
        apps_dir: PathBuf,
        /// The packages found there, sorted.
        known: Vec<String>,
    },
    /// `cargo` could not be started or read.
    #[error("cannot run {cargo}: {source}")]
    CargoSpawn {
        /// The cargo executable.
        cargo: String,
        /// The error.
        source: std::io::Error,
    },
    /// The Rust toolchain lacks the native target.
    #[error(
        "the {NATIVE_TARGET} target is not installed, so native images cannot be built: run \
         `rustup target add {NATIVE_TARGET}` (or use --hosted)"
    )]
    TargetNotInstalled,
    /// The toolchain lacks the native target and it could not be added.
    #[error("{0} (or use --hosted)")]
    Toolchain(#[from] ebb_toolchain::ToolchainError),
    /// `cargo build` failed (its diagnostics were printed above).
    #[error("cargo build of {app} ({flavour}) failed: {status}")]
    BuildFailed {
        /// The app.
        app: String,
        /// "native" or "hosted".
        flavour: &'static str,
        /// Cargo's exit status.
        status: std::process::ExitStatus,
    },
    /// Cargo succeeded but reported no executable for the app.
    #[error("cargo built {app} ({flavour}) but reported no executable for it")]
    NoExecutable {
        /// The app.
        app: String,
        /// "native" or "hosted".
        flavour: &'static str,
    },
    /// A native run was asked for (or an image given) but KVM cannot be used.
    #[error(
        "cannot run natively: /dev/kvm is unusable: {reason} (check that /dev/kvm exists and \
         that this user may open it; or run the app with --hosted)"
    )]
    KvmUnusable {
        /// Why, as ebb-vmm reports it.
        reason: String,
    },
    /// The image could not be read, validated or booted (ebb-vmm's error).
    #[error("{}: {source}{hint}", path.display())]
    Image {
        /// The image.
        path: PathBuf,
        /// ebb-vmm's error.
        source: ebb_vmm::VmError,
        /// Advice appended to the message (empty when there is none).
        hint: &'static str,
    },
    /// The hosted executable could not be started or waited for.
    #[error("cannot run {}: {source}", path.display())]
    HostedSpawn {
        /// The executable.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An app's `[package.metadata.ebb]` table is malformed.
    #[error("apps/{app}/Cargo.toml: [package.metadata.ebb]: {reason}")]
    BadAppMetadata {
        /// The app.
        app: String,
        /// What is wrong.
        reason: String,
    },
    /// The VM's network could not be set up (passt missing, a busy port, a TAP device
    /// that cannot be opened).
    #[error("{0}")]
    Network(ebb_vmm::virtio::HostLinkError),
    /// The network options do not make a device.
    #[error(transparent)]
    NetOptions(#[from] ebb_vmm::net_options::NetOptionError),
    /// A command-line value is out of range.
    #[error("{0}")]
    BadArgument(String),
}

/// Appended to the error for a dynamic executable given as an image.
pub const HINT_HOSTED_EXECUTABLE: &str =
    " (if this is a hosted app's Linux executable, run it with --hosted)";

impl CliError {
    /// The error for an unusable `/dev/kvm`, from ebb-vmm's reason.
    pub fn kvm_unusable(reason: &ebb_vmm::VmError) -> CliError {
        CliError::KvmUnusable {
            reason: reason.to_string(),
        }
    }

    /// The error for an image ebb-vmm could not read, validate or boot.
    pub fn image(path: &std::path::Path, source: ebb_vmm::VmError) -> CliError {
        use ebb_vmm::image::ImageError;
        let hint = match &source {
            ebb_vmm::VmError::Image(ImageError::NotExecutable(_)) => HINT_HOSTED_EXECUTABLE,
            _ => "",
        };
        CliError::Image {
            path: path.to_path_buf(),
            source,
            hint,
        }
    }
}
