//! Read-copy-update with the end of an event-loop iteration as the quiescent state.
//!
//! # Model
//!
//! Each core runs a non-preemptive event loop. RCU readers run inside events and hold
//! references only until the event returns, so the end of every loop iteration is a
//! **quiescent state** (QS): the core holds no RCU reference. A core that sleeps
//! waiting for events is in an **extended quiescent state** from
//! [`RcuDomain::enter_idle`] to [`RcuDomain::exit_idle`]. A **grace period** (GP) is an
//! interval during which every core passed a QS or was idle; anything unlinked before a
//! GP started is unreachable by every reader once it ends, and [`RcuDomain::call_rcu`]
//! callbacks (typically frees) run then. Read-side critical sections are nearly free:
//! no shared write, no read-modify-write, no fence (see below); readers use Acquire
//! loads of the pointers they follow.
//!
//! [`RcuHashMap`] is a hash map built on this: lock-free reads that lend references
//! to closures only, writers serialized by a per-map spin lock, and unlinked entries
//! and outgrown tables retired through `call_rcu`.
//!
//! # Grace-period algorithm
//!
//! A GP sequence number `gp_seq` is `2 × completed + (1 while one runs)`; each core
//! has a `need_qs` flag and an `idle` flag on its own cache line.
//!
//! 1. **Retire.** `call_rcu` queues the callback on the core's `next` list. At that
//!    core's next QS the whole list gets one target: after a SeqCst fence, read
//!    `gp_seq = s` and wait for `snap(s) = (s + 3) & !1`, the end of the first GP that
//!    starts after the read; then request that GP.
//! 2. **Start** (under `gp_lock`, when none runs and one is requested): store
//!    `gp_seq = s + 1`, fence F1, set every core's `need_qs`, fence F2, then report on
//!    behalf of every core whose `idle` is set. `outstanding` counts the cores still to
//!    report (plus one the starter drops last, so setup cannot race with completion).
//!    2b. A core at its QS that finds `need_qs` set swaps it to false (exactly one
//!    of the core and the starter wins the swap), fences, and decrements `outstanding`.
//! 3. **Complete.** The decrement that reaches zero bumps `gp_seq` to even, and starts
//!    the next GP if one was requested meanwhile. Each core runs its batches whose
//!    target `gp_seq` has reached at its QS (the fast path compares a cached
//!    `wake_at` with `gp_seq`).
//! 4. **Idle entry.** After a last QS, store `idle = true`, fence, and report if
//!    `need_qs` is set.
//! 5. **Idle exit.** Store `idle = false`, fence.
//!
//! The QS fast path is a thread-local load (the caller check) and a few relaxed loads
//! of lines that are rarely written (the core's own line, and the read-mostly line with
//! `gp_seq`); a core pays one swap, one fence and one shared decrement per GP, not per
//! QS. Per-GP work is O(cores) for the starter only. Callbacks queued off core go to a
//! shared list that the next core at a QS adopts.
//!
//! Why not per-core QS counters with a snapshot per callback batch: every core with a
//! waiting batch would rescan all N counters (N cache lines other cores keep writing)
//! at each of its QSs, and every QS would write a counter line that the others poll.
//! Here a QS writes nothing shared unless a GP asks for it, one shared GP serves the
//! batches of all cores, and GP starts are rare (one per GP, under a lock).
//!
//! # Memory-ordering argument
//!
//! Two things must hold for a node `p` unlinked by store `U` and freed by callback `C`.
//!
//! **(a) Reads before the QS happen before the free.** A core's reads precede its
//! report (program order), reports are `AcqRel` decrements of one counter, so the final
//! decrement acquires them all (a chain of read-modify-writes); it then increments
//! `gp_seq` with Release, and the core running `C` loads `gp_seq` with Acquire before
//! running it. For an idle core the starter's Acquire load of `idle` reads the core's
//! SeqCst (hence Release) store in `enter_idle`, which follows its last reads.
//!
//! **(b) Reads after the QS cannot find `p`.** Let `F_w` be the fence of step 1. The
//! retirer read `gp_seq` without seeing the starter's store of `s + 1`, so (C++20
//! `[atomics.order]` p4, fence–fence case) `F_w` precedes the starter's `F1` in the
//! single SeqCst order. A core that reports itself swapped the `need_qs` value stored
//! after `F1`, then fenced (`F_c`), so `F1` precedes `F_c`; as `U` precedes `F_w`, every
//! load after `F_c` sees `U` or later: the core's later reads do not reach `p`. A core
//! reported idle by the starter: the starter's load after `F2` did not see the core's
//! later `idle = false`, so `F2` precedes the fence in `exit_idle`, and the same
//! reasoning applies to everything the core reads after waking. That is the idle race:
//! a core waking right after the starter found it idle reads only the new pointer,
//! because the unlink happened before the check. Conversely the idle Dekker (store
//! `idle`/fence/load `need_qs` against store `need_qs`/`F2`/load `idle`) guarantees
//! that a core falling asleep as a GP starts is seen idle or sees its flag, so a
//! sleeping core never stalls a GP.
//!
//! A GP started by someone else just before our `gp_seq` read is handled by `snap`: if
//! we saw it running (`s` odd) we wait for the next one.
//!
//! # Read-side critical sections
//!
//! A reader opens an [`RcuReadGuard`] with [`RcuDomain::read_guard`] (the map does it
//! for you) and may use RCU-protected pointers only while it lives; structures tie the
//! references they lend to it, e.g. by lending them only to a closure. The guard is a
//! per-core nesting depth: plain loads and stores on the core's own cache line, no
//! read-modify-write, no fence. It is what makes the reporting calls safe functions:
//! [`RcuDomain::quiescent_state`] and [`RcuDomain::enter_idle`] panic if the calling
//! thread is not running as that core (`crate::percore::current_core()`) or if a guard
//! of the core is alive, so no safe code can end a grace period under a live reader.
//! `read_guard` refuses (returns `None`) on threads that are not active cores of the
//! domain; callers then need other exclusion (the map takes its writer lock).
//!
//! # Invariants a user must respect
//!
//! * **RCU reads happen on cores**, inside event handlers, under a guard that does not
//!   survive the handler. A thread that is not a core is not protected by grace
//!   periods: RCU structures must check `read_guard` (as the map does) rather than
//!   read unguarded.
//! * At most one thread runs as a given core id at a time (`set_current_core` is the
//!   runtime's business), and that thread's event loop reports its quiescent states;
//!   all RCU structures a runtime's cores read use the runtime's one domain.
//! * Every core starts active, so a core that has not started yet stalls grace
//!   periods until it runs or calls `enter_idle`; a core that stops for good should
//!   call `enter_idle` last.
//! * Callbacks run on the core that queued them, at one of its later QSs, outside any
//!   lock, and may queue more callbacks. A core that sleeps does not run its callbacks
//!   until it wakes. Dropping the domain runs every remaining callback (safe: no
//!   structure that uses the domain, and so no reader, can outlive it).
//! * Never wait for a GP inside an event: nothing here blocks, and a core that spins
//!   waiting for a GP would prevent it (there is deliberately no `synchronize_rcu`).

mod domain;
#[allow(unsafe_code)] // listed in the crate root
mod hashmap;

pub use domain::{RcuCallback, RcuDomain, RcuReadGuard};
pub use hashmap::{DefaultHashBuilder, RcuHashMap};

#[cfg(test)]
mod tests;
