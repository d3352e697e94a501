//! `expect-status`: runs a command, exits 0 when it ended with the expected status and 1
//! otherwise — so hyperfine can time a command whose success is not status 0 (QEMU ends
//! with `(code << 1) | 1` through `isa-debug-exit`) without `--ignore-failure`, which
//! would count a failed run as a fast one.
//!
//! With `--wait-descendants` it also waits for every process the command left behind:
//! it is the child subreaper of the command's process tree, so orphans are reparented to
//! it and reaped before it exits. Our monitor hands KVM's VM teardown to a background
//! process and exits first; QEMU tears its VM down before it exits. Timing both through
//! `expect-status --wait-descendants` counts the teardown on both sides alike.
//!
//! Usage: `expect-status [--wait-descendants] STATUS -- COMMAND [ARGS...]`

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let wait_descendants = args.first().is_some_and(|a| a == "--wait-descendants");
    if wait_descendants {
        args.remove(0);
    }
    let (Some(expected), Some("--")) = (
        args.first().and_then(|s| s.parse::<i32>().ok()),
        args.get(1).map(String::as_str),
    ) else {
        eprintln!("usage: expect-status [--wait-descendants] STATUS -- COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    let Some(program) = args.get(2) else {
        eprintln!("expect-status: no command");
        return ExitCode::from(2);
    };
    if wait_descendants {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            eprintln!(
                "expect-status: cannot become a subreaper: {}",
                std::io::Error::last_os_error()
            );
            return ExitCode::from(2);
        }
    }
    let status = match Command::new(program).args(&args[3..]).status() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("expect-status: cannot run {program}: {e}");
            return ExitCode::from(2);
        }
    };
    if wait_descendants {
        // Reap every orphan of the command's tree until none is left.
        loop {
            // SAFETY: a null status pointer is allowed; waits for any child.
            let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
            if pid < 0 {
                break; // ECHILD: nothing left (EINTR cannot happen: no handlers)
            }
        }
    }
    if status.code() == Some(expected) {
        ExitCode::SUCCESS
    } else {
        eprintln!("expect-status: {program} ended with {status}, expected status {expected}");
        ExitCode::FAILURE
    }
}
