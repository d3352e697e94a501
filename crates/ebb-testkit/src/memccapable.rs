//! Reading libmemcached's `memccapable` (Debian: libmemcached-tools) against a
//! memcached-compatible server: which of its tests passed, and whether the outcome is
//! what memcached 1.6.45 itself gets.
//!
//! memccapable was written against older memcached: its `ascii delete` and `ascii delete
//! noreply` tests send `delete a b c d e` and want an error, which memcached up to 1.6.39
//! gives (`CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`) and
//! 1.6.40 and later do not (the tokens after the key are ignored: `NOT_FOUND`). A server
//! that follows 1.6.45 — Ebbflow's memcached — fails exactly those two, at
//! [`DELETE_EXTRA_ARGUMENTS_CHECK`]; every other test must pass.

use std::process::Output;

/// memccapable's ASCII tests that memcached 1.6.45 fails (see the module docs).
pub const FAILED_BY_MEMCACHED_1_6_45: &[&str] = &["ascii delete", "ascii delete noreply"];

/// Where those two fail: the error memccapable waits for after `delete a b c d e`.
pub const DELETE_EXTRA_ARGUMENTS_CHECK: &str = "memcapable.cc:1456: receive_error_response()";

/// What one run of memccapable showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The tests that ran, in order.
    pub tests: Vec<String>,
    /// Those that did not pass.
    pub failed: Vec<String>,
}

/// The tests of a memccapable run and which did not pass, from its standard output.
/// Each test's name is printed padded to 40 columns, then `[pass]` and a newline if it
/// passed; if not, nothing more on standard output (memccapable prints `[FAIL]` on
/// standard error) unless `-v`, which adds the failed check's lines, the last ending in
/// `)`. So a name starts the output, a line, follows a `)`, or follows padding.
pub fn outcome(stdout: &str) -> Outcome {
    let mut tests = Vec::new();
    let mut failed = Vec::new();
    let mut at = 0;
    while let Some(start) = next_name(stdout, at) {
        let rest = &stdout[start..];
        let len = ["  ", "\n", "[pass]"]
            .iter()
            .filter_map(|end| rest.find(end))
            .min()
            .unwrap_or(rest.len());
        let name = rest[..len].trim_end().to_string();
        if !rest[len..].trim_start_matches(' ').starts_with("[pass]") {
            failed.push(name.clone());
        }
        tests.push(name);
        at = start + len.max(1);
    }
    Outcome { tests, failed }
}

/// Where the next test name starts at or after `from`.
fn next_name(stdout: &str, from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let rest = stdout.get(at..)?;
        let found = ["ascii ", "binary "]
            .iter()
            .filter_map(|prefix| rest.find(prefix))
            .min()?;
        let start = at + found;
        let before = &stdout[..start];
        if before.is_empty() || before.ends_with(['\n', ')']) || before.ends_with("  ") {
            return Some(start);
        }
        at = start + 1;
    }
}

/// Whether a memccapable run in `mode` (`-a` or `-b`) against a server following
/// memcached 1.6.45 came out as it does against 1.6.45: every test passed but, in ASCII
/// mode, exactly [`FAILED_BY_MEMCACHED_1_6_45`] (with `-v`, each at its check). `Ok` with the number
/// of tests passed; `Err` says what differs, with the whole output.
pub fn as_memcached_1_6_45(mode: &str, output: &Output) -> Result<usize, String> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let all = format!("{stdout}\n--- stderr ---\n{stderr}");
    let expected: &[&str] = if mode == "-a" {
        FAILED_BY_MEMCACHED_1_6_45
    } else {
        &[]
    };
    let run = outcome(&stdout);
    if run.tests.is_empty() {
        return Err(format!("memccapable {mode}: no test ran\n{all}"));
    }
    if run.failed != expected {
        return Err(format!(
            "memccapable {mode}: tests not passed {:?}, expected {expected:?}\n{all}",
            run.failed
        ));
    }
    // With -v each failure names its check: they must be the extra delete arguments'.
    let verbose = stdout.contains("memcapable.cc:");
    if verbose && stdout.matches(DELETE_EXTRA_ARGUMENTS_CHECK).count() != expected.len() {
        return Err(format!(
            "memccapable {mode}: the failures are not the extra delete arguments' check\n{all}"
        ));
    }
    let finished = if expected.is_empty() {
        output.status.success() && stdout.contains("All tests passed")
    } else {
        all.contains(&format!(
            "{} of {} tests failed",
            expected.len(),
            run.tests.len()
        ))
    };
    if !finished {
        return Err(format!(
            "memccapable {mode}: its summary does not say so ({})\n{all}",
            output.status
        ));
    }
    Ok(run.tests.len() - run.failed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_read_from_memccapables_lines() {
        let stdout = "ascii set                               [pass]\n\
            ascii delete                            \n\
            ./src/bin/memcapable.cc:1076: strncmp(buffer, \"ERROR\", 5) == 0\n\
            ./src/bin/memcapable.cc:1456: receive_error_response()ascii delete noreply                    \n\
            ./src/bin/memcapable.cc:1456: receive_error_response()ascii incr                              [pass]\n";
        let run = outcome(stdout);
        assert_eq!(
            run.tests,
            [
                "ascii set",
                "ascii delete",
                "ascii delete noreply",
                "ascii incr"
            ]
        );
        assert_eq!(run.failed, ["ascii delete", "ascii delete noreply"]);
        let all_pass = outcome("binary get   [pass]\nbinary set   [pass]\n");
        assert!(all_pass.failed.is_empty());
        // Without -v a failure prints nothing on standard output: the next name follows
        // the padding.
        let quiet = outcome(
            "ascii cas                               [pass]\n\
             ascii delete                            ascii delete noreply                    \
             ascii incr                              [pass]\n",
        );
        assert_eq!(
            quiet.tests,
            [
                "ascii cas",
                "ascii delete",
                "ascii delete noreply",
                "ascii incr"
            ]
        );
        assert_eq!(quiet.failed, ["ascii delete", "ascii delete noreply"]);
        // A passing test whose name starts another's is not mistaken for it.
        let run = outcome("ascii delete noreply  [pass]\nascii delete  \nx)binary noop [pass]\n");
        assert_eq!(run.failed, ["ascii delete"]);
    }
}
