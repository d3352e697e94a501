//! Misbehaves in the way its command line names, to test that the monitor reports each
//! misbehaviour clearly and ends only this VM. Cases: bad-pointer, huge-length,
//! unknown-hypercall, block-outside, misaligned, bad-port, bad-kick, doorbell (with no
//! shared window), corrupt-console, cli, hlt, mov-cr3, wild-jump, spin.
#![no_std]
#![no_main]

use core::arch::asm;
use ebb_native::abi::{CONSOLE_CAPACITY, ConsoleRing, HC_PANIC, HcPanic, HypercallHeader};
use ebb_native::{arch, cmdline, hypercall, println};

fn panic_block(message_addr: u64, message_len: u64) -> HcPanic {
    HcPanic {
        header: HypercallHeader {
            nr: HC_PANIC,
            result: 0,
        },
        message_addr,
        message_len,
        frames_addr: 0,
        frames_len: 0,
    }
}

fn main() -> i32 {
    let case = cmdline();
    println!("hostile: {case}");
    match case {
        // A message pointer far outside guest memory.
        "bad-pointer" => hypercall::raw(&mut panic_block(0x40_0000_0000, 16)),
        // A valid pointer with a length over any limit.
        "huge-length" => {
            let msg = b"x";
            hypercall::raw(&mut panic_block(msg.as_ptr() as u64, u64::MAX / 2))
        }
        "unknown-hypercall" => {
            let mut block = HypercallHeader {
                nr: 0x7777,
                result: 0,
            };
            hypercall::raw(&mut block)
        }
        // An argument block beyond the end of guest memory (4 GiB - 8).
        "block-outside" => arch::out32(ebb_native::abi::HYPERCALL_PORT, 0xffff_fff8),
        "misaligned" => arch::out32(ebb_native::abi::HYPERCALL_PORT, 0x20_0003),
        "bad-port" => arch::out32(0x80, 0x1234),
        "bad-kick" => hypercall::kick(99),
        // This VM has no shared window, so the doorbell port is not the host's.
        "doorbell" => arch::out32(ebb_native::abi::DOORBELL_PORT, 7),
        "corrupt-console" => {
            let ring = arch::percore().console as *mut ConsoleRing;
            // SAFETY: none needed for the guest's own memory — this scribbles a head that
            // runs far ahead of the tail, on purpose.
            unsafe { (*ring).head = CONSOLE_CAPACITY * 7 };
            hypercall::console_flush();
        }
        // SAFETY: none of these are safe at CPL 3 — each must fault.
        "cli" => unsafe { asm!("cli") },
        // SAFETY: as above.
        "hlt" => unsafe { asm!("hlt") },
        // SAFETY: as above.
        "mov-cr3" => unsafe { asm!("mov cr3, {}", in(reg) 0u64) },
        // SAFETY: as above: jumps into the unmapped null page.
        "wild-jump" => unsafe { asm!("jmp {}", in(reg) 0x10u64, options(noreturn)) },
        "spin" => loop {
            core::hint::spin_loop();
        },
        other => {
            println!("unknown case {other:?}");
            return 2;
        }
    }
    println!("hostile: the monitor let {case} through");
    1
}

ebb_native::entry!(main);
