//! A Disk View whose file system runs out of space (a 16 MiB tmpfs): `apply` fails with an
//! error that names the view and says the device is full (no panic), the applied index stays
//! at the last transaction written, reads keep answering; after space is freed and the view
//! reopened, apply resumes where it stopped and every item reads back its last version.
//! Without a reopen, too: the error says the disk is full (`is_disk_full`), and once enough
//! space is free RocksDB lifts its write stop by itself, so retrying the same records
//! succeeds. Mounting needs root: without it the test prints why and passes vacuously.

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

/// Apply transactions 1, 2, … until one fails; the last applied and the error.
fn apply_until_full(view: &DiskView) -> (u64, spindle_view::ViewError) {
    let mut i = 0;
    loop {
        match view.apply(&txn(i + 1)) {
            Ok(applied) => {
                i += 1;
                assert_eq!(applied, Index::new(i));
            }
            Err(e) => return (i, e),
        }
        assert!(i < 10_000, "the file system never filled");
    }
}

#[test]
fn a_full_disk_fails_apply_and_keeps_reads() {
    let Some(fs) = tmpfs::Tmpfs::mount_or_skip(16 << 20) else {
        return;
    };
    let dir = fs.path().join("view");
    let view = DiskView::open(&dir, Partition::ALL).unwrap();
    // What an operator deletes to make room.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 2 << 20]).unwrap();

    let (i, err) = apply_until_full(&view);
    println!("full after {i} transactions: {err}");
    let message = err.to_string();
    assert!(message.contains("No space left on device"), "{message}");
    assert!(err.is_disk_full(), "{err:?}");
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

#[test]
fn freed_space_lets_the_same_view_write_again_without_a_reopen() {
    // RocksDB resumes a write-stopped database once it sees 64 MiB (one write buffer) free:
    // the ballast is larger than that.
    let Some(fs) = tmpfs::Tmpfs::mount_or_skip(128 << 20) else {
        return;
    };
    let dir = fs.path().join("view");
    let view = DiskView::open(&dir, Partition::ALL).unwrap();
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 80 << 20]).unwrap();
    let (i, err) = apply_until_full(&view);
    assert!(err.is_disk_full(), "{err:?}");
    assert_eq!(view.applied_index(), Index::new(i));

    std::fs::remove_file(&ballast).unwrap();
    // Hang guard only: RocksDB looks for free space every 5 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match view.apply(&txn(i + 1)) {
            Ok(applied) => {
                assert_eq!(applied, Index::new(i + 1));
                break;
            }
            Err(e) => {
                assert!(e.is_disk_full(), "only the full disk may refuse: {e:?}");
                assert_eq!(view.applied_index(), Index::new(i), "nothing half applied");
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the view never wrote again"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for j in i + 2..=i + 20 {
        view.apply(&txn(j)).unwrap();
    }
    assert_reads(&view, i + 20);
    drop(view);
    let view = DiskView::open(&dir, Partition::ALL).unwrap();
    assert_eq!(
        view.applied_index(),
        Index::new(i + 20),
        "reopened where it was"
    );
    assert_reads(&view, i + 20);
    drop(view);
    drop(fs);
}
