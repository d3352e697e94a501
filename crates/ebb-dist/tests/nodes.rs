//! The NodeAllocator from a hosted test process (KVM required; SKIPPED without, as the
//! other KVM tests): native nodes booted in this process by [`LocalNodeAllocator`]
//! (and as child `ebb run` processes by [`ProcessNodeAllocator`]) running `apps/echo`
//! and the test guests `panic`, `exit_code` and `window`.
//!
//! Shown: two nodes serve echoes through their forwarded ports; freeing one is bounded,
//! closes its port and leaves the other serving; a node whose guest panics or exits is
//! reported through the exit notification — blocking wait and future — within 1 s; a
//! node allocated from a thread pinned to one CPU runs its vCPUs unpinned; a node with a
//! shared window hands it out (its size, at the top of the node's memory) and rings and
//! is woken through it; after every node is freed, no VM thread is left. The tests take one lock: they count this
//! process's threads and share two CPUs.
//!
//! `allocation_time_in_process_and_as_a_child` prints the time from `allocate` to the
//! echo's first answer for both backends (run it with `--release --nocapture` for the
//! numbers in docs/benchmarks.md).

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use ebb_dist::allocator::{
    FREE_BOUND, LocalNodeAllocator, NodeAllocator, NodeHandle, NodeImage, NodeNetwork, NodeOutcome,
    NodeSpec, ProcessNodeAllocator, allocate_in_background,
};

/// The echo app's port natively.
const ECHO_PORT: u16 = 7;
/// From `allocate` to the echo's "listening" line (a loaded machine, a debug build).
const START: Duration = Duration::from_secs(20);
/// The stated bound on reporting a node's end.
const EXIT_BOUND: Duration = Duration::from_secs(1);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One test at a time: they count this process's threads and share two CPUs.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn kvm(test: &str) -> Option<()> {
    match ebb_vmm::kvm_usable() {
        Ok(()) => Some(()),
        Err(e) => ebb_testkit::skip(
            test,
            ebb_testkit::Capability::Kvm,
            &format!("/dev/kvm unusable: {e}"),
        ),
    }
}

/// The test guests, built once (the same directory as ebb-vmm's tests use).
fn guest(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../guests");
        ebb_testkit::guests::build(&repo_root(), &target_dir, &[], "ebb-dist tests: ")
    })
    .join(name)
}

/// `apps/echo` as a native image, built once (as ebb-vmm's tests build apps).
fn echo_image() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../apps");
        ebb_testkit::guests::app_image(&repo_root(), &target_dir, "echo", "ebb-dist tests: ")
    })
    .clone()
}

/// The `ebb` command of this build's profile and target directory, built if needed
/// (with this build's own flags: usually a no-op, `cargo test` built it already for
/// ebb-cli's tests).
fn ebb_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        // This test binary is TARGET_DIR/PROFILE/deps/nodes-HASH.
        let exe = std::env::current_exe().expect("the test's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("TARGET_DIR/PROFILE");
        let target_dir = profile_dir.parent().expect("TARGET_DIR");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .current_dir(repo_root())
            .args(["build", "-p", "ebb-cli", "--bin", "ebb"])
            .arg("--target-dir")
            .arg(target_dir)
            .env_remove("CARGO_BUILD_TARGET");
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let out = build.output().expect("run cargo to build ebb");
        assert!(
            out.status.success(),
            "building ebb failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile_dir.join("ebb")
    })
    .clone()
}

fn echo_spec() -> NodeSpec {
    echo_spec_with(false)
}

/// `outbound`: passt behind the forwards (as `ebb run --net user` has it when installed).
fn echo_spec_with(outbound: bool) -> NodeSpec {
    NodeSpec {
        network: NodeNetwork::User {
            forwards: vec![ECHO_PORT],
            guest_forwards: Vec::new(),
            outbound,
        },
        timeout: Some(Duration::from_secs(120)),
        ..NodeSpec::new(NodeImage::Path(echo_image()))
    }
}

