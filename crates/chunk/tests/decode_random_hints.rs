//! Chunk headers and hint files under random and mutated input: decoding never panics, what
//! decodes re-encodes to the same bytes, a hint that decodes tiles its volume (so no read is
//! sized by a length the volume does not hold), and opening or verifying a store whose hint
//! files were damaged behind valid checksums never panics.
//!
//! `PROPTEST_CASES` raises the case counts, `SPINDLE_DAMAGED_STORES` the number of damaged
//! stores opened (docs/benchmarks/faults.md has the long run).

mod common;
#[path = "../../core/tests/common/mutate.rs"]
mod mutate;
use mutate::cases;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use spindle_chunk::format::{
    decode_hint, encode_hint, HintEntry, RecordHeader, VolumeHeader, HINT_HEADER_LEN,
    HINT_TRAILER_LEN,
};
use spindle_chunk::{verify_store, ChunkId, ChunkStore, RecordKind, VOLUME_HEADER_LEN};

/// A volume's records as its hint lists them: contiguous from the volume header on.
fn valid_hint() -> impl Strategy<Value = (u32, u64, Vec<HintEntry>)> {
    let record = (
        any::<[u8; 32]>(),
        prop_oneof![3 => Just(RecordKind::Put), 1 => Just(RecordKind::Tombstone)],
        prop_oneof![0u32..2048, Just(1 << 20), Just(u32::MAX)],
    );
    (any::<u32>(), proptest::collection::vec(record, 0..8)).prop_map(|(volume, records)| {
        let mut offset = VOLUME_HEADER_LEN;
        let entries: Vec<HintEntry> = records
            .into_iter()
            .map(|(id, kind, len)| {
                let len = if kind == RecordKind::Tombstone {
                    0
                } else {
                    len
                };
                let e = HintEntry {
                    id: ChunkId::from_bytes(id),
                    offset,
                    len,
                    kind,
                };
                offset += e.record_len();
                e
            })
            .collect();
        (volume, offset, entries)
    })
}

/// Recompute both checksums of a hint image so that damage reaches the checks behind them.
fn reseal_hint(b: &mut [u8]) {
    if b.len() < HINT_HEADER_LEN + HINT_TRAILER_LEN {
        return;
    }
    let crc = crc32c::crc32c(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    let trailer = b.len() - HINT_TRAILER_LEN;
    let crc = crc32c::crc32c(&b[HINT_HEADER_LEN..trailer]);
    b[trailer..].copy_from_slice(&crc.to_le_bytes());
}

/// What every decoded hint must satisfy, whatever bytes it came from.
fn check_decoded_hint(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(hint) = decode_hint(bytes) else {
        return Ok(());
    };
    prop_assert_eq!(
        encode_hint(hint.volume, hint.volume_len, &hint.entries),
        bytes,
        "a decoded hint re-encodes to its bytes"
    );
    let mut offset = VOLUME_HEADER_LEN;
    for e in &hint.entries {
        prop_assert_eq!(e.offset, offset, "entries are contiguous");
        offset += e.record_len();
    }
    prop_assert_eq!(offset, hint.volume_len, "entries end where the volume ends");
    Ok(())
}

proptest! {
    #![proptest_config(cases(10000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes(), reseal in any::<bool>()) {
        let mut bytes = bytes;
        if reseal {
            reseal_hint(&mut bytes);
        }
        check_decoded_hint(&bytes)?;
        if let Ok(b) = <&[u8; 52]>::try_from(bytes.get(..52).unwrap_or(&[])) {
            if let Ok(h) = RecordHeader::decode(b) {
                prop_assert_eq!(&h.encode(), b);
            }
        }
        if let Ok(b) = <&[u8; 64]>::try_from(bytes.get(..64).unwrap_or(&[])) {
            if let Ok(h) = VolumeHeader::decode(b) {
                prop_assert_eq!(VolumeHeader::decode(&h.encode()), Ok(h));
            }
        }
    }

    #[test]
    fn valid_hints_round_trip((volume, volume_len, entries) in valid_hint()) {
        let bytes = encode_hint(volume, volume_len, &entries);
        let hint = decode_hint(&bytes).unwrap();
        prop_assert_eq!((hint.volume, hint.volume_len), (volume, volume_len));
        prop_assert_eq!(hint.entries, entries);
    }

    #[test]
    fn mutated_hints_decode_cleanly(
        (volume, volume_len, entries) in valid_hint(),
        ms in mutate::mutations(),
        reseal in any::<bool>(),
    ) {
        let mut bytes = encode_hint(volume, volume_len, &entries);
        mutate::apply_all(&mut bytes, &ms);
        if reseal {
            reseal_hint(&mut bytes);
        }
        check_decoded_hint(&bytes)?;
    }

    #[test]
    fn hint_counts_and_lengths_set_huge_are_refused_or_consistent(
        (volume, volume_len, entries) in valid_hint(),
        pick in any::<prop::sample::Index>(),
        value in mutate::huge_value(),
    ) {
        let mut bytes = encode_hint(volume, volume_len, &entries);
        // The count, volume_len, and each entry's offset and len.
        let mut fields = vec![(24usize, 4usize), (16, 8)];
        for i in 0..entries.len() {
            let at = HINT_HEADER_LEN + i * 48;
            fields.push((at + 32, 8));
            fields.push((at + 40, 4));
        }
        let (at, width) = fields[pick.index(fields.len())];
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        reseal_hint(&mut bytes);
        check_decoded_hint(&bytes)?;
    }

    #[test]
    fn mutated_record_headers_decode_cleanly(
        data in proptest::collection::vec(any::<u8>(), 0..64),
        tombstone in any::<bool>(),
        ms in mutate::mutations(),
    ) {
        let id = ChunkId::of(&data);
        let h = if tombstone { RecordHeader::tombstone(id) } else { RecordHeader::put(id, &data) };
        let mut bytes = h.encode().to_vec();
        prop_assert_eq!(RecordHeader::decode(&h.encode()), Ok(h));
        mutate::apply_all(&mut bytes, &ms);
        bytes.resize(52, 0);
        let b: &[u8; 52] = bytes.as_slice().try_into().unwrap();
        if let Ok(back) = RecordHeader::decode(b) {
            prop_assert_eq!(&back.encode(), b);
        }
    }
}

