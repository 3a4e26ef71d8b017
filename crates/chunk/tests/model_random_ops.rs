//! Random put/get/has/delete/compact/reopen sequences behave exactly like a `HashMap` of
//! chunk bytes, across volume seals, compactions and reopens, with 1 to 4 volumes appended
//! to at once (lanes) and reopens that change that number (a new generation of volumes).

mod common;

use std::collections::HashMap;

use proptest::prelude::*;
use spindle_chunk::{ChunkError, ChunkId, ChunkStore, Options};

#[derive(Debug, Clone)]
enum Op {
    Put {
        seed: u8,
        len: u16,
    },
    Get {
        seed: u8,
        len: u16,
    },
    Delete {
        seed: u8,
        len: u16,
    },
    Compact,
    /// Close and open again with this many lanes.
    Reopen(usize),
}

fn op() -> impl Strategy<Value = Op> {
    // A small pool of (seed, len) pairs so deletes and re-puts hit existing chunks.
    let seed = 0u8..24;
    let len = prop_oneof![Just(0u16), 1u16..64, 256u16..1500];
    prop_oneof![
        6 => (seed.clone(), len.clone()).prop_map(|(seed, len)| Op::Put { seed, len }),
        3 => (seed.clone(), len.clone()).prop_map(|(seed, len)| Op::Get { seed, len }),
        4 => (seed, len).prop_map(|(seed, len)| Op::Delete { seed, len }),
        1 => Just(Op::Compact),
        1 => (1usize..=4).prop_map(Op::Reopen),
    ]
}

/// The pool maps a seed to one fixed length so the same seed means the same chunk.
fn bytes(seed: u8, len: u16) -> Vec<u8> {
    let len = if seed.is_multiple_of(3) {
        0
    } else {
        usize::from(len) % 4096
    };
    common::chunk(u64::from(seed) + 1, len)
}

fn check_all(store: &ChunkStore, model: &HashMap<ChunkId, Vec<u8>>) {
    let mut keys = store.keys();
    keys.sort();
    let mut expect: Vec<ChunkId> = model.keys().copied().collect();
    expect.sort();
    assert_eq!(keys, expect);
    for (id, data) in model {
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
    }
    assert_eq!(store.used_bytes(), common::disk_bytes(store.dir()));
}

/// What the store checks a put against: its files, plus the hints its unsealed volumes
/// will need (docs/chunk-format.md, "Space").
fn committed_bytes(volumes: &[(u32, spindle_chunk::VolumeStats)]) -> u64 {
    use spindle_chunk::format::{HINT_ENTRY_LEN, HINT_HEADER_LEN, HINT_TRAILER_LEN};
    volumes
        .iter()
        .map(|(_, v)| {
            let hint =
                (HINT_HEADER_LEN + HINT_TRAILER_LEN) as u64 + v.records * HINT_ENTRY_LEN as u64;
            v.bytes + v.hint_bytes.max(hint)
        })
        .sum()
}