fn echo_addr(node: &NodeHandle) -> SocketAddr {
    SocketAddr::V4(
        node.forwarded(ECHO_PORT)
            .expect("the echo port is forwarded"),
    )
}

fn assert_echoes(node: &NodeHandle, seed: u64) {
    if let Err(e) =
        ebb_testkit::netcheck::echo(echo_addr(node), 256 * 1024, seed, Duration::from_secs(10))
    {
        panic!(
            "{}: echo through {}: {e}\nconsole:\n{}",
            node.name(),
            echo_addr(node),
            node.console().text()
        );
    }
}

/// Threads of this process whose name is a VM's or a node's.
fn vm_threads() -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) {
                let comm = comm.trim().to_string();
                let node = comm
                    .strip_prefix("node")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
                if comm.starts_with("vcpu") || comm == "virtio-net" || node {
                    names.push(comm);
                }
            }
        }
    }
    names
}

/// Runs `future` on this thread until it completes or `timeout` passes.
fn block_on<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}

#[test]
fn two_nodes_serve_and_freeing_one_leaves_the_other_serving() {
    let test = "two_nodes_serve_and_freeing_one_leaves_the_other_serving";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    echo_image();
    let fds_before = open_fds();
    let allocator = LocalNodeAllocator::new();
    let a = allocator.allocate(echo_spec()).expect("node a");
    let b = allocator.allocate(echo_spec()).expect("node b");
    assert_ne!(echo_addr(&a), echo_addr(&b));
    for node in [&a, &b] {
        assert!(
            node.console().wait_for("echo: listening", START),
            "{}: {}",
            node.name(),
            node.console().text()
        );
    }
    assert_echoes(&a, 1);
    assert_echoes(&b, 2);
    assert_eq!(a.exit().outcome(), None, "a runs");

    let a_addr = echo_addr(&a);
    let started = Instant::now();
    let outcome = a.free().expect("free is bounded");
    let took = started.elapsed();
    assert_eq!(outcome, NodeOutcome::Freed);
    assert!(took < FREE_BOUND, "free took {took:?}");
    println!("free took {took:?}");
    assert!(
        TcpStream::connect_timeout(&a_addr, Duration::from_secs(1)).is_err(),
        "a freed node's forwarded port is closed"
    );
    assert_echoes(&b, 3);
    assert_eq!(b.exit().outcome(), None, "b keeps running");
    assert_eq!(b.free().expect("free b"), NodeOutcome::Freed);
    assert_eq!(vm_threads(), Vec::<String>::new(), "every VM thread joined");
    assert_eq!(
        open_fds(),
        fds_before,
        "every descriptor closed (KVM, eventfds, epoll, sockets)"
    );
}

/// This process's open descriptors, with what they are.
fn open_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).ok()?;
            Some(format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            ))
        })
        // The directory listing's own descriptor.
        .filter(|l| !l.contains("/proc/") || !l.contains("/fd"))
        .collect();
    fds.sort();
    fds
}

