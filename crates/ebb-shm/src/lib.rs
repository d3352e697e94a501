//! # ebb-shm — byte rings in a window two sides map
//!
//! A hosted front end that runs a native node's monitor in its own process can read and
//! write the node's memory: the monitor maps a **shared window** at the top of guest
//! memory that the guest's allocators never use. This crate is the protocol both sides
//! run in that window: two single-producer, single-consumer byte rings (host → guest and
//! guest → host), each end's state (open, finished, reset), and the flags that let a side
//! sleep without missing the other — a stream with TCP's shape and no system call per
//! message. The connection over it (`ebb::shm`) and the doorbells (an ioeventfd one way, a
//! vCPU's kick eventfd the other) live elsewhere; this crate only knows memory.
//!
//! ## The window
//!
//! ```text
//! 0     host end:  state u32, core u32            (written by the host)
//! 64    guest end: state u32, core u32            (written by the guest)
//! 256   ring host→guest: produced u64 | consumed u64 | consumer_sleeping u32 | producer_waiting u32
//! 512   ring guest→host: the same              (each field on its own 64-byte line)
//! 4096  host→guest data, `capacity` bytes
//! 4096 + capacity   guest→host data, `capacity` bytes
//! ```
//!
//! `capacity` is the largest power of two with both data areas inside the window, so the
//! layout is a function of the window's length alone and nothing is negotiated. Fresh
//! guest memory is zero, which is every field's initial value (ends absent, rings empty).
//! `produced` and `consumed` count bytes since the start and only grow; byte `n` of a
//! ring is at `data[n % capacity]`.
//!
//! ## Ordering and sleeping
//!
//! A producer copies bytes, then stores `produced` with release; a consumer loads it with
//! acquire before copying out, and stores `consumed` with release after. To sleep, a
//! consumer sets `consumer_sleeping`, fences, and looks once more; a producer fences
//! after publishing and, if it swaps the flag from 1 to 0, owes the consumer a wake
//! (Dekker's pattern, as in the event loop's own sleep). A producer that found the ring
//! full sets `producer_waiting` the same way and the consumer owes it a wake after
//! making room.
//!
//! ## Invariants
//!
//! * Nothing read from the window is trusted: the other side may be a hostile guest (or,
//!   for the guest, a confused host). An index that claims more than `capacity` bytes in
//!   flight, or that moves backwards, is [`Corrupt`]; each index is loaded once per
//!   call, and what [`Endpoint::available`] reported stays readable; a state that is no
//!   state is [`PeerState::Invalid`]. Copies never leave the data areas whatever the
//!   indices say.
//! * Every access to the window is an atomic access or a copy between the window and
//!   private memory, bounded by the ring's arithmetic. `unsafe` is confined to
//!   [`window`], whose contract is [`Mapping`]'s.
//! * A window carries one connection: each end is opened once.

#![no_std]

extern crate alloc;

mod window;

use alloc::sync::Arc;
use core::fmt;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU64, Ordering, fence};

use window::Window;
pub use window::{HeapWindow, Mapping};

/// Bytes of the control page at the window's start.
pub const CONTROL_BYTES: usize = 4096;
/// The smallest ring a window may have.
pub const MIN_CAPACITY: usize = 4096;

const END_HOST: usize = 0;
const END_GUEST: usize = 64;
const END_CORE: usize = 4;
const RING_TO_GUEST: usize = 256;
const RING_TO_HOST: usize = 512;
const PRODUCED: usize = 0;
const CONSUMED: usize = 64;
const CONSUMER_SLEEPING: usize = 128;
const PRODUCER_WAITING: usize = 192;

/// Which side of the window an end is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The program that runs the monitor (the front end).
    Host,
    /// The native node.
    Guest,
}

impl Side {
    fn end(self) -> usize {
        match self {
            Side::Host => END_HOST,
            Side::Guest => END_GUEST,
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Host => Side::Guest,
            Side::Guest => Side::Host,
        }
    }

    /// The ring this side produces into.
    fn tx_ring(self) -> usize {
        match self {
            Side::Host => RING_TO_GUEST,
            Side::Guest => RING_TO_HOST,
        }
    }
}

