//! Bad input gets a clear error and leaves no output and no temporary files: a length that
//! is not a whole number of records, a missing input, a memory budget too small, and a full
//! disk (a small tmpfs, mounted when running as root; skipped otherwise). And a disk with
//! room for the input's size but not twice it is enough: pass two removes each bucket as it
//! reads it.

use std::path::Path;
use std::process::Command;

use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{
    sort_file, IoMode, RecordSortOptions, RecordSortReport, RECORD_MEMORY_MIN_BYTES,
};
use spindle_sort::SortError;

fn opts(memory_bytes: u64) -> RecordSortOptions {
    RecordSortOptions {
        memory_bytes,
        tmp_dir: None,
        threads: 1,
        io: IoMode::Buffered,
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn bad_length_missing_input_and_tiny_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&inp, vec![7u8; 250]).unwrap();
    let e = sort_file(&inp, &out, &opts(64 << 20), &mut |_| {}).unwrap_err();
    assert!(matches!(e, SortError::BadLength { bytes: 250, .. }), "{e}");
    assert!(e
        .to_string()
        .contains("not a multiple of the 100-byte record"));

    let e = sort_file(
        &dir.path().join("absent"),
        &out,
        &opts(64 << 20),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, SortError::Input { .. }), "{e}");

    std::fs::write(&inp, vec![7u8; 1000]).unwrap();
    let e = sort_file(&inp, &out, &opts(RECORD_MEMORY_MIN_BYTES - 1), &mut |_| {}).unwrap_err();
    assert!(matches!(e, SortError::MemoryTooSmall { .. }), "{e}");
    assert_eq!(entries(dir.path()), ["in"]);
}

/// Mounts a tmpfs of `size` at `dir`; false if that is not possible here (not root).
fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Sorts the records `input` generates with 1 MiB of memory into a tmpfs of `size`, through
/// the page cache and with O_DIRECT (tmpfs takes it on Linux 6.6 and later); `after` looks at
/// each sort's result, the input and the tmpfs before the next sort. `None` where no tmpfs
/// can be mounted (not root).
fn sort_into_tmpfs<T>(
    size: &str,
    input: &GenOptions,
    mut after: impl FnMut(&Result<RecordSortReport, SortError>, &Path, &Path) -> T,
) -> Option<Vec<(IoMode, T)>> {
    let base = tempfile::tempdir().unwrap();
    let small = base.path().join("small");
    std::fs::create_dir(&small).unwrap();
    if !mount_tmpfs(&small, size) {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return None;
    }
    let inp = base.path().join("in");
    generate(&inp, input).unwrap();
    let mut results = Vec::new();
    for io in [IoMode::Buffered, IoMode::Auto] {
        let result = sort_file(
            &inp,
            &small.join("out"),
            &RecordSortOptions {
                io,
                ..opts(1 << 20)
            },
            &mut |_| {},
        );
        results.push((io, after(&result, &inp, &small)));
    }
    let _ = Command::new("umount").arg(&small).status();
    Some(results)
}

#[test]
fn full_disk_removes_temporary_files_and_says_how_much_space() {
    // Larger than memory: the buckets (4 MB) do not fit in 3 MiB.
    let Some(results) = sort_into_tmpfs("3m", &records(40_000, false, 9), |result, _, small| {
        let error = result.as_ref().err().map(|e| {
            let needed = match e {
                SortError::NoSpace { needed_bytes, .. } => Some(*needed_bytes),
                _ => None,
            };
            (e.to_string(), needed)
        });
        (error, entries(small))
    }) else {
        return;
    };
    for (io, (error, names)) in results {
        let (message, needed) = error.unwrap_or_else(|| panic!("{io:?}: it fit in 3 MiB"));
        let needed = needed.unwrap_or_else(|| panic!("{io:?}: not NoSpace: {message}"));
        // About the input's size: the input and one arena of the 1 MiB budget.
        assert!(
            (4_000_000..=5_000_000).contains(&needed),
            "{io:?}: {needed}"
        );
        assert!(
            message.contains(&format!("about {needed} bytes free")),
            "{io:?}: {message}"
        );
        assert!(names.is_empty(), "{io:?}: left behind: {names:?}");
    }
}

fn records(records: u64, skew: bool, seed: u64) -> GenOptions {
    GenOptions {
        records,
        ascii: false,
        skew,
        seed,
    }
}

#[test]
fn a_disk_with_room_for_less_than_twice_the_input_is_enough() {
    // 4 MB of records in 6 MiB: the buckets and the whole output (8 MB) never coexist.
    room_for_less_than_twice_is_enough("6m", &records(40_000, false, 11));
}

#[test]
fn a_skewed_sort_whose_buckets_are_split_again_fits_too() {
    // 40 MB of skewed records in 48 MiB: one-key buckets larger than an arena and buckets
    // split again (25 splits at this seed) each stay on disk while read, one at a time.
    let splits = room_for_less_than_twice_is_enough("48m", &records(400_000, true, 13));
    assert!(
        splits.iter().all(|&n| n > 0),
        "buckets split again: {splits:?}"
    );
}

/// Sorts `input` into a tmpfs of `size` in each I/O mode, checks each output, and returns
/// each sort's count of buckets split again (nothing where no tmpfs can be mounted).
fn room_for_less_than_twice_is_enough(size: &str, input: &GenOptions) -> Vec<usize> {
    let Some(results) = sort_into_tmpfs(size, input, |result, inp, small| {
        let out = small.join("out");
        let checked = result
            .as_ref()
            .map(|report| {
                (
                    (report.buckets, report.splits),
                    check_file(&out).unwrap(),
                    check_file(inp).unwrap(),
                )
            })
            .map_err(|e| e.to_string());
        let names = entries(small);
        let _ = std::fs::remove_file(&out);
        (checked, names)
    }) else {
        return Vec::new();
    };
    let mut splits = Vec::new();
    for (io, (checked, names)) in results {
        let ((buckets, split), sorted, original) =
            checked.unwrap_or_else(|e| panic!("{io:?}: {e}"));
        splits.push(split);
        assert!(buckets > 1, "{io:?}: an external sort");
        assert!(sorted.is_sorted(), "{io:?}: {sorted:?}");
        assert_eq!(sorted.records, input.records, "{io:?}");
        assert_eq!(
            sorted.checksum, original.checksum,
            "{io:?}: the same records"
        );
        assert_eq!(names, ["out"], "{io:?}: only the output is left");
    }
    splits
}
