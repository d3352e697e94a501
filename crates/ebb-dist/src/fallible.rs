//! Decoding a peer's payload without an allocation that can abort the node.
//!
//! serde's own `Vec<u8>`, `String` and `Vec<T>` grow with the global allocator's
//! infallible calls: a peer's payload could make a node that is short of memory abort.
//! The helpers here, used with `#[serde(deserialize_with = "...")]` on the fields a peer
//! fills, reserve with `try_reserve` and turn a refusal into a decode error (the call or
//! message fails, the node goes on; postcard reports such an error without its text, as
//! "Serde Deserialization Error"). They read the same bytes as serde's own impls
//! under postcard — a length and the bytes for `Vec<u8>` and `String`, a length and the
//! elements for a sequence — so the encoding side keeps plain `Serialize`.
//!
//! [`contiguous`] copies a multi-segment payload into one buffer the same way.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use ebb::IOBufChain;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};

/// What a refused reservation becomes: a decode error that names it.
const OUT_OF_MEMORY: &str = "out of memory for a peer's payload";

/// The payload's bytes in one slice: borrowed when it is one segment, else copied into a
/// buffer reserved fallibly (`None`: no memory for it).
pub fn contiguous(payload: &IOBufChain) -> Option<Cow<'_, [u8]>> {
    match payload.segment_count() {
        0 => Some(Cow::Borrowed(&[])),
        1 => Some(Cow::Borrowed(
            payload.front().map_or(&[][..], |b| b.as_slice()),
        )),
        _ => payload.try_to_vec().map(Cow::Owned),
    }
}

fn copy<E: de::Error>(v: &[u8]) -> Result<Vec<u8>, E> {
    let mut out = Vec::new();
    out.try_reserve_exact(v.len())
        .map_err(|_| E::custom(OUT_OF_MEMORY))?;
    out.extend_from_slice(v);
    Ok(out)
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        copy(v)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::new();
        while let Some(b) = seq.next_element::<u8>()? {
            out.try_reserve(1)
                .map_err(|_| de::Error::custom(OUT_OF_MEMORY))?;
            out.push(b);
        }
        Ok(out)
    }
}

/// A `Vec<u8>` field, reserved fallibly.
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    d.deserialize_bytes(BytesVisitor)
}

/// An `Option<Vec<u8>>` field, reserved fallibly.
pub fn option_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    struct OptionVisitor;
    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<Vec<u8>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("optional bytes")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            bytes(d).map(Some)
        }
    }
    d.deserialize_option(OptionVisitor)
}

/// A `String` field, reserved fallibly.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct StrVisitor;
    impl<'de> Visitor<'de> for StrVisitor {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            let mut out = String::new();
            out.try_reserve_exact(v.len())
                .map_err(|_| E::custom(OUT_OF_MEMORY))?;
            out.push_str(v);
            Ok(out)
        }
    }
    d.deserialize_str(StrVisitor)
}

/// A `Vec<T>` field, reserved fallibly one element at a time (the elements' own
/// allocations are theirs: give them fallible types too).
pub fn seq<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct SeqVisitor<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqVisitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element()? {
                out.try_reserve(1)
                    .map_err(|_| de::Error::custom(OUT_OF_MEMORY))?;
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(SeqVisitor(PhantomData))
}

/// Bytes that decode fallibly wherever they sit (inside a tuple or a sequence, where a
/// `deserialize_with` cannot reach): a `Vec<u8>` on the wire, the same bytes as serde's.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub Vec<u8>);

impl serde::Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        bytes(d).map(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        b: Vec<u8>,
        o: Option<Vec<u8>>,
        s: String,
        v: Vec<(Vec<u8>, Vec<u8>)>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Fallible {
        #[serde(deserialize_with = "bytes")]
        b: Vec<u8>,
        #[serde(deserialize_with = "option_bytes")]
        o: Option<Vec<u8>>,
        #[serde(deserialize_with = "string")]
        s: String,
        #[serde(deserialize_with = "seq")]
        v: Vec<(Bytes, Bytes)>,
    }

    #[test]
    fn the_fallible_fields_read_what_serde_writes() {
        for o in [None, Some(alloc::vec![9u8; 300])] {
            let plain = Plain {
                b: (0..=255).collect(),
                o: o.clone(),
                s: "é and more".into(),
                v: alloc::vec![
                    (b"k".to_vec(), alloc::vec![7; 200]),
                    (Vec::new(), Vec::new())
                ],
            };
            let wire = postcard::to_allocvec(&plain).unwrap();
            let got: Fallible = postcard::from_bytes(&wire).unwrap();
            assert_eq!(got.b, plain.b);
            assert_eq!(got.o, plain.o);
            assert_eq!(got.s, plain.s);
            let v: Vec<_> = got.v.into_iter().map(|(k, v)| (k.0, v.0)).collect();
            assert_eq!(v, plain.v);
        }
    }

    #[test]
    fn a_length_past_the_payload_is_an_error_not_an_allocation() {
        // A varint length of 2^62 and no bytes behind it.
        let wire = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40];
        assert!(postcard::from_bytes::<Fallible>(&wire).is_err());
        #[derive(Debug, Deserialize)]
        struct Many(#[serde(deserialize_with = "seq")] Vec<u64>);
        assert!(postcard::from_bytes::<Many>(&wire).map(|m| m.0).is_err());
    }
}
