//! `spindle verify --data DIR` on a stopped data directory: intact Disk Views exit 0 and say
//! ok; a value rewritten in RocksDB around the apply path exits 1 naming the view as a
//! mismatch; a flipped byte in a view's table file exits 1 as corrupt.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Output};

use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_view::disk_ingest::disk_view_dir;
use spindle_view::DiskView;

fn verify(data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["verify", "--data"])
        .arg(data)
        .output()
        .unwrap()
}

/// Two Disk Views (partitions 0 and 1 of 2) holding 3000 node versions, flushed to tables.
fn write_views(data: &Path) {
    let records: Vec<Record> = (1..=3000u64)
        .map(|i| Record {
            index: Index::new(i),
            commit: true,
            key: ItemKey::node(format!("n{}", i % 700)).unwrap(),
            value: Value::json(format!("{{\"i\":{i},\"pad\":\"{i:0>24}\"}}")).unwrap(),
        })
        .collect();
    for i in 0..2 {
        let view = DiskView::open(disk_view_dir(data, i, 2), Partition::nth(i, 2)).unwrap();
        view.apply(&records).unwrap();
        view.flush().unwrap();
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn verify_passes_intact_views_and_fails_damaged_ones() {
    let data = tempfile::tempdir().unwrap();
    write_views(data.path());
    let out = verify(data.path());
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("disk-0-of-2      ok"), "{stdout}");
    assert!(stdout.contains("disk-1-of-2      ok"), "{stdout}");

    // A value written straight into RocksDB, bypassing the apply path.
    let view0 = disk_view_dir(data.path(), 0, 2);
    {
        let db = rocksdb::DB::open_cf(&rocksdb::Options::default(), &view0, ["default", "meta"])
            .unwrap();
        let key = db
            .iterator(rocksdb::IteratorMode::Start)
            .next()
            .unwrap()
            .unwrap()
            .0;
        db.put(&key, b"\x00{\"forged\":1}").unwrap();
    }
    let out = verify(data.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(
        stdout.contains("disk-0-of-2      MISMATCH"),
        "{}",
        text(&out)
    );
    assert!(stdout.contains("disk-1-of-2      ok"), "{}", text(&out));

    // A flipped byte in the largest table file of the other view.
    let view1 = disk_view_dir(data.path(), 1, 2);
    let table = std::fs::read_dir(&view1)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let len = std::fs::metadata(&table).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&table)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, len / 3).unwrap();
    file.write_all_at(&[byte[0] ^ 0x5A], len / 3).unwrap();
    drop(file);
    let out = verify(data.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(
        stdout.contains("disk-1-of-2      CORRUPT"),
        "{}",
        text(&out)
    );
}
