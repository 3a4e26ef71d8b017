//! A torn write at the end of the last volume (cut short, garbage appended, header half
//! written) is cut on open: every whole record before it survives, the store takes new puts,
//! and `verify_store` reports the tear as a torn tail, not corruption. The same damage in a
//! sealed volume, or inside bytes a hint file says were synced, is an error that names the
//! volume and offset.

mod common;

use std::fs::OpenOptions;
use std::io::Write;

use spindle_chunk::{
    verify_store, ChunkError, ChunkId, ChunkStore, VolumeStatus, RECORD_HEADER_LEN,
};

/// Put `n` chunks into a fresh store and close it; returns the ids in put order.
fn fill(dir: &std::path::Path, n: u64) -> Vec<ChunkId> {
    let store = ChunkStore::open(dir, common::small_opts()).unwrap();
    let ids = (0..n)
        .map(|s| store.put(&common::chunk(s, 1500)).unwrap())
        .collect();
    store.close().unwrap();
    ids
}

fn last_volume(dir: &std::path::Path) -> std::path::PathBuf {
    common::volumes(dir).pop().unwrap()
}

fn check_tail_is_cut(damage: impl Fn(&std::path::Path, u64)) {
    let dir = tempfile::tempdir().unwrap();
    let ids = fill(dir.path(), 24);
    let path = last_volume(dir.path());
    // A process that dies leaves no hint for its active volume: only a clean close writes one.
    std::fs::remove_file(path.with_extension("hint")).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    damage(&path, len);
    let report = verify_store(dir.path()).unwrap();
    assert!(report.is_ok(), "a torn tail is not corruption: {report:?}");
    let last = report.volumes.last().unwrap();
    assert!(
        matches!(last.status, VolumeStatus::TornTail { .. }),
        "{:?}",
        last.status
    );

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let [(cut_path, _, cut_bytes)] = &store.open_report().torn_tails[..] else {
        panic!("one cut: {:?}", store.open_report());
    };
    let cut_bytes = *cut_bytes;
    assert_eq!(*cut_path, path);
    assert!(cut_bytes > 0);
    let lost: Vec<&ChunkId> = ids.iter().filter(|id| !store.has(id)).collect();
    assert!(
        lost.len() <= 1,
        "only the torn record may be lost: {lost:?}"
    );
    for id in ids.iter().filter(|id| store.has(id)) {
        assert_eq!(ChunkId::of(&store.get(id).unwrap().unwrap()), *id);
    }
    let fresh = store.put(&common::chunk(1000, 700)).unwrap();
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert!(store.open_report().torn_tails.is_empty());
    assert!(store.has(&fresh));
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    drop(store);
    assert!(verify_store(dir.path()).unwrap().is_ok());
}

#[test]
fn last_record_cut_short_is_cut() {
    check_tail_is_cut(|path, len| {
        let f = OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(len - 100).unwrap();
    });
}

#[test]
fn garbage_after_the_last_record_is_cut() {
    check_tail_is_cut(|path, _| {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(&common::chunk(77, 3000)).unwrap();
    });
}

#[test]
fn half_written_header_is_cut() {
    check_tail_is_cut(|path, _| {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(&b"CHNK\x01\0\0\0"[..]).unwrap();
    });
}

#[test]
fn zeroes_after_the_last_record_are_cut() {
    check_tail_is_cut(|path, len| {
        let f = OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(len + 4096).unwrap();
    });
}

