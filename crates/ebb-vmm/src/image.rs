//! Guest images: static, non-PIE x86_64 ELF executables linked at
//! [`IMAGE_BASE`](ebb_abi::IMAGE_BASE) and above, parsed with the `object` crate.
//!
//! [`Image::parse`] validates everything the loader relies on (machine, type, every
//! loadable segment's bounds, the entry point) before a byte reaches guest memory;
//! [`Symbolizer`] turns guest addresses back into `function+offset` for fault and panic
//! reports.

use ebb_abi::IMAGE_BASE;
use object::{Architecture, Object, ObjectKind, ObjectSegment, ObjectSymbol, SymbolKind};
use std::path::Path;

/// Why an image cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be read.
    #[error("cannot read image {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a well-formed ELF file.
    #[error("image is not a valid ELF file: {0}")]
    Parse(#[from] object::Error),
    /// The image is for another machine or word size.
    #[error("image is for {0:?}, not 64-bit x86_64")]
    Architecture(Architecture),
    /// Only static executables (ET_EXEC) can be loaded.
    #[error(
        "image is {0:?}, not a static executable (ET_EXEC): link with -C relocation-model=static \
         and the ebb-native linker script"
    )]
    NotExecutable(ObjectKind),
    /// The image has nothing to load.
    #[error("image has no loadable segments")]
    NoSegments,
    /// A loadable segment lies below the image base or wraps around.
    #[error(
        "segment at {addr:#x} (+{size:#x} bytes) lies outside the loadable range starting at {IMAGE_BASE:#x}"
    )]
    SegmentOutOfRange {
        /// Segment address.
        addr: u64,
        /// Segment size in memory.
        size: u64,
    },
    /// A segment's file data is larger than its size in memory, or lies outside the file.
    #[error("segment at {addr:#x} has inconsistent file data: {detail}")]
    SegmentData {
        /// Segment address.
        addr: u64,
        /// What is wrong.
        detail: String,
    },
    /// The entry point is not inside a loadable segment.
    #[error("entry point {0:#x} is not inside a loadable segment")]
    BadEntry(u64),
}

/// One loadable segment: `data` goes at `addr`, the rest up to `size` is zero.
#[derive(Debug)]
pub struct Segment<'a> {
    /// Guest address (identity-mapped: also the physical address).
    pub addr: u64,
    /// Size in memory.
    pub size: u64,
    /// Bytes from the file (at most `size`).
    pub data: &'a [u8],
}

/// A validated image borrowing the file's bytes.
#[derive(Debug)]
pub struct Image<'a> {
    /// Entry point.
    pub entry: u64,
    /// Loadable segments.
    pub segments: Vec<Segment<'a>>,
    /// Lowest segment address.
    pub start: u64,
    /// End of the highest segment.
    pub end: u64,
}

/// An image file's bytes (`Deref<Target = [u8]>`): the file mapped read-only, so its
/// pages are read from the page cache only as the parser touches them (most of an image
/// is debug information that a boot never reads: copying a 1.8 MB `hello` into fresh
/// memory took ≈ 1.5 ms here).
pub use crate::sys::MappedFile as ImageBytes;

/// Opens and maps an image file.
pub fn read(path: &Path) -> Result<ImageBytes, ImageError> {
    let error = |source| ImageError::Read {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(error)?;
    crate::sys::MappedFile::new(&file).map_err(error)
}

impl<'a> Image<'a> {
    /// Parses and validates `bytes`. Segment bounds are checked against the address space
    /// here and against guest memory by the layout.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ImageError> {
        let file = object::File::parse(bytes)?;
        if file.architecture() != Architecture::X86_64 || !file.is_64() {
            return Err(ImageError::Architecture(file.architecture()));
        }
        if file.kind() != ObjectKind::Executable {
            return Err(ImageError::NotExecutable(file.kind()));
        }
        let mut segments = Vec::new();
        for seg in file.segments() {
            let (addr, size) = (seg.address(), seg.size());
            if size == 0 {
                continue;
            }
            if addr < IMAGE_BASE || addr.checked_add(size).is_none() {
                return Err(ImageError::SegmentOutOfRange { addr, size });
            }
            let data = seg.data().map_err(|e| ImageError::SegmentData {
                addr,
                detail: e.to_string(),
            })?;
            if data.len() as u64 > size {
                return Err(ImageError::SegmentData {
                    addr,
                    detail: format!("{} file bytes for {size} bytes in memory", data.len()),
                });
            }
            segments.push(Segment { addr, size, data });
        }
        let start = segments
            .iter()
            .map(|s| s.addr)
            .min()
            .ok_or(ImageError::NoSegments)?;
        let end = segments
            .iter()
            .map(|s| s.addr + s.size)
            .max()
            .unwrap_or(start);
        let entry = file.entry();
        if !segments
            .iter()
            .any(|s| (s.addr..s.addr + s.size).contains(&entry))
        {
            return Err(ImageError::BadEntry(entry));
        }
        Ok(Image {
            entry,
            segments,
            start,
            end,
        })
    }
}

