//! A Disk View whose file system runs out of space (a 16 MiB tmpfs): `apply` fails with an
//! error that names the view and says the device is full (no panic), the applied index stays
//! at the last transaction written, reads keep answering; after space is freed and the view
//! reopened, apply resumes where it stopped and every item reads back its last version.
//! Mounting needs root: without it the test prints why and passes vacuously.

#[path = "../../chunk/tests/common/tmpfs.rs"]
mod tmpfs;

use std::collections::BTreeMap;

use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_view::{DiskView, Freshness};

const ITEMS: u64 = 50;

fn key(i: u64) -> ItemKey {
    ItemKey::node(format!("n{}", i % ITEMS)).unwrap()
}

fn value(i: u64) -> Value {
    Value::json(format!(
        "{{\"i\":{i},\"pad\":\"{}\"}}",
        "x".repeat(16 << 10)
    ))
    .unwrap()
}

/// Transaction `i` is one record at index `i` writing item `i % ITEMS`.
fn txn(i: u64) -> Vec<Record> {
    vec![Record {
        index: Index::new(i),
        commit: true,
        key: key(i),
        value: value(i),
    }]
}

fn assert_reads(view: &DiskView, upto: u64) {
    let expected: BTreeMap<u64, u64> = (1..=upto).map(|i| (i % ITEMS, i)).collect();
    for (item, last) in expected {
        let got = view.latest(&key(item), Freshness::Any).unwrap().unwrap();
        assert_eq!(got.index, Index::new(last), "item {item}");
        assert_eq!(got.value, value(last), "item {item}");
    }
}

#[test]
fn a_full_disk_fails_apply_and_keeps_reads() {
    let fs = match tmpfs::Tmpfs::mount(16 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = fs.path().join("view");
    let view = DiskView::open(&dir, Partition::ALL).unwrap();
    // What an operator deletes to make room.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 2 << 20]).unwrap();

    let mut i = 0;
    let err = loop {
        match view.apply(&txn(i + 1)) {
            Ok(applied) => {
                i += 1;
                assert_eq!(applied, Index::new(i));
            }
            Err(e) => break e,
        }
        assert!(i < 10_000, "a 16 MiB file system never filled");
    };
    println!("full after {i} transactions: {err}");
    let message = err.to_string();
    assert!(message.contains("No space left on device"), "{message}");
    assert!(message.contains(&dir.display().to_string()), "{message}");
    assert_eq!(view.applied_index(), Index::new(i), "nothing half applied");
    assert_reads(&view, i);
    let again = view.apply(&txn(i + 1));
    println!("a second apply on the full disk: {again:?}");
    assert!(again.is_err(), "still no space");
    assert_eq!(view.applied_index(), Index::new(i));
    drop(view);

    std::fs::remove_file(&ballast).unwrap();
    let view = DiskView::open(&dir, Partition::ALL).unwrap();
    assert_eq!(
        view.applied_index(),
        Index::new(i),
        "reopened where it stopped"
    );
    assert_reads(&view, i);
    for j in i + 1..=i + 20 {
        view.apply(&txn(j)).unwrap();
    }
    assert_reads(&view, i + 20);
    drop(view);
    drop(fs);
}
