//! Opening a cleanly closed store reads only hint files; a missing or stale hint makes open
//! scan that one volume and rebuild the same index.

mod common;

use spindle_chunk::ChunkStore;

#[test]
fn open_uses_hints_and_scans_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    for s in 0..40 {
        store.put(&common::chunk(s, 1800)).unwrap();
    }
    let mut keys = store.keys();
    keys.sort();
    let volumes = store.stats().volumes.len() as u32;
    assert!(volumes >= 3);
    store.close().unwrap();

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.open_report().volumes_from_hints, volumes);
    assert_eq!(store.open_report().volumes_scanned, 0);
    store.close().unwrap();

    let second = common::volumes(dir.path()).remove(1);
    std::fs::remove_file(second.with_extension("hint")).unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.open_report().volumes_scanned, 1);
    let mut again = store.keys();
    again.sort();
    assert_eq!(again, keys);
    assert!(
        second.with_extension("hint").exists(),
        "open rewrote the sealed volume's hint"
    );
}