/// An end's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum State {
    /// Not opened yet (the window's initial zero).
    Absent = 0,
    /// Open: bytes may flow.
    Open = 1,
    /// Finished sending (TCP's FIN): everything it will send is in the ring.
    Finished = 2,
    /// Gone at once (TCP's reset): what is in the rings does not matter any more.
    Reset = 3,
}

/// The other end's state as read from the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// One of the states.
    Is(State),
    /// A value that is no state (a hostile or broken peer).
    Invalid(u32),
}

/// Why a window cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// Not page-aligned.
    Misaligned(usize),
    /// Too small for the control page and two rings of [`MIN_CAPACITY`].
    TooSmall(usize),
    /// This side's end was opened before (a window carries one connection).
    InUse(Side),
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowError::Misaligned(addr) => {
                write!(f, "the shared window at {addr:#x} is not page-aligned")
            }
            WindowError::TooSmall(len) => write!(
                f,
                "a shared window of {len} bytes is too small (at least {} needed)",
                CONTROL_BYTES + 2 * MIN_CAPACITY
            ),
            WindowError::InUse(side) => {
                write!(f, "the shared window's {side:?} end is already open")
            }
        }
    }
}

impl core::error::Error for WindowError {}

/// The other side broke the ring protocol; the connection cannot go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corrupt {
    /// The producer claims more bytes in flight than the ring holds.
    Produced {
        /// Its `produced`.
        produced: u64,
        /// Our `consumed`.
        consumed: u64,
    },
    /// The producer's `produced` went backwards: it took back bytes it had published
    /// (and we had been told of: a second look at the index must not find fewer).
    ProducedBackwards {
        /// Its `produced` now.
        produced: u64,
        /// What it said before.
        seen: u64,
    },
    /// The consumer's `consumed` is ahead of what was produced or went backwards.
    Consumed {
        /// Its `consumed`.
        consumed: u64,
        /// Our `produced`.
        produced: u64,
    },
}

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corrupt::Produced { produced, consumed } => write!(
                f,
                "the peer claims to have produced {produced} bytes; {consumed} were consumed \
                 and the ring holds fewer than that difference"
            ),
            Corrupt::ProducedBackwards { produced, seen } => write!(
                f,
                "the peer's produced index went back from {seen} to {produced} bytes"
            ),
            Corrupt::Consumed { consumed, produced } => write!(
                f,
                "the peer claims to have consumed {consumed} bytes of the {produced} produced \
                 (ahead, or backwards)"
            ),
        }
    }
}

impl core::error::Error for Corrupt {}

/// The ring capacity of a window of `len` bytes: the largest power of two with both data
/// areas after the control page.
pub fn capacity_of(len: usize) -> Option<usize> {
    let each = len.checked_sub(CONTROL_BYTES)? / 2;
    if each < MIN_CAPACITY {
        return None;
    }
    Some(1 << each.ilog2())
}

/// Marks `side`'s end of the window reset, as if it had reset itself: the embedder does
/// this for a guest that is gone (it exited or was stopped), so the host's connection
/// ends at once instead of waiting for silence.
pub fn mark_reset(mapping: Arc<dyn Mapping>, side: Side) -> Result<(), WindowError> {
    let window = Window::new(mapping)?;
    window
        .u32(side.end())
        .store(State::Reset as u32, Ordering::Release);
    Ok(())
}

/// One side's end of the window: it produces into one ring and consumes the other.
/// Used by one core at a time (its methods take `&mut self` where they move an index).
pub struct Endpoint {
    window: Window,
    side: Side,
    capacity: u64,
    /// Bytes we produced (published or not).
    produced: u64,
    /// Bytes we consumed (released or not).
    consumed: u64,
    /// The peer's `consumed` as last validated (it never goes backwards).
    peer_consumed: u64,
    /// The peer's `produced` as last validated (it never goes backwards either: what
    /// [`available`](Self::available) reported is there for the read that follows).
    /// Private memory; atomic only so that `available` can take `&self`.
    peer_produced: AtomicU64,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("side", &self.side)
            .field("capacity", &self.capacity)
            .field("produced", &self.produced)
            .field("consumed", &self.consumed)
            .finish()
    }
}

