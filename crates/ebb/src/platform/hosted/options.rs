//! The hosted runtime's options, from the environment: how many cores (`EBB_CPUS`) and
//! how long an idle core polls before it sleeps (`EBB_IDLE_POLL_US`).

use alloc::string::{String, ToString};
use core::fmt;

/// The environment variable that sets a hosted app's core count.
pub const CPUS_ENV: &str = "EBB_CPUS";

/// The environment variable that sets how long a hosted app's idle core keeps polling
/// before it sleeps, in microseconds (0: sleep at once, like tokio; default 10:
/// `ebb_hosted::DEFAULT_IDLE_POLL`).
pub const IDLE_POLL_ENV: &str = "EBB_IDLE_POLL_US";

/// Why the hosted runtime cannot settle on a core count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoresError {
    /// `EBB_CPUS` is set but is not a core count.
    Malformed {
        /// The variable's value.
        value: String,
    },
    /// `EBB_CPUS` and the app's command line (`ebb::main!(app, cores = ...)`) ask for
    /// different core counts: neither silently wins.
    Conflict {
        /// `EBB_CPUS`.
        env: usize,
        /// What the command line asks for.
        requested: usize,
    },
}

impl fmt::Display for CoresError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoresError::Malformed { value } => write!(
                f,
                "{CPUS_ENV}={value:?} is not a core count (a whole number from 1)"
            ),
            CoresError::Conflict { env, requested } => write!(
                f,
                "{CPUS_ENV}={env} conflicts with the command line, which asks for {requested} \
                 core{}: unset {CPUS_ENV} or make the two agree",
                if *requested == 1 { "" } else { "s" }
            ),
        }
    }
}

impl std::error::Error for CoresError {}

/// How many cores a hosted app runs on: `EBB_CPUS` if set, else every CPU the process may
/// run on (the hosted runtime's default).
pub fn hosted_cores() -> Result<usize, CoresError> {
    match std::env::var_os(CPUS_ENV) {
        None => Ok(ebb_hosted::Config::default().cores),
        Some(value) => parse_cores(&value.to_string_lossy()),
    }
}

/// How many cores a hosted app whose command line asks for `requested` cores runs on
/// (`ebb::main!(app, cores = f)`, e.g. memcached's `-t N`): that many, and `EBB_CPUS`,
/// if it is set too, must say the same; with no request, [`hosted_cores`].
pub fn hosted_cores_for(requested: Option<usize>) -> Result<usize, CoresError> {
    let Some(requested) = requested else {
        return hosted_cores();
    };
    match std::env::var_os(CPUS_ENV) {
        None => Ok(requested),
        Some(value) => cores_agreeing(parse_cores(&value.to_string_lossy())?, requested),
    }
}

fn cores_agreeing(env: usize, requested: usize) -> Result<usize, CoresError> {
    if env == requested {
        Ok(requested)
    } else {
        Err(CoresError::Conflict { env, requested })
    }
}

/// The runtime's settings for `cores` cores, with `EBB_IDLE_POLL_US` applied (a value
/// that is not a whole number is reported and ignored).
pub(super) fn hosted_config(cores: usize) -> ebb_hosted::Config {
    let mut config = ebb_hosted::Config::with_cores(cores);
    if let Some(value) = std::env::var_os(IDLE_POLL_ENV) {
        match value.to_string_lossy().trim().parse::<u64>() {
            Ok(us) => config.idle_poll = std::time::Duration::from_micros(us),
            Err(_) => std::eprintln!("ebb: ignoring {IDLE_POLL_ENV}={value:?}: not microseconds"),
        }
    }
    config
}

fn parse_cores(value: &str) -> Result<usize, CoresError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(CoresError::Malformed {
            value: value.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_parse() {
        assert_eq!(parse_cores("2"), Ok(2));
        assert_eq!(parse_cores(" 3\n"), Ok(3));
        assert!(parse_cores("0").is_err());
        assert!(parse_cores("two").is_err());
        let message = parse_cores("x").unwrap_err().to_string();
        assert!(message.contains("EBB_CPUS"), "{message}");
    }

    #[test]
    fn a_request_and_ebb_cpus_must_agree() {
        assert_eq!(cores_agreeing(2, 2), Ok(2));
        let conflict = cores_agreeing(2, 1).unwrap_err();
        assert_eq!(
            conflict,
            CoresError::Conflict {
                env: 2,
                requested: 1
            }
        );
        let message = conflict.to_string();
        assert!(
            message.contains("EBB_CPUS=2") && message.contains("1 core:"),
            "{message}"
        );
    }
}
