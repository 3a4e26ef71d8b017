//! The verifying scan catches damage the apply path did not make: a value rewritten directly
//! in RocksDB (a checksum mismatch), a version outside the view's partition, and a flipped
//! byte in a table file of a closed view (a RocksDB corruption error, at open or in the
//! scan); an intact view verifies ok.

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use spindle_core::{Index, Partition, Value};
use spindle_view::{keys, DiskView, ViewError};

fn partition() -> Partition {
    Partition::nth(0, 2)
}

/// A closed view with a few thousand versions, flushed into table files.
fn filled_view(dir: &std::path::Path) -> Vec<u8> {
    let view = DiskView::open(dir, partition()).unwrap();
    let mut rng = Rng::new(7);
    for txn in random_records(&mut rng, 1500, 400) {
        view.apply(&txn).unwrap();
    }
    view.flush().unwrap();
    let report = view.verify().unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(report.versions > 500, "{report:?}");
    drop(view);
    // Some key the view holds, to overwrite later.
    let db = rocksdb_raw(dir);
    let first = db.iterator(rocksdb::IteratorMode::Start).next();
    first.unwrap().unwrap().0.to_vec()
}

fn rocksdb_raw(dir: &std::path::Path) -> rocksdb::DB {
    rocksdb::DB::open_cf(&rocksdb::Options::default(), dir, ["default", "meta"]).unwrap()
}

#[test]
fn a_value_written_around_apply_is_a_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let key = filled_view(dir.path());
    {
        let db = rocksdb_raw(dir.path());
        let mut bad = Vec::new();
        keys::encode_value(&Value::json("{\"forged\":true}").unwrap(), &mut bad);
        db.put(&key, bad).unwrap();
    }
    let view = DiskView::open(dir.path(), partition()).unwrap();
    let report = view.verify().unwrap();
    assert!(!report.ok(), "{report:?}");
    assert_ne!(report.stored, Some(report.computed));
    assert_eq!(report.misplaced, 0);
}

#[test]
fn a_version_outside_the_partition_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    filled_view(dir.path());
    {
        let db = rocksdb_raw(dir.path());
        let stray = (0..)
            .map(wide_item)
            .find(|k| !partition().contains(k.hash()))
            .unwrap();
        db.put(keys::version_key(&stray, Index::FIRST), [1u8])
            .unwrap();
    }
    let view = DiskView::open(dir.path(), partition()).unwrap();
    let report = view.verify().unwrap();
    assert_eq!(report.misplaced, 1, "{report:?}");
    assert!(!report.ok());
}

#[test]
fn a_flipped_byte_in_a_table_file_is_a_corruption_error() {
    let dir = tempfile::tempdir().unwrap();
    filled_view(dir.path());
    let mut tables: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    tables.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    // The largest table is the data column family's; its first third is data blocks.
    let table = tables.last().unwrap();
    let len = std::fs::metadata(table).unwrap().len();
    assert!(len > 16 << 10, "{len}");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(table)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, len / 3).unwrap();
    file.write_all_at(&[byte[0] ^ 0x5A], len / 3).unwrap();
    drop(file);
    let outcome = DiskView::open(dir.path(), partition()).and_then(|view| view.verify());
    match outcome {
        Err(ViewError::Db { source, .. }) => {
            assert!(
                source.to_string().to_lowercase().contains("corrupt"),
                "{source}"
            );
        }
        other => panic!("a flipped byte went unnoticed: {other:?}"),
    }
}
