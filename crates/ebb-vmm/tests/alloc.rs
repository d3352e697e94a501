//! Boots the allocator stress guest (`tests/guests/src/bin/alloc_stress.rs`) with 1 and 2
//! vCPUs: random sizes (1 B–1 MiB) and alignments (to 4 KiB), every block checked before it
//! is freed, remote frees with 2 vCPUs, and growth until the allocator says no through
//! fallible APIs, then recovery. The guest exits non-zero on any mismatch; this checks its
//! exit code and summary lines.
//!
//! When `/dev/kvm` cannot be used the test prints `SKIPPED: <test>: /dev/kvm unusable:
//! <reason>` and returns.

mod common;

use common::{Run, boot, kvm};

/// The value of `key=` in the line starting with `prefix`.
fn field(run: &Run, prefix: &str, key: &str) -> Option<u64> {
    let line = run.stdout.lines().find(|l| l.starts_with(prefix))?;
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

#[test]
fn allocator_survives_random_remote_frees_and_exhaustion() {
    let Some(()) = kvm("allocator_survives_random_remote_frees_and_exhaustion") else {
        return;
    };
    for cpus in [1u32, 2] {
        let cpus_arg = cpus.to_string();
        let run = boot(
            "alloc_stress",
            &["--timeout", "120", "--mem", "256M", "--cpus", &cpus_arg],
        );
        println!("--- alloc_stress --cpus {cpus}\n{}", run.stdout);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("alloc_stress: ok"), "{run:?}");
        assert!(run.stderr.is_empty(), "{run:?}");
        let mixed = "alloc_stress: mixed:";
        let blocks = field(&run, mixed, "blocks").expect("blocks count");
        let local = field(&run, mixed, "local_frees").expect("local frees");
        let remote = field(&run, mixed, "remote_frees").expect("remote frees");
        assert!(blocks > 1000, "{run:?}");
        assert_eq!(local + remote, blocks, "{run:?}");
        assert_eq!(field(&run, mixed, "mismatches"), Some(0), "{run:?}");
        assert_eq!(field(&run, mixed, "misaligned"), Some(0), "{run:?}");
        assert_eq!(
            field(&run, mixed, "cores"),
            Some(u64::from(cpus)),
            "{run:?}"
        );
        if cpus == 1 {
            assert_eq!(remote, 0, "{run:?}");
        } else {
            // About half of all blocks are sent to the other core.
            assert!(remote > blocks / 4, "{run:?}");
        }
        let exhaustion = "alloc_stress: exhaustion:";
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(exhaustion))
            .unwrap_or_default();
        assert!(line.contains("1GiB refused=true"), "{run:?}");
        assert!(line.contains("usable_after_free=yes"), "{run:?}");
        // 256 MiB of guest memory: most of it is reachable in 1 MiB chunks, both times.
        let first = field(&run, exhaustion, "first_failure_after_mib").expect("first");
        let regrown = field(&run, exhaustion, "regrown_mib").expect("regrown");
        assert!((128..256).contains(&first), "{run:?}");
        assert!(regrown * 10 >= first * 9, "{run:?}");
    }
}
