//! Fault injection (feature `failpoints`): when only the sync of the output's directory
//! fails, after the rename, the sort (and `gen-records`) reports it as such — the output is
//! complete and kept, its name may not survive a power cut — and not as a failed write
//! whose files were removed.

#![cfg(feature = "failpoints")]

use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{sort_file, IoMode, RecordSortOptions};
use spindle_sort::SortError;

#[test]
fn a_failed_directory_sync_keeps_the_complete_output_and_says_so() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    let gen = GenOptions {
        records: 20_000,
        ascii: false,
        skew: false,
        seed: 3,
    };

    fail::cfg("sort::sync_output_dir", "return").unwrap();
    let e = generate(&inp, &gen).unwrap_err();
    assert!(matches!(e, SortError::OutputNotDurable { .. }), "{e}");
    assert!(e.to_string().contains("is complete"), "{e}");
    let input = check_file(&inp).unwrap();
    assert_eq!(input.records, 20_000);

    for memory in [64 << 20, 1 << 20] {
        let opts = RecordSortOptions {
            memory_bytes: memory,
            tmp_dir: None,
            threads: 2,
            io: IoMode::Buffered,
        };
        let e = sort_file(&inp, &out, &opts, &mut |_| {}).unwrap_err();
        assert!(matches!(e, SortError::OutputNotDurable { .. }), "{e}");
        assert!(e.to_string().contains("is complete"), "{e}");
        let sorted = check_file(&out).unwrap();
        assert_eq!(sorted.first_unsorted_offset, None);
        assert_eq!(
            (sorted.records, sorted.checksum),
            (input.records, input.checksum)
        );
        std::fs::remove_file(&out).unwrap();
    }
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["in"], "temporary files left");
    fail::remove("sort::sync_output_dir");
    scenario.teardown();
}
