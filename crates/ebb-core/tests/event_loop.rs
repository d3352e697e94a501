//! Event-loop behaviour on the test platform: ordering, sleeping, waking, timers, errors.

use ebb_core::event::{
    self, Elapsed, Handle, IdleStatus, Runtime, SpawnError, add_idle_handler, run_on,
    run_on_threads, sleep, spawn_local, spawn_local_on, spawn_on, timeout,
};
use ebb_core::platform::Instant;
use ebb_core::testing::{PlatformEvent, TestPlatform};
use ebb_core::{CoreId, Platform};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn run<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    platform: Arc<TestPlatform>,
    cores: usize,
    main: impl FnOnce() -> F + Send,
) -> T {
    let runtime = Runtime::new(platform, cores).expect("runtime");
    run_on_threads(runtime, |_| {}, main).expect("runtime ran")
}

#[test]
fn main_output_is_returned_and_cores_stop() {
    let out = run(TestPlatform::new(2), 2, || async { 6 * 7 });
    assert_eq!(out, 42);
}

#[test]
fn spawn_on_a_core_that_does_not_exist_is_an_error() {
    let err = run(TestPlatform::new(2), 2, || async {
        spawn_on(CoreId(2), || {})
    });
    assert_eq!(err, Err(SpawnError::NoSuchCore(CoreId(2))));
    let err = run(TestPlatform::new(1), 1, || async {
        run_on(CoreId(9), || ()).await
    });
    assert_eq!(err, Err(SpawnError::NoSuchCore(CoreId(9))));
}

#[test]
fn spawn_on_off_core_is_an_error_not_a_panic() {
    assert_eq!(spawn_on(CoreId(0), || {}), Err(SpawnError::NotOnCore));
}

#[test]
fn a_runtime_needs_a_sane_core_count() {
    assert!(matches!(
        Runtime::new(TestPlatform::new(1), 0),
        Err(SpawnError::BadCoreCount(0))
    ));
    assert!(matches!(
        Runtime::new(TestPlatform::new(1), 100_000),
        Err(SpawnError::BadCoreCount(_))
    ));
}

#[test]
fn run_on_executes_on_the_target_core_and_returns_its_value() {
    let cores = run(TestPlatform::new(2), 2, || async {
        let here = event::core_id();
        let there = run_on(CoreId(1), event::core_id).await.unwrap();
        (here, there)
    });
    assert_eq!(cores, (CoreId(0), CoreId(1)));
}

