//! The `shm_window` target's harness (also run on the checked-in seeds by `cargo test`).
//!
//! One window in this process's heap, the host's and the guest's ring ends over it, and
//! a hostile peer that writes any bytes anywhere in it between their calls. The input:
//!
//! * byte 0, the window: capacity `4096 << (b & 1)`, plus `(b >> 1) & 3` spare pages
//!   (the capacity is then what `capacity_of` says); bit 4 set: the ends open only after
//!   the scribbles that come first (a window dirty before anyone opened it);
//! * then operations, an opcode byte each (`% 16`) and its arguments (missing argument
//!   bytes read as zero; lengths are u16 LE, at most twice the capacity):
//!   * 0/1 host/guest `write(len)`, 2/3 `publish`, 4/5 `read(len)`, 6/7
//!     `read_uninit(len)`, 8/9 `release`;
//!   * 10/11 host/guest something else (`sel` byte): `room`, `want_room`,
//!     `arm_receive`, `disarm_receive`, `set_state`, `peer_state`/`peer_core`;
//!   * 12/13 host/guest drain: read `1 + chunk` bytes at a time until nothing waits or
//!     an error, then release;
//!   * 14 scribble: `offset` (u16 LE, modulo the window), `n` (u8), then `n` bytes
//!     written there (cut at the window's end);
//!   * 15 nudge: `slot` (u8), `delta` (i16 LE): slot bit 3 clear, a ring index
//!     (produced or consumed of either ring) moves by `delta`; set, a state, core or
//!     flag word (of 8) becomes `delta`.
//!
//! Promised, and asserted: nothing panics (nor copies outside the window: the sanitizer
//! sees the heap window's bounds); every read returns at most what was asked and at most
//! the capacity, and exactly what `available` said just before (or the same error);
//! `room` and `available` never exceed the capacity, and what `available` said waits
//! stays readable (a later read gets at least that, or fails); a call that fails changes neither
//! end's indices, reports an error whose numbers bear it out (ring-index errors from
//! reads, consumed-index errors from writes) and keeps reporting it while the window
//! says the same; a drain ends within `capacity` reads. While no ring index was
//! scribbled on, no call fails; while no index nor data byte was, every byte read is
//! the one the other end wrote at that place in its stream.

use std::mem::MaybeUninit;
use std::sync::Arc;

use ebb_shm::{CONTROL_BYTES, Corrupt, Endpoint, HeapWindow, Mapping, PeerState, Side, State};

/// The control page's ring indices (ebb-shm's layout: produced and consumed of the
/// host → guest ring, then of the guest → host ring).
const INDICES: [usize; 4] = [256, 320, 512, 576];
/// Its other words: each end's state and core, each ring's two flags.
const WORDS: [usize; 8] = [0, 4, 64, 68, 384, 448, 640, 704];

/// What [`run`] saw, for the seeds test (every outcome reached).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes {
    /// Bytes read by either end.
    pub bytes_read: u64,
    /// Of those, checked against what the other end wrote (nothing scribbled yet).
    pub bytes_checked: u64,
    /// Writes cut short by a full ring.
    pub full: u64,
    /// `Corrupt::Produced`: more in flight than the ring holds.
    pub too_many: u64,
    /// `Corrupt::ProducedBackwards`.
    pub backwards: u64,
    /// `Corrupt::Consumed`.
    pub bad_consumed: u64,
    /// `PeerState::Invalid`.
    pub invalid_states: u64,
    /// Drains that read something and ended.
    pub drains: u64,
    /// Scribbles and nudges applied.
    pub scribbles: u64,
    /// Opens refused (a state word scribbled before).
    pub refused_opens: u64,
}

/// Byte `pos` of the stream `from` writes.
fn pattern(from: Side, pos: u64) -> u8 {
    let salt = match from {
        Side::Host => 0,
        Side::Guest => 0x5a,
    };
    (pos % 251) as u8 ^ salt
}

/// The input, read front to back; zeros past its end.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// One end and what the harness knows of its streams.
struct End {
    ep: Endpoint,
    side: Side,
    /// Stream position of the next byte it writes, of its last publish, of the next byte
    /// it reads, and of its last release.
    written: u64,
    published: u64,
    read: u64,
    released: u64,
    /// Bytes `available` last said wait, less those read since: they stay readable
    /// whatever the peer writes (or the read fails).
    promised: usize,
}

/// The hostile peer's view of the window: raw bytes.
struct Scribbler {
    mapping: Arc<HeapWindow>,
    /// A ring index was written (errors may follow, for good).
    indices: bool,
    /// A byte of a ring's data was written (what is read may not be what was sent).
    data: bool,
}

