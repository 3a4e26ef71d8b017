//! With the writer held before its sync, a queued chunk is readable from the write buffer but
//! not yet listed as durable, and its put has not returned; puts beyond the write buffer's
//! bound wait outside it; a failed sync fails the waiting put and every later write until the
//! store is reopened; `has_durable` waits for a put in flight and is false if it fails.
//! (Needs `--features failpoints`.)

#![cfg(feature = "failpoints")]

mod common;

use spindle_chunk::{ChunkError, ChunkId, ChunkStore};

#[test]
fn buffered_gets_and_sticky_sync_failure() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let first = store.put(&common::chunk(1, 3000)).unwrap();

    // 1. Hold the writer before its sync: the put waits, the chunk is served from the buffer.
    fail::cfg("chunk-writer-before-sync", "pause").unwrap();
    let data = common::chunk(2, 3000);
    let id = ChunkId::of(&data);
    std::thread::scope(|s| {
        let putter = s.spawn(|| store.put(&data).unwrap());
        while !store.has(&id) {
            std::thread::yield_now(); // wait for the put to be queued (a condition, not a timer)
        }
        assert_eq!(
            store.get(&id).unwrap().as_deref(),
            Some(&data[..]),
            "served from the buffer"
        );
        assert!(
            !store.keys().contains(&id),
            "not listed before it is durable"
        );
        assert!(!putter.is_finished(), "a put returns only after its sync");
        // `has_durable` waits for the put in flight and answers once it is durable.
        let prober = s.spawn(|| {
            let held = store.has_durable(&id);
            (held, store.keys().contains(&id))
        });
        fail::cfg("chunk-writer-before-sync", "off").unwrap();
        assert_eq!(putter.join().unwrap(), id);
        assert_eq!(prober.join().unwrap(), (true, true), "(held, durable then)");
    });
    assert!(store.keys().contains(&id));

    // 2. The buffer bound: with syncs held, only as many records as fit are buffered; the
    //    other puts wait outside the buffer, and all finish once syncs resume.
    fail::cfg("chunk-writer-before-sync", "pause").unwrap();
    let chunks: Vec<Vec<u8>> = (100..120).map(|s| common::chunk(s, 8000)).collect();
    let record = 8000 + spindle_chunk::RECORD_HEADER_LEN;
    let fit = (common::small_opts().write_buffer_bytes_max / record) as usize;
    assert!(fit < chunks.len());
    std::thread::scope(|s| {
        let putters: Vec<_> = chunks
            .iter()
            .map(|c| s.spawn(|| store.put(c).unwrap()))
            .collect();
        let buffered = || chunks.iter().filter(|c| store.has(&ChunkId::of(c))).count();
        while buffered() < fit {
            std::thread::yield_now();
        }
        let stats = store.stats();
        assert_eq!(buffered(), fit, "no more than the bound is buffered");
        assert!(stats.write_buffer_bytes <= common::small_opts().write_buffer_bytes_max);
        assert!(putters.iter().all(|p| !p.is_finished()));
        fail::cfg("chunk-writer-before-sync", "off").unwrap();
        for p in putters {
            p.join().unwrap();
        }
    });
    assert!(chunks.iter().all(|c| store.has(&ChunkId::of(c))));
    assert_eq!(store.stats().write_buffer_bytes, 0);

    // 3. A failed sync is sticky; `has_durable` of a chunk whose put it failed is false
    //    (`has` counts the buffer, where the chunk was).
    fail::cfg("chunk-writer-before-sync", "pause").unwrap();
    let lost = common::chunk(3, 3000);
    let lost_id = ChunkId::of(&lost);
    std::thread::scope(|s| {
        let putter = s.spawn(|| store.put(&lost));
        while !store.has(&lost_id) {
            std::thread::yield_now();
        }
        let prober = s.spawn(|| store.has_durable(&lost_id));
        fail::cfg("chunk-writer-sync", "return").unwrap();
        fail::cfg("chunk-writer-before-sync", "off").unwrap();
        let err = putter.join().unwrap().unwrap_err();
        assert!(matches!(err, ChunkError::WriterFailed { .. }), "{err}");
        assert!(
            !prober.join().unwrap(),
            "a chunk whose put failed counted as held"
        );
    });
    fail::cfg("chunk-writer-sync", "off").unwrap();
    let err = store.put(&common::chunk(4, 3000)).unwrap_err();
    assert!(
        matches!(err, ChunkError::WriterFailed { .. }),
        "still failed: {err}"
    );
    assert!(matches!(
        store.delete(&first),
        Err(ChunkError::WriterFailed { .. })
    ));
    assert!(store.get(&first).unwrap().is_some(), "reads still work");
    assert!(store.close().is_err());

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert!(store.has(&first) && store.has(&id));
    store.put(&common::chunk(4, 3000)).unwrap();
    scenario.teardown();
}