#[test]
fn one_synthetic_event_per_iteration_interleaved_with_idle_handlers() {
    let log = run(TestPlatform::new(1), 1, || async {
        let log = Rc::new(RefCell::new(Vec::<&'static str>::new()));
        let shared = Arc::new(Mutex::new(Vec::<&'static str>::new()));
        let (s1, s2) = (shared.clone(), shared.clone());
        spawn_on(CoreId(0), move || s1.lock().unwrap().push("event 1")).unwrap();
        spawn_on(CoreId(0), move || s2.lock().unwrap().push("event 2")).unwrap();
        let (s3, l3) = (shared.clone(), log.clone());
        let rounds = Rc::new(RefCell::new(0));
        let r = rounds.clone();
        let id = add_idle_handler(move || {
            s3.lock().unwrap().push("idle");
            l3.borrow_mut().push("idle");
            *r.borrow_mut() += 1;
            IdleStatus::Idle
        });
        while *rounds.borrow() < 3 {
            event::yield_now().await;
        }
        event::remove_idle_handler(id);

        shared.lock().unwrap().clone()
    });
    // This task's own first poll happens in iteration 1 too; what matters is that the two
    // remote events land in different iterations, each followed by the idle round.
    let events: Vec<_> = log.iter().copied().filter(|e| *e != "idle").collect();
    assert_eq!(events, ["event 1", "event 2"]);
    let first = log.iter().position(|e| *e == "event 1").unwrap();
    let second = log.iter().position(|e| *e == "event 2").unwrap();
    assert_eq!(
        log[first + 1],
        "idle",
        "idle handlers run after the event, in the same iteration: {log:?}"
    );
    assert!(
        second > first + 1,
        "one synthetic event per iteration: {log:?}"
    );
}

#[test]
fn an_idle_core_sleeps_until_its_next_timer_deadline() {
    let platform = TestPlatform::with_auto_advance(1);
    let p = platform.clone();
    let (t0, t1) = run(platform.clone(), 1, move || async move {
        let t0 = event::now();
        sleep(Duration::from_millis(10)).await;
        (t0, p.now())
    });
    assert_eq!(t1.saturating_duration_since(t0), Duration::from_millis(10));
    let waits = platform.waits(CoreId(0));
    assert!(
        waits.contains(&(t0, Instant::from_nanos(10_000_000))),
        "slept exactly until the deadline: {waits:?}"
    );
}

#[test]
fn timers_fire_in_deadline_order() {
    let order = run(TestPlatform::with_auto_advance(1), 1, || async {
        let order = Rc::new(RefCell::new(Vec::new()));
        let mut handles = Vec::new();
        for ms in [30u64, 10, 20] {
            let order = order.clone();
            handles.push(spawn_local(async move {
                sleep(Duration::from_millis(ms)).await;
                order
                    .borrow_mut()
                    .push((ms, event::now().as_nanos() / 1_000_000));
            }));
        }
        for h in handles {
            h.await;
        }

        order.borrow().clone()
    });
    assert_eq!(order, [(10, 10), (20, 20), (30, 30)]);
}

#[test]
fn timeout_elapses_or_passes_the_output_through() {
    let (slow, fast) = run(TestPlatform::with_auto_advance(1), 1, || async {
        let slow = timeout(Duration::from_millis(5), sleep(Duration::from_secs(60))).await;
        let fast = timeout(Duration::from_secs(5), async { 9 }).await;
        (slow, fast)
    });
    assert_eq!(slow, Err(Elapsed));
    assert_eq!(fast, Ok(9));
}

#[test]
fn a_busy_core_is_never_kicked_and_a_sleeping_one_is() {
    let platform = TestPlatform::new(2);
    let runtime = Runtime::new(platform.clone(), 2).unwrap();
    let handle = runtime.handle();
    let result = run_on_threads(
        runtime,
        |_| {},
        move || async move {
            // Make core 1 busy: an idle handler that keeps reporting work until told to stop.
            let busy = Arc::new(AtomicBool::new(true));
            let b = busy.clone();
            run_on(CoreId(1), move || {
                add_idle_handler(move || {
                    if b.load(Ordering::SeqCst) {
                        IdleStatus::Busy
                    } else {
                        IdleStatus::Idle
                    }
                });
            })
            .await
            .unwrap();
            let kicks_before = handle.kicks(CoreId(1));
            let ran = Arc::new(AtomicUsize::new(0));
            for _ in 0..1000 {
                let ran = ran.clone();
                spawn_on(CoreId(1), move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            }
            while ran.load(Ordering::SeqCst) < 1000 {
                event::yield_now().await;
            }
            let busy_kicks = handle.kicks(CoreId(1)) - kicks_before;
            // Only waits logged from now on count: core 1 also slept before it got busy.
            let log_start = platform.log().len();
            busy.store(false, Ordering::SeqCst);
            // Let core 1 fall asleep (it waits with no deadline), then send it one event.
            let asleep = |p: &TestPlatform| {
                p.log()[log_start..].iter().any(|e| {
                    matches!(e, PlatformEvent::Wait { core: CoreId(1), deadline, .. }
                        if *deadline == Instant::FAR_FUTURE)
                })
            };
            while !asleep(&platform) {
                std::thread::sleep(Duration::from_millis(1));
                event::yield_now().await;
            }
            let before = handle.kicks(CoreId(1));
            run_on(CoreId(1), || ()).await.unwrap();
            (busy_kicks, handle.kicks(CoreId(1)) - before)
        },
    );
    let (busy_kicks, sleeping_kicks) = result.unwrap();
    assert_eq!(busy_kicks, 0, "a running core must not be kicked");
    assert_eq!(sleeping_kicks, 1, "a sleeping core is kicked exactly once");
}

#[test]
fn shutdown_drops_pending_tasks_on_their_own_core() {
    struct OnDrop(Arc<Mutex<Vec<String>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            self.0.lock().unwrap().push(name);
        }
    }
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let d = dropped.clone();
    run(TestPlatform::new(2), 2, move || async move {
        let d1 = d.clone();
        run_on(CoreId(1), move || {
            let guard = OnDrop(d1);
            let _detached = spawn_local(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
        })
        .await
        .unwrap();
        let guard = OnDrop(d);
        let _detached = spawn_local(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
    });
    let mut names = dropped.lock().unwrap().clone();
    names.sort();
    assert_eq!(names, ["ebb-core-0", "ebb-core-1"]);
}

#[test]
fn a_panicking_core_stops_the_runtime_and_reports_which() {
    let runtime = Runtime::new(TestPlatform::new(2), 2).unwrap();
    let result = run_on_threads(
        runtime,
        |_| {},
        || async {
            spawn_on(CoreId(1), || panic!("boom on purpose")).unwrap();
            std::future::pending::<()>().await;
        },
    );
    match result {
        Err(event::RunError::CorePanicked { core, message }) => {
            assert_eq!(core, CoreId(1));
            assert!(message.contains("boom on purpose"), "message: {message}");
        }
        other => panic!("expected a core panic, got {other:?}"),
    }
}

#[test]
fn a_handle_reaches_cores_from_outside_and_shuts_down() {
    let runtime = Runtime::new(TestPlatform::new(2), 2).unwrap();
    let handle: Handle = runtime.handle();
    let counter = Arc::new(AtomicUsize::new(0));
    let c = counter.clone();
    let h = handle.clone();
    let outside = std::thread::spawn(move || {
        for i in 0..100u32 {
            let c = c.clone();
            h.spawn_on(CoreId(i % 2), move || {
                c.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        }
    });
    let c = counter.clone();
    let out = run_on_threads(
        runtime,
        |_| {},
        move || async move {
            while c.load(Ordering::SeqCst) < 100 {
                event::yield_now().await;
                std::thread::yield_now();
            }
            "done"
        },
    );
    outside.join().unwrap();
    assert_eq!(out.unwrap(), "done");
    assert!(handle.is_shutting_down());
    assert_eq!(
        handle.spawn_on(CoreId(0), || {}),
        Err(SpawnError::ShuttingDown)
    );
}

#[test]
fn adaptive_polling_catches_an_event_without_sleeping() {
    let platform = TestPlatform::new(1);
    // Virtual time stands still, so the poll window never runs out: the core must spin,
    // polling its devices, until the injected device event arrives.
    let runtime = Runtime::with_idle_poll(platform.clone(), 1, Duration::from_secs(3600)).unwrap();
    let (promise, arrived) = ebb_core::future::promise::<u32>();
    let p = platform.clone();
    let injector = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        p.inject_device_event(CoreId(0), move || {
            promise.set(7).unwrap();
        });
    });
    let got = run_on_threads(
        runtime,
        |_| {},
        move || async move { arrived.await.unwrap() },
    )
    .unwrap();
    injector.join().unwrap();
    assert_eq!(got, 7);
    assert!(
        platform.waits(CoreId(0)).is_empty(),
        "the core slept: {:?}",
        platform.log()
    );
    assert!(
        platform.log().iter().any(|e| matches!(
            e,
            PlatformEvent::Device {
                core: CoreId(0),
                count: 1
            }
        )),
        "the device event was dispatched"
    );
}

#[test]
fn polling_that_finds_nothing_stops() {
    // Every idle period: the clock passes the 1 ms window while the core polls (nothing
    // comes), then the next event arrives 2 ms into its sleep — polling never pays, so
    // the budget halves each time until the core sleeps as soon as it is idle.
    const EVENTS: usize = 10;
    let platform = TestPlatform::new(1);
    let runtime = Runtime::with_idle_poll(platform.clone(), 1, Duration::from_millis(1)).unwrap();
    let (promises, arrivals): (Vec<_>, Vec<_>) = (0..EVENTS)
        .map(|_| ebb_core::future::promise::<()>())
        .unzip();
    let p = platform.clone();
    let injector = std::thread::spawn(move || {
        // The core must see each clock step before the next: it runs on a thread the
        // host may deschedule for longer than any real sleep here (seen under load: the
        // core saw 4 ms at once, or found the event while still polling). So each event
        // comes only once the core has slept in that idle period.
        let mut slept = p.waits(CoreId(0)).len();
        for promise in promises {
            std::thread::sleep(Duration::from_millis(10));
            p.advance(Duration::from_millis(2));
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while p.waits(CoreId(0)).len() == slept && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            p.advance(Duration::from_millis(2));
            slept = p.waits(CoreId(0)).len();
            p.inject_device_event(CoreId(0), move || promise.set(()).unwrap());
        }
    });
    run_on_threads(
        runtime,
        |_| {},
        move || async move {
            for arrived in arrivals {
                arrived.await.unwrap();
            }
        },
    )
    .unwrap();
    injector.join().unwrap();
    let waits = platform.waits(CoreId(0));
    let ms = |at: Instant| at.as_nanos() / 1_000_000;
    // The first sleep came after a poll that ran out, 2 ms into the idle period; the
    // last ones at once, at its start (every 4 ms).
    assert_eq!(ms(waits[0].0), 2, "{waits:?}");
    let last = waits.last().unwrap().0;
    assert_eq!(ms(last) % 4, 0, "still polling at the end: {waits:?}");
}

#[test]
fn without_adaptive_polling_an_idle_core_sleeps_at_once() {
    let platform = TestPlatform::new(1);
    let runtime = Runtime::new(platform.clone(), 1).unwrap();
    let (promise, arrived) = ebb_core::future::promise::<u32>();
    let p = platform.clone();
    let injector = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        p.inject_device_event(CoreId(0), move || {
            promise.set(7).unwrap();
        });
    });
    let got = run_on_threads(
        runtime,
        |_| {},
        move || async move { arrived.await.unwrap() },
    )
    .unwrap();
    injector.join().unwrap();
    assert_eq!(got, 7);
    assert_eq!(
        platform.waits(CoreId(0)).first().map(|w| w.1),
        Some(Instant::FAR_FUTURE)
    );
}

#[test]
fn with_several_cores_virtual_time_moves_only_when_every_core_sleeps() {
    // Core 1 sleeps 30 ms while core 0 sleeps 10 ms: the clock must stop at 10 ms for
    // core 0 (the earliest deadline of all), not jump to 30 ms because core 1 slept.
    let platform = TestPlatform::with_auto_advance(2);
    let p = platform.clone();
    let (woke0, woke1) = run(platform, 2, move || async move {
        let p1 = p.clone();
        let far = spawn_local_on(CoreId(1), move || async move {
            sleep(Duration::from_millis(30)).await;
            p1.now()
        });
        let far = spawn_local(far);
        sleep(Duration::from_millis(10)).await;
        let woke0 = p.now();
        (woke0, far.await.unwrap())
    });
    assert_eq!(
        woke0,
        Instant::from_nanos(10_000_000),
        "core 0 woke at its deadline"
    );
    assert_eq!(
        woke1,
        Instant::from_nanos(30_000_000),
        "core 1 woke at its deadline"
    );
}
