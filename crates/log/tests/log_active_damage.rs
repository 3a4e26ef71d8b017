//! Damage early in the active (last) segment is corruption, not a torn tail: after a crash,
//! with intact frames more than the unsynced window past it, and after a clean close,
//! anywhere below the synced length it recorded, `open` and `inspect` report the file and
//! offset and nothing is cut or zeroed. After a crash, damage within the unsynced end is
//! still cut as a torn tail.

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::{FileLog, LogConfig, OpenError};

/// Default 64 MiB segments and unsynced window; about `mib` MiB of acknowledged appends.
fn build(dir: &std::path::Path, mib: usize) -> Vec<u64> {
    let log = open(dir, LogConfig::default());
    let value = Value::json(format!("{{\"pad\":\"{}\"}}", "p".repeat(1000))).unwrap();
    let mut commits = Vec::new();
    for round in 0..mib * 10 {
        let txns: Vec<Transaction> = (0..100)
            .map(|i| {
                Transaction::new()
                    .write(node(&format!("a{round}-{i}")), value.clone())
                    .write(node("b"), obj(i))
            })
            .collect();
        for r in futures::executor::block_on(log.append_many(&txns)) {
            commits.push(r.unwrap().get());
        }
    }
    commits
}

fn flip(path: &std::path::Path, at: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x04], at).unwrap();
}

#[test]
fn a_flipped_byte_early_in_the_active_segment_is_reported_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let commits = build(dir.path(), 6);
    forget_clean_close(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    assert_eq!(segments.len(), 1, "everything is in the active segment");
    let seg = &segments[0].1;
    let victim = 32 + 5000;
    flip(seg, victim);
    let before = std::fs::read(seg).unwrap();

    for err in [
        FileLog::open(dir.path(), LogConfig::default()).unwrap_err(),
        spindle_log::inspect::inspect(dir.path()).unwrap_err(),
    ] {
        match err {
            OpenError::Corrupt {
                file,
                offset,
                reason,
            } => {
                assert_eq!(&file, seg);
                assert!(
                    offset <= victim && victim < offset + 2048,
                    "offset {offset} ({reason})"
                );
                assert!(reason.contains("beyond what can be unsynced"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other}"),
        }
    }
    assert!(
        std::fs::read(seg).unwrap() == before,
        "open cut or zeroed bytes of a damaged log"
    );

    // Undo the damage: every acknowledged transaction is still there.
    flip(seg, victim);
    let log = open(dir.path(), LogConfig::default());
    assert!(log.open_report().torn_tail.is_none());
    assert_eq!(log.durable_index().get(), *commits.last().unwrap());
}

#[test]
fn damage_within_the_unsynced_end_is_still_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let commits = build(dir.path(), 1);
    forget_clean_close(dir.path());
    let seg = spindle_log::segment::list_segments(dir.path()).unwrap()[0]
        .1
        .clone();
    let used = spindle_log::inspect::inspect(dir.path()).unwrap().segments[0].used_bytes;
    // Less than one unsynced window before the end: could be an unsynced write that
    // reached the disk out of order, so it is cut like a torn tail.
    let victim = used - 20_000;
    flip(&seg, victim);
    let log = open(dir.path(), LogConfig::default());
    let torn = log
        .open_report()
        .torn_tail
        .clone()
        .expect("cut as a torn tail");
    assert!(torn.offset <= victim);
    let last = log.durable_index().get();
    assert!(commits.contains(&last) && last < *commits.last().unwrap());
}

#[test]
fn after_a_clean_close_damage_anywhere_in_the_written_data_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 1);
    let seg = spindle_log::segment::list_segments(dir.path()).unwrap()[0]
        .1
        .clone();
    let used = spindle_log::inspect::inspect(dir.path()).unwrap().segments[0].used_bytes;
    let victim = used - 20;
    flip(&seg, victim);
    let before = std::fs::read(&seg).unwrap();
    match FileLog::open(dir.path(), LogConfig::default()).unwrap_err() {
        OpenError::Corrupt {
            file,
            offset,
            reason,
        } => {
            assert_eq!(file, seg);
            assert!(offset <= victim, "{offset}");
            assert!(reason.contains("clean close"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(std::fs::read(&seg).unwrap() == before, "nothing cut");
}