impl Endpoint {
    /// Opens `side`'s end of the window `mapping`, naming `core` as the core that serves
    /// it (the host wakes that vCPU when the guest sleeps).
    pub fn open(mapping: Arc<dyn Mapping>, side: Side, core: u32) -> Result<Endpoint, WindowError> {
        let window = Window::new(mapping)?;
        let capacity = capacity_of(window.len()).ok_or(WindowError::TooSmall(window.len()))?;
        let end = side.end();
        if window.u32(end).load(Ordering::Acquire) != State::Absent as u32 {
            return Err(WindowError::InUse(side));
        }
        // Named before the end shows as open, so a peer that sees it open wakes this core.
        window.u32(end + END_CORE).store(core, Ordering::Relaxed);
        window
            .u32(end)
            .compare_exchange(
                State::Absent as u32,
                State::Open as u32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|_| WindowError::InUse(side))?;
        // Start where the window's indices are (zero, unless a confused peer wrote them:
        // then the first look reports it).
        let rx = side.other().tx_ring();
        let produced = window
            .u64(side.tx_ring() + PRODUCED)
            .load(Ordering::Acquire);
        let consumed = window.u64(rx + CONSUMED).load(Ordering::Acquire);
        Ok(Endpoint {
            window,
            side,
            capacity: capacity as u64,
            produced,
            consumed,
            peer_consumed: produced,
            peer_produced: AtomicU64::new(consumed),
        })
    }

