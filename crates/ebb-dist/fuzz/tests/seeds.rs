//! The targets' seeds: streams the Messenger sends (frames of every class, cut anywhere)
//! and ones it must refuse (each malformed header field, an oversize length, a stream
//! that stops inside a frame); control payloads of each message and broken ones.
//! `seed_files_are_current` checks `seeds/` holds exactly these bytes (`WRITE_SEEDS=1
//! cargo test` rewrites them); the other tests run the harnesses on them.

use std::path::PathBuf;

use ebb_core::{EbbId, IOBuf, IOBufChain};
use ebb_dist::messenger::{Control, PROTOCOL_VERSION};
use ebb_dist::node::{NodeId, RuntimeInfo, global_ids_of};
use ebb_dist::wire::{FrameClass, Header, WireError, encode};
use ebb_dist_fuzz::{control, frames};

#[path = "../../../ebb-testkit/src/seed_files.rs"]
mod seed_files;

fn frame(class: FrameClass, call: u32, payload: &[u8]) -> Vec<u8> {
    let header = Header {
        class,
        source: NodeId(1),
        destination: EbbId::from_u32(2100).unwrap(),
        kind: 3,
        call,
        len: 0,
    };
    encode(header, IOBufChain::from(IOBuf::copy_from_slice(payload)))
        .unwrap()
        .to_vec()
}

/// A frames seed: limit byte (0x1f: 1 << 1... see the harness), cut seed, stream.
fn stream(limit: u8, cut: u8, parts: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = vec![limit, cut];
    for p in parts {
        bytes.extend_from_slice(p);
    }
    bytes
}

fn with(mut bytes: Vec<u8>, at: usize, value: &[u8]) -> Vec<u8> {
    bytes[at..at + value.len()].copy_from_slice(value);
    bytes
}

fn frame_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // 0xaf: a limit of 15 << 10 bytes.
    let good = vec![
        frame(FrameClass::Message, 0, b"hello"),
        frame(FrameClass::Request, 7, &[1; 300]),
        frame(FrameClass::Reply, 7, b""),
        frame(FrameClass::Failure, 8, b"no handler"),
        frame(FrameClass::Control, 0, &[0, 1, 2]),
    ];
    let m = frame(FrameClass::Message, 0, b"x");
    vec![
        ("every-class", stream(0xaf, 3, &good)),
        ("every-class-bytewise", stream(0xaf, 0, &good)),
        ("bad-magic", stream(0xaf, 5, &[with(m.clone(), 0, b"GE")])),
        ("bad-version", stream(0xaf, 5, &[with(m.clone(), 2, &[2])])),
        ("bad-class", stream(0xaf, 5, &[with(m.clone(), 3, &[9])])),
        ("reserved", stream(0xaf, 5, &[with(m.clone(), 14, &[1, 0])])),
        (
            "bad-destination",
            stream(0xaf, 5, &[with(m.clone(), 8, &u32::MAX.to_le_bytes())]),
        ),
        (
            "call-id-on-message",
            stream(0xaf, 5, &[with(m.clone(), 16, &[1, 0, 0, 0])]),
        ),
        (
            "too-long",
            stream(0x1a, 5, &[good[0].clone(), good[1].clone()]),
        ),
        (
            "truncated",
            stream(0xaf, 9, &[good[0].clone(), good[1][..100].to_vec()]),
        ),
        (
            "after-an-error",
            stream(0xaf, 2, &[with(m.clone(), 0, b"zz"), good[0].clone()]),
        ),
    ]
}

fn control_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let encode = |c: &Control| postcard::to_allocvec(c).unwrap();
    let welcome = Control::Welcome {
        info: RuntimeInfo {
            node: NodeId(3),
            global_ids: global_ids_of(NodeId(3)).unwrap(),
            front_end: "10.0.2.2:7000".parse().unwrap(),
        },
        peer_key: 0x0123_4567_89ab_cdef,
    };
    vec![
        (
            "hello",
            encode(&Control::Hello {
                version: PROTOCOL_VERSION,
                token: 0x5eed,
            }),
        ),
        ("welcome", encode(&welcome)),
        (
            "refused",
            encode(&Control::Refused("unknown join token 0x2".into())),
        ),
        ("heartbeat", encode(&Control::Heartbeat)),
        (
            "peer-hello",
            encode(&Control::PeerHello {
                version: PROTOCOL_VERSION,
                node: NodeId(2),
                key: 0x0123_4567_89ab_cdef,
            }),
        ),
        (
            "peer-welcome",
            encode(&Control::PeerWelcome { node: NodeId(1) }),
        ),
        ("unknown-variant", vec![9, 0, 0]),
        ("huge-string", vec![2, 0xff, 0xff, 0xff, 0xff, 0x0f, b'a']),
        ("empty", vec![]),
    ]
}

fn check_files(dir: &str, seeds: &[(&str, Vec<u8>)]) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(dir);
    seed_files::check_exactly(&dir, seeds.iter().map(|(name, bytes)| (name, bytes)));
}

#[test]
fn seed_files_are_current() {
    check_files("frames", &frame_seeds());
    check_files("control", &control_seeds());
}

#[test]
fn frame_seeds_reach_every_outcome() {
    let outcomes: Vec<_> = frame_seeds()
        .into_iter()
        .map(|(name, bytes)| (name, frames(&bytes)))
        .collect();
    let get = |name: &str| outcomes.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    assert_eq!(get("every-class").frames, 5);
    assert_eq!(get("every-class-bytewise").frames, 5);
    assert!(matches!(
        get("bad-magic").error,
        Some(WireError::BadMagic(0x4745))
    ));
    assert!(matches!(
        get("bad-version").error,
        Some(WireError::UnsupportedVersion(2))
    ));
    assert!(matches!(
        get("bad-class").error,
        Some(WireError::UnknownClass(9))
    ));
    assert!(matches!(
        get("reserved").error,
        Some(WireError::ReservedNotZero(1))
    ));
    assert!(matches!(
        get("bad-destination").error,
        Some(WireError::BadDestination(_))
    ));
    assert!(matches!(
        get("call-id-on-message").error,
        Some(WireError::BadCallId { .. })
    ));
    let too_long = get("too-long");
    assert_eq!(too_long.frames, 1);
    assert!(matches!(
        too_long.error,
        Some(WireError::TooLong { len: 300, max: 20 })
    ));
    let truncated = get("truncated");
    assert_eq!(
        (truncated.frames, truncated.incomplete, truncated.error),
        (1, 100, None)
    );
    assert_eq!(get("after-an-error").frames, 0);
}

#[test]
fn control_seeds_decode_or_fail_cleanly() {
    let decoded: Vec<_> = control_seeds()
        .into_iter()
        .map(|(name, bytes)| (name, control(&bytes)))
        .collect();
    for (name, result) in decoded {
        let ok = matches!(
            name,
            "hello" | "welcome" | "refused" | "heartbeat" | "peer-hello" | "peer-welcome"
        );
        assert_eq!(result.is_some(), ok, "{name}");
    }
}
