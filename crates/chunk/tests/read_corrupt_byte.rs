//! A flipped byte in a chunk's bytes or record header is detected on read: `get` returns
//! `Corrupt` naming the volume and the record's offset, never other bytes, with or without
//! BLAKE3 verification; `verify_store` reports the same volume and offset.

mod common;

use std::os::unix::fs::FileExt;

use spindle_chunk::{
    verify_store, ChunkError, ChunkId, ChunkStore, VolumeStatus, RECORD_HEADER_LEN,
    VOLUME_HEADER_LEN,
};

fn flip_and_read(byte_in_record: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let first = store.put(&common::chunk(1, 2000)).unwrap();
    let second = store.put(&common::chunk(2, 2000)).unwrap();
    store.close().unwrap();

    // The second record starts right after the first.
    let record = VOLUME_HEADER_LEN + RECORD_HEADER_LEN + 2000;
    let path = common::volumes(dir.path()).remove(0);
    common::flip_byte(&path, record + byte_in_record, 0x10);

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(
        store.open_report().volumes_scanned,
        0,
        "opened from hints, no scan"
    );
    assert_eq!(ChunkId::of(&store.get(&first).unwrap().unwrap()), first);
    for verify in [true, false] {
        match store.get_with(&second, verify) {
            Err(ChunkError::Corrupt { volume, offset, .. }) => {
                assert_eq!((volume, offset), (path.clone(), record), "verify {verify}");
            }
            other => panic!("expected Corrupt (verify {verify}), got {other:?}"),
        }
    }
    drop(store);
    let report = verify_store(dir.path()).unwrap();
    assert!(!report.is_ok());
    // The volume's hint says these bytes were synced, so this is corruption, not a tear.
    match &report.volumes[0].status {
        VolumeStatus::Corrupt { offset, .. } => assert_eq!(*offset, record),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Opening scans the volume when its hint is gone; the hint-less last volume's damage then
    // looks like a torn tail, which is why hints are kept after a clean close.
}

#[test]
fn flipped_data_byte_is_detected() {
    flip_and_read(RECORD_HEADER_LEN + 1234);
}

#[test]
fn flipped_header_byte_is_detected() {
    flip_and_read(20);
}

/// With a matching hint, verification goes past the first damaged record and reports every
/// damaged one, while counting the healthy chunks after them as live.
#[test]
fn verify_reports_every_damaged_record_through_the_hint() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let ids: Vec<ChunkId> = (0..5)
        .map(|s| store.put(&common::chunk(s, 1000)).unwrap())
        .collect();
    store.close().unwrap();
    let record = RECORD_HEADER_LEN + 1000;
    let path = common::volumes(dir.path()).remove(0);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for i in [1u64, 3] {
        let at = VOLUME_HEADER_LEN + i * record + RECORD_HEADER_LEN + 10;
        f.write_all_at(&[0xAA, 0x55], at).unwrap();
    }
    drop(f);
    let report = verify_store(dir.path()).unwrap();
    assert!(!report.is_ok());
    let damaged: Vec<u64> = report.volumes[0].damaged.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        damaged,
        vec![VOLUME_HEADER_LEN + record, VOLUME_HEADER_LEN + 3 * record]
    );
    assert_eq!(
        report.chunks,
        ids.len() as u64,
        "records after the damage are counted"
    );
}

/// A volume whose name was damaged is not left out unseen (its chunks lost, its hint
/// removed as an orphan): open and `verify_store` refuse the directory naming the file,
/// and once the name is put right every chunk is there.
#[test]
fn a_volume_with_a_damaged_name_is_refused_not_left_out() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let ids: Vec<ChunkId> = (0..4)
        .map(|i| store.put(&common::chunk(i, 3000)).unwrap())
        .collect();
    store.close().unwrap();
    let volume = common::volumes(dir.path()).remove(0);
    let name = volume.file_name().unwrap().as_bytes().to_vec();
    let mut letter = name.clone();
    letter[2] = b'O';
    let mut not_utf8 = name;
    not_utf8[4] = 0xfe;
    for damaged in [letter, not_utf8] {
        let moved = dir.path().join(std::ffi::OsStr::from_bytes(&damaged));
        std::fs::rename(&volume, &moved).unwrap();
        let opened = ChunkStore::open(dir.path(), common::small_opts()).map(|_| ());
        for err in [opened.unwrap_err(), verify_store(dir.path()).unwrap_err()] {
            match err {
                ChunkError::Corrupt { volume, reason, .. } => {
                    assert!(
                        reason.contains("not a file the chunk store writes"),
                        "{reason}"
                    );
                    assert_eq!(volume.parent(), Some(dir.path()));
                }
                other => panic!("expected Corrupt, got {other:?}"),
            }
        }
        std::fs::rename(&moved, &volume).unwrap();
    }
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            store.get(id).unwrap().unwrap(),
            common::chunk(i as u64, 3000)
        );
    }
}