    /// Which side this end is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Bytes each ring holds.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    fn tx(&self) -> usize {
        self.side.tx_ring()
    }

    fn rx(&self) -> usize {
        self.side.other().tx_ring()
    }

    fn data(&self, ring: usize) -> usize {
        match ring {
            RING_TO_GUEST => CONTROL_BYTES,
            _ => CONTROL_BYTES + self.capacity as usize,
        }
    }

    /// The other end's state.
    pub fn peer_state(&self) -> PeerState {
        let raw = self
            .window
            .u32(self.side.other().end())
            .load(Ordering::Acquire);
        match raw {
            0 => PeerState::Is(State::Absent),
            1 => PeerState::Is(State::Open),
            2 => PeerState::Is(State::Finished),
            3 => PeerState::Is(State::Reset),
            other => PeerState::Invalid(other),
        }
    }

    /// The core the other end named (untrusted: a host checks it before waking it).
    pub fn peer_core(&self) -> u32 {
        self.window
            .u32(self.side.other().end() + END_CORE)
            .load(Ordering::Relaxed)
    }

    /// Sets this end's state. Returns whether the peer sleeps and must be woken to see it.
    pub fn set_state(&mut self, state: State) -> bool {
        self.window
            .u32(self.side.end())
            .store(state as u32, Ordering::Release);
        self.peer_sleeping()
    }

    fn peer_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        let flag = self.window.u32(self.tx() + CONSUMER_SLEEPING);
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
    }

    /// Bytes waiting to be read. At least that many stay readable: a later look that
    /// finds fewer (the peer moved `produced` back) is [`Corrupt`].
    pub fn available(&self) -> Result<usize, Corrupt> {
        let produced = self
            .window
            .u64(self.rx() + PRODUCED)
            .load(Ordering::Acquire);
        let waiting = produced.wrapping_sub(self.consumed);
        if waiting > self.capacity {
            return Err(Corrupt::Produced {
                produced,
                consumed: self.consumed,
            });
        }
        // Both differences are at most `capacity` (`consumed` never passes what was
        // seen), so comparing them is comparing the indices.
        let seen = self.peer_produced.load(Ordering::Relaxed);
        if waiting < seen.wrapping_sub(self.consumed) {
            return Err(Corrupt::ProducedBackwards { produced, seen });
        }
        self.peer_produced.store(produced, Ordering::Relaxed);
        Ok(waiting as usize)
    }

    /// Bytes that may be written now.
    pub fn room(&mut self) -> Result<usize, Corrupt> {
        let consumed = self
            .window
            .u64(self.tx() + CONSUMED)
            .load(Ordering::Acquire);
        // Between the last value we saw and what we produced, inclusive.
        let advanced = consumed.wrapping_sub(self.peer_consumed);
        let outstanding = self.produced.wrapping_sub(self.peer_consumed);
        if advanced > outstanding {
            return Err(Corrupt::Consumed {
                consumed,
                produced: self.produced,
            });
        }
        self.peer_consumed = consumed;
        let used = self.produced.wrapping_sub(consumed);
        Ok((self.capacity - used) as usize)
    }

    /// Copies as much of `bytes` as there is room for into the ring (not yet visible to
    /// the peer: see [`publish`](Self::publish)). Returns how many.
    pub fn write(&mut self, bytes: &[u8]) -> Result<usize, Corrupt> {
        let n = bytes.len().min(self.room()?);
        let ring = self.tx();
        self.window.copy_in(
            self.data(ring),
            self.capacity as usize,
            self.produced,
            &bytes[..n],
        );
        self.produced = self.produced.wrapping_add(n as u64);
        Ok(n)
    }

    /// Makes what was written visible. Returns whether the peer sleeps and must be woken.
    pub fn publish(&mut self) -> bool {
        self.window
            .u64(self.tx() + PRODUCED)
            .store(self.produced, Ordering::Release);
        self.peer_sleeping()
    }

    /// Copies up to `out.len()` waiting bytes out of the ring (their room is not given back
    /// until [`release`](Self::release)). Returns how many.
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, Corrupt> {
        let n = out.len().min(self.available()?);
        let ring = self.rx();
        self.window.copy_out(
            self.data(ring),
            self.capacity as usize,
            self.consumed,
            &mut out[..n],
        );
        self.consumed = self.consumed.wrapping_add(n as u64);
        Ok(n)
    }

    /// [`read`](Self::read) into memory never initialized (a fresh buffer's tailroom,
    /// which then needs no zero-fill first). Returns the prefix of `out` it filled.
    pub fn read_uninit<'o>(
        &mut self,
        out: &'o mut [MaybeUninit<u8>],
    ) -> Result<&'o mut [u8], Corrupt> {
        let n = out.len().min(self.available()?);
        let ring = self.rx();
        let read = self.window.copy_out_uninit(
            self.data(ring),
            self.capacity as usize,
            self.consumed,
            &mut out[..n],
        );
        self.consumed = self.consumed.wrapping_add(n as u64);
        Ok(read)
    }

    /// Gives the room of what was read back to the producer. Returns whether it waits
    /// for room and must be woken.
    pub fn release(&mut self) -> bool {
        let rx = self.rx();
        self.window
            .u64(rx + CONSUMED)
            .store(self.consumed, Ordering::Release);
        fence(Ordering::SeqCst);
        let flag = self.window.u32(rx + PRODUCER_WAITING);
        flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0
    }

    /// About to sleep: asks the peer for a wake when it produces (or changes its state),
    /// then looks once more. Returns whether bytes are waiting already (then do not
    /// sleep; the flag may stay set, which costs at most one spurious wake).
    pub fn arm_receive(&self) -> Result<bool, Corrupt> {
        self.window
            .u32(self.rx() + CONSUMER_SLEEPING)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Ok(self.available()? > 0)
    }

    /// Awake again: the peer need not wake us.
    pub fn disarm_receive(&self) {
        let flag = self.window.u32(self.rx() + CONSUMER_SLEEPING);
        if flag.load(Ordering::Relaxed) != 0 {
            flag.store(0, Ordering::Relaxed);
        }
    }

    /// The ring was full: asks the peer for a wake when it makes room, then looks once
    /// more. Returns whether there is room already.
    pub fn want_room(&mut self) -> Result<bool, Corrupt> {
        self.window
            .u32(self.tx() + PRODUCER_WAITING)
            .store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Ok(self.room()? > 0)
    }
}

#[cfg(test)]
mod tests;
