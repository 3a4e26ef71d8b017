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

/// A damaged hint of a sealed volume is not used: the volume is scanned, the hint written
/// anew, and the open report says which hint and why (the node logs it). A missing hint is
/// written too, but is not damage and is not reported.
#[test]
fn a_damaged_hint_is_rewritten_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    for s in 0..40 {
        store.put(&common::chunk(s, 1800)).unwrap();
    }
    store.close().unwrap();
    let volumes = common::volumes(dir.path());
    let (first, second) = (
        volumes[0].with_extension("hint"),
        volumes[1].with_extension("hint"),
    );
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[40] ^= 0x01;
    std::fs::write(&first, &bytes).unwrap();
    std::fs::remove_file(&second).unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let report = store.open_report();
    assert_eq!(report.volumes_scanned, 2);
    let [(hint, why)] = &report.rewritten_hints[..] else {
        panic!("one damaged hint: {:?}", report.rewritten_hints);
    };
    assert_eq!(hint, &first);
    assert!(why.contains("offset"), "{why}");
    assert_eq!(store.len(), 40);
    store.close().unwrap();
    assert!(second.exists(), "the missing hint was written");
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert!(store.open_report().rewritten_hints.is_empty());
    assert_eq!(store.open_report().volumes_scanned, 0);
}
