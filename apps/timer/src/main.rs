//! `timer`: several timers with different deadlines on core 0 (and, with two or more
//! cores, a second set on core 1), printed in the order they fire with their elapsed
//! times; then a `timeout` that must expire and one that must not. Checks that the
//! timers fired in deadline order and that none fired before its deadline; exits 0 only
//! if everything checks.
//!
//! Lateness is printed, never judged: a busy host may deschedule a core for milliseconds.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::time::Duration;

/// The timers' deadlines, in milliseconds after the start, in the order they are armed.
const DEADLINES_MS: &[u64] = &[40, 10, 30, 5, 50, 20, 15];

/// One timer that fired: its index in [`DEADLINES_MS`] and when, after the start.
#[derive(Clone, Copy, Debug)]
struct Fired {
    timer: usize,
    after: Duration,
}

/// Arms every timer of [`DEADLINES_MS`] at once on this core; returns them in firing order.
async fn fire_all() -> Vec<Fired> {
    let fired: Rc<RefCell<Vec<Fired>>> = Rc::new(RefCell::new(Vec::new()));
    let start = ebb::now();
    let timers: Vec<_> = DEADLINES_MS
        .iter()
        .enumerate()
        .map(|(timer, &ms)| {
            let fired = fired.clone();
            ebb::spawn_local(async move {
                ebb::sleep_until(start + Duration::from_millis(ms)).await;
                let after = ebb::now() - start;
                fired.borrow_mut().push(Fired { timer, after });
            })
        })
        .collect();
    for timer in timers {
        timer.await;
    }
    fired.take()
}

/// Prints one core's firings; true if they came in deadline order and none was early.
fn check(core: u32, fired: &[Fired]) -> bool {
    let mut ok = fired.len() == DEADLINES_MS.len();
    let mut previous_deadline = 0;
    for f in fired {
        let deadline = DEADLINES_MS[f.timer];
        let early = f.after < Duration::from_millis(deadline);
        ebb::println!(
            "timer: core {core}: timer {} (deadline {deadline} ms) fired after {} us{}",
            f.timer,
            f.after.as_micros(),
            if early { " EARLY" } else { "" }
        );
        if early || deadline < previous_deadline {
            ok = false;
        }
        previous_deadline = deadline;
    }
    if !ok {
        ebb::println!("timer: core {core}: out of order, early or missing");
    }
    ok
}

async fn app_main() -> i32 {
    ebb::println!(
        "timer: {} timers {DEADLINES_MS:?} ms on {} core(s)",
        DEADLINES_MS.len(),
        ebb::num_cores().min(2)
    );
    let mut ok = check(0, &fire_all().await);
    if ebb::num_cores() > 1 {
        match ebb::spawn_local_on(ebb::CoreId(1), fire_all).await {
            Ok(fired) => ok &= check(1, &fired),
            Err(e) => {
                ebb::println!("timer: core 1 failed: {e}");
                ok = false;
            }
        }
    }

    // A timeout shorter than the work expires (and not early); a longer one lets it finish.
    let start = ebb::now();
    let expired = ebb::timeout(
        Duration::from_millis(10),
        ebb::sleep(Duration::from_secs(5)),
    )
    .await
    .is_err();
    let after = ebb::now() - start;
    ebb::println!(
        "timer: timeout(10 ms) around sleep(5 s): {} after {} us",
        if expired { "expired" } else { "did NOT expire" },
        after.as_micros()
    );
    ok &= expired && after >= Duration::from_millis(10);
    let start = ebb::now();
    let finished = ebb::timeout(
        Duration::from_secs(5),
        ebb::sleep(Duration::from_millis(10)),
    )
    .await
    .is_ok();
    let after = ebb::now() - start;
    ebb::println!(
        "timer: timeout(5 s) around sleep(10 ms): {} after {} us",
        if finished { "finished" } else { "EXPIRED" },
        after.as_micros()
    );
    ok &= finished && after >= Duration::from_millis(10);

    if ok {
        ebb::println!("timer: ok");
        0
    } else {
        ebb::println!("timer: FAILED");
        1
    }
}

ebb::main!(app_main);
