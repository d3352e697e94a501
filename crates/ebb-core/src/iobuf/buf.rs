//! [`IOBuf`]: one contiguous view into a heap or static region.

use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;

use super::region::{Region, RegionMut};
use super::{IOBufError, Result, check_range};

/// The region a buffer views.
#[derive(Clone)]
enum Storage {
    /// Heap region (one allocation, or an adopted `Vec`'s buffer): unique while its
    /// count is one; initialized up to its `initialized` length.
    Heap(Region),
    /// Static region: always initialized, never writable.
    Static(&'static [u8]),
}

impl Storage {
    /// The region's initialized bytes.
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Heap(r) => r.bytes(),
            Self::Static(s) => s,
        }
    }

    /// The region's size: how far a view may grow.
    #[inline]
    fn capacity(&self) -> usize {
        match self {
            Self::Heap(r) => r.capacity(),
            Self::Static(s) => s.len(),
        }
    }

    /// Write access to the region, if no other buffer can see it.
    #[inline]
    fn unique_mut(&mut self) -> Result<RegionMut<'_>> {
        match self {
            Self::Heap(r) => r.get_mut().ok_or(IOBufError::Shared),
            Self::Static(_) => Err(IOBufError::ReadOnly),
        }
    }
}

/// A buffer's tailroom as [`IOBuf::read_into_tailroom`] hands it to a reader.
pub enum Tailroom<'b> {
    /// Bytes initialized before (a recycled buffer's), to be overwritten.
    Init(&'b mut [u8]),
    /// Bytes never initialized (a fresh buffer's), written without zero-filling them
    /// first.
    Uninit(&'b mut [core::mem::MaybeUninit<u8>]),
}

/// One contiguous view `[start, start + len)` into a heap or static memory region.
///
/// The bytes before the view are *headroom* (where protocol layers prepend
/// headers), the bytes after it *tailroom* (where a driver or a writer appends).
/// [`Clone`] shares the region — a reference-count bump, never a copy — as do
/// [`split_off`](Self::split_off) and [`split_to`](Self::split_to). Anything that
/// writes requires the region to be unique to this buffer and not static; otherwise
/// it returns [`IOBufError::Shared`] or [`IOBufError::ReadOnly`], and
/// [`make_unique`](Self::make_unique) copies the view into fresh storage.
///
/// Derefs to the viewed bytes.
#[derive(Clone)]
pub struct IOBuf {
    storage: Storage,
    /// Offset of the view in the region; also the headroom. 32 bits, like `len`: regions
    /// are at most [`MAX_REGION`] bytes, and an `IOBuf` of 24 bytes (32 with `usize`
    /// offsets) keeps a chain with its inline segments small enough to move without a
    /// `memcpy` call; chains move by value through every layer.
    start: u32,
    /// Length of the view.
    len: u32,
}

/// The largest region an [`IOBuf`] views: 4 GiB - 1. Building one larger panics.
pub const MAX_REGION: usize = u32::MAX as usize;

/// How much more than twice its bytes a view may occupy before
/// [`IOBuf::wasteful`] calls it worth a copy.
const WASTE_SLACK: usize = 512;

// The size the comment on `start` is about (and `Segments`' inline ring with it).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(core::mem::size_of::<IOBuf>() == 24);

/// `n` as a view offset or length: in range whenever `n` is at most a region's size.
#[inline]
fn offset(n: usize) -> u32 {
    debug_assert!(n <= MAX_REGION);
    n as u32
}

/// Panics unless a region of `size` bytes can be viewed.
#[inline]
#[track_caller]
fn check_region(size: usize) {
    assert!(
        size <= MAX_REGION,
        "an IOBuf region is at most 4 GiB - 1 bytes, not {size}"
    );
}

impl IOBuf {
    /// An empty buffer with no storage: no headroom, no tailroom, no allocation.
    pub const fn new() -> Self {
        Self::from_static(&[])
    }

    /// An empty buffer with room to append at least `cap` bytes and no headroom.
    ///
    /// Allocates once (the region and its reference count together), but does not
    /// zero-fill: bytes are initialized as they are appended.
    ///
    /// # Panics
    ///
    /// If `cap` exceeds [`MAX_REGION`] (before allocating anything).
    pub fn with_capacity(cap: usize) -> Self {
        Self::with_headroom(0, cap)
    }

    /// An empty buffer with room to append at least `cap` bytes, or
    /// [`IOBufError::OutOfMemory`] when the allocator cannot serve it: for memory a
    /// client's request asks for, whose failure must cost that request, not the node.
    ///
    /// # Panics
    ///
    /// If `cap` exceeds [`MAX_REGION`] (before allocating anything).
    pub fn try_with_capacity(cap: usize) -> Result<Self> {
        check_region(cap);
        let region = Region::try_new(cap).ok_or(IOBufError::OutOfMemory { requested: cap })?;
        Ok(Self {
            storage: Storage::Heap(region),
            start: 0,
            len: 0,
        })
    }

    /// An empty buffer with exactly `headroom` bytes reserved in front (for headers
    /// to be prepended) and room to append at least `cap` bytes.
    ///
    /// Only the headroom is zero-filled.
    ///
    /// # Panics
    ///
    /// If `headroom + cap` exceeds [`MAX_REGION`] (before allocating anything).
    pub fn with_headroom(headroom: usize, cap: usize) -> Self {
        // Saturating: an overflowing sum is past MAX_REGION too.
        check_region(headroom.saturating_add(cap));
        Self {
            storage: Storage::Heap(Region::with_zeroed_prefix(headroom + cap, headroom)),
            start: offset(headroom),
            len: 0,
        }
    }

    /// A buffer viewing all of `v`, without copying; `v`'s spare capacity becomes
    /// tailroom (up to [`MAX_REGION`] bytes in all: a larger capacity is shrunk first).
    ///
    /// The region adopts `v`'s buffer and adds a small header allocation for the
    /// reference count, so this costs an allocation more than [`IOBuf::with_capacity`]
    /// followed by [`extend_from_slice`](Self::extend_from_slice); it pays where the
    /// bytes are already in a `Vec`.
    ///
    /// # Panics
    ///
    /// If `v` holds more than [`MAX_REGION`] bytes.
    pub fn from_vec(mut v: Vec<u8>) -> Self {
        if v.capacity() > MAX_REGION {
            v.shrink_to(MAX_REGION.max(v.len()));
        }
        check_region(v.capacity());
        let len = offset(v.len());
        Self {
            storage: Storage::Heap(Region::from_vec(v)),
            start: 0,
            len,
        }
    }

    /// A buffer viewing all of `lent`, memory owned outside the heap (a device's receive
    /// chunk), without a copy: see [`LentMemory::new`](super::LentMemory::new) for
    /// what the lender promises. Clones share it; the lender learns that every other
    /// view is gone when its own handle is unique again ([`recycle`](Self::recycle)).
    pub fn from_lent(lent: super::LentMemory) -> Self {
        let len = offset(lent.region.initialized());
        Self {
            storage: Storage::Heap(lent.region),
            start: 0,
            len,
        }
    }

    /// A unique buffer holding a copy of `data`, with no headroom or tailroom.
    ///
    /// # Panics
    ///
    /// If `data` is longer than [`MAX_REGION`].
    pub fn copy_from_slice(data: &[u8]) -> Self {
        Self::copy_from_slices(&[data])
    }

    /// A unique buffer holding a copy of `parts`, one after another, with no headroom
    /// or tailroom: one allocation, each byte written once (a gathering copy, for a
    /// line built from a few pieces).
    ///
    /// # Panics
    ///
    /// If the parts add up to more than [`MAX_REGION`] bytes (before allocating).
    pub fn copy_from_slices(parts: &[&[u8]]) -> Self {
        // `concat` refuses more than u32::MAX = MAX_REGION bytes before allocating.
        let region = Region::concat(parts);
        let len = offset(region.capacity());
        Self {
            storage: Storage::Heap(region),
            start: 0,
            len,
        }
    }

    /// A read-only buffer viewing `data`, without copying or allocating.
    ///
    /// # Panics
    ///
    /// If `data` is longer than [`MAX_REGION`].
    pub const fn from_static(data: &'static [u8]) -> Self {
        assert!(
            data.len() <= MAX_REGION,
            "an IOBuf region is at most 4 GiB - 1 bytes"
        );
        Self {
            storage: Storage::Static(data),
            start: 0,
            len: data.len() as u32,
        }
    }

    /// The length of the view.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the view is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The viewed bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // In bounds by the invariant `start + len <= initialized`.
        &self.storage.bytes()[self.start as usize..self.end()]
    }

    /// The viewed bytes, writable.
    ///
    /// # Errors
    ///
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        let (start, end) = (self.start as usize, self.end());
        let r = self.storage.unique_mut()?.into_bytes_mut();
        Ok(&mut r[start..end])
    }

    /// The number of bytes in front of the view.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    /// The number of bytes after the view that it could grow into.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.storage.capacity() - self.end()
    }

    /// The memory this view keeps alive: its storage's whole size (headroom, bytes and
    /// tailroom), whatever part of it the view shows. A few bytes cut from a 2 KiB
    /// receive buffer occupy 2 KiB for as long as they are kept.
    #[inline]
    pub fn occupied(&self) -> usize {
        self.headroom() + self.len() + self.tailroom()
    }

    /// Whether the view occupies much more memory than it holds bytes (more than twice
    /// them and half a kilobyte): a piece worth copying into a buffer of its size before
    /// it is kept for long — a full-sized segment in its frame buffer is not.
    #[inline]
    pub fn wasteful(&self) -> bool {
        self.occupied() > 2 * self.len() + WASTE_SLACK
    }

    /// Whether no other buffer shares this one's storage, so it may be written.
    /// Always false for static storage.
    #[inline]
    pub fn is_unique(&self) -> bool {
        match &self.storage {
            // We never create `Weak`s, so a strong count of one is what
            // `unique_mut` will find, barring a concurrent clone through `&self`.
            Storage::Heap(r) => r.is_unique(),
            Storage::Static(_) => false,
        }
    }

    /// Whether `self` and `other` view the same region (whether or not their views
    /// overlap). Two static buffers share storage when they view the same slice.
    pub fn shares_storage_with(&self, other: &IOBuf) -> bool {
        match (&self.storage, &other.storage) {
            (Storage::Heap(a), Storage::Heap(b)) => a.ptr_eq(b),
            (Storage::Static(a), Storage::Static(b)) => core::ptr::eq(*a, *b),
            _ => false,
        }
    }

    /// Grows the view `n` bytes into the headroom and returns those bytes, zeroed,
    /// for the caller to fill with a header.
    ///
    /// # Errors
    ///
    /// [`IOBufError::NoHeadroom`] if `n > headroom()`; otherwise
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8]> {
        let start = self.start as usize;
        if n > start {
            return Err(IOBufError::NoHeadroom {
                requested: n,
                available: start,
            });
        }
        let v = self.storage.unique_mut()?.into_bytes_mut();
        // `n <= start`, so both stay within the region.
        self.start -= offset(n);
        self.len += offset(n);
        let bytes = &mut v[start - n..start];
        // Headroom may hold an old header that was trimmed off; hand out zeros.
        bytes.fill(0);
        Ok(bytes)
    }

    /// Grows the view `n` bytes into the tailroom and returns those bytes, zeroed,
    /// for the caller to fill.
    ///
    /// # Errors
    ///
    /// [`IOBufError::NoTailroom`] if `n > tailroom()`; otherwise
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn append(&mut self, n: usize) -> Result<&mut [u8]> {
        self.check_tailroom(n)?;
        let end = self.end();
        let mut r = self.storage.unique_mut()?;
        // Zeroes the part of the `n` bytes that was initialized already (stale bytes past
        // the view), then the rest as it is initialized: each byte written once.
        let stale = r.initialized().min(end + n);
        if let Some(old) = r.bytes_mut().get_mut(end..stale) {
            old.fill(0);
        }
        r.init_zeroed(end + n);
        // Within the region's capacity (checked above), so within 32 bits.
        self.len += offset(n);
        Ok(&mut r.into_bytes_mut()[end..end + n])
    }

    /// Grows the view `n` bytes into the tailroom and returns those bytes as they are,
    /// for a caller that overwrites every one of them: [`append`](Self::append)
    /// without zeroing what a recycled region held there before. Bytes never
    /// initialized are zeroed (once per region), so nothing uninitialized is exposed;
    /// what the caller does not overwrite shows old bytes of this same buffer.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append).
    pub fn append_for_overwrite(&mut self, n: usize) -> Result<&mut [u8]> {
        self.check_tailroom(n)?;
        let end = self.end();
        let mut r = self.storage.unique_mut()?;
        r.init_zeroed(end + n);
        // Within the region's capacity (checked above), so within 32 bits.
        self.len += offset(n);
        Ok(&mut r.into_bytes_mut()[end..end + n])
    }

    /// Copies `data` into the tailroom and grows the view over it.
    ///
    /// # Errors
    ///
    /// [`IOBufError::NoTailroom`] if `data.len() > tailroom()`; otherwise
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> Result<()> {
        self.check_tailroom(data.len())?;
        let end = self.end();
        // As in `append`, but each byte is written once: no zero-fill first.
        self.storage.unique_mut()?.write(end, data);
        self.len += offset(data.len());
        Ok(())
    }

    /// Copies `parts`, one after another, into the tailroom and grows the view over
    /// them: [`extend_from_slice`](Self::extend_from_slice) of each, with one
    /// uniqueness and one bounds check for all of them.
    ///
    /// # Errors
    ///
    /// As `extend_from_slice`, for the parts' total length; nothing is copied then.
    pub fn extend_from_slices(&mut self, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        self.check_tailroom(total)?;
        let mut at = self.end();
        let mut region = self.storage.unique_mut()?;
        for part in parts {
            region.write(at, part);
            at += part.len();
        }
        // Within the region's capacity (checked above), so within 32 bits.
        self.len += offset(total);
        Ok(())
    }

    /// The whole tailroom, writable, so a driver or `read()` can fill it; follow with
    /// [`commit`](Self::commit) to grow the view over the bytes written.
    ///
    /// The first call on a fresh region zero-fills its tailroom once (the price of
    /// handing out `&mut [u8]` without `unsafe`); later calls do not.
    ///
    /// # Errors
    ///
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn spare_capacity_mut(&mut self) -> Result<&mut [u8]> {
        let end = self.end();
        let mut r = self.storage.unique_mut()?;
        // Keeps what was already initialized (perhaps data written by an earlier call
        // and not yet committed); zeroes only the never-initialized rest.
        let cap = r.capacity();
        r.init_zeroed(cap);
        Ok(&mut r.into_bytes_mut()[end..])
    }

    /// Reads into the tailroom: `read` gets it as a [`Tailroom`] and returns the prefix
    /// it filled (as `rustix::io::read` does into either kind of buffer); the view grows
    /// over it. Unlike [`spare_capacity_mut`](Self::spare_capacity_mut), a tailroom
    /// never initialized (a fresh buffer's) is handed over uninitialized instead of
    /// zero-filled first, which for a fresh 64 KiB read buffer was as much memory
    /// traffic again as the read; a tailroom initialized before (a recycled buffer's)
    /// is handed over initialized, its never-initialized rest zeroed once.
    ///
    /// Returns the bytes read, or `read`'s own error (then the view is unchanged).
    ///
    /// # Errors
    ///
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is unique
    /// (`read` is not called).
    ///
    /// # Panics
    ///
    /// If `read` returns a slice that is not a prefix of the one it was given.
    pub fn read_into_tailroom<E>(
        &mut self,
        read: impl FnOnce(Tailroom<'_>) -> core::result::Result<&mut [u8], E>,
    ) -> Result<core::result::Result<usize, E>> {
        let end = self.end();
        let mut r = self.storage.unique_mut()?;
        let n = if r.initialized() <= end {
            match r.fill_uninit(end, |bytes| read(Tailroom::Uninit(bytes))) {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            }
        } else {
            let cap = r.capacity();
            r.init_zeroed(cap);
            let room = &mut r.into_bytes_mut()[end..];
            let (given, len) = (room.as_ptr() as usize, room.len());
            let filled = match read(Tailroom::Init(room)) {
                Ok(filled) => filled,
                Err(e) => return Ok(Err(e)),
            };
            assert!(
                filled.is_empty() || (filled.as_ptr() as usize == given && filled.len() <= len),
                "IOBuf: a tailroom reader must return a prefix of the tailroom it was given"
            );
            filled.len()
        };
        self.len += offset(n);
        Ok(Ok(n))
    }

    /// Grows the view over the next `n` bytes of tailroom, as just written through
    /// [`spare_capacity_mut`](Self::spare_capacity_mut). Bytes of the tailroom never
    /// initialized read as zero; bytes this buffer initialized earlier (handed out, or
    /// trimmed off its view, or before a [`recycle`](Self::recycle)) keep what they held.
    ///
    /// # Errors
    ///
    /// [`IOBufError::NoTailroom`] if `n > tailroom()`; otherwise
    /// [`IOBufError::Shared`] or [`IOBufError::ReadOnly`] unless the storage is
    /// unique.
    pub fn commit(&mut self, n: usize) -> Result<()> {
        self.check_tailroom(n)?;
        let end = self.end();
        self.storage.unique_mut()?.init_zeroed(end + n);
        self.len += offset(n);
        Ok(())
    }

    /// Drops the first `n` bytes from the view; they become headroom.
    ///
    /// Allowed on shared and static storage: it only moves this buffer's view.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`] if `n > len()`.
    pub fn trim_front(&mut self, n: usize) -> Result<()> {
        check_range(n, self.len())?;
        self.start += offset(n);
        self.len -= offset(n);
        Ok(())
    }

    /// Drops the last `n` bytes from the view; they become tailroom.
    ///
    /// Allowed on shared and static storage: it only moves this buffer's view.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`] if `n > len()`.
    pub fn trim_back(&mut self, n: usize) -> Result<()> {
        check_range(n, self.len())?;
        self.len -= offset(n);
        Ok(())
    }

    /// Splits the view at `at`: `self` keeps `[0, at)` and the returned buffer views
    /// `[at, len)`. Both share the storage; nothing is copied.
    ///
    /// A part that would be empty gets no storage (it is [`IOBuf::new`]), so the other
    /// part stays unique if `self` was. The returned part's headroom is `self`'s
    /// view before `at`, which it cannot write while `self` lives.
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`] if `at > len()`.
    pub fn split_off(&mut self, at: usize) -> Result<IOBuf> {
        check_range(at, self.len())?;
        if at == self.len() {
            return Ok(IOBuf::new());
        }
        if at == 0 {
            return Ok(core::mem::take(self));
        }
        let at = offset(at);
        let tail = IOBuf {
            storage: self.storage.clone(),
            start: self.start + at,
            len: self.len - at,
        };
        self.len = at;
        Ok(tail)
    }

    /// Splits the view at `at`: the returned buffer views `[0, at)` and `self` keeps
    /// `[at, len)`. Both share the storage; nothing is copied.
    ///
    /// A part that would be empty gets no storage, as in
    /// [`split_off`](Self::split_off).
    ///
    /// # Errors
    ///
    /// [`IOBufError::OutOfRange`] if `at > len()`.
    pub fn split_to(&mut self, at: usize) -> Result<IOBuf> {
        check_range(at, self.len())?;
        if at == 0 {
            return Ok(IOBuf::new());
        }
        if at == self.len() {
            return Ok(core::mem::take(self));
        }
        let at = offset(at);
        let head = IOBuf {
            storage: self.storage.clone(),
            start: self.start,
            len: at,
        };
        self.start += at;
        self.len -= at;
        Ok(head)
    }

    /// Makes the storage unique and writable: if it is shared or static, copies the
    /// view into a fresh heap region with the same headroom and at least the same
    /// tailroom. Does nothing (and allocates nothing) if it is already unique.
    ///
    /// The fresh region is no larger than the old one, so this never exceeds
    /// [`MAX_REGION`].
    pub fn make_unique(&mut self) {
        if self.storage.unique_mut().is_ok() {
            return;
        }
        let (headroom, tailroom) = (self.headroom(), self.tailroom());
        let mut fresh = IOBuf::with_headroom(headroom, self.len().saturating_add(tailroom));
        let copied = fresh.extend_from_slice(self.as_slice());
        // Cannot fail: the region is fresh and has room for the view by construction.
        debug_assert!(copied.is_ok());
        *self = fresh;
    }

    /// Takes the whole region back for writing: if the storage is unique (every other
    /// view of it has been dropped), the view becomes empty at offset 0, so all of the
    /// region is tailroom again, and this returns true. Otherwise (shared or static)
    /// nothing changes and it returns false.
    ///
    /// For a receive path that fills a buffer, hands a clone to a consumer and, once the
    /// consumer has let go, fills the same region again instead of allocating. The
    /// region's bytes stay initialized, so [`spare_capacity_mut`](Self::spare_capacity_mut)
    /// does not zero them again: the tailroom holds this region's earlier contents, not
    /// zeros, until written — nobody else can see them, since the storage is unique.
    pub fn recycle(&mut self) -> bool {
        if self.storage.unique_mut().is_err() {
            return false;
        }
        self.start = 0;
        self.len = 0;
        true
    }

    /// The offset just past the view.
    fn end(&self) -> usize {
        self.start as usize + self.len as usize
    }

    fn check_tailroom(&self, n: usize) -> Result<()> {
        let available = self.tailroom();
        if n > available {
            Err(IOBufError::NoTailroom {
                requested: n,
                available,
            })
        } else {
            Ok(())
        }
    }
}

impl Default for IOBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for IOBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for IOBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// [`IOBuf::from_vec`], which panics past [`MAX_REGION`] bytes.
impl From<Vec<u8>> for IOBuf {
    fn from(v: Vec<u8>) -> Self {
        Self::from_vec(v)
    }
}

impl From<&'static [u8]> for IOBuf {
    fn from(data: &'static [u8]) -> Self {
        Self::from_static(data)
    }
}

/// Compares the viewed bytes only, not storage, headroom or tailroom.
impl PartialEq for IOBuf {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for IOBuf {}

impl PartialEq<[u8]> for IOBuf {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for IOBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Content is left out: a buffer may hold a whole jumbo frame.
        let kind = match &self.storage {
            Storage::Heap(_) if self.is_unique() => "unique",
            Storage::Heap(_) => "shared",
            Storage::Static(_) => "static",
        };
        f.debug_struct("IOBuf")
            .field("len", &self.len)
            .field("headroom", &self.headroom())
            .field("tailroom", &self.tailroom())
            .field("kind", &kind)
            .finish()
    }
}
