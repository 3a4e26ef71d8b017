//! The entry sorter equals a stable `Vec::sort` of the same entries, in memory and when it
//! spills (small budgets, skewed keys, many equal keys, splits of buckets that do not fit),
//! and leaves no temporary files behind.
//!
//! More cases: `PROPTEST_CASES=2000 cargo test --release -p spindle-sort --test entries_model`.

use proptest::prelude::*;
use spindle_sort::entries::{EntrySortOptions, EntrySorter, SortStats, ENTRY_MEMORY_MIN_BYTES};

type Entry = (Vec<u8>, Vec<u8>);

/// Sorts with the sorter and returns its output and stats; checks the temporary directory
/// is empty afterwards.
fn sort(entries: &[Entry], memory_bytes: u64, threads: usize) -> (Vec<Entry>, SortStats) {
    let dir = tempfile::tempdir().unwrap();
    let mut sorter = EntrySorter::new(EntrySortOptions {
        memory_bytes,
        tmp_dir: dir.path().to_path_buf(),
        threads,
    })
    .unwrap();
    for (k, v) in entries {
        sorter.push(k, v).unwrap();
    }
    let sorted = sorter.finish().unwrap();
    let mut out = Vec::new();
    let mut sorted = sorted;
    for entry in sorted.by_ref() {
        out.push(entry.unwrap());
    }
    let stats = sorted.stats();
    drop(sorted);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    (out, stats)
}

/// The reference: a stable sort by key; values carry the push position so order among
/// equal keys is checked too.
fn reference(entries: &[Entry]) -> Vec<Entry> {
    let mut v = entries.to_vec();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Keys from a few shapes: short random, long with a shared prefix, or one of a handful
/// (many equal keys).
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..12),
        proptest::collection::vec(0u8..3, 9..20).prop_map(|tail| {
            let mut k = b"prefix/shared/".to_vec();
            k.extend(tail);
            k
        }),
        (0u8..4).prop_map(|b| vec![b; 5]),
    ]
}

fn entries(max: usize) -> impl Strategy<Value = Vec<Entry>> {
    proptest::collection::vec((key(), 0usize..48), 0..max).prop_map(|pairs| {
        pairs
            .into_iter()
            .enumerate()
            .map(|(i, (k, pad))| {
                let mut v = (i as u32).to_be_bytes().to_vec();
                v.resize(4 + pad, 0xAB);
                (k, v)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
    ))]

    #[test]
    fn equals_stable_vec_sort(entries in entries(3000), threads in 1usize..4) {
        let (out, stats) = sort(&entries, ENTRY_MEMORY_MIN_BYTES, threads);
        prop_assert_eq!(out, reference(&entries));
        prop_assert_eq!(stats.entries, entries.len() as u64);
        // Over ~16 KiB of entries the budget is exceeded, so the spill path is exercised.
        if entries.len() > 400 {
            prop_assert!(stats.bytes_spilled > 0, "{:?}", stats);
        }
    }
}

#[test]
fn parallel_in_memory_sort_is_stable() {
    // Enough entries for the chunked parallel sort and its merge; few distinct keys.
    let entries: Vec<Entry> = (0..150_000u32)
        .map(|i| {
            (
                (i.wrapping_mul(2654435761) % 97).to_be_bytes().to_vec(),
                i.to_be_bytes().to_vec(),
            )
        })
        .collect();
    let (out, stats) = sort(&entries, 64 << 20, 3);
    assert_eq!(stats.passes, 1);
    assert_eq!(out, reference(&entries));
}

#[test]
fn fits_in_memory_never_touches_disk() {
    let entries: Vec<Entry> = (0..500u32)
        .map(|i| {
            (
                (i.wrapping_mul(2654435761)).to_be_bytes().to_vec(),
                i.to_be_bytes().to_vec(),
            )
        })
        .collect();
    let (out, stats) = sort(&entries, 1 << 20, 2);
    assert_eq!(out, reference(&entries));
    assert_eq!((stats.bytes_spilled, stats.passes), (0, 1));
}

#[test]
fn larger_than_memory_spills_in_two_passes() {
    let entries: Vec<Entry> = (0..20_000u32)
        .map(|i| {
            (
                (i.wrapping_mul(2654435761)).to_be_bytes().to_vec(),
                vec![7; 20],
            )
        })
        .collect();
    let (out, stats) = sort(&entries, 256 << 10, 1);
    assert_eq!(out, reference(&entries));
    assert!(stats.bytes_spilled > 0);
    assert_eq!(
        stats.passes, 2,
        "evenly spread keys need no split: {stats:?}"
    );
}

#[test]
fn keys_longer_than_the_splitters_allowance_still_split() {
    // Keys of 1,500 bytes in a 16 KiB budget: between the splitters' allowance (1/16 of
    // the budget) and the largest entry (1/8); still at least one splitter per spill and
    // per split, so every split makes progress and the sort ends.
    let entries: Vec<Entry> = (0..400u32)
        .map(|i| {
            let mut key = vec![b'k'; 1500];
            key[..4].copy_from_slice(&i.wrapping_mul(2654435761).to_be_bytes());
            (key, i.to_be_bytes().to_vec())
        })
        .collect();
    let (out, stats) = sort(&entries, ENTRY_MEMORY_MIN_BYTES, 1);
    assert_eq!(out, reference(&entries));
    assert!(stats.bytes_spilled > 0, "{stats:?}");
}

#[test]
fn one_key_only_streams_in_push_order() {
    let entries: Vec<Entry> = (0..20_000u32)
        .map(|i| (b"same".to_vec(), i.to_be_bytes().to_vec()))
        .collect();
    let (out, _) = sort(&entries, ENTRY_MEMORY_MIN_BYTES, 2);
    assert_eq!(out, entries);
}

#[test]
fn skewed_late_keys_force_a_split() {
    // The sample (first memory-full) sees only high keys; everything after is low and
    // distinct, so the lowest bucket is far larger than memory and must be split again.
    let mut entries: Vec<Entry> = (0..300u32)
        .map(|i| (vec![0xFF, i as u8], vec![1; 8]))
        .collect();
    entries.extend((0..20_000u32).map(|i| {
        (
            i.wrapping_mul(2654435761).to_be_bytes().to_vec(),
            vec![2; 8],
        )
    }));
    let (out, stats) = sort(&entries, ENTRY_MEMORY_MIN_BYTES, 1);
    assert_eq!(out, reference(&entries));
    assert!(stats.passes > 2, "expected a split: {stats:?}");
}

#[test]
fn too_small_memory_and_too_large_entry_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |memory_bytes| EntrySortOptions {
        memory_bytes,
        tmp_dir: dir.path().to_path_buf(),
        threads: 1,
    };
    assert!(EntrySorter::new(opts(ENTRY_MEMORY_MIN_BYTES - 1)).is_err());
    let mut sorter = EntrySorter::new(opts(ENTRY_MEMORY_MIN_BYTES)).unwrap();
    let big = vec![0u8; ENTRY_MEMORY_MIN_BYTES as usize];
    assert!(sorter.push(b"k", &big).is_err());
}