/// A small store with several sealed volumes and some tombstones, built once; each case copies
/// it.
fn template() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
        let mut ids = Vec::new();
        for s in 0..24 {
            ids.push(store.put(&common::chunk(s, 900 + 37 * s as usize)).unwrap());
        }
        for id in ids.iter().step_by(5) {
            store.delete(id).unwrap();
        }
        store.close().unwrap();
        dir
    })
    .path()
}

fn copy_template() -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let mut hints = Vec::new();
    for entry in std::fs::read_dir(template()).unwrap() {
        let entry = entry.unwrap();
        let to = dir.path().join(entry.file_name());
        std::fs::copy(entry.path(), &to).unwrap();
        if to.extension().is_some_and(|e| e == "hint") {
            hints.push(to);
        }
    }
    hints.sort();
    (dir, hints)
}

/// Open and verify a store; either may fail, neither may panic, and an opened store answers
/// every get with bytes that hash to the id or an error.
fn open_and_read(dir: &Path) {
    let _ = verify_store(dir);
    if let Ok(store) = ChunkStore::open(dir, common::small_opts()) {
        for id in store.keys() {
            if let Ok(Some(bytes)) = store.get(&id) {
                assert_eq!(ChunkId::of(&bytes), id, "a get never returns other bytes");
            }
        }
        let _ = store.close();
    }
}

/// Each case opens a store (file copies and syncs), so this property has its own count,
/// `SPINDLE_DAMAGED_STORES` (default 48). It runs its own `TestRunner` because the
/// `proptest!` macro lets `PROPTEST_CASES` override any configured count.
#[test]
fn stores_with_damaged_hints_open_without_panic() {
    let cases = std::env::var("SPINDLE_DAMAGED_STORES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let damage = (
        any::<prop::sample::Index>(),
        mutate::mutations(),
        any::<bool>(),
    );
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&damage, |(pick, ms, reseal)| {
        let (dir, hints) = copy_template();
        assert!(!hints.is_empty(), "the template store has hint files");
        let hint = &hints[pick.index(hints.len())];
        let mut bytes = std::fs::read(hint).unwrap();
        mutate::apply_all(&mut bytes, &ms);
        if reseal {
            reseal_hint(&mut bytes);
        }
        std::fs::write(hint, &bytes).unwrap();
        open_and_read(dir.path());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Regression: a hint whose checksums match but whose records are out of file order used to
/// reach the catalog, whose replay asserts file order, and so panicked `ChunkStore::open`.
/// It is now refused and the volume scanned.
#[test]
fn open_refuses_a_checksummed_hint_with_records_out_of_order() {
    let (dir, hints) = copy_template();
    let hint = &hints[0];
    let mut decoded = decode_hint(&std::fs::read(hint).unwrap()).unwrap();
    assert!(decoded.entries.len() >= 2);
    decoded.entries.swap(0, 1);
    let bytes = encode_hint(decoded.volume, decoded.volume_len, &decoded.entries);
    assert!(
        decode_hint(&bytes).is_err(),
        "out-of-order records are refused"
    );
    std::fs::write(hint, &bytes).unwrap();

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.open_report().volumes_scanned, 1);
    for id in store.keys() {
        let bytes = store.get(&id).unwrap().unwrap();
        assert_eq!(ChunkId::of(&bytes), id);
    }
    store.close().unwrap();
}

/// Regression: a checksummed hint could name a record far longer than its volume; the read of
/// that chunk then reserved a buffer of the named length. Such a hint is now refused.
#[test]
fn a_hint_record_longer_than_its_volume_is_refused() {
    let entries = [HintEntry {
        id: ChunkId::of(b"x"),
        offset: VOLUME_HEADER_LEN,
        len: u32::MAX,
        kind: RecordKind::Put,
    }];
    let bytes = encode_hint(1, VOLUME_HEADER_LEN + 53, &entries);
    assert!(decode_hint(&bytes).is_err());
}
