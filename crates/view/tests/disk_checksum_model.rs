//! A Disk View's checksum and checkpoints equal a reference computed from the records alone
//! (the sum of each in-range version's hash, per checkpoint over exactly the versions at or
//! below it), whatever the batching: two views applying the same random history (deletes,
//! multi-record transactions, transactions wholly out of range) one transaction at a time and
//! in large random chunks agree; a different history gives a different checksum; a reopen
//! keeps both; and a directory without stored checksums (written before them) recomputes
//! the same value at open.

mod common;

use common::*;
use spindle_core::{Index, Partition, Record};
use spindle_view::checksum::CHECKPOINTS_KEPT_MAX;
use spindle_view::{keys, Checkpoint, Checksum, DiskView};

const TXNS: usize = 400;
const ITEMS: u64 = 80;
const INTERVAL: u64 = 7;

fn partition() -> Partition {
    Partition::nth(1, 2)
}

/// The reference: checksum of the in-range versions up to `applied`, and the checkpoints a
/// view at `applied` keeps.
fn reference(records: &[Record], applied: Index) -> (Checksum, Vec<Checkpoint>) {
    let mut sum = Checksum::EMPTY;
    let mut checkpoints = Vec::new();
    let mut value = Vec::new();
    for r in records.iter().take_while(|r| r.index <= applied) {
        if partition().contains(r.key.hash()) {
            value.clear();
            keys::encode_value(&r.value, &mut value);
            sum = sum.plus(Checksum::of_version(
                &keys::version_key(&r.key, r.index),
                &value,
            ));
        }
        if r.index.get().is_multiple_of(INTERVAL) {
            checkpoints.push(Checkpoint {
                index: r.index,
                checksum: sum,
            });
        }
    }
    let keep = checkpoints.len().saturating_sub(CHECKPOINTS_KEPT_MAX);
    (sum, checkpoints.split_off(keep))
}

fn open(dir: &std::path::Path) -> DiskView {
    let view = DiskView::open(dir, partition()).unwrap();
    view.set_checkpoint_interval(INTERVAL);
    view
}

fn assert_matches(view: &DiskView, records: &[Record]) {
    let (sum, checkpoints) = reference(records, view.applied_index());
    assert_eq!(view.checksum().applied, view.applied_index());
    assert_eq!(
        view.checksum().checksum,
        sum,
        "checksum at {}",
        view.applied_index()
    );
    assert_eq!(view.checkpoints(), checkpoints);
    let report = view.verify().unwrap();
    assert!(report.ok(), "{report:?}");
}

#[test]
fn checksums_agree_across_batchings_and_reopens() {
    for seed in 0..u64::from(cases(4)) {
        let mut rng = Rng::new(seed);
        let txns = random_records(&mut rng, TXNS, ITEMS);
        let records: Vec<Record> = txns.iter().flatten().cloned().collect();
        let dir = tempfile::tempdir().unwrap();
        let one = open(&dir.path().join("one"));
        let chunked = open(&dir.path().join("chunked"));
        for txn in &txns {
            one.apply(txn).unwrap();
        }
        let mut at = 0;
        while at < txns.len() {
            let n = 1 + rng.below(40) as usize;
            let batch: Vec<Record> = txns[at..(at + n).min(txns.len())]
                .iter()
                .flatten()
                .cloned()
                .collect();
            chunked.apply(&batch).unwrap();
            at += n;
            assert_matches(&chunked, &records);
        }
        assert_matches(&one, &records);
        assert_eq!(one.checksum(), chunked.checksum());
        assert_eq!(one.checkpoints().len(), CHECKPOINTS_KEPT_MAX);
        assert_eq!(one.checkpoints(), chunked.checkpoints());

        // A history differing in one value gives another checksum.
        let mut other = txns.clone();
        let pos = other
            .iter()
            .flatten()
            .position(|r| partition().contains(r.key.hash()))
            .unwrap();
        let victim = other.iter_mut().flatten().nth(pos).unwrap();
        victim.value = value(Some(if victim.value.is_tombstone() { 1 } else { 2 }));
        if victim.value == records[pos].value {
            victim.value = spindle_core::Value::TOMBSTONE;
        }
        let differs = open(&dir.path().join("other"));
        for txn in &other {
            differs.apply(txn).unwrap();
        }
        assert_eq!(differs.applied_index(), one.applied_index());
        assert_ne!(differs.checksum(), one.checksum());

        // A reopen keeps both.
        let before = (one.checksum(), one.checkpoints());
        drop(one);
        let one = open(&dir.path().join("one"));
        assert_eq!((one.checksum(), one.checkpoints()), before);
        assert_matches(&one, &records);
    }
}

#[test]
fn a_directory_without_checksums_computes_them_at_open() {
    let mut rng = Rng::new(99);
    let txns = random_records(&mut rng, TXNS, ITEMS);
    let dir = tempfile::tempdir().unwrap();
    let expected = {
        let view = DiskView::open(dir.path(), partition()).unwrap();
        for txn in &txns {
            view.apply(txn).unwrap();
        }
        view.checksum()
    };
    {
        // Remove the keys as a build without checksums would have left the directory.
        let opts = rocksdb::Options::default();
        let db = rocksdb::DB::open_cf(&opts, dir.path(), ["default", "meta"]).unwrap();
        let meta = db.cf_handle("meta").unwrap();
        db.delete_cf(meta, b"checksum").unwrap();
        db.delete_cf(meta, b"checkpoints").unwrap();
    }
    let view = DiskView::open(dir.path(), partition()).unwrap();
    assert_eq!(view.checksum(), expected);
    assert!(view.verify().unwrap().ok());
}
