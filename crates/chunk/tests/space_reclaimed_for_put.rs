//! A put refused for space is not refused while deleted chunks could make room: the records
//! of deleted chunks are rewritten away first, even where they sit in the volume being
//! appended to (which deletes alone never seal) or in sealed volumes the compaction policy
//! would leave alone. Without deleted chunks to reclaim, the refusal stands and writes
//! nothing.

mod common;

use spindle_chunk::{ChunkError, ChunkId, ChunkStore, CompactionPolicy, Options};

const LIMIT: u64 = 64 << 10;

/// Put chunks of `len` bytes until the store refuses one for space.
fn fill(store: &ChunkStore, first_seed: u64, len: usize) -> Vec<(u64, ChunkId)> {
    let mut stored = Vec::new();
    loop {
        let seed = first_seed + stored.len() as u64;
        match store.put(&common::chunk(seed, len)) {
            Ok(id) => stored.push((seed, id)),
            Err(ChunkError::SpaceExhausted { .. }) => return stored,
            Err(e) => panic!("{e}"),
        }
        assert!(stored.len() < 1000, "the limit was never hit");
    }
}

fn check_all(store: &ChunkStore, live: &[(u64, ChunkId)], len: usize) {
    for (seed, id) in live {
        assert_eq!(
            store.get(id).unwrap().as_deref(),
            Some(&common::chunk(*seed, len)[..])
        );
    }
    assert_eq!(store.len(), live.len());
}

fn reclaims(opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    let stored = fill(&store, 0, 3000);
    // Delete two thirds: their records are garbage, wherever they are.
    let mut live = Vec::new();
    for (i, (seed, id)) in stored.iter().enumerate() {
        if i % 3 == 0 {
            live.push((*seed, *id));
        } else {
            assert!(store.delete(id).unwrap());
        }
    }
    // The tombstones take space too: the store is still at its limit until it reclaims.
    let before = store.stats().compaction;
    let more = fill(&store, 10_000, 3000);
    assert!(
        more.len() >= stored.len() / 2,
        "deleting {} of {} chunks made room for only {} more",
        stored.len() - live.len(),
        stored.len(),
        more.len()
    );
    let after = store.stats().compaction;
    assert!(after.volumes > before.volumes, "{after:?}");
    assert!(store.used_bytes() <= LIMIT);
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    live.extend(more);
    check_all(&store, &live, 3000);
    store.close().unwrap();
    let on_disk = common::disk_bytes(dir.path());
    assert!(on_disk <= LIMIT, "{on_disk} bytes on disk after close");
    // What is durable is what was acknowledged: nothing deleted comes back.
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    check_all(&store, &live, 3000);
    assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
    let report = spindle_chunk::verify_store(dir.path()).unwrap();
    assert_eq!(report.live_bytes, store.stats().live_bytes);
}

/// Every chunk sits in the one volume being appended to: deletes never seal it.
#[test]
fn deleted_chunks_in_the_active_volume_make_room() {
    reclaims(Options {
        space_bytes_max: LIMIT,
        volume_bytes_max: 1 << 20,
        ..common::small_opts()
    });
}

/// Sealed volumes whose garbage the policy would leave alone, and background compaction off.
#[test]
fn deleted_chunks_below_the_compaction_policy_make_room() {
    reclaims(Options {
        space_bytes_max: LIMIT,
        compaction: CompactionPolicy {
            garbage_ratio_min: 0.99,
            garbage_bytes_min: 1 << 30,
        },
        ..common::small_opts()
    });
}

/// With several lanes, each active volume holds some of the deleted chunks.
#[test]
fn deleted_chunks_in_every_lane_make_room() {
    reclaims(Options {
        space_bytes_max: LIMIT,
        volume_bytes_max: 1 << 20,
        active_volumes: 3,
        compact_in_background: true,
        ..common::small_opts()
    });
}

/// Nothing deleted: the put is refused, writes nothing and seals nothing.
#[test]
fn nothing_to_reclaim_refuses_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        space_bytes_max: LIMIT,
        volume_bytes_max: 1 << 20,
        ..common::small_opts()
    };
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    let stored = fill(&store, 0, 3000);
    let files = common::volumes(dir.path());
    let bytes = common::disk_bytes(dir.path());
    let err = store.put(&common::chunk(99_999, 3000)).unwrap_err();
    assert!(matches!(err, ChunkError::SpaceExhausted { .. }), "{err}");
    assert_eq!(common::volumes(dir.path()), files);
    assert_eq!(common::disk_bytes(dir.path()), bytes);
    assert_eq!(store.stats().compaction, Default::default());
    check_all(&store, &stored, 3000);
}
