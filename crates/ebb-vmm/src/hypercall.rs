//! Hypercall decoding and handling: the trust boundary between the guest and the monitor.
//!
//! A hypercall is a 32-bit `out` to [`HYPERCALL_PORT`](ebb_abi::HYPERCALL_PORT)
//! whose value is the guest-physical address of an argument block. Everything in the block
//! is guest-controlled: the block itself, and every address and length inside it, is
//! checked against guest memory before use, and anything malformed ends the VM with an
//! [`AbiError`] naming the hypercall and the offending value. Nothing the guest supplies
//! can make the monitor panic, block forever or touch memory outside the guest.

use crate::abi_error::AbiError;
use crate::report::Outcome;
use crate::shared::Shared;
use ebb_abi::{
    HC_CLOCK, HC_CONSOLE_FLUSH, HC_EXIT, HC_PANIC, HC_WAIT, HcClock, HcExit, HcPanic, HcWait,
    HypercallHeader, PANIC_FRAMES_MAX, PANIC_MESSAGE_MAX, WAIT_KICKED, WAIT_TIMED_OUT,
};
use std::mem::{offset_of, size_of};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use vmm_sys_util::eventfd::EventFd;

/// What the vCPU does after a hypercall.
#[derive(Debug)]
pub enum Step {
    /// Resume the guest.
    Continue,
    /// End the VM.
    End(Box<Outcome>),
}

fn name(nr: u32) -> &'static str {
    match nr {
        HC_CONSOLE_FLUSH => "CONSOLE_FLUSH",
        HC_EXIT => "EXIT",
        HC_PANIC => "PANIC",
        HC_CLOCK => "CLOCK",
        HC_WAIT => "WAIT",
        _ => "UNKNOWN",
    }
}

/// What a hypercall needs from its vCPU.
pub struct Caller<'a> {
    /// VM-wide state.
    pub shared: &'a Shared,
    /// The calling core.
    pub core: u32,
    /// The core's kick eventfd (signalled by other cores through ioeventfd).
    pub kick: &'a EventFd,
}

/// Handles the hypercall whose argument block is at `value`.
pub fn handle(caller: &Caller<'_>, value: u32) -> Result<Step, AbiError> {
    let mem = &caller.shared.mem;
    let addr = u64::from(value);
    if !addr.is_multiple_of(8) {
        return Err(AbiError::Misaligned { addr });
    }
    let header_len = size_of::<HypercallHeader>() as u64;
    let nr = mem
        .read_u32(addr + offset_of!(HypercallHeader, nr) as u64)
        .filter(|_| mem.contains(addr, header_len))
        .ok_or(AbiError::BlockOutside {
            hypercall: "hypercall header",
            addr,
            len: header_len,
        })?;
    let hypercall = name(nr);
    let block_len = match nr {
        HC_CONSOLE_FLUSH => header_len,
        HC_EXIT => size_of::<HcExit>() as u64,
        HC_PANIC => size_of::<HcPanic>() as u64,
        HC_CLOCK => size_of::<HcClock>() as u64,
        HC_WAIT => size_of::<HcWait>() as u64,
        _ => return Err(AbiError::Unknown { nr, addr }),
    };
    let outside = AbiError::BlockOutside {
        hypercall,
        addr,
        len: block_len,
    };
    if !mem.contains(addr, block_len) {
        return Err(outside);
    }
    // The block is in range from here on: field reads and writes cannot fail, but are
    // still checked rather than unwrapped.
    let u64_at = |off: usize| mem.read_u64(addr + off as u64).ok_or(outside.clone());
    let step = match nr {
        HC_CONSOLE_FLUSH => {
            caller.shared.console.drain(mem, caller.core)?;
            Step::Continue
        }
        HC_EXIT => {
            let code = mem
                .read_u32(addr + offset_of!(HcExit, code) as u64)
                .ok_or(outside.clone())?;
            Step::End(Box::new(Outcome::Exited { code }))
        }
        HC_PANIC => panic(caller, &u64_at)?,
        HC_CLOCK => {
            let realtime = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let monotonic = caller.shared.started.elapsed();
            mem.write_u64(
                addr + offset_of!(HcClock, realtime_ns) as u64,
                realtime.as_nanos() as u64,
            )
            .ok_or(outside.clone())?;
            mem.write_u64(
                addr + offset_of!(HcClock, monotonic_ns) as u64,
                monotonic.as_nanos() as u64,
            )
            .ok_or(outside.clone())?;
            Step::Continue
        }
        HC_WAIT => {
            let timeout_ns = u64_at(offset_of!(HcWait, timeout_ns))?;
            let timeout = (timeout_ns != u64::MAX).then(|| Duration::from_nanos(timeout_ns));
            let woken_by = match caller.shared.wait(caller.kick, timeout) {
                true => WAIT_KICKED,
                false => WAIT_TIMED_OUT,
            };
            mem.write_u32(addr + offset_of!(HcWait, woken_by) as u64, woken_by)
                .ok_or(outside.clone())?;
            Step::Continue
        }
        _ => unreachable!("numbers were matched above"),
    };
    mem.write_u32(addr + offset_of!(HypercallHeader, result) as u64, 0)
        .ok_or(outside)?;
    Ok(step)
}

