//! Compaction moves live chunks out of garbage-heavy volumes while other threads keep
//! reading: every get during and after compaction returns the right bytes, deleted chunks
//! stay deleted, and the emptied volume files are gone.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use spindle_chunk::{ChunkId, ChunkStore};

#[test]
fn gets_run_through_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let ids: Vec<ChunkId> = (0..80)
        .map(|s| store.put(&common::chunk(s, 2500)).unwrap())
        .collect();
    let (dead, live): (Vec<_>, Vec<_>) = ids.iter().enumerate().partition(|(i, _)| i % 4 != 0);
    for (_, id) in &dead {
        assert!(store.delete(id).unwrap());
    }
    let volumes_before = common::volumes(dir.path());
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    // Read at least one full round, and keep reading until compaction is over.
                    while n < live.len() as u64 || !done.load(Ordering::Acquire) {
                        let (_, id) = live[n as usize % live.len()];
                        let data = store.get(id).unwrap().expect("live chunk readable");
                        assert_eq!(ChunkId::of(&data), *id);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let report = store.compact().unwrap();
        done.store(true, Ordering::Release);
        assert!(report.volumes.len() >= 2, "{report:?}");
        assert!(
            report.chunks_moved >= 1 && report.chunks_moved as usize <= live.len(),
            "{report:?}"
        );
        readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
    });
    assert!(reads >= live.len() as u64);
    for (_, id) in &live {
        assert_eq!(ChunkId::of(&store.get(id).unwrap().unwrap()), **id);
    }
    for (_, id) in &dead {
        assert!(store.get(id).unwrap().is_none());
    }
    let volumes_after = common::volumes(dir.path());
    assert!(
        volumes_after.len() < volumes_before.len(),
        "{volumes_before:?} -> {volumes_after:?}"
    );
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.len(), live.len());
}

/// With `compact_in_background`, deletes alone get the space back: the compactor is asked
/// before a delete returns, and `wait_for_background_compaction` waits for it.
#[test]
fn background_compaction_follows_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = spindle_chunk::Options {
        compact_in_background: true,
        active_volumes: 4,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    // Enough volumes that the active ones (one per lane, never compacted) hold a small part
    // of the garbage.
    let ids: Vec<ChunkId> = (0..160)
        .map(|s| store.put(&common::chunk(s, 2500)).unwrap())
        .collect();
    store.wait_for_background_compaction();
    let full = store.used_bytes();
    for id in &ids[..120] {
        store.delete(id).unwrap();
    }
    store.wait_for_background_compaction();
    let stats = store.stats();
    assert_eq!(stats.compaction_error, None);
    assert!(
        store.used_bytes() < full / 2,
        "{} of {full} bytes still used",
        store.used_bytes()
    );
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    for id in &ids[120..] {
        assert_eq!(ChunkId::of(&store.get(id).unwrap().unwrap()), *id);
    }
}
