//! Damage outside the torn tail is never repaired silently: a flipped byte in a sealed
//! segment fails `open` and `inspect` with the file and the byte offset of the bad frame.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use common::*;
use spindle_log::{FileLog, LogConfig, OpenError};

/// The file, offset and reason of a `Corrupt` error; any other error fails the test.
fn corrupt(err: OpenError) -> (std::path::PathBuf, u64, String) {
    match err {
        OpenError::Corrupt {
            file,
            offset,
            reason,
        } => (file, offset, reason),
        other => panic!("expected Corrupt, got {other}"),
    }
}

/// A log of 600 small appends across several small segments.
fn log_of_small_segments(dir: &std::path::Path) {
    let log = open(dir, small_segments());
    for i in 0..600u64 {
        log.append_blocking(&put(&format!("n{i}"), i)).unwrap();
    }
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    log_of_small_segments(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    assert!(segments.len() > 3);
    let (_, sealed) = &segments[1];
    let victim = 32 + 100; // inside the second frame of the segment
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(sealed)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, victim).unwrap();
    file.write_all_at(&[byte[0] ^ 0x40], victim).unwrap();
    drop(file);

    for err in [
        FileLog::open(dir.path(), small_segments()).unwrap_err(),
        spindle_log::inspect::inspect(dir.path()).unwrap_err(),
    ] {
        let (file, offset, reason) = corrupt(err);
        assert_eq!(&file, sealed);
        assert!(
            offset <= victim && offset + 100 > victim,
            "offset {offset} ({reason})"
        );
    }
}

#[test]
fn a_missing_middle_segment_is_a_gap_error() {
    let dir = tempfile::tempdir().unwrap();
    log_of_small_segments(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    std::fs::remove_file(&segments[2].1).unwrap();
    let (file, _, reason) = corrupt(FileLog::open(dir.path(), small_segments()).unwrap_err());
    assert_eq!(file, segments[3].1);
    assert!(reason.contains("gap"), "{reason}");
}

#[test]
fn a_second_opener_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _log = open(dir.path(), small_segments());
    assert!(matches!(
        FileLog::open(dir.path(), small_segments()),
        Err(OpenError::Locked { .. })
    ));
}

/// The synced length the last clean close recorded (`synced.hint`, bytes 16..24).
fn hinted_synced_bytes(dir: &std::path::Path) -> u64 {
    let b = std::fs::read(dir.join("synced.hint")).unwrap();
    u64::from_le_bytes(b[16..24].try_into().unwrap())
}

#[test]
fn a_last_segment_zeroed_from_a_transaction_on_is_damage_not_a_clean_end() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(dir.path(), LogConfig::default());
        // Same-sized one-record transactions: their frames tile the segment evenly.
        for i in 0..100u64 {
            log.append_blocking(&put(&format!("n{:03}", i), 100 + i))
                .unwrap();
        }
    }
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    let (_, last) = segments.last().unwrap();
    let synced = hinted_synced_bytes(dir.path());
    let frame = (synced - 32) / 100;
    assert_eq!((synced - 32) % 100, 0, "frames of one size");
    // Everything from transaction 50 on reads back as zeros, as a lost extent would.
    let from = 32 + 50 * frame;
    let file = OpenOptions::new().write(true).open(last).unwrap();
    file.write_all_at(&vec![0u8; (synced - from) as usize], from)
        .unwrap();
    drop(file);
    for err in [
        FileLog::open(dir.path(), LogConfig::default()).unwrap_err(),
        spindle_log::inspect::inspect(dir.path()).unwrap_err(),
    ] {
        let (file, offset, reason) = corrupt(err);
        assert_eq!(&file, last);
        assert_eq!(offset, from, "{reason}");
        assert!(reason.contains("synced data is missing"), "{reason}");
    }
}

#[test]
fn a_missing_last_segment_the_hint_names_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    log_of_small_segments(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    assert!(segments.len() > 2);
    let (_, last) = segments.last().unwrap();
    std::fs::remove_file(last).unwrap();
    let (file, _, reason) = corrupt(FileLog::open(dir.path(), small_segments()).unwrap_err());
    assert_eq!(&file, last);
    assert!(reason.contains("missing"), "{reason}");
}

/// A segment whose name was damaged (a digit changed, or bytes that are not UTF-8) is not
/// left out of the log unseen: `open` and `inspect` refuse the directory naming the file,
/// and once the name is put right every record is there.
#[test]
fn a_segment_with_a_damaged_name_is_refused_not_left_out() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    log_of_small_segments(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    let (_, last) = segments.last().unwrap();
    let name = last.file_name().unwrap().as_bytes().to_vec();
    let mut letter = name.clone();
    letter[3] = b'O';
    let mut not_utf8 = name.clone();
    not_utf8[5] = 0xff;
    for damaged in [letter, not_utf8] {
        let moved = dir.path().join(std::ffi::OsStr::from_bytes(&damaged));
        std::fs::rename(last, &moved).unwrap();
        for err in [
            FileLog::open(dir.path(), small_segments()).unwrap_err(),
            spindle_log::inspect::inspect(dir.path()).unwrap_err(),
        ] {
            let (file, offset, reason) = corrupt(err);
            assert_eq!(offset, 0);
            assert!(reason.contains("not a file the log writes"), "{reason}");
            assert_eq!(file.parent(), Some(dir.path()));
        }
        std::fs::rename(&moved, last).unwrap();
    }
    let log = open(dir.path(), small_segments());
    assert_eq!(log.durable_index().get(), 600);
}