#[test]
fn dropped_mid_output_removes_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut sorter = EntrySorter::new(EntrySortOptions {
        memory_bytes: ENTRY_MEMORY_MIN_BYTES,
        tmp_dir: dir.path().to_path_buf(),
        threads: 1,
    })
    .unwrap();
    for i in 0..5_000u32 {
        sorter
            .push(&i.wrapping_mul(2654435761).to_be_bytes(), b"value")
            .unwrap();
    }
    let mut sorted = sorter.finish().unwrap();
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_some(),
        "expected a spill"
    );
    sorted.next().unwrap().unwrap();
    drop(sorted);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// Keys that only rise, in push order (one item's versions in an import): a bucket that
/// does not fit is split by a sample taken across all of it, so each split divides it,
/// instead of shedding half a budget and rewriting the rest again and again.
#[test]
fn rising_keys_split_into_even_children() {
    let entries: Vec<Entry> = (0u64..20_000)
        .map(|i| {
            let mut k = b"hot".to_vec();
            k.extend_from_slice(&i.to_be_bytes());
            (k, i.to_le_bytes().to_vec())
        })
        .collect();
    let (out, rising) = sort(&entries, 64 << 10, 1);
    assert_eq!(out, reference(&entries));
    // The same entries pushed in a scrambled order: what splitting costs when the first
    // entries are a fair sample. Rising keys may cost one more split (the first spill's
    // splitters come from the first batch, all below the rest), not one per half budget
    // (a sample of each bucket's first entries cost 71 passes and 12 times the bytes).
    let mut scrambled = entries.clone();
    scrambled.sort_by_key(|(k, _)| {
        let i = u64::from_be_bytes(k[3..].try_into().unwrap());
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    });
    let (out, fair) = sort(&scrambled, 64 << 10, 1);
    assert_eq!(out.len(), entries.len());
    assert!(
        rising.passes <= fair.passes + 2 && rising.bytes_spilled <= fair.bytes_spilled * 2,
        "rising {rising:?}, scrambled {fair:?}"
    );
}
