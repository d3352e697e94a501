//! Boots the test guests that run ebb-core's runtime (`tests/guests/src/bin/rt_*.rs`) on
//! the native platform: the executor on every vCPU, timers, multicore Ebbs, RCU, and a
//! sleeping core woken by a cross-core `spawn_on`. Each prints its measurements (run with
//! `--nocapture` to see them).
//!
//! The images are built by the first test that needs them, as in `boot.rs`. When
//! `/dev/kvm` cannot be used each test prints `SKIPPED: <test>: /dev/kvm unusable:
//! <reason>` and returns.

mod common;

use common::{Run, boot, kvm};

/// Runs `ebb-vmm <guest> --cpus N <args...>` with a timeout, echoes its output, and
/// checks it exited 0 with `<guest>: ok` and nothing on stderr.
fn boot_ok(guest: &str, cpus: u32, args: &[&str]) -> Run {
    let cpus_arg = cpus.to_string();
    let mut all = vec!["--timeout", "60", "--cpus", cpus_arg.as_str()];
    all.extend_from_slice(args);
    let run = boot(guest, &all);
    println!("--- {guest} --cpus {cpus} {args:?}\n{}", run.stdout);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(&format!("{guest}: ok")), "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    run
}

#[test]
fn executor_runs_work_on_every_core_and_rcu_spans_them() {
    let Some(()) = kvm("executor_runs_work_on_every_core_and_rcu_spans_them") else {
        return;
    };
    for cpus in [1u32, 2] {
        let run = boot_ok("rt_multicore", cpus, &[]);
        assert!(
            run.stdout
                .contains(&format!("rt_multicore: {cpus} cores, main on core 0")),
            "{run:?}"
        );
        for core in 0..cpus {
            let value: u64 = (1..=10_000u64).map(|i| i * u64::from(core + 1)).sum();
            assert!(
                run.stdout.contains(&format!(
                    "rt_multicore: core {core} returned {value} (ids agree: true)"
                )),
                "{run:?}"
            );
        }
        assert!(run.stdout.contains("call_rcu ran after"), "{run:?}");
    }
}

#[test]
fn timers_fire_in_deadline_order_and_never_early() {
    let Some(()) = kvm("timers_fire_in_deadline_order_and_never_early") else {
        return;
    };
    for cpus in [1u32, 2] {
        let run = boot_ok("rt_timers", cpus, &[]);
        assert!(
            run.stdout.contains("fired in order [5, 1, 6, 3, 2, 0, 4]"),
            "{run:?}"
        );
        assert_eq!(
            run.stdout.contains("rt_timers: core 1 fired in order"),
            cpus == 2,
            "{run:?}"
        );
    }
    // Waking early and polling the rest: same order, and the guest checks never early.
    boot_ok("rt_timers", 2, &["--", "wait_early_us=300"]);
}

#[test]
fn multicore_ebb_reps_are_built_by_the_miss_handler_on_each_core() {
    let Some(()) = kvm("multicore_ebb_reps_are_built_by_the_miss_handler_on_each_core") else {
        return;
    };
    for cpus in [1u32, 2] {
        let run = boot_ok("rt_ebb", cpus, &[]);
        for core in 0..cpus {
            let count = 1000 * (core + 1);
            assert!(
                run.stdout.contains(&format!(
                    "rt_ebb: core {core}: rep built on core {core} for core {core}, count {count}"
                )),
                "{run:?}"
            );
        }
    }
}

#[test]
fn sleeping_core_is_woken_by_a_spawn_on_kick_and_a_busy_one_is_not_kicked() {
    let Some(()) = kvm("sleeping_core_is_woken_by_a_spawn_on_kick_and_a_busy_one_is_not_kicked")
    else {
        return;
    };
    let run = boot_ok("rt_wake", 2, &[]);
    assert!(
        run.stdout
            .contains("busy core: 100 spawn_on sent while it ran, kicks 0"),
        "{run:?}"
    );
}
