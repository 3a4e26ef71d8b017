//! The checker reports count, duplicates and an order-independent checksum equal for an
//! input and its sorted output, and catches an unsorted file and a changed record.

use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{sort_file, IoMode, RecordSortOptions, RECORD_BYTES};

#[test]
fn sorted_output_matches_input_and_changes_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    generate(
        &inp,
        &GenOptions {
            records: 10_000,
            ascii: true,
            skew: true,
            seed: 11,
        },
    )
    .unwrap();
    let before = check_file(&inp).unwrap();
    assert!(!before.is_sorted(), "random input should not be sorted");
    let opts = RecordSortOptions {
        memory_bytes: 1 << 20,
        tmp_dir: None,
        threads: 2,
        io: IoMode::Buffered,
    };
    sort_file(&inp, &out, &opts, &mut |_| {}).unwrap();
    let after = check_file(&out).unwrap();
    assert!(after.is_sorted());
    assert_eq!(
        (after.records, after.checksum),
        (before.records, before.checksum)
    );
    assert!(after.duplicate_keys > 0, "skewed input has repeated keys");

    // One changed byte outside the key: still sorted, different checksum.
    let mut bytes = std::fs::read(&out).unwrap();
    bytes[5 * RECORD_BYTES + 50] ^= 1;
    std::fs::write(&out, &bytes).unwrap();
    let changed = check_file(&out).unwrap();
    assert!(changed.is_sorted());
    assert_ne!(changed.checksum, before.checksum);

    // Two records swapped: the first out-of-order record is found at its offset.
    let mut bytes = std::fs::read(&out).unwrap();
    let i = 5000 * RECORD_BYTES;
    let (a, b) = bytes.split_at_mut(i);
    let last = &mut a[i - RECORD_BYTES..];
    // Make record 4999 larger than record 5000 by giving it the maximum key.
    last[..10].fill(0x7E);
    let _ = b;
    std::fs::write(&out, &bytes).unwrap();
    let r = check_file(&out).unwrap();
    assert_eq!(r.first_unsorted_offset, Some(i as u64));
}

/// A pipe has no length to check its records against: `check_file` refuses it as not a
/// regular file (a FIFO's length reads 0, and reading it whole first would report it
/// "changed" after all).
#[test]
fn a_pipe_is_refused_as_not_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // A writer, so that opening the FIFO for reading does not wait for ever.
    let path = fifo.clone();
    let writer =
        std::thread::spawn(move || drop(std::fs::OpenOptions::new().write(true).open(path)));
    let err = check_file(&fifo).unwrap_err();
    assert!(
        matches!(err, spindle_sort::SortError::InputNotFile { .. }),
        "{err}"
    );
    writer.join().unwrap();
}