#[test]
fn a_panicking_node_is_reported_within_a_second() {
    let test = "a_panicking_node_is_reported_within_a_second";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let allocator = LocalNodeAllocator::new();
    let node = allocator
        .allocate(NodeSpec::new(NodeImage::Path(guest("panic"))))
        .expect("allocate");
    let allocated = Instant::now();
    let outcome = block_on(node.exit().ended(), EXIT_BOUND)
        .unwrap_or_else(|| panic!("no outcome within {EXIT_BOUND:?}"));
    let detected = node.exit().ended_at().expect("published") - allocated;
    println!("panic reported {detected:?} after allocate returned");
    let NodeOutcome::Panicked(report) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(report.contains("deliberate panic: 6 * 7 = 42"), "{report}");
    assert!(node.console().text().contains("about to panic"));
    assert_eq!(node.free().expect("free"), outcome, "free reports the end");
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn a_faulting_node_is_reported_within_a_second() {
    let test = "a_faulting_node_is_reported_within_a_second";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let node = LocalNodeAllocator::new()
        .allocate(NodeSpec::new(NodeImage::Path(guest("page_fault"))))
        .expect("allocate");
    match node.exit().wait(EXIT_BOUND) {
        Some(NodeOutcome::Crashed(report)) => assert!(report.contains("rip"), "{report}"),
        other => panic!("{other:?}"),
    }
    drop(node);
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn an_exiting_node_reports_its_code_within_a_second() {
    let test = "an_exiting_node_reports_its_code_within_a_second";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let allocator = LocalNodeAllocator::new();
    let node = allocator
        .allocate(NodeSpec::new(NodeImage::Bytes(
            std::fs::read(guest("exit_code")).expect("image").into(),
        )))
        .expect("allocate");
    assert_eq!(node.exit().wait(EXIT_BOUND), Some(NodeOutcome::Exited(42)));
    drop(node); // freeing an ended node
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn a_node_with_a_shared_window_shares_it_and_rings_both_ways() {
    let test = "a_node_with_a_shared_window_shares_it_and_rings_both_ways";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let window_bytes = 1 << 20;
    let spec = NodeSpec {
        shared_window: window_bytes,
        timeout: Some(Duration::from_secs(60)),
        ..NodeSpec::new(NodeImage::Path(guest("window")))
    };
    let memory = spec.memory;
    let node = LocalNodeAllocator::new()
        .allocate(spec.clone())
        .expect("allocate");
    let window = Arc::clone(node.shared_window().expect("a window was asked for"));
    assert_eq!(window.len() as u64, window_bytes);
    assert_eq!(window.guest_addr(), memory - window_bytes);
    // The `window` guest rings once it has written its second word, then sleeps until
    // the third word is set and its core woken.
    let deadline = Instant::now() + START;
    while window.doorbell().read().is_err() {
        assert!(
            Instant::now() < deadline,
            "no doorbell: {}",
            node.console().text()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let third = window
        .as_ptr()
        .wrapping_add(16)
        .cast::<std::sync::atomic::AtomicU64>();
    assert!(third.is_aligned() && 24 <= window.len());
    // SAFETY: inside the window (checked), which `window` keeps mapped; aligned; the
    // guest reads it concurrently, which an atomic allows.
    unsafe { (*third).store(1, std::sync::atomic::Ordering::Release) };
    assert!(window.wake_vcpu(0));
    assert_eq!(
        node.exit().wait(START),
        Some(NodeOutcome::Exited(0)),
        "{}",
        node.console().text()
    );
    drop(node);
    assert_eq!(vm_threads(), Vec::<String>::new());
    // The window outlives the node; waking its ended vCPU is harmless.
    assert!(window.wake_vcpu(0));

    // The process backend cannot share memory, and says so.
    let refused = ProcessNodeAllocator::new("/nonexistent/ebb").allocate(spec);
    assert!(
        matches!(
            refused,
            Err(ebb_dist::allocator::AllocateError::Unsupported(_))
        ),
        "{refused:?}"
    );
    let plain = LocalNodeAllocator::new()
        .allocate(NodeSpec::new(NodeImage::Path(guest("exit_code"))))
        .expect("allocate");
    assert!(plain.shared_window().is_none());
}

/// The signals this process catches (`SigCgt` of /proc/self/status), as a bit mask.
fn caught_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .expect("SigCgt")
        .trim();
    u64::from_str_radix(hex, 16).expect("a hex mask")
}

#[test]
fn a_front_end_event_loop_awaits_a_node_end_and_keeps_its_signals() {
    // A hosted front end (one pinned event loop) allocates a node that panics and awaits
    // its end: the node's thread wakes the loop; the process goes on; Ctrl-C, SIGTERM
    // and SIGUSR1 are still the process's own (not caught by the monitor).
    let test = "a_front_end_event_loop_awaits_a_node_end_and_keeps_its_signals";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let bit = |signal: i32| 1u64 << (signal - 1);
    let own = [
        libc_signal::SIGINT,
        libc_signal::SIGTERM,
        libc_signal::SIGUSR1,
    ];
    let before = caught_signals();
    let image = guest("panic");
    let outcome = ebb_hosted::run(ebb_hosted::Config::with_cores(1), move || async move {
        let node = LocalNodeAllocator::new()
            .allocate(NodeSpec::new(NodeImage::Path(image)))
            .expect("allocate");
        let outcome = node.exit().ended().await;
        drop(node);
        outcome
    })
    .expect("the front end runs");
    assert!(matches!(outcome, NodeOutcome::Panicked(_)), "{outcome:?}");
    let after = caught_signals();
    for signal in own {
        assert_eq!(
            after & bit(signal),
            before & bit(signal),
            "signal {signal}: caught before {before:#x}, after {after:#x}"
        );
    }
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn an_event_loop_that_allocates_in_the_background_keeps_running() {
    // A front end's one event loop starts a node with `allocate_in_background` and a
    // ticker task beside it: the ticker runs while the VM is built (with the blocking
    // `allocate` it could not run before the allocation returned), and the node serves.
    // The ticker yields rather than sleeps, so it counts the loop's turns: a sleeping
    // ticker depended on timer latency, which on a machine where the build takes 2-3 ms
    // and its threads share the loop's CPU was often more than the whole build (one tick).
    let test = "an_event_loop_that_allocates_in_the_background_keeps_running";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    echo_image();
    let (node, ticks, longest_gap, took) =
        ebb_hosted::run(ebb_hosted::Config::with_cores(1), || async {
            let ticks = std::rc::Rc::new(std::cell::Cell::new((0u32, Duration::ZERO)));
            let started = Instant::now();
            let allocation =
                allocate_in_background(Arc::new(LocalNodeAllocator::new()), echo_spec());
            let done = std::rc::Rc::new(std::cell::Cell::new(false));
            let ticker = {
                let (ticks, done) = (ticks.clone(), done.clone());
                ebb::spawn_local(async move {
                    let mut last = Instant::now();
                    while !done.get() {
                        let (n, gap) = ticks.get();
                        ticks.set((n + 1, gap.max(last.elapsed())));
                        last = Instant::now();
                        ebb::yield_now().await;
                    }
                })
            };
            let node = allocation.await.expect("allocate");
            let took = started.elapsed();
            let (n, gap) = ticks.get();
            done.set(true);
            let _ = ticker.await;
            (node, n, gap, took)
        })
        .expect("the front end runs");
    println!(
        "{test}: allocation took {took:?}; the loop ticked {ticks} times meanwhile, \
         longest gap {longest_gap:?}"
    );
    assert!(
        ticks >= 2,
        "the loop stalled while the node was built: {ticks} ticks in {took:?}"
    );
    assert_echoes(&node, 11);
    node.free().expect("free");
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn a_background_allocation_nobody_awaits_frees_its_node() {
    // The future is dropped at once: the node the thread builds anyway is freed, and no
    // VM thread is left.
    let test = "a_background_allocation_nobody_awaits_frees_its_node";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    echo_image();
    drop(allocate_in_background(
        Arc::new(LocalNodeAllocator::new()),
        echo_spec(),
    ));
    let deadline = Instant::now() + START + FREE_BOUND;
    let mut threads = vm_threads();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        threads = vm_threads();
        let allocating = std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "ebb-allocate")
            });
        if threads.is_empty() && !allocating {
            break;
        }
    }
    assert_eq!(
        threads,
        Vec::<String>::new(),
        "a node outlived its allocation"
    );
}

/// Linux's signal numbers (no libc dependency for three constants).
mod libc_signal {
    pub const SIGINT: i32 = 2;
    pub const SIGUSR1: i32 = 10;
    pub const SIGTERM: i32 = 15;
}

#[test]
fn a_bad_image_is_an_error_not_a_node() {
    let _serial = serial();
    let allocator = LocalNodeAllocator::new();
    let err = allocator
        .allocate(NodeSpec::new(NodeImage::Bytes(
            b"not an ELF image".to_vec().into(),
        )))
        .expect_err("refused");
    println!("{err}");
    let err = allocator
        .allocate(NodeSpec::new(NodeImage::Path("/nonexistent/image".into())))
        .expect_err("refused");
    assert!(err.to_string().contains("/nonexistent/image"), "{err}");
    assert_eq!(vm_threads(), Vec::<String>::new());
}

/// The CPUs of a `Cpus_allowed_list` ("0-3,5").
fn cpu_list(list: &str) -> Vec<usize> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .flat_map(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            a.trim().parse::<usize>().unwrap()..=b.trim().parse::<usize>().unwrap()
        })
        .collect()
}

