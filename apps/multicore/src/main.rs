//! `multicore`: every core does a share of the work, core 0 gathers and checks it.
//!
//! The numbers `1..=N` (N = [`DEFAULT_N`], or the first argument) are split into one
//! contiguous range per core; `run_on` sends each range to its core, which returns the
//! range's sum, how many primes it holds and the id of the core that really ran it. Core 0
//! prints each core's result and the totals, checks them against closed forms computed
//! on core 0 alone (`N(N+1)/2`, and a sieve for the prime count), and exits 0 only if
//! every core answered from the right core with the right numbers.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use core::ops::RangeInclusive;

/// How far to count when no argument is given.
const DEFAULT_N: u64 = 200_000;

/// What one core computed over its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Partial {
    ran_on: u32,
    sum: u64,
    primes: u64,
}

fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// The work sent to a core: trial division, deliberately independent of the sieve used
/// to check it.
fn partial(range: RangeInclusive<u64>) -> Partial {
    Partial {
        ran_on: ebb::core_id().0,
        sum: range.clone().sum(),
        primes: range.filter(|&n| is_prime(n)).count() as u64,
    }
}

/// Core `core`'s share of `1..=n` split over `cores` cores (the last takes the remainder).
fn share(n: u64, core: u64, cores: u64) -> RangeInclusive<u64> {
    let per = n / cores;
    let start = core * per + 1;
    let end = if core + 1 == cores {
        n
    } else {
        start + per - 1
    };
    start..=end
}

/// Primes up to `n` by the sieve of Eratosthenes.
fn primes_up_to(n: u64) -> u64 {
    let n = n as usize;
    let mut composite = vec![false; n + 1];
    let mut count = 0;
    for i in 2..=n {
        if !composite[i] {
            count += 1;
            let mut j = i * i;
            while j <= n {
                composite[j] = true;
                j += i;
            }
        }
    }
    count
}

async fn app_main() -> i32 {
    let n = match ebb::args().first().map(|a| a.parse::<u64>()) {
        None => DEFAULT_N,
        Some(Ok(n)) if (1..=100_000_000).contains(&n) => n,
        Some(_) => {
            ebb::println!("multicore: the argument is N, from 1 to 100000000");
            return 2;
        }
    };
    let cores = ebb::num_cores() as u64;
    ebb::println!("multicore: summing and counting primes in 1..={n} on {cores} core(s)");
    let start = ebb::now();
    let requests: Vec<_> = (0..cores)
        .map(|core| {
            let range = share(n, core, cores);
            ebb::run_on(ebb::CoreId(core as u32), move || partial(range))
        })
        .collect();
    let mut ok = true;
    let (mut sum, mut primes) = (0u64, 0u64);
    for (core, request) in requests.into_iter().enumerate() {
        match request.await {
            Ok(p) => {
                let range = share(n, core as u64, cores);
                ebb::println!(
                    "multicore: core {core} ({}..={}): sum {} primes {} (ran on core {})",
                    range.start(),
                    range.end(),
                    p.sum,
                    p.primes,
                    p.ran_on
                );
                if p.ran_on != core as u32 {
                    ebb::println!("multicore: core {core}'s share ran on core {}", p.ran_on);
                    ok = false;
                }
                sum += p.sum;
                primes += p.primes;
            }
            Err(e) => {
                ebb::println!("multicore: core {core} failed: {e}");
                ok = false;
            }
        }
    }
    let elapsed = ebb::now() - start;
    let (want_sum, want_primes) = (n * (n + 1) / 2, primes_up_to(n));
    ebb::println!(
        "multicore: total sum {sum} (expected {want_sum}), primes {primes} (expected {want_primes}), {} us",
        elapsed.as_micros()
    );
    if sum != want_sum || primes != want_primes {
        ok = false;
    }
    if ok {
        ebb::println!("multicore: ok");
        0
    } else {
        ebb::println!("multicore: FAILED");
        1
    }
}

ebb::main!(app_main);
