//! The shared window, from the embedding program's side: a VM built in this process with
//! `VmConfig::shared_window` hands out a `SharedWindow` whose memory the guest sees as its
//! `Shared` region, whose doorbell fires when the guest rings, and whose `wake_vcpu` ends
//! the guest's WAIT (the `window` test guest, `tests/guests/src/bin/window.rs`).
//!
//! The guest image is built by the first test that needs it, as in `boot.rs`. When
//! `/dev/kvm` cannot be used each test prints `SKIPPED: <test>: /dev/kvm unusable:
//! <reason>` and returns.

mod common;

use common::{guests, kvm};
use ebb_vmm::{Outcome, Vm, VmConfig, VmError};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Console output collected in memory.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<u8>>>);

impl Write for Collected {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Collected {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

const MEM: u64 = 64 << 20;
const WINDOW: u64 = 1 << 20;

fn config(shared_window: u64) -> VmConfig {
    VmConfig {
        mem_size: MEM,
        shared_window,
        timeout: Some(Duration::from_secs(30)),
        ..VmConfig::default()
    }
}

fn image(name: &str) -> Vec<u8> {
    std::fs::read(guests().join(name)).expect("the test guest image")
}

/// Word `i` of the window, as the embedder must access it: atomically.
fn word(window: &ebb_vmm::SharedWindow, i: usize) -> &AtomicU64 {
    assert!((i + 1) * 8 <= window.len());
    let ptr = window.as_ptr().wrapping_add(i * 8).cast::<AtomicU64>();
    assert!(ptr.is_aligned());
    // SAFETY: the word lies inside the window (checked above), which stays mapped while
    // `window` lives (the returned borrow cannot outlive it); aligned (checked); the guest
    // writes it concurrently, which atomics allow.
    unsafe { &*ptr }
}

#[test]
fn the_window_is_the_top_of_guest_memory_and_bad_sizes_are_refused() {
    let Some(()) = kvm("the_window_is_the_top_of_guest_memory_and_bad_sizes_are_refused") else {
        return;
    };
    let bytes = image("window");
    let vm = Vm::new(&bytes, config(WINDOW), Box::new(std::io::sink())).unwrap();
    let window = vm.shared_window().expect("a window was asked for");
    assert_eq!(window.len() as u64, WINDOW);
    assert_eq!(window.guest_addr(), MEM - WINDOW);
    assert!(!window.as_ptr().is_null());
    drop(vm);
    // The window keeps guest memory mapped after the VM is gone.
    word(&window, 3).store(7, Ordering::Relaxed);
    assert_eq!(word(&window, 3).load(Ordering::Relaxed), 7);
    assert!(window.wake_vcpu(0), "harmless after the VM ended");
    assert!(!window.wake_vcpu(1), "one vCPU");

    let none = Vm::new(&bytes, config(0), Box::new(std::io::sink())).unwrap();
    assert!(none.shared_window().is_none());
    for bad in [0x800, MEM / 2 + 0x1000] {
        let e = Vm::new(&bytes, config(bad), Box::new(std::io::sink())).unwrap_err();
        assert!(matches!(e, VmError::Layout(_)), "{bad:#x}: {e}");
        assert!(e.to_string().contains("shared window"), "{e}");
    }
}

#[test]
fn guest_and_host_share_the_window_and_ring_each_other() {
    let Some(()) = kvm("guest_and_host_share_the_window_and_ring_each_other") else {
        return;
    };
    let console = Collected::default();
    let vm = Vm::new(&image("window"), config(WINDOW), Box::new(console.clone())).unwrap();
    let window = vm.shared_window().expect("a window was asked for");
    let host_word = 0x5eed_0000_cafe_f00d_u64;
    word(&window, 0).store(host_word, Ordering::Release);
    let run = std::thread::spawn(move || vm.run_embedded().map(|(outcome, _)| outcome));

    // The guest's doorbell: its eventfd becomes readable.
    let deadline = Instant::now() + Duration::from_secs(20);
    let rang = loop {
        match window.doorbell().read() {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    Instant::now() < deadline && !run.is_finished(),
                    "no doorbell; console:\n{}",
                    console.text()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("reading the doorbell: {e}"),
        }
    };
    assert_eq!(rang, 1, "rung once");
    assert_eq!(
        word(&window, 1).load(Ordering::Acquire),
        !host_word,
        "the guest's answer, written before it rang"
    );
    // Our answer, then the wake.
    word(&window, 2).store(1, Ordering::Release);
    assert!(window.wake_vcpu(0));

    let outcome = run.join().unwrap().unwrap();
    let printed = console.text();
    assert!(
        matches!(outcome, Outcome::Exited { code: 0 }),
        "{outcome:?}\n{printed}"
    );
    assert!(
        printed.contains(&format!(
            "window: {:#x} {}\n",
            window.guest_addr(),
            window.len()
        )),
        "the guest's Shared region is the host's window: {printed}"
    );
    assert!(
        printed.contains(&format!("window: host wrote {host_word:#x}\n")),
        "{printed}"
    );
    assert!(
        printed.contains("window: woken, kicked true\n"),
        "{printed}"
    );
}