#[test]
fn a_node_allocated_from_a_pinned_thread_runs_its_vcpus_off_that_cpu() {
    // A hosted runtime's event loop is pinned to one CPU; threads inherit affinity. The
    // node's vCPU must not: it runs on the other CPUs (beside the pinned core it would
    // wait for that core's idle poll; see `LocalNodeAllocator::allocate`).
    let test = "a_node_allocated_from_a_pinned_thread_runs_its_vcpus_off_that_cpu";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let allowed = rustix::thread::sched_getaffinity(None).expect("affinity");
    if allowed.count() < 2 {
        println!("SKIPPED: {test}: one CPU only");
        return;
    }
    let (creator_cpu, node) = echo_node_from_a_pinned_thread(&allowed);
    let vcpu_cpus = thread_cpus("vcpu0").expect("a vcpu0 thread");
    assert!(
        !vcpu_cpus.is_empty() && !vcpu_cpus.contains(&creator_cpu),
        "vcpu0 may run on {vcpu_cpus:?}: every CPU but the creator's {creator_cpu}"
    );
    assert_echoes(&node, 5);
    assert_eq!(node.free().expect("free"), NodeOutcome::Freed);
}

/// The echo node, allocated from a thread pinned to the first CPU of `allowed` (as a
/// hosted core is), listening; and that CPU.
fn echo_node_from_a_pinned_thread(allowed: &rustix::thread::CpuSet) -> (usize, NodeHandle) {
    let creator_cpu = (0..rustix::thread::CpuSet::MAX_CPU)
        .find(|&c| allowed.is_set(c))
        .unwrap();
    let node = std::thread::spawn(move || {
        let mut one = rustix::thread::CpuSet::new();
        one.set(creator_cpu);
        rustix::thread::sched_setaffinity(None, &one).expect("pin");
        LocalNodeAllocator::new()
            .allocate(echo_spec())
            .expect("allocate")
    })
    .join()
    .expect("the pinned thread");
    assert!(node.console().wait_for("echo: listening", START));
    (creator_cpu, node)
}

