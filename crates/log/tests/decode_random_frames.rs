//! Log frames, segment headers and segment scans under random and mutated input: decoding
//! never panics, a frame that decodes re-encodes to the same bytes, a scan's end positions
//! stay inside the image and count exactly the frames it visited, and a length field set
//! huge is refused before anything is sized by it (the reader included).
//!
//! `PROPTEST_CASES` raises the case counts (docs/benchmarks/faults.md has the long run).

#[path = "../../core/tests/common/mutate.rs"]
mod mutate;
use mutate::cases;

use proptest::prelude::*;
use spindle_core::record::{decode_payload, encode_payload, payload_key};
use spindle_core::{Index, ItemKey, Transaction, Value, RECORD_BYTES_MAX};
use spindle_log::frame::{decode_frame, encode_frame, FrameFault, FRAME_HEADER_BYTES};
use spindle_log::segment::{decode_header, scan_frames, SEGMENT_HEADER_BYTES};
use spindle_log::{FileLog, LogConfig, ReadError};

/// A segment header as `docs/log-format.md` draws it.
fn segment_header(first: u64) -> Vec<u8> {
    let mut h = vec![0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(b"SPNDLLOG");
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h[16..24].copy_from_slice(&first.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

fn key() -> impl Strategy<Value = ItemKey> {
    let field = "[a-z\u{0}\u{e9}]{1,6}";
    prop_oneof![
        field.prop_map(|id| ItemKey::node(id).unwrap()),
        (field, field, field).prop_map(|(f, l, t)| ItemKey::edge(f, l, t).unwrap()),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::TOMBSTONE),
        (0u32..1000).prop_map(|n| Value::json(format!("{{\"n\":{n}}}")).unwrap()),
    ]
}

/// Record payloads (key, value, commit flag), as the writer lays them out.
fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec((any::<bool>(), key(), value()), 1..8).prop_map(|records| {
        records
            .into_iter()
            .map(|(commit, key, value)| {
                let mut out = Vec::new();
                encode_payload(commit, &key, &value, &mut out);
                out
            })
            .collect()
    })
}

/// First indexes, including ones whose frames run up to the end of the index space.
fn first_index() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        1u64..1_000_000,
        (0u64..8).prop_map(|k| u64::MAX - k),
    ]
}

/// A frame that decodes equals the bytes it came from.
fn check_frame(buf: &[u8], expected: Index) -> Result<(), TestCaseError> {
    if let Ok(frame) = decode_frame(buf, expected, RECORD_BYTES_MAX) {
        prop_assert!(frame.total_len() <= buf.len());
        prop_assert!(frame.payload.len() <= RECORD_BYTES_MAX);
        let mut again = Vec::new();
        encode_frame(frame.index, frame.payload, &mut again);
        prop_assert_eq!(&again[..], &buf[..frame.total_len()]);
    }
    Ok(())
}

/// Scan a segment image the way recovery does and check the scan's accounting.
fn check_scan(image: &[u8], first: Index) -> Result<(), TestCaseError> {
    let mut visited = Vec::new();
    let result = scan_frames(image, first, RECORD_BYTES_MAX, |index, payload, offset| {
        visited.push((index, offset));
        let key = payload_key(payload).ok_or("record payload does not decode")?;
        if let Ok(rec) = decode_payload(index, payload) {
            let mut again = Vec::new();
            let range = encode_payload(rec.commit, &rec.key, &rec.value, &mut again);
            assert_eq!(again, payload, "a decoded payload re-encodes to its bytes");
            assert_eq!(&again[range], key);
        }
        Ok(())
    });
    let Ok(end) = result else {
        return Ok(());
    };
    prop_assert!(end.end_offset <= image.len().max(SEGMENT_HEADER_BYTES as usize) as u64);
    prop_assert!(end.commit_end_offset <= end.end_offset);
    prop_assert!(end.commit_next_index <= end.next_index);
    prop_assert_eq!(end.next_index.get() - first.get(), visited.len() as u64);
    for (i, (index, _)) in visited.iter().enumerate() {
        prop_assert_eq!(index.get(), first.get() + i as u64);
    }
    Ok(())
}

fn image_of(first: u64, payloads: &[Vec<u8>], zeros: usize) -> Vec<u8> {
    let mut image = segment_header(first);
    for (i, p) in payloads.iter().enumerate() {
        encode_frame(Index::new(first.wrapping_add(i as u64)), p, &mut image);
    }
    image.resize(image.len() + zeros, 0);
    image
}

