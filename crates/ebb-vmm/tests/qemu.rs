//! The same native images booted by QEMU instead of `ebb-vmm`, through their PVH entry
//! (`crates/ebb-native/src/pvh/`): `qemu-system-x86_64 -M microvm -accel tcg -kernel IMAGE`.
//!
//! Under QEMU the guest's console is the serial port (stdout with `-nographic`) and its
//! exit code goes through the `isa-debug-exit` device at port 0xf4, which makes QEMU exit
//! with status `(code << 1) | 1`; [`decode_exit`] undoes that. QEMU's own failures exit
//! with 1 too (= guest code 0), so every test also checks what the guest printed.
//!
//! TCG (QEMU's emulator) is used so that the ring-0 stub runs at a sane speed on any
//! host; the CPL-0 slowness of the nested PVM KVM is what `bench/scripts/boot-compare.sh`
//! measures. Every run has a timeout: QEMU is killed and the test fails. Without
//! `qemu-system-x86_64` each test prints `SKIPPED: <test>: ...` and returns.

mod common;

use common::{guests, qemu};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a QEMU run may take (TCG on a busy 2-CPU machine boots in well under 1 s).
const QEMU_TIMEOUT: Duration = Duration::from_secs(60);

struct QemuRun {
    /// QEMU's exit status.
    status: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for QemuRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "qemu status {} (guest code {:?})\n--- stdout\n{}--- stderr\n{}",
            self.status,
            decode_exit(self.status),
            self.stdout,
            self.stderr
        )
    }
}

/// The guest's exit code from QEMU's status: `isa-debug-exit` makes QEMU exit with
/// `(code << 1) | 1`; an even status means the guest did not exit through the device.
fn decode_exit(status: i32) -> Option<i32> {
    (status & 1 == 1).then_some(status >> 1)
}

/// Boots `guest` under QEMU microvm with TCG; `append` is the guest's command line.
fn boot_qemu(guest: &str, append: &str) -> QemuRun {
    let image = guests().join(guest);
    let mut child = Command::new("qemu-system-x86_64")
        .args(["-M", "microvm", "-accel", "tcg", "-m", "128M", "-smp", "1"])
        .arg("-kernel")
        .arg(&image)
        .args(["-append", append])
        .args(["-nographic", "-no-reboot"])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu-system-x86_64");
    // Drain both pipes on their own threads so QEMU never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for qemu") {
            break status;
        }
        if started.elapsed() > QEMU_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{guest} under QEMU did not finish within {QEMU_TIMEOUT:?}; output so far:\n{}",
                stdout.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    QemuRun {
        status: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

#[test]
fn hello_boots_under_qemu_through_pvh_at_cpl_3() {
    let Some(()) = qemu("hello_boots_under_qemu_through_pvh_at_cpl_3") else {
        return;
    };
    let run = boot_qemu("hello", "");
    assert_eq!(decode_exit(run.status), Some(0), "{run:?}");
    assert!(
        run.stdout
            .contains("hello from ring 3 (CPL 3, 1 cpus, 128 MiB, tsc "),
        "{run:?}"
    );
}

#[test]
fn exit_code_reaches_qemus_status_through_isa_debug_exit() {
    let Some(()) = qemu("exit_code_reaches_qemus_status_through_isa_debug_exit") else {
        return;
    };
    let run = boot_qemu("exit_code", "");
    assert_eq!(run.status, (42 << 1) | 1, "{run:?}");
    assert_eq!(decode_exit(run.status), Some(42), "{run:?}");
}

#[test]
fn panic_under_qemu_prints_message_and_a_backtrace_that_symbolizes() {
    let Some(()) = qemu("panic_under_qemu_prints_message_and_a_backtrace_that_symbolizes") else {
        return;
    };
    let run = boot_qemu("panic", "");
    assert_eq!(decode_exit(run.status), Some(101), "{run:?}");
    assert!(run.stdout.contains("about to panic\n"), "{run:?}");
    assert!(
        run.stdout
            .contains("guest panicked on core 0: deliberate panic: 6 * 7 = 42 at src/bin/panic.rs"),
        "{run:?}"
    );
    // The frames are raw return addresses; the monitor's symbolizer names them.
    let bytes = std::fs::read(guests().join("panic")).expect("read the panic image");
    let symbols = ebb_vmm::image::Symbolizer::new(&bytes);
    let frames: Vec<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("0x"))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .map(|addr| symbols.describe_return(addr))
        .collect();
    assert!(
        frames.iter().any(|f| f.contains("<panic::deeper+0x")),
        "{frames:#?}\n{run:?}"
    );
    assert!(
        frames.iter().any(|f| f.contains("<__ebb_native_main+0x")),
        "{frames:#?}\n{run:?}"
    );
}

#[test]
fn runtime_timers_and_command_line_work_under_qemu() {
    let Some(()) = qemu("runtime_timers_and_command_line_work_under_qemu") else {
        return;
    };
    let run = boot_qemu("rt_timers", "wait_early_us=300");
    assert_eq!(decode_exit(run.status), Some(0), "{run:?}");
    assert!(
        run.stdout.contains("rt_timers: wait_early 300 us"),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("fired in order [5, 1, 6, 3, 2, 0, 4]"),
        "{run:?}"
    );
    assert!(run.stdout.contains("rt_timers: ok"), "{run:?}");
}

#[test]
fn every_image_carries_the_pvh_note_in_a_pt_note_segment() {
    use object::Endianness;
    use object::elf::{FileHeader64, PT_NOTE};
    use object::read::elf::{FileHeader, ProgramHeader};
    // No QEMU needed: this is about the file.
    let bytes = std::fs::read(guests().join("hello")).expect("read the hello image");
    let header = FileHeader64::<Endianness>::parse(&*bytes).expect("an ELF64 file");
    let endian = header.endian().expect("a known byte order");
    let mut entry = None;
    for phdr in header
        .program_headers(endian, &*bytes)
        .expect("program headers")
    {
        if phdr.p_type(endian) != PT_NOTE {
            continue;
        }
        let Some(mut notes) = phdr.notes(endian, &*bytes).expect("notes") else {
            continue;
        };
        while let Some(note) = notes.next().expect("a well-formed note") {
            if note.name() == b"Xen" && note.n_type(endian) == object::elf::NoteType(18) {
                let desc: [u8; 4] = note.desc().try_into().expect("a 32-bit entry address");
                entry = Some(u32::from_le_bytes(desc));
            }
        }
    }
    let entry = entry.expect("a Xen PHYS32_ENTRY note in a PT_NOTE segment");
    let symbols = ebb_vmm::image::Symbolizer::new(&bytes);
    assert_eq!(
        symbols.lookup(u64::from(entry)).as_deref(),
        Some("ebb_pvh_start32+0x0")
    );
}