fn panic(
    caller: &Caller<'_>,
    u64_at: &dyn Fn(usize) -> Result<u64, AbiError>,
) -> Result<Step, AbiError> {
    let mem = &caller.shared.mem;
    let message_addr = u64_at(offset_of!(HcPanic, message_addr))?;
    let message_len = u64_at(offset_of!(HcPanic, message_len))?;
    let frames_addr = u64_at(offset_of!(HcPanic, frames_addr))?;
    let frames_len = u64_at(offset_of!(HcPanic, frames_len))?;
    if message_len > PANIC_MESSAGE_MAX {
        return Err(AbiError::TooLong {
            hypercall: "PANIC",
            what: "message",
            len: message_len,
            max: PANIC_MESSAGE_MAX,
        });
    }
    if frames_len > PANIC_FRAMES_MAX {
        return Err(AbiError::TooLong {
            hypercall: "PANIC",
            what: "backtrace",
            len: frames_len,
            max: PANIC_FRAMES_MAX,
        });
    }
    let message = mem
        .read_bytes(message_addr, message_len)
        .ok_or(AbiError::RangeOutside {
            hypercall: "PANIC",
            what: "message",
            addr: message_addr,
            len: message_len,
        })?;
    let frames_bytes = if frames_len == 0 {
        Vec::new()
    } else {
        mem.read_bytes(frames_addr, frames_len * 8)
            .ok_or(AbiError::RangeOutside {
                hypercall: "PANIC",
                what: "backtrace",
                addr: frames_addr,
                len: frames_len * 8,
            })?
    };
    let backtrace = frames_bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    Ok(Step::End(Box::new(Outcome::Panicked {
        core: caller.core,
        message: String::from_utf8_lossy(&message).into_owned(),
        backtrace,
    })))
}

#[cfg(test)]
mod tests {
    //! The decoder against a hostile guest, over plain host memory (no KVM).
    use super::*;
    use crate::testing::{FakeGuest, MEM_SIZE};
    use ebb_abi::HcPanic;

    /// Where the tests put argument blocks: inside guest memory, 8-byte aligned, clear of
    /// the console rings (which the flush hypercall reads).
    const BLOCK: u64 = 0x60_0000;

    fn header(g: &FakeGuest, at: u64, nr: u32) {
        g.mem().write_u32(at, nr).expect("in memory");
        g.mem().write_u32(at + 4, 0xdead).expect("in memory"); // result: monitor writes 0
    }

    fn result_field(g: &FakeGuest, at: u64) -> u32 {
        g.mem().read_u32(at + 4).expect("in memory")
    }

    #[test]
    fn a_block_address_must_be_aligned_and_inside_memory() {
        let g = FakeGuest::new(1);
        assert_eq!(
            g.call(0, BLOCK as u32 + 4).unwrap_err(),
            AbiError::Misaligned { addr: BLOCK + 4 }
        );
        // The header itself beyond the end (an aligned 8-byte header cannot straddle it).
        for addr in [MEM_SIZE, u64::from(u32::MAX) & !7] {
            assert!(
                matches!(
                    g.call(0, addr as u32),
                    Err(AbiError::BlockOutside { addr: a, len: 8, .. }) if a == addr
                ),
                "{addr:#x}"
            );
        }
    }

    #[test]
    fn unknown_numbers_are_refused_by_number() {
        let g = FakeGuest::new(1);
        for nr in [0, 6, 99, u32::MAX] {
            header(&g, BLOCK, nr);
            assert_eq!(
                g.call(0, BLOCK as u32).unwrap_err(),
                AbiError::Unknown { nr, addr: BLOCK }
            );
        }
    }

    #[test]
    fn a_block_that_runs_past_the_end_of_memory_is_refused() {
        let g = FakeGuest::new(1);
        // The header fits, the rest of a PANIC block does not.
        let at = MEM_SIZE - 8;
        header(&g, at, HC_PANIC);
        assert_eq!(
            g.call(0, at as u32).unwrap_err(),
            AbiError::BlockOutside {
                hypercall: "PANIC",
                addr: at,
                len: size_of::<HcPanic>() as u64
            }
        );
    }

