//! The native command line as arguments (pure, so it is tested on the host too).

use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// Splits a native command line into arguments (on spaces; empty pieces dropped).
#[allow(dead_code)] // called by the native platform only; its test runs on the host
pub(crate) fn split_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split(' ')
        .filter(|a| !a.is_empty())
        .map(ToString::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_splits_on_spaces() {
        assert_eq!(split_cmdline(""), Vec::<String>::new());
        assert_eq!(split_cmdline("a  b c "), ["a", "b", "c"]);
    }
}
