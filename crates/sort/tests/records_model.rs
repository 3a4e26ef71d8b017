//! `sort_file` equals a reference sort of the same records, in memory and in two passes
//! (skewed keys, all keys equal, buckets that must be split again, ASCII and binary), and
//! leaves no temporary files.
//!
//! More cases: `PROPTEST_CASES=200 cargo test --release -p spindle-sort --test records_model`.

use std::path::Path;

use proptest::prelude::*;
use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{
    sort_file, IoMode, RecordSortOptions, RecordSortReport, KEY_BYTES, RECORD_BYTES,
};

fn sort(
    dir: &Path,
    input: &[u8],
    memory_bytes: u64,
    threads: usize,
    io: IoMode,
) -> (Vec<u8>, RecordSortReport) {
    let (inp, out) = (dir.join("in"), dir.join("out"));
    std::fs::write(&inp, input).unwrap();
    let opts = RecordSortOptions {
        memory_bytes,
        tmp_dir: None,
        threads,
        io,
    };
    let report = sort_file(&inp, &out, &opts, &mut |_| {}).unwrap();
    let sorted = std::fs::read(&out).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["in", "out"], "temporary files left");
    (sorted, report)
}

/// Checks `out` is `input` sorted by key (equal keys in any order).
fn assert_sorted_permutation(input: &[u8], out: &[u8]) {
    assert_eq!(input.len(), out.len());
    let keys: Vec<&[u8]> = out.chunks(RECORD_BYTES).map(|r| &r[..KEY_BYTES]).collect();
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "output not sorted by key"
    );
    let mut a: Vec<&[u8]> = input.chunks(RECORD_BYTES).collect();
    let mut b: Vec<&[u8]> = out.chunks(RECORD_BYTES).collect();
    a.sort();
    b.sort();
    assert!(a == b, "output is not a permutation of the input");
}

fn generated(dir: &Path, records: u64, ascii: bool, skew: bool, seed: u64) -> Vec<u8> {
    let p = dir.join("gen");
    generate(
        &p,
        &GenOptions {
            records,
            ascii,
            skew,
            seed,
        },
    )
    .unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    bytes
}

#[test]
fn in_memory_is_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let input = generated(dir.path(), 20_000, false, false, 1);
    for io in [IoMode::Auto, IoMode::Buffered] {
        let (out, report) = sort(dir.path(), &input, 64 << 20, 2, io);
        assert_sorted_permutation(&input, &out);
        assert_eq!(report.passes, 1);
    }
}

#[test]
fn larger_than_memory_is_two_passes_binary_and_ascii() {
    for (ascii, io) in [(false, IoMode::Auto), (true, IoMode::Buffered)] {
        let dir = tempfile::tempdir().unwrap();
        let input = generated(dir.path(), 60_000, ascii, false, 2);
        let (out, report) = sort(dir.path(), &input, 1 << 20, 2, io);
        assert_sorted_permutation(&input, &out);
        assert_eq!(report.passes, 2, "{report:?}");
        assert!(report.buckets > 1);
        if ascii {
            assert!(out.chunks(RECORD_BYTES).all(|r| r.ends_with(b"\r\n")));
        }
    }
}

#[test]
fn skewed_keys_larger_than_memory() {
    let dir = tempfile::tempdir().unwrap();
    let input = generated(dir.path(), 60_000, false, true, 3);
    let (out, report) = sort(dir.path(), &input, 1 << 20, 1, IoMode::Auto);
    assert_sorted_permutation(&input, &out);
    assert!(report.passes >= 2);
}

#[test]
fn all_keys_equal_larger_than_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = generated(dir.path(), 40_000, false, false, 4);
    for r in input.chunks_mut(RECORD_BYTES) {
        r[..KEY_BYTES].copy_from_slice(b"samesame!!");
    }
    let (out, report) = sort(dir.path(), &input, 1 << 20, 2, IoMode::Auto);
    assert_sorted_permutation(&input, &out);
    assert_eq!(
        report.passes, 2,
        "one-key buckets are copied, never split: {report:?}"
    );
}

#[test]
fn narrow_key_range_larger_than_memory() {
    // Most records share their first 8 key bytes: the sampler must place its splitters
    // inside that narrow range (the last two bytes) for the buckets to fit.
    let dir = tempfile::tempdir().unwrap();
    let mut input = generated(dir.path(), 60_000, false, false, 5);
    for (i, r) in input.chunks_mut(RECORD_BYTES).enumerate() {
        if i % 8 != 0 {
            r[..8].copy_from_slice(b"\x80narrow!");
        }
    }
    let (out, report) = sort(dir.path(), &input, 1 << 20, 2, IoMode::Auto);
    assert_sorted_permutation(&input, &out);
    assert_eq!(
        check_file(&dir.path().join("out"))
            .unwrap()
            .first_unsorted_offset,
        None
    );
    assert!(report.buckets > 8, "{report:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(12)
    ))]

    #[test]
    fn equals_reference(
        records in 0u64..30_000, skew: bool, ascii: bool, seed: u64, small: bool, cached: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let input = generated(dir.path(), records, ascii, skew, seed);
        let memory = if small { 1 << 20 } else { 16 << 20 };
        let io = if cached { IoMode::Buffered } else { IoMode::Auto };
        let (out, _) = sort(dir.path(), &input, memory, 2, io);
        assert_sorted_permutation(&input, &out);
    }
}