#[test]
fn damage_in_a_sealed_volume_without_hint_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 24);
    let first = common::volumes(dir.path()).remove(0);
    std::fs::remove_file(first.with_extension("hint")).unwrap();
    let f = OpenOptions::new().write(true).open(&first).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - RECORD_HEADER_LEN).unwrap();
    drop(f);
    match ChunkStore::open(dir.path(), common::small_opts()) {
        Err(ChunkError::Corrupt { volume, offset, .. }) => {
            assert_eq!(volume, first);
            assert!(offset > 0 && offset < len);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let report = verify_store(dir.path()).unwrap();
    assert!(!report.is_ok());
}

#[test]
fn cut_inside_bytes_a_hint_covers_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 24);
    let path = last_volume(dir.path());
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 100).unwrap();
    drop(f);
    match ChunkStore::open(dir.path(), common::small_opts()) {
        Err(ChunkError::Corrupt { volume, offset, .. }) => {
            assert_eq!(volume, path);
            assert!(offset <= len - 100, "{offset}");
        }
        other => panic!("synced bytes lost must not be cut silently: {other:?}"),
    }
    assert!(!verify_store(dir.path()).unwrap().is_ok());
}

/// A byte flipped in an acknowledged record of the last volume, after a crash (no hint),
/// with intact records more than the volume's unsynced window after it: that record had
/// been synced, so it is damage, not a torn tail. Nothing is cut, and `verify_store` agrees.
#[test]
fn damage_a_window_before_intact_records_is_not_cut_as_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let opts = spindle_chunk::Options {
        volume_bytes_max: 4 << 20,
        write_buffer_bytes_max: 64 << 10,
        chunk_bytes_max: 8 << 10,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    for s in 0..100 {
        store.put(&common::chunk(s, 4096)).unwrap();
    }
    store.close().unwrap();
    let path = last_volume(dir.path());
    std::fs::remove_file(path.with_extension("hint")).unwrap();
    let len_before = std::fs::metadata(&path).unwrap().len();
    // Inside the data of the sixth record: about 25 KB in, 380 KB of records after it.
    let victim = 64 + 5 * (RECORD_HEADER_LEN + 4096) + RECORD_HEADER_LEN + 100;
    {
        use std::os::unix::fs::FileExt;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, victim).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], victim).unwrap();
    }
    match ChunkStore::open(dir.path(), opts.clone()) {
        Err(ChunkError::Corrupt {
            volume,
            offset,
            reason,
        }) => {
            assert_eq!(volume, path);
            assert!(
                offset < victim && victim < offset + 4200,
                "{offset}: {reason}"
            );
            assert!(reason.contains("not a torn tail"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        len_before,
        "nothing was cut"
    );
    let report = verify_store(dir.path()).unwrap();
    assert!(!report.is_ok(), "verify calls it damage too: {report:?}");
    assert!(matches!(
        report.volumes.last().unwrap().status,
        VolumeStatus::Corrupt { .. }
    ));
}

/// A volume shorter than its hint says was synced, even cut at a record boundary (so its
/// records scan clean), has lost synced records: open refuses it, sealed or the last of its
/// lane, and leaves the hint that proves the loss.
#[test]
fn a_volume_shorter_than_its_hint_is_damage() {
    for which in ["sealed", "last"] {
        let dir = tempfile::tempdir().unwrap();
        fill(dir.path(), 24);
        let volumes = common::volumes(dir.path());
        assert!(volumes.len() > 2, "{volumes:?}");
        let path = match which {
            "sealed" => volumes[0].clone(),
            _ => volumes.last().unwrap().clone(),
        };
        let hint = std::fs::read(path.with_extension("hint")).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        // Drop the volume's last record: `fill` puts 1500-byte chunks.
        let cut = len - (RECORD_HEADER_LEN + 1500);
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        match ChunkStore::open(dir.path(), common::small_opts()) {
            Err(ChunkError::Corrupt {
                volume,
                offset,
                reason,
            }) => {
                assert_eq!((volume, offset), (path.clone(), cut), "{which}: {reason}");
                assert!(reason.contains("synced records are missing"), "{reason}");
            }
            other => panic!("{which}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(path.with_extension("hint")).unwrap(),
            hint,
            "{which}: the hint is kept"
        );
        let report = verify_store(dir.path()).unwrap();
        assert!(!report.is_ok(), "{which}: inspect agrees with open");
    }
}
