//! The panic handler: formats the message, walks the frame-pointer chain of this core's
//! stack, and hands both to the monitor through the panic hypercall.

use crate::abi::PANIC_FRAMES_MAX;
use crate::{arch, hypercall};
use core::fmt::Write;
use core::panic::PanicInfo;

/// Longest message sent (longer ones are cut).
const MESSAGE_MAX: usize = 1024;
/// Deepest backtrace sent.
const FRAMES: usize = 32;
const _: () = assert!(FRAMES as u64 <= PANIC_FRAMES_MAX);

struct Buffer {
    buf: [u8; MESSAGE_MAX],
    len: usize,
}

impl Write for Buffer {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[panic_handler]
fn on_panic(info: &PanicInfo<'_>) -> ! {
    let mut msg = Buffer {
        buf: [0; MESSAGE_MAX],
        len: 0,
    };
    let _ = write!(msg, "{}", info.message());
    if let Some(loc) = info.location() {
        let _ = write!(msg, " at {}:{}:{}", loc.file(), loc.line(), loc.column());
    }
    let pc = arch::percore();
    let (low, high) = (pc.stack_bottom, pc.stack_top);
    let mut frames = [0u64; FRAMES];
    let mut n = 0;
    let mut fp = arch::frame_pointer();
    while n < FRAMES && fp != 0 {
        let (Some(next), Some(ret)) = (
            arch::read_stack_word(fp, low, high),
            arch::read_stack_word(fp.wrapping_add(8), low, high),
        ) else {
            break;
        };
        if ret == 0 {
            break;
        }
        frames[n] = ret;
        n += 1;
        if next <= fp {
            break; // frames must move up the stack
        }
        fp = next;
    }
    hypercall::panic(&msg.buf[..msg.len], &frames[..n])
}