/// Function symbols of an image, for reports.
#[derive(Debug, Default)]
pub struct Symbolizer {
    /// `(address, size, demangled name)`, sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

impl Symbolizer {
    /// Collects the function symbols of `bytes` (an image that [`Image::parse`] accepted);
    /// an image without a symbol table yields a symbolizer that knows no names.
    pub fn new(bytes: &[u8]) -> Self {
        let Ok(file) = object::File::parse(bytes) else {
            return Self::default();
        };
        let mut symbols: Vec<_> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some((
                    s.address(),
                    s.size(),
                    format!("{:#}", rustc_demangle::demangle(name)),
                ))
            })
            .collect();
        symbols.sort();
        Symbolizer { symbols }
    }

    /// The function containing `addr`: its start and name.
    /// A symbolizer over `(address, size, name)` triples as an image's symbol table gives
    /// them (any values: the tests feed it hostile ones).
    #[cfg(test)]
    pub(crate) fn from_symbols(mut symbols: Vec<(u64, u64, String)>) -> Self {
        symbols.sort();
        Symbolizer { symbols }
    }

    fn function(&self, addr: u64) -> Option<(u64, &str)> {
        let i = self.symbols.partition_point(|s| s.0 <= addr);
        let (start, size, name) = self.symbols.get(i.checked_sub(1)?)?;
        // A symbol without a size covers up to the next symbol. Address and size come from
        // the image: their sum may not fit (it then covers the rest of the address space).
        let end = if *size > 0 {
            start.saturating_add(*size)
        } else {
            self.symbols.get(i).map_or(u64::MAX, |s| s.0)
        };
        (addr < end).then_some((*start, name.as_str()))
    }

    /// `name+0xoffset` for `addr`, or `None` outside every known function.
    pub fn lookup(&self, addr: u64) -> Option<String> {
        self.function(addr)
            .map(|(start, name)| format!("{name}+{:#x}", addr - start))
    }

    /// `addr` formatted with its symbol, e.g. `0x201234 <hello::main+0x14>`.
    pub fn describe(&self, addr: u64) -> String {
        match self.lookup(addr) {
            Some(s) => format!("{addr:#x} <{s}>"),
            None => format!("{addr:#x} <unknown>"),
        }
    }

    /// Like [`describe`](Self::describe) for a return address: the function is the one
    /// holding the call, `addr - 1` (a call that never returns may be its function's last
    /// instruction, leaving the return address just past the end).
    pub fn describe_return(&self, addr: u64) -> String {
        // The call is the instruction before the return address; `function` found
        // `start <= addr - 1`, so `addr - start` cannot underflow unless `addr` is 0, where
        // `addr - 1` wrapped and no function can match it.
        match addr.checked_sub(1).and_then(|call| self.function(call)) {
            Some((start, name)) => format!("{addr:#x} <{name}+{:#x}>", addr - start),
            None => format!("{addr:#x} <unknown>"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_and_host_executables() {
        assert!(matches!(
            Image::parse(b"not an elf file at all"),
            Err(ImageError::Parse(_))
        ));
        assert!(Image::parse(&[]).is_err());
        // The test binary itself is a PIE (ET_DYN) or links below IMAGE_BASE: either way
        // it must be refused with a clear error, not loaded.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(Image::parse(&me).is_err());
    }

    #[test]
    fn truncated_images_are_errors_not_panics() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for len in [16, 64, 100, 4096] {
            let _ = Image::parse(&me[..len.min(me.len())]);
        }
    }

    #[test]
    fn symbol_arithmetic_cannot_overflow() {
        let sym = Symbolizer::from_symbols(vec![
            (0x40_0000, 0x10, "small".into()),
            (0x40_0100, 0, "sizeless".into()),
            (u64::MAX - 4, 100, "at_the_top".into()),
        ]);
        assert_eq!(sym.lookup(0x40_0004).as_deref(), Some("small+0x4"));
        assert_eq!(sym.lookup(0x40_0010), None, "past its size");
        assert_eq!(sym.lookup(0x3f_ffff), None, "before every symbol");
        assert_eq!(
            sym.lookup(0x40_0200).as_deref(),
            Some("sizeless+0x100"),
            "a sizeless symbol covers up to the next"
        );
        // start + size overflows: the symbol covers the rest of the address space.
        assert_eq!(sym.lookup(u64::MAX - 1).as_deref(), Some("at_the_top+0x3"));
        assert_eq!(sym.describe(u64::MAX), format!("{:#x} <unknown>", u64::MAX));
        // A return address of 0 (the call would be at -1) and the top of memory.
        assert_eq!(sym.describe_return(0), "0x0 <unknown>");
        assert_eq!(
            sym.describe_return(u64::MAX),
            format!("{:#x} <at_the_top+0x4>", u64::MAX)
        );
        assert_eq!(sym.describe_return(0x40_0001), "0x400001 <small+0x1>");
        let empty = Symbolizer::new(b"not an ELF");
        assert_eq!(empty.describe(0x1234), "0x1234 <unknown>");
    }
}