fn run(ops: Vec<Op>, mut opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
    let mut model: HashMap<ChunkId, Vec<u8>> = HashMap::new();
    let limit = opts.space_bytes_max;
    for op in ops {
        match op {
            Op::Put { seed, len } => {
                let data = bytes(seed, len);
                let used_before = store.used_bytes();
                // Both ways in: a borrowed slice (copied) and a handed-over buffer.
                let put = if seed % 2 == 0 {
                    store.put(&data)
                } else {
                    store.put_bytes(data.clone().into())
                };
                match put {
                    Ok(id) => {
                        assert_eq!(id, ChunkId::of(&data));
                        model.insert(id, data);
                    }
                    // Refused only past the space limit, and only once no volume holds a
                    // deleted chunk's record any more (the put reclaimed them all first),
                    // or when even all of them would not have made room.
                    Err(ChunkError::SpaceExhausted { needed_bytes, .. }) => {
                        assert!(limit < u64::MAX);
                        let volumes = store.stats().volumes;
                        let dead: u64 = volumes.iter().map(|(_, v)| v.dead_put_bytes()).sum();
                        let committed = committed_bytes(&volumes);
                        assert!(
                            dead == 0 || committed + needed_bytes > limit + dead,
                            "refused with {dead} dead bytes, {committed} committed, \
                             {needed_bytes} needed"
                        );
                        assert!(!model.contains_key(&ChunkId::of(&data)));
                        assert!(!store.has(&ChunkId::of(&data)));
                    }
                    Err(e) => panic!("{e}"),
                }
                // A put (and what it reclaims) never takes the store past its limit. (A reopen
                // that changes the number of lanes starts new volumes whatever the limit.)
                let used = store.used_bytes();
                assert!(
                    used <= limit.max(used_before),
                    "{used} used, {used_before} before"
                );
            }
            Op::Get { seed, len } => {
                let id = ChunkId::of(&bytes(seed, len));
                assert_eq!(store.get(&id).unwrap(), model.get(&id).cloned());
                assert_eq!(store.has(&id), model.contains_key(&id));
            }
            Op::Delete { seed, len } => {
                let id = ChunkId::of(&bytes(seed, len));
                assert_eq!(store.delete(&id).unwrap(), model.remove(&id).is_some());
            }
            Op::Compact => {
                store.compact().unwrap();
                check_all(&store, &model);
            }
            Op::Reopen(lanes) => {
                store.close().unwrap();
                opts.active_volumes = lanes;
                store = ChunkStore::open(dir.path(), opts.clone()).unwrap();
                assert_eq!(
                    store.open_report().volumes_scanned,
                    0,
                    "a clean close leaves hints"
                );
                check_all(&store, &model);
            }
        }
    }
    check_all(&store, &model);
    store.compact().unwrap();
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), opts).unwrap();
    check_all(&store, &model);
    let report = spindle_chunk::verify_store(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.chunks, model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_a_map(ops in proptest::collection::vec(op(), 1..120), lanes in 1usize..=4) {
        // Volumes of a few records each, so seals and compactions happen often.
        run(ops, Options {
            volume_bytes_max: 4 << 10,
            active_volumes: lanes,
            ..common::small_opts()
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The same under a space limit of a few volumes: puts past it are refused and write
    /// nothing, puts that deleted chunks make room for reclaim it first (sealing the volumes
    /// being appended to when they hold the dead records), and nothing else changes.
    #[test]
    fn store_matches_a_map_at_its_space_limit(
        ops in proptest::collection::vec(op(), 1..160),
        lanes in 1usize..=3,
        volumes in 1u64..=4,
    ) {
        run(ops, Options {
            volume_bytes_max: 4 << 10,
            space_bytes_max: volumes * (4 << 10) + 512,
            active_volumes: lanes,
            ..common::small_opts()
        });
    }
}

/// A tombstone must survive compaction while an older volume still holds the deleted put,
/// or the chunk would come back after a reopen.
#[test]
fn regression_tombstone_outlives_compaction_of_its_volume() {
    // Five 3000-byte chunks and one of 1000 fill volume 1. Deleting chunk 1 puts its tombstone in volume 2,
    // which then fills with chunks that are deleted too, and is sealed by two more puts.
    // Volume 2 is all garbage and is compacted; volume 1 (one dead chunk) is not, so the
    // tombstone must be carried forward. (Seeds divisible by 3 are empty chunks: skipped.)
    let put = |seed| Op::Put { seed, len: 3000 };
    let del = |seed| Op::Delete { seed, len: 3000 };
    let mut ops: Vec<Op> = [1, 2, 4, 5, 7].into_iter().map(put).collect();
    ops.push(Op::Put {
        seed: 19,
        len: 1000,
    }); // leaves volume 1 no room for a tombstone
    ops.push(del(1));
    ops.extend([8, 10, 11, 13, 14].into_iter().map(put));
    ops.extend([8, 10, 11, 13, 14].into_iter().map(del));
    ops.extend([16, 17].into_iter().map(put));
    ops.extend([Op::Compact, Op::Reopen(1), Op::Get { seed: 1, len: 3000 }]);
    run(ops, common::small_opts());
}