    #[test]
    fn exit_clock_and_flush_succeed_and_write_the_result() {
        let g = FakeGuest::new(1);
        header(&g, BLOCK, HC_EXIT);
        g.mem().write_u32(BLOCK + 8, 0x1_0007).expect("in memory");
        match g.call(0, BLOCK as u32) {
            Ok(Step::End(outcome)) => assert!(
                matches!(*outcome, Outcome::Exited { code: 0x1_0007 }),
                "{outcome:?}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(result_field(&g, BLOCK), 0);

        header(&g, BLOCK, HC_CLOCK);
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(matches!(g.call(0, BLOCK as u32), Ok(Step::Continue)));
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let real = g.mem().read_u64(BLOCK + 8).expect("in memory");
        let mono = g.mem().read_u64(BLOCK + 16).expect("in memory");
        assert!((before.as_nanos()..=after.as_nanos()).contains(&u128::from(real)));
        assert!(u128::from(mono) <= g.shared.started.elapsed().as_nanos());
        assert_eq!(result_field(&g, BLOCK), 0);

        header(&g, BLOCK, HC_CONSOLE_FLUSH);
        assert!(matches!(g.call(0, BLOCK as u32), Ok(Step::Continue)));
        assert_eq!(result_field(&g, BLOCK), 0);
    }

    #[test]
    fn wait_times_out_or_returns_on_a_kick() {
        let g = FakeGuest::new(1);
        header(&g, BLOCK, HC_WAIT);
        g.mem().write_u64(BLOCK + 8, 1_000_000).expect("in memory"); // 1 ms
        let started = std::time::Instant::now();
        assert!(matches!(g.call(0, BLOCK as u32), Ok(Step::Continue)));
        assert!(started.elapsed() >= Duration::from_millis(1));
        assert_eq!(g.mem().read_u32(BLOCK + 16), Some(WAIT_TIMED_OUT));
        // A pending kick ends even an endless wait at once.
        g.kick.write(1).expect("kick");
        g.mem().write_u64(BLOCK + 8, u64::MAX).expect("in memory");
        assert!(matches!(g.call(0, BLOCK as u32), Ok(Step::Continue)));
        assert_eq!(g.mem().read_u32(BLOCK + 16), Some(WAIT_KICKED));
    }

    fn panic_block(g: &FakeGuest, message: (u64, u64), frames: (u64, u64)) {
        header(g, BLOCK, HC_PANIC);
        let fields = [message.0, message.1, frames.0, frames.1];
        for (i, v) in fields.into_iter().enumerate() {
            g.mem()
                .write_u64(BLOCK + 8 + 8 * i as u64, v)
                .expect("in memory");
        }
    }

    #[test]
    fn a_panic_carries_its_message_and_frames_lossily() {
        let g = FakeGuest::new(2);
        let (msg, frames) = (0x20_0000, 0x20_1000);
        g.mem()
            .write_bytes(msg, b"bad \xff byte")
            .expect("in memory");
        for (i, f) in [0x40_1234u64, 0x40_5678].into_iter().enumerate() {
            g.mem()
                .write_u64(frames + 8 * i as u64, f)
                .expect("in memory");
        }
        panic_block(&g, (msg, 10), (frames, 2));
        match g.call(1, BLOCK as u32) {
            Ok(Step::End(outcome)) => match *outcome {
                Outcome::Panicked {
                    core,
                    message,
                    backtrace,
                } => {
                    assert_eq!(core, 1);
                    assert_eq!(message, "bad \u{fffd} byte");
                    assert_eq!(backtrace, [0x40_1234, 0x40_5678]);
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        // No frames: the frame address is not looked at.
        panic_block(&g, (msg, 0), (u64::MAX, 0));
        assert!(matches!(g.call(0, BLOCK as u32), Ok(Step::End(_))));
    }

    #[test]
    fn panic_lengths_and_ranges_are_checked() {
        let g = FakeGuest::new(1);
        panic_block(&g, (0x20_0000, PANIC_MESSAGE_MAX + 1), (0, 0));
        assert!(matches!(
            g.call(0, BLOCK as u32),
            Err(AbiError::TooLong {
                what: "message",
                ..
            })
        ));
        panic_block(&g, (0x20_0000, 1), (0x20_1000, PANIC_FRAMES_MAX + 1));
        assert!(matches!(
            g.call(0, BLOCK as u32),
            Err(AbiError::TooLong {
                what: "backtrace",
                ..
            })
        ));
        for (addr, len) in [(MEM_SIZE - 2, 4), (u64::MAX - 1, 4), (u64::MAX, u64::MAX)] {
            let len = len.min(PANIC_MESSAGE_MAX);
            panic_block(&g, (addr, len), (0, 0));
            assert_eq!(
                g.call(0, BLOCK as u32).unwrap_err(),
                AbiError::RangeOutside {
                    hypercall: "PANIC",
                    what: "message",
                    addr,
                    len
                }
            );
        }
        panic_block(&g, (0x20_0000, 1), (u64::MAX - 8, PANIC_FRAMES_MAX));
        assert!(matches!(
            g.call(0, BLOCK as u32),
            Err(AbiError::RangeOutside {
                what: "backtrace",
                ..
            })
        ));
    }

    #[test]
    fn random_blocks_never_panic_the_monitor() {
        // Every hypercall number (and some others) over blocks of arbitrary words: the
        // handler returns, whatever it finds.
        let g = FakeGuest::new(1);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2_000u64 {
            let nr = [HC_CONSOLE_FLUSH, HC_EXIT, HC_PANIC, HC_CLOCK, 7][round as usize % 5];
            header(&g, BLOCK, nr);
            for i in 1..6 {
                let mut v = next();
                if round % 3 == 0 {
                    v %= 2 * MEM_SIZE; // near memory, so some ranges are valid
                }
                g.mem().write_u64(BLOCK + 8 * i, v).expect("in memory");
            }
            let _ = g.call(0, BLOCK as u32);
        }
    }
}
