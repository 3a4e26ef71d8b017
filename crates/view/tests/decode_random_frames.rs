//! Iteration frames under random and mutated input: the reader never panics and always
//! ends, stops for good at the first bad frame, and every frame it yields re-encodes to
//! exactly the bytes it was read from (borrowed and owned alike). Lengths set huge are
//! refused by the bytes present, never allocated.
//!
//! `PROPTEST_CASES` raises the case counts (docs/benchmarks/faults.md has the long run).

#[path = "../../core/tests/common/mutate.rs"]
mod mutate;
use mutate::cases;

use proptest::prelude::*;
use spindle_core::{Index, ItemKey, Partition};
use spindle_view::frame::{
    encode_end, encode_same_item_version, encode_version, EndFrame, Frame, FrameReader, FrameRef,
    FLAG_PROJECTED, FLAG_SAME_ITEM, FLAG_TOMBSTONE, FLAG_VALUE, TAG_VERSION,
};

#[derive(Clone, Debug)]
enum Spec {
    Version {
        /// Encoded as a same-item frame (no key) when a version frame comes before it; it
        /// then has that frame's key.
        same: bool,
        flags: u8,
        index: u64,
        key: ItemKey,
        value: Option<String>,
    },
    End(EndFrame),
}

fn key() -> impl Strategy<Value = ItemKey> {
    let field = "[a-z\u{0}\u{e9}]{1,6}";
    prop_oneof![
        field.prop_map(|id| ItemKey::node(id).unwrap()),
        (field, field, field).prop_map(|(f, l, t)| ItemKey::edge(f, l, t).unwrap()),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    let version = (
        any::<bool>(),
        any::<bool>(),
        any::<u64>(),
        key(),
        proptest::option::of("[ -~]{0,16}"),
        any::<bool>(),
    )
        .prop_map(|(tombstone, projected, index, key, value, same)| {
            // A tombstone carries no value, projected or not (a decoder refuses one that
            // does).
            let (projected, value) = if tombstone {
                (false, None)
            } else {
                (projected, value)
            };
            let mut flags = 0;
            if tombstone {
                flags |= FLAG_TOMBSTONE;
            }
            if projected {
                flags |= FLAG_PROJECTED;
            }
            if value.is_some() {
                flags |= FLAG_VALUE;
            }
            Spec::Version {
                same,
                flags,
                index,
                key,
                value,
            }
        });
    let end = (any::<u64>(), 1u64..=16, any::<u64>()).prop_map(|(cut, n, frames)| {
        Spec::End(EndFrame {
            cut: Index::new(cut),
            range: Partition::nth(cut % n, n),
            frames,
        })
    });
    prop_oneof![4 => version, 1 => end]
}

fn encode(specs: &[Spec]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut after_version = false;
    for s in specs {
        match s {
            Spec::Version {
                same,
                flags,
                index,
                key,
                value,
            } => {
                let value = value.as_deref().map(str::as_bytes);
                if *same && after_version {
                    encode_same_item_version(&mut out, *flags, Index::new(*index), value);
                } else {
                    encode_version(&mut out, *flags, Index::new(*index), &key.to_bytes(), value);
                }
                after_version = true;
            }
            Spec::End(end) => {
                encode_end(&mut out, end);
                after_version = false;
            }
        }
    }
    out
}

/// Whether the frame at the start of `bytes` is a same-item version frame.
fn same_item(bytes: &[u8]) -> bool {
    bytes.first() == Some(&TAG_VERSION) && bytes.get(1).is_some_and(|f| f & FLAG_SAME_ITEM != 0)
}

fn encode_ref(frame: &FrameRef<'_>, same: bool) -> Vec<u8> {
    let mut out = Vec::new();
    match *frame {
        FrameRef::Version {
            flags,
            index,
            value,
            ..
        } if same => encode_same_item_version(&mut out, flags, index, value),
        FrameRef::Version {
            flags,
            index,
            key,
            value,
        } => encode_version(&mut out, flags, index, key, value),
        FrameRef::End(end) => encode_end(&mut out, &end),
    }
    out
}

fn encode_owned(frame: &Frame, same: bool) -> Vec<u8> {
    let mut out = Vec::new();
    match frame {
        Frame::Version(v) => {
            let mut flags = 0;
            if v.tombstone {
                flags |= FLAG_TOMBSTONE;
            }
            if v.projected {
                flags |= FLAG_PROJECTED;
            }
            if v.value.is_some() {
                flags |= FLAG_VALUE;
            }
            let value = v.value.as_deref().map(str::as_bytes);
            if same {
                encode_same_item_version(&mut out, flags, v.index, value);
            } else {
                encode_version(&mut out, flags, v.index, &v.key.to_bytes(), value);
            }
        }
        Frame::End(end) => encode_end(&mut out, end),
    }
    out
}

/// Read `buf` both ways and check every frame against the bytes it came from.
fn check_stream(buf: &[u8]) -> Result<(), TestCaseError> {
    let mut reader = FrameReader::new(buf);
    let mut frames = 0usize;
    loop {
        let start = reader.offset();
        let Some(item) = reader.next_ref() else { break };
        frames += 1;
        prop_assert!(frames <= buf.len(), "every frame consumes bytes");
        match item {
            Ok(frame) => {
                let bytes = &buf[start..reader.offset()];
                let same = same_item(bytes);
                prop_assert_eq!(&encode_ref(&frame, same)[..], bytes);
                if let Ok(owned) = frame.to_owned_frame() {
                    prop_assert_eq!(&encode_owned(&owned, same)[..], bytes);
                }
            }
            Err(e) => {
                prop_assert_eq!(e.offset, start);
                prop_assert!(reader.next_ref().is_none(), "a bad frame ends the stream");
                break;
            }
        }
    }
    let mut owned = FrameReader::new(buf);
    let mut count = 0usize;
    let mut failed = false;
    for item in owned.by_ref() {
        count += 1;
        prop_assert!(count <= buf.len());
        prop_assert!(!failed, "nothing follows an error");
        failed = item.is_err();
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(10000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes()) {
        check_stream(&bytes)?;
    }

    #[test]
    fn valid_streams_round_trip(specs in proptest::collection::vec(spec(), 0..8)) {
        let buf = encode(&specs);
        let frames: Vec<Frame> = FrameReader::new(&buf).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(frames.len(), specs.len());
        // A same-item frame decodes with the key of the version frame before it.
        let mut last_key = None;
        let mut again = Vec::new();
        for (frame, spec) in frames.iter().zip(&specs) {
            let same = matches!(spec, Spec::Version { same: true, .. }) && last_key.is_some();
            if let (Frame::Version(v), Spec::Version { key, .. }) = (frame, spec) {
                let want = if same { last_key.clone().unwrap() } else { key.clone() };
                prop_assert_eq!(&v.key, &want);
                last_key = Some(want);
            } else {
                last_key = None;
            }
            again.extend(encode_owned(frame, same));
        }
        prop_assert_eq!(again, buf);
    }

    #[test]
    fn mutated_streams_decode_cleanly(
        specs in proptest::collection::vec(spec(), 1..8),
        ms in mutate::mutations(),
    ) {
        let mut buf = encode(&specs);
        mutate::apply_all(&mut buf, &ms);
        check_stream(&buf)?;
    }

    #[test]
    fn lengths_set_huge_are_refused_or_consistent(
        key in key(),
        value in proptest::option::of("[ -~]{0,16}"),
        key_len in any::<bool>(),
        huge in mutate::huge_value(),
    ) {
        let flags = if value.is_some() { FLAG_VALUE } else { 0 };
        let mut buf = Vec::new();
        let key = key.to_bytes();
        let value = value.as_deref().map(str::as_bytes);
        encode_version(&mut buf, flags, Index::new(1), &key, value);
        if key_len || value.is_none() {
            buf[10..12].copy_from_slice(&huge.to_le_bytes()[..2]);
        } else {
            let at = 12 + key.len();
            buf[at..at + 4].copy_from_slice(&huge.to_le_bytes()[..4]);
        }
        check_stream(&buf)?;
    }
}
