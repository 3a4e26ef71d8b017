//! A failed append or sync (EIO, ENOSPC; with half a record already in the file or none) is
//! sticky: the put is refused and its chunk is not readable afterwards (`has` and `get` say
//! no, as they will after a restart), later puts and deletes are refused, acknowledged chunks
//! stay readable; reopening cuts any half record as a torn tail, keeps every acknowledged
//! chunk and takes puts again. ENOSPC is reported as `disk_full`; a panic while writing is
//! a failure like the others. (Needs `--features failpoints`.)

#![cfg(feature = "failpoints")]

mod common;

use spindle_chunk::{ChunkError, ChunkId, ChunkStore, Options, RECORD_HEADER_LEN};

fn refused_write_is_sticky(failpoint: &str, action: &str, disk_full: bool, torn: bool) {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    // One lane, so the refused record goes to the newest volume.
    let opts = Options {
        active_volumes: 1,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    // Enough to fill more than one volume, so the failure lands in a later one.
    let acked: Vec<(ChunkId, Vec<u8>)> = (0..12)
        .map(|s| {
            let data = common::chunk(s, 1500 + s as usize * 100);
            (store.put(&data).unwrap(), data)
        })
        .collect();
    let deleted = acked[0].0;
    assert!(store.delete(&deleted).unwrap());
    let last_volume = common::volumes(dir.path()).pop().unwrap();
    let len_before = std::fs::metadata(&last_volume).unwrap().len();

    fail::cfg(failpoint, action).unwrap();
    let refused = common::chunk(999, 3000);
    let refused_id = ChunkId::of(&refused);
    match store.put(&refused) {
        Err(ChunkError::WriterFailed { disk_full: d, .. }) => assert_eq!(d, disk_full),
        other => panic!("expected WriterFailed, got {other:?}"),
    }
    fail::cfg(failpoint, "off").unwrap();

    assert!(!store.has(&refused_id), "a refused put is not listed");
    assert_eq!(store.get(&refused_id).unwrap(), None, "nor served");
    let err = store.put(&common::chunk(1000, 10)).unwrap_err();
    assert!(
        matches!(err, ChunkError::WriterFailed { .. }),
        "sticky: {err}"
    );
    assert_eq!(err.is_disk_full(), disk_full);
    assert!(matches!(
        store.delete(&acked[1].0),
        Err(ChunkError::WriterFailed { .. })
    ));
    for (id, data) in &acked[1..] {
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
    }
    assert!(!store.has(&deleted));
    assert!(store.close().is_err(), "close reports the failure");

    let len_after = std::fs::metadata(&last_volume).unwrap().len();
    let store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    match (store.open_report().torn_tails.first(), torn) {
        (Some((path, offset, bytes)), true) => {
            assert_eq!((path, *offset), (&last_volume, len_before));
            assert_eq!(*bytes, RECORD_HEADER_LEN / 2);
        }
        (None, false) => {}
        (other, _) => panic!("torn tail {other:?}, expected one: {torn}"),
    }
    for (id, data) in &acked[1..] {
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
    }
    assert!(!store.has(&deleted), "the acknowledged delete holds");
    // A sync that failed had written the bytes: the chunk may be there, but then whole.
    if let Some(got) = store.get(&refused_id).unwrap() {
        assert_eq!(got, refused);
        assert!(len_after > len_before && !torn);
    }
    store.put(&refused).unwrap();
    store.put(&common::chunk(1000, 10)).unwrap();
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    assert_eq!(store.get(&refused_id).unwrap(), Some(refused));
    drop(store);
    scenario.teardown();
}

#[test]
fn failed_append_writes_nothing() {
    refused_write_is_sticky("chunk-writer-append", "return", false, false);
}

#[test]
fn failed_append_leaves_half_a_record() {
    refused_write_is_sticky("chunk-writer-append", "return(torn)", false, true);
}

#[test]
fn enospc_on_append_is_disk_full() {
    refused_write_is_sticky("chunk-writer-append", "return(full)", true, false);
}

#[test]
fn failed_sync_is_not_served_afterwards() {
    refused_write_is_sticky("chunk-writer-sync", "return", false, false);
}

/// A panic while writing (a broken invariant) stops the writer as a failed write does: the
/// put gets `WriterFailed` instead of waiting forever for a writer that is gone, and the
/// store reopens with every acknowledged chunk.
#[test]
fn panic_while_appending_is_sticky() {
    refused_write_is_sticky("chunk-writer-append", "panic", false, false);
}

/// The same for a panic in a syncer (here, in its sync).
#[test]
fn panic_while_syncing_is_sticky() {
    refused_write_is_sticky("chunk-writer-sync", "panic", false, false);
}