proptest! {
    #![proptest_config(cases(10000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes(), expected in any::<u64>()) {
        check_frame(&bytes, Index::new(expected))?;
        if let Ok(first) = decode_header(&bytes) {
            prop_assert_eq!(&segment_header(first.get())[..], &bytes[..32]);
        }
        let mut image = vec![0u8; SEGMENT_HEADER_BYTES as usize];
        image.extend_from_slice(&bytes);
        check_scan(&image, Index::new(expected.max(1)))?;
    }

    #[test]
    fn valid_segments_scan_whole(
        first in first_index(),
        payloads in payloads(),
        zeros in 0usize..64,
    ) {
        // A segment never holds the largest index: keep the frames below it.
        let mut payloads = payloads;
        let room = usize::try_from(u64::MAX - first).unwrap_or(usize::MAX);
        payloads.truncate(room);
        let image = image_of(first, &payloads, zeros);
        let end = scan_frames(&image, Index::new(first), RECORD_BYTES_MAX, |_, _, _| Ok(()))
            .unwrap();
        prop_assert_eq!(end.fault, None);
        prop_assert_eq!(end.next_index.get(), first + payloads.len() as u64);
        prop_assert_eq!(end.end_offset as usize, image.len() - zeros);
        check_scan(&image, Index::new(first))?;
    }

    #[test]
    fn mutated_segments_scan_cleanly(
        first in first_index(),
        payloads in payloads(),
        zeros in 0usize..64,
        ms in mutate::mutations(),
        damage_payload in any::<Option<prop::sample::Index>>(),
    ) {
        let mut payloads = payloads;
        // Either damage the image (checksums catch it) or one payload before its frame is
        // sealed (the frame is valid, the record inside it is not).
        let mut image = match damage_payload {
            Some(pick) => {
                let i = pick.index(payloads.len());
                mutate::apply_all(&mut payloads[i], &ms);
                if payloads[i].is_empty() {
                    payloads[i].push(0);
                }
                image_of(first, &payloads, zeros)
            }
            None => image_of(first, &payloads, zeros),
        };
        if damage_payload.is_none() {
            let header = SEGMENT_HEADER_BYTES as usize;
            let mut body = image.split_off(header);
            mutate::apply_all(&mut body, &ms);
            image.extend_from_slice(&body);
        }
        check_scan(&image, Index::new(first))?;
        check_frame(&image[SEGMENT_HEADER_BYTES as usize..], Index::new(first))?;
    }

    #[test]
    fn frame_lengths_set_huge_are_refused(
        payloads in payloads(),
        value in mutate::huge_value(),
    ) {
        let mut buf = Vec::new();
        encode_frame(Index::new(5), &payloads[0], &mut buf);
        let len = u32::try_from(value.min(u64::from(u32::MAX))).unwrap();
        buf[4..8].copy_from_slice(&len.to_le_bytes());
        match decode_frame(&buf, Index::new(5), RECORD_BYTES_MAX) {
            Err(FrameFault::BadLength(n)) => prop_assert!(n as usize > RECORD_BYTES_MAX),
            Err(_) => {}
            Ok(frame) => prop_assert_eq!(frame.payload.len(), len as usize),
        }
    }
}

/// Regression: a frame carrying the largest index passed every check, and the scan then
/// computed the index after it (`Index::next`), which panics. The scan now stops there.
#[test]
fn a_frame_at_the_largest_index_ends_the_scan() {
    let image = image_of(u64::MAX, &[vec![1, 0, 1, 0, b'a']], 0);
    let end = scan_frames(&image, Index::MAX, RECORD_BYTES_MAX, |_, _, _| Ok(())).unwrap();
    assert_eq!(
        end.fault,
        Some((SEGMENT_HEADER_BYTES, FrameFault::IndexOverflow))
    );
    assert_eq!(end.next_index, Index::MAX);
}

/// Regression: when fewer than a header's bytes of a frame are left below the durable index,
/// the reader grew its buffer to the frame's length field unchecked (up to 4 GiB, zeroed).
/// It now refuses a length past the record limit before growing.
#[test]
fn a_damaged_length_below_the_durable_index_does_not_size_the_read_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let log = FileLog::open(dir.path(), LogConfig::default()).unwrap();
    let key = ItemKey::node("n").unwrap();
    let value = Value::json("{}").unwrap();
    log.append_blocking(&Transaction::single(key, value))
        .unwrap();
    let segment = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    use std::os::unix::fs::FileExt;
    let frame_at = SEGMENT_HEADER_BYTES;
    file.write_all_at(&u32::MAX.to_le_bytes(), frame_at + 4)
        .unwrap();
    file.set_len(frame_at + FRAME_HEADER_BYTES as u64 - 4)
        .unwrap();
    match log.read(Index::FIRST, 10) {
        Err(ReadError::Corrupt { reason, .. }) => assert!(
            reason.contains("record limit"),
            "refused at the length field, not after growing the buffer: {reason}"
        ),
        other => panic!("expected a corruption error, got {other:?}"),
    }
}