/// The CPUs the calling process's thread named `name` may run on (`/proc`), if one is.
fn thread_cpus(name: &str) -> Option<Vec<usize>> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|s| cpu_list(s.trim()));
        }
    }
    None
}

#[test]
fn a_bulk_stream_moves_the_vcpu_onto_the_front_ends_cpu_and_back() {
    // On scarce CPUs the device thread of a node on the user-mode network trades places
    // with its vCPU for a bulk stream (ebb-vmm's TrafficPlacement): the vCPU onto the
    // allocating core's CPU, the device thread off it; after the stream, back. The echo
    // of 256 MiB through the forward is a stream; a few small echoes afterwards are not.
    let test = "a_bulk_stream_moves_the_vcpu_onto_the_front_ends_cpu_and_back";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let off = ebb_vmm::FOLLOW_TRAFFIC_ENV;
    if std::env::var(off).is_ok_and(|v| v.trim() == "0") {
        println!("SKIPPED: {test}: {off}=0 turns the placement off");
        return;
    }
    let allowed = rustix::thread::sched_getaffinity(None).expect("affinity");
    if allowed.count() != 2 {
        // With more CPUs than the vCPU and the front end need, nothing is traded.
        println!(
            "SKIPPED: {test}: needs exactly two CPUs, has {}",
            allowed.count()
        );
        return;
    }
    let (creator_cpu, node) = echo_node_from_a_pinned_thread(&allowed);
    let off_front = |cpus: &[usize]| !cpus.is_empty() && !cpus.contains(&creator_cpu);
    let vcpu = || thread_cpus("vcpu0").expect("a vcpu0 thread");
    assert!(off_front(&vcpu()), "before: vcpu0 on {:?}", vcpu());
    let addr = echo_addr(&node);
    let started = std::time::Instant::now();
    let stream = std::thread::spawn(move || {
        ebb_testkit::netcheck::echo(addr, 256 << 20, 7, Duration::from_secs(60))
    });
    let mut moved_onto_front = false;
    while !stream.is_finished() {
        moved_onto_front |= vcpu() == [creator_cpu];
        std::thread::sleep(Duration::from_millis(1));
    }
    stream
        .join()
        .expect("the echo thread")
        .expect("the bulk echo");
    // Both ways through the device: what its placement counts (a stream needs 400 MB/s).
    let rate = 2.0 * (256 << 20) as f64 / started.elapsed().as_secs_f64() / 1e6;
    assert!(
        moved_onto_front,
        "vcpu0 never ran on the front end's CPU {creator_cpu} during the stream \
         ({rate:.0} MB/s through the device)"
    );
    // The stream ended: at the device thread's next round (two quiet windows, 20 ms)
    // the vCPU goes back. Small echoes are request/response traffic.
    assert_echoes(&node, 8);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !off_front(&vcpu()) && std::time::Instant::now() < deadline {
        assert_echoes(&node, 9);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(off_front(&vcpu()), "after: vcpu0 still on {:?}", vcpu());
    assert_eq!(node.free().expect("free"), NodeOutcome::Freed);
}

#[test]
fn two_nodes_on_a_tap_bridge_serve_its_namespace() {
    // As root: each node's TAP device (created by its monitor, in this process) moved
    // into a namespace and enslaved to a bridge there (10.0.2.2/24); each node has its
    // own address from its command line. Echoes from the namespace reach both.
    use ebb_testkit::netns::{ip, namespace, need_namespace_and_tap, unique_name};
    let test = "two_nodes_on_a_tap_bridge_serve_its_namespace";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let Some(()) = need_namespace_and_tap(test, &[]) else {
        return;
    };
    let ns = namespace(test, unique_name("ebdn"));
    let n = ns.name.as_str();
    ip(&["-n", n, "link", "add", "br0", "type", "bridge"]);
    ip(&["-n", n, "addr", "add", "10.0.2.2/24", "dev", "br0"]);
    ip(&["-n", n, "link", "set", "br0", "up"]);
    let allocator = LocalNodeAllocator::new();
    let mut nodes = Vec::new();
    for addr in ["10.0.2.21", "10.0.2.22"] {
        let tap = unique_name("ebdt");
        let node = allocator
            .allocate(NodeSpec {
                network: NodeNetwork::Tap(tap.clone()),
                args: vec!["--ip".into(), format!("{addr}/24")],
                timeout: Some(Duration::from_secs(120)),
                ..NodeSpec::new(NodeImage::Path(echo_image()))
            })
            .expect("allocate");
        ip(&["link", "set", &tap, "netns", n]);
        ip(&["-n", n, "link", "set", &tap, "master", "br0"]);
        ip(&["-n", n, "link", "set", &tap, "up"]);
        assert!(
            node.console().wait_for("echo: listening", START),
            "{}",
            node.console().text()
        );
        nodes.push((addr, node));
    }
    let ns_path = format!("/var/run/netns/{n}");
    let targets: Vec<&str> = nodes.iter().map(|(a, _)| *a).collect();
    let results = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let fd = std::fs::File::open(&ns_path).expect("the namespace");
                rustix::thread::move_into_link_name_space(
                    std::os::fd::AsFd::as_fd(&fd),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .expect("enter the namespace");
                targets
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let addr = SocketAddr::new(a.parse().unwrap(), ECHO_PORT);
                        ebb_testkit::netcheck::echo(
                            addr,
                            128 * 1024,
                            i as u64,
                            Duration::from_secs(10),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .join()
            .expect("the namespace's client")
    });
    for ((addr, node), result) in nodes.iter().zip(results) {
        if let Err(e) = result {
            panic!("echo to {addr}: {e}\n{}", node.console().text());
        }
    }
    for (_, node) in nodes {
        assert_eq!(node.free().expect("free"), NodeOutcome::Freed);
    }
    assert_eq!(vm_threads(), Vec::<String>::new());
}

#[test]
fn a_child_process_node_serves_reports_and_frees() {
    let test = "a_child_process_node_serves_reports_and_frees";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let allocator = ProcessNodeAllocator::new(ebb_binary());
    let node = allocator.allocate(echo_spec()).expect("allocate");
    assert!(
        node.console().wait_for("echo: listening", START),
        "{}",
        node.console().text()
    );
    assert_echoes(&node, 7);
    let started = Instant::now();
    assert_eq!(node.free().expect("free"), NodeOutcome::Freed);
    assert!(started.elapsed() < FREE_BOUND);
    let panicking = allocator
        .allocate(NodeSpec::new(NodeImage::Path(guest("panic"))))
        .expect("allocate");
    match panicking.exit().wait(Duration::from_secs(5)) {
        Some(NodeOutcome::Panicked(report)) => {
            assert!(report.contains("deliberate panic"), "{report}")
        }
        other => panic!("{other:?}"),
    }
}

/// Connects, sends a line and reads it back, retrying until `deadline`; when it first
/// answered.
fn first_answer(addr: SocketAddr, deadline: Instant) -> Option<Instant> {
    while Instant::now() < deadline {
        let attempt = (|| -> std::io::Result<()> {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
            s.set_read_timeout(Some(Duration::from_millis(500)))?;
            s.write_all(b"ping\n")?;
            let mut back = [0u8; 5];
            s.read_exact(&mut back)?;
            if &back == b"ping\n" {
                Ok(())
            } else {
                Err(std::io::ErrorKind::InvalidData.into())
            }
        })();
        if attempt.is_ok() {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

#[test]
fn allocation_time_in_process_and_as_a_child() {
    let test = "allocation_time_in_process_and_as_a_child";
    let _serial = serial();
    let Some(()) = kvm(test) else { return };
    let local = LocalNodeAllocator::new();
    let child = ProcessNodeAllocator::new(ebb_binary());
    // `ebb run --net user` starts passt behind the forwards when it is installed: the
    // in-process backend is measured both without passt and with it, as the child has it.
    let passt = ebb_testkit::have_tool("passt");
    let backends: [(&str, &dyn NodeAllocator, bool); 3] = [
        ("in-process", &local, false),
        ("in-process with passt", &local, passt),
        ("child ebb run", &child, false),
    ];
    println!("passt installed: {passt}");
    let runs = 5;
    echo_image(); // built (or found fresh) before the clock starts
    for (name, allocator, outbound) in backends {
        let mut lines = Vec::new();
        let mut answers = Vec::new();
        for _ in 0..runs {
            let started = Instant::now();
            let node = allocator
                .allocate(echo_spec_with(outbound))
                .expect("allocate");
            let allocated = started.elapsed();
            let SocketAddr::V4(addr) = echo_addr(&node) else {
                unreachable!()
            };
            let answered = first_answer(SocketAddr::V4(addr), started + START)
                .unwrap_or_else(|| panic!("{name}: no answer\n{}", node.console().text()));
            answers.push((answered - started).as_secs_f64() * 1e3);
            let freeing = Instant::now();
            assert_eq!(node.free().expect("free"), NodeOutcome::Freed);
            lines.push(format!(
                "allocate {:.1} ms, first answer {:.1} ms, free {:.1} ms",
                allocated.as_secs_f64() * 1e3,
                (answered - started).as_secs_f64() * 1e3,
                freeing.elapsed().as_secs_f64() * 1e3,
            ));
            let _: SocketAddrV4 = addr;
        }
        for line in lines {
            println!("{name}: {line}");
        }
        answers.sort_by(f64::total_cmp);
        println!(
            "{name}: allocate to first answer: min {:.1} ms, median {:.1} ms ({runs} runs)",
            answers[0],
            answers[runs / 2]
        );
    }
}