impl Scribbler {
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let len = self.mapping.size();
        let offset = offset % len;
        let n = bytes.len().min(len - offset);
        if INDICES.iter().any(|&i| offset < i + 8 && i < offset + n) {
            self.indices = true;
        }
        if offset + n > CONTROL_BYTES {
            self.data = true;
        }
        // SAFETY: `offset + n <= len`, so the bytes lie in the window, which `mapping`
        // keeps allocated; this harness runs on one thread and nothing holds references
        // into the window (the ends make atomic accesses and copies only during their
        // calls), so nothing reads or writes these bytes meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.mapping.base().add(offset), n);
        }
    }

    fn read_u64(&self, offset: usize) -> u64 {
        let mut word = [0u8; 8];
        // SAFETY: as for `write`: `offset` is one of `INDICES`, 8 bytes inside the
        // control page, which lies in the window.
        unsafe {
            std::ptr::copy_nonoverlapping(self.mapping.base().add(offset), word.as_mut_ptr(), 8);
        }
        u64::from_ne_bytes(word)
    }
}

/// Checks an error against what it claims; counts it.
fn corrupt(e: Corrupt, capacity: u64, from_read: bool, out: &mut Outcomes) {
    assert!(!e.to_string().is_empty());
    match e {
        Corrupt::Produced { produced, consumed } => {
            assert!(from_read, "{e:?} from a write");
            assert!(produced.wrapping_sub(consumed) > capacity, "{e:?}");
            out.too_many += 1;
        }
        Corrupt::ProducedBackwards { produced, seen } => {
            assert!(from_read, "{e:?} from a write");
            assert_ne!(produced, seen);
            out.backwards += 1;
        }
        Corrupt::Consumed { .. } => {
            assert!(!from_read, "{e:?} from a read");
            out.bad_consumed += 1;
        }
    }
}

fn open(mapping: &Arc<HeapWindow>, out: &mut Outcomes) -> Option<(End, End)> {
    let end = |side, core| {
        let ep = Endpoint::open(mapping.clone(), side, core).ok()?;
        Some(End {
            ep,
            side,
            written: 0,
            published: 0,
            read: 0,
            released: 0,
            promised: 0,
        })
    };
    let ends = end(Side::Host, 0).zip(end(Side::Guest, 1));
    if ends.is_none() {
        out.refused_opens += 1;
    }
    ends
}

