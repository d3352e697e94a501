// The compute loop shared by the `compute` guest and the host side of the speed test.
// Written in assembly so both sides run the same instructions whatever the optimization
// level: a chain of dependent multiply-adds plus a load and store per step into a 64 KiB
// table (user-mode memory traffic through the guest's page tables).

/// Iterations per round.
pub const ITERATIONS: u64 = 20_000_000;
/// Rounds; the best is reported.
pub const ROUNDS: u32 = 5;

#[inline(never)]
pub fn workload(iterations: u64) -> u64 {
    let mut table = [0u64; 8192];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    // SAFETY: the loop reads and writes only `table` (index masked to 8191) and registers.
    unsafe {
        core::arch::asm!(
            "2:",
            "imul {x}, {k}",
            "add {x}, 1",
            "mov {i}, {x}",
            "shr {i}, 51",
            "add {x}, qword ptr [{t} + {i}*8]",
            "mov qword ptr [{t} + {i}*8], {x}",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            n = inout(reg) iterations => _,
            i = out(reg) _,
            k = in(reg) 0x5851_f42d_4c95_7f2du64,
            t = in(reg) table.as_mut_ptr(),
            options(nostack),
        );
    }
    x ^ table[(x & 8191) as usize]
}
