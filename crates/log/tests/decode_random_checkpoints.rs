//! Version-table checkpoints under random and mutated input: decoding never panics, a valid
//! checkpoint round-trips, whatever decodes re-encodes to a checkpoint that decodes to the
//! same table, and an entry count or key length set huge is refused by the bytes actually
//! present (nothing is allocated by the declared count).
//!
//! `PROPTEST_CASES` raises the case counts (docs/benchmarks/faults.md has the long run).

#[path = "../../core/tests/common/mutate.rs"]
mod mutate;
use mutate::cases;

use std::collections::BTreeMap;

use proptest::prelude::*;
use spindle_core::Index;
use spindle_log::versions::{decode_checkpoint, VersionTable, CHECKPOINT_FILE};

/// Bit 63 of a stored version in format 2: the item's latest record is a delete.
const DELETED_BIT: u64 = 1 << 63;

/// A format 1 checkpoint image as the module doc of `versions.rs` draws it, entries in the
/// given order.
fn encode(as_of: u64, entries: &[(Vec<u8>, u64)]) -> Vec<u8> {
    encode_format(1, as_of, entries)
}

/// The same image in checkpoint format `format` (2 reads bit 63 as the delete flag).
fn encode_format(format: u32, as_of: u64, entries: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut buf = Vec::new();
    buf.extend_from_slice(b"SPNDLVER");
    buf.extend_from_slice(&format.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(&as_of.to_le_bytes());
    buf.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (key, version) in entries {
        buf.extend_from_slice(&u16::try_from(key.len()).unwrap().to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&version.to_le_bytes());
    }
    append_crc(&mut buf);
    buf
}

/// Append (or, when `buf` already ends in one, recompute) the trailing checksum.
fn append_crc(buf: &mut Vec<u8>) {
    let crc = crc32c::crc32c(buf);
    buf.extend_from_slice(&crc.to_le_bytes());
}

fn reseal_in_place(buf: &mut Vec<u8>) {
    if buf.len() >= 4 {
        buf.truncate(buf.len() - 4);
        append_crc(buf);
    }
}

fn entries() -> impl Strategy<Value = BTreeMap<Vec<u8>, u64>> {
    proptest::collection::btree_map(
        proptest::collection::vec(any::<u8>(), 0..24),
        // Bit 63 of a stored version is the delete flag (format 2); format 1 refuses it.
        0..(1u64 << 63),
        0..12,
    )
}

/// The table's entries, read back through `get` and `is_deleted` (the table has no
/// iterator): every key in `expected` holds its stored version (bit 63 the delete flag) and
/// there are no others.
fn holds(table: &VersionTable, expected: &BTreeMap<Vec<u8>, u64>) -> Result<(), TestCaseError> {
    prop_assert_eq!(table.len(), expected.len());
    for (key, stored) in expected {
        prop_assert_eq!(table.get(key), Index::new(*stored & !DELETED_BIT));
        prop_assert_eq!(table.is_deleted(key), *stored & DELETED_BIT != 0);
    }
    Ok(())
}

/// Walk the entries of a checkpoint that decoded: the last write of each key wins, as in
/// `decode_checkpoint`. Used to re-encode what was decoded.
fn entries_of(buf: &[u8]) -> BTreeMap<Vec<u8>, u64> {
    let count = u64::from_le_bytes(buf[24..32].try_into().unwrap());
    let mut out = BTreeMap::new();
    let mut pos = 32;
    for _ in 0..count {
        let len = usize::from(u16::from_le_bytes([buf[pos], buf[pos + 1]]));
        let key = buf[pos + 2..pos + 2 + len].to_vec();
        let v = u64::from_le_bytes(buf[pos + 2 + len..pos + 10 + len].try_into().unwrap());
        out.insert(key, v);
        pos += 10 + len;
    }
    out
}

fn check_decoded(buf: &[u8]) -> Result<(), TestCaseError> {
    let Ok((table, as_of)) = decode_checkpoint(buf) else {
        return Ok(());
    };
    let expected = entries_of(buf);
    holds(&table, &expected)?;
    let entries: Vec<_> = expected.clone().into_iter().collect();
    // Re-encoded in the format it was read in (a mutation may have made a format 1 image a
    // format 2 one, whose versions may carry the delete flag).
    let format = u32::from_le_bytes(buf[8..12].try_into().unwrap());
    let again = encode_format(format, as_of.get(), &entries);
    let (back, back_as_of) = decode_checkpoint(&again).unwrap();
    prop_assert_eq!(back_as_of, as_of);
    holds(&back, &expected)?;
    Ok(())
}

proptest! {
    #![proptest_config(cases(20000))]

    #[test]
    fn random_bytes_never_panic(bytes in mutate::random_bytes(), reseal in any::<bool>()) {
        let mut bytes = bytes;
        if reseal {
            reseal_in_place(&mut bytes);
        }
        check_decoded(&bytes)?;
        let mut with_magic = b"SPNDLVER\x01\0\0\0\0\0\0\0".to_vec();
        with_magic.extend_from_slice(&bytes);
        append_crc(&mut with_magic);
        check_decoded(&with_magic)?;
    }

    #[test]
    fn valid_checkpoints_round_trip(as_of in any::<u64>(), entries in entries()) {
        let list: Vec<_> = entries.clone().into_iter().collect();
        let (table, back) = decode_checkpoint(&encode(as_of, &list)).unwrap();
        prop_assert_eq!(back, Index::new(as_of));
        holds(&table, &entries)?;
    }

    #[test]
    fn mutated_checkpoints_decode_cleanly(
        as_of in any::<u64>(),
        entries in entries(),
        ms in mutate::mutations(),
        reseal in any::<bool>(),
    ) {
        let list: Vec<_> = entries.into_iter().collect();
        let mut bytes = encode(as_of, &list);
        mutate::apply_all(&mut bytes, &ms);
        if reseal {
            reseal_in_place(&mut bytes);
        }
        check_decoded(&bytes)?;
    }

    #[test]
    fn counts_and_key_lengths_set_huge_are_refused_or_consistent(
        as_of in any::<u64>(),
        entries in entries(),
        pick in any::<prop::sample::Index>(),
        value in mutate::huge_value(),
    ) {
        let list: Vec<_> = entries.into_iter().collect();
        let mut bytes = encode(as_of, &list);
        let mut fields = vec![(24usize, 8usize)];
        let mut pos = 32;
        for (key, _) in &list {
            fields.push((pos, 2));
            pos += 10 + key.len();
        }
        let (at, width) = fields[pick.index(fields.len())];
        bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        reseal_in_place(&mut bytes);
        check_decoded(&bytes)?;
    }
}

/// The hand-written image above is the format `write_checkpoint` writes.
#[test]
fn written_checkpoints_decode_like_the_hand_encoding() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = VersionTable::new();
    let mut expected = BTreeMap::new();
    for i in 0..50u64 {
        let key = format!("key-{}", i % 17).into_bytes();
        table.set(&key, Index::new(i + 1), false);
        expected.insert(key, i + 1);
    }
    table
        .write_checkpoint(&spindle_log::fs::StdFs, dir.path(), Index::new(50))
        .unwrap();
    let written = std::fs::read(dir.path().join(CHECKPOINT_FILE)).unwrap();
    let (back, as_of) = decode_checkpoint(&written).unwrap();
    assert_eq!(as_of, Index::new(50));
    assert_eq!(back.len(), expected.len());
    for (key, version) in &expected {
        assert_eq!(back.get(key), Index::new(*version));
    }
    let list: Vec<_> = expected.into_iter().collect();
    assert_eq!(written.len(), encode(50, &list).len());
}
