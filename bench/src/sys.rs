//! Small Linux helpers: CPU pinning and the open-file limit.

use std::io;

/// Number of CPUs this process may run on (falls back to 1).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling thread to CPU `core` (`sched_setaffinity(0, ..)`).
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("core {core} out of range"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core < CPU_SETSIZE` was checked above, so CPU_SET stays in bounds.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 = the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("pin to core {core}: {e}")))
    }
}

/// Raises the soft `RLIMIT_NOFILE` to at least `want` (capped by the hard
/// limit). Returns the resulting soft limit.
pub fn raise_fd_limit(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let cur = lim.rlim_cur;
    if cur == libc::RLIM_INFINITY || cur >= want {
        return Ok(cur);
    }
    lim.rlim_cur = if lim.rlim_max == libc::RLIM_INFINITY {
        want
    } else {
        want.min(lim.rlim_max)
    };
    // SAFETY: `lim` is a valid rlimit with cur <= max.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}
