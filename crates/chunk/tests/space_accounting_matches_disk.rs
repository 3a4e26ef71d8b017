//! `used_bytes` equals the bytes of the store's volume and hint files after puts, deletes,
//! compaction and reopen; a put past `space_bytes_max` fails with `SpaceExhausted` and writes
//! nothing; compaction gives the space of deleted chunks back, and its totals in `stats` say
//! what it did.

mod common;

use spindle_chunk::{ChunkError, ChunkStore, Options};

#[test]
fn used_bytes_match_files_through_deletes_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    let ids: Vec<_> = (0..60)
        .map(|s| {
            store
                .put(&common::chunk(s, 1000 + s as usize * 37))
                .unwrap()
        })
        .collect();
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    let before = store.used_bytes();
    for id in ids.iter().step_by(3).chain(ids.iter().skip(30)) {
        store.delete(id).unwrap();
    }
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    let stats = store.stats();
    assert_eq!(stats.used_bytes, store.used_bytes());
    assert!(stats.garbage_bytes > 0);
    assert_eq!(stats.compaction, Default::default(), "no compaction yet");
    let report = store.compact().unwrap();
    assert!(!report.volumes.is_empty());
    // The totals the status page shows are what the compactions did.
    let totals = store.stats().compaction;
    assert_eq!(totals.runs, 1);
    assert_eq!(totals.volumes, report.volumes.len() as u64);
    assert_eq!(totals.chunks_moved, report.chunks_moved);
    assert_eq!(totals.bytes_reclaimed, report.bytes_reclaimed);
    assert!(!store.stats().compacting);
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    assert!(store.used_bytes() < before, "compaction reclaimed space");
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    let inspected = spindle_chunk::verify_store(dir.path()).unwrap();
    assert_eq!(inspected.live_bytes, store.stats().live_bytes);
    assert_eq!(inspected.garbage_bytes, store.stats().garbage_bytes);
}

#[test]
fn put_past_space_limit_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        space_bytes_max: 40 << 10,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    let mut stored = Vec::new();
    let err = loop {
        match store.put(&common::chunk(stored.len() as u64, 4000)) {
            Ok(id) => stored.push(id),
            Err(e) => break e,
        }
        assert!(stored.len() < 100, "the limit was never hit");
    };
    assert!(
        matches!(err, ChunkError::SpaceExhausted { space_bytes_max, .. } if space_bytes_max == 40 << 10),
        "{err}"
    );
    let on_disk = common::disk_bytes(dir.path());
    assert_eq!(store.used_bytes(), on_disk);
    assert!(on_disk <= 40 << 10);
    assert!(store.put(&common::chunk(9999, 4000)).is_err());
    assert_eq!(
        common::disk_bytes(dir.path()),
        on_disk,
        "a refused put writes nothing"
    );
    // A chunk already stored is not a new put and needs no space.
    assert_eq!(store.put(&common::chunk(0, 4000)).unwrap(), stored[0]);
    store.close().unwrap();
    assert!(
        common::disk_bytes(dir.path()) <= 40 << 10,
        "hints written at close fit too"
    );
}