/// Runs the operations `data` describes; asserts the promises of the module docs.
pub fn run(data: &[u8]) -> Outcomes {
    let mut out = Outcomes::default();
    let mut input = Input(data);
    let layout = input.u8();
    let capacity_wanted = 4096usize << (layout & 1);
    let len = CONTROL_BYTES + 2 * capacity_wanted + usize::from((layout >> 1) & 3) * 4096;
    let mapping = HeapWindow::new(len).expect("a heap window");
    let capacity = ebb_shm::capacity_of(len).expect("room for two rings");
    let mut scribbler = Scribbler {
        mapping: mapping.clone(),
        indices: false,
        data: false,
    };
    let mut ends: Option<(End, End)> = None;
    if layout & 0x10 == 0 {
        ends = open(&mapping, &mut out);
    }
    // Lengths past twice the capacity act as twice the capacity (cheaper to run).
    let most = 2 * capacity;
    let mut buf = vec![0u8; most];
    let mut uninit = vec![MaybeUninit::<u8>::uninit(); most];
    while !input.0.is_empty() {
        let op = input.u8() % 16;
        if op >= 14 {
            out.scribbles += 1;
            if op == 14 {
                let offset = usize::from(input.u16());
                let n = usize::from(input.u8());
                let bytes = input.bytes(n).to_vec();
                scribbler.write(offset, &bytes);
            } else {
                let slot = usize::from(input.u8());
                let delta = input.u16() as i16;
                if slot & 8 == 0 {
                    let at = INDICES[slot % 4];
                    let value = scribbler.read_u64(at).wrapping_add(delta as u64);
                    scribbler.write(at, &value.to_ne_bytes());
                } else {
                    scribbler.write(WORDS[slot % 8], &u32::from(delta as u16).to_ne_bytes());
                }
            }
            continue;
        }
        if ends.is_none() {
            ends = open(&mapping, &mut out);
        }
        let Some((host, guest)) = ends.as_mut() else {
            return out;
        };
        assert_eq!(host.ep.capacity(), capacity);
        let (me, other) = if op & 1 == 0 {
            (host, guest)
        } else {
            (guest, host)
        };
        let state = format!("{:?}", me.ep);
        // What this call may do: fail only once an index was scribbled on; return what
        // the other end wrote only while nothing was.
        let may_fail = scribbler.indices;
        let clean = !scribbler.indices && !scribbler.data;
        let cap = capacity as u64;
        match op >> 1 {
            0 => {
                let len = usize::from(input.u16()).min(most);
                for (k, b) in buf[..len].iter_mut().enumerate() {
                    *b = pattern(me.side, me.written + k as u64);
                }
                match me.ep.write(&buf[..len]) {
                    Ok(n) => {
                        assert!(n <= len && n <= capacity);
                        if !may_fail {
                            let room = cap - (me.written - other.released);
                            assert_eq!(n as u64, room.min(len as u64), "what there is room for");
                        }
                        if n < len {
                            out.full += 1;
                        }
                        me.written += n as u64;
                    }
                    Err(e) => {
                        assert!(may_fail, "{e} with honest indices");
                        corrupt(e, cap, false, &mut out);
                        assert_eq!(format!("{:?}", me.ep), state, "a failed write moved");
                    }
                }
            }
            1 => {
                me.ep.publish();
                me.published = me.written;
            }
            2 | 3 => {
                let len = usize::from(input.u16()).min(most);
                let available = me.ep.available();
                let read = if op >> 1 == 2 {
                    me.ep.read(&mut buf[..len])
                } else {
                    let start = uninit.as_ptr().cast::<u8>();
                    me.ep.read_uninit(&mut uninit[..len]).map(|filled| {
                        assert_eq!(filled.as_ptr(), start, "the prefix of the buffer");
                        let n = filled.len();
                        buf[..n].copy_from_slice(filled);
                        n
                    })
                };
                match (available, read) {
                    (Ok(a), Ok(n)) => {
                        assert!(a <= capacity);
                        assert!(a >= me.promised, "{a} bytes wait of {} said", me.promised);
                        me.promised = a - n;
                        assert_eq!(n, a.min(len), "read what available said");
                        if !may_fail {
                            assert_eq!(a as u64, other.published - me.read);
                        }
                        if clean {
                            for (k, &b) in buf[..n].iter().enumerate() {
                                assert_eq!(b, pattern(other.side, me.read + k as u64));
                            }
                            out.bytes_checked += n as u64;
                        }
                        out.bytes_read += n as u64;
                        me.read += n as u64;
                    }
                    (Err(a), Err(r)) => {
                        assert!(may_fail, "{a} with honest indices");
                        assert_eq!(a, r, "the same error twice");
                        corrupt(r, cap, true, &mut out);
                        assert_eq!(format!("{:?}", me.ep), state, "a failed read moved");
                    }
                    (a, r) => panic!("available said {a:?}, read {r:?}"),
                }
            }
            4 => {
                me.ep.release();
                me.released = me.read;
            }
            5 => {
                let sel = input.u8();
                match sel % 6 {
                    0 | 1 => {
                        let room = if sel % 6 == 0 {
                            me.ep.room().map(|n| n as u64)
                        } else {
                            me.ep.want_room().map(u64::from)
                        };
                        match room {
                            Ok(n) => {
                                assert!(n <= cap);
                                if !may_fail && sel % 6 == 0 {
                                    assert_eq!(n, cap - (me.written - other.released));
                                }
                            }
                            Err(e) => {
                                assert!(may_fail, "{e} with honest indices");
                                corrupt(e, cap, false, &mut out);
                            }
                        }
                    }
                    2 => match me.ep.arm_receive() {
                        Ok(waiting) => {
                            assert!(waiting || me.promised == 0, "bytes said to wait vanished");
                            if !may_fail {
                                assert_eq!(waiting, other.published > me.read);
                            }
                        }
                        Err(e) => {
                            assert!(may_fail, "{e} with honest indices");
                            corrupt(e, cap, true, &mut out);
                        }
                    },
                    3 => me.ep.disarm_receive(),
                    4 => {
                        let state = match (sel >> 3) % 3 {
                            0 => State::Open,
                            1 => State::Finished,
                            _ => State::Reset,
                        };
                        me.ep.set_state(state);
                    }
                    _ => {
                        if let PeerState::Invalid(raw) = me.ep.peer_state() {
                            assert!(raw > 3);
                            out.invalid_states += 1;
                        }
                        let _ = me.ep.peer_core();
                    }
                }
            }
            _ => {
                let chunk = 1 + usize::from(input.u8());
                let mut reads = 0;
                loop {
                    match me.ep.read(&mut buf[..chunk]) {
                        Ok(0) => {
                            assert_eq!(me.promised, 0, "bytes said to wait vanished");
                            break;
                        }
                        Ok(n) => {
                            assert!(n <= chunk);
                            assert!(n >= me.promised.min(chunk), "fewer than said to wait");
                            me.promised = me.promised.saturating_sub(n);
                            reads += 1;
                            assert!(reads <= capacity, "a drain that does not end");
                            if clean {
                                for (k, &b) in buf[..n].iter().enumerate() {
                                    assert_eq!(b, pattern(other.side, me.read + k as u64));
                                }
                                out.bytes_checked += n as u64;
                            }
                            out.bytes_read += n as u64;
                            me.read += n as u64;
                        }
                        Err(e) => {
                            assert!(may_fail, "{e} with honest indices");
                            corrupt(e, cap, true, &mut out);
                            break;
                        }
                    }
                }
                if !may_fail {
                    assert_eq!(me.read, other.published, "drained");
                }
                if reads > 0 {
                    out.drains += 1;
                }
                me.ep.release();
                me.released = me.read;
            }
        }
    }
    out
}
