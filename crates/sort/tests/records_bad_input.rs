//! Bad input gets a clear error and leaves no output and no temporary files: a length that
//! is not a whole number of records, a missing input, a memory budget too small, and a full
//! disk (a small tmpfs, mounted when running as root; skipped otherwise). And a disk with
//! room for the input's size but not twice it is enough: pass two removes each bucket as it
//! reads it.

mod common;

use std::path::Path;
use std::process::Command;

use common::names_in;

use spindle_sort::entries::{EntrySortOptions, EntrySorter, ENTRY_MEMORY_MIN_BYTES};
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
    assert_eq!(names_in(dir.path()), ["in"]);
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
        (error, names_in(small))
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

/// A mounted file system, unmounted when dropped (also when a test panics).
struct Mounted<'a>(&'a Path);

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

/// A tmpfs whose only inode is its root, mounted at `dir`: making a directory in it fails
/// with ENOSPC. `None` where that cannot be done here (not root, or another error).
fn mount_without_inodes(dir: &Path) -> Option<Mounted<'_>> {
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,nr_inodes=1", "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        return None;
    }
    let mounted = Mounted(dir);
    let probe = std::fs::create_dir(dir.join("probe"));
    if probe.as_ref().err().and_then(std::io::Error::raw_os_error) == Some(libc::ENOSPC) {
        return Some(mounted);
    }
    let _ = std::fs::remove_dir(dir.join("probe"));
    None
}

#[test]
fn a_full_disk_for_the_temporary_directory_says_how_much_space() {
    let base = tempfile::tempdir().unwrap();
    let full = base.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let Some(mounted) = mount_without_inodes(&full) else {
        eprintln!("skipped: cannot mount a tmpfs without free inodes here (needs root)");
        return;
    };
    let inp = base.path().join("in");
    generate(&inp, &records(40_000, false, 5)).unwrap();
    let mut outcomes = Vec::new();
    for io in [IoMode::Buffered, IoMode::Auto] {
        let result = sort_file(
            &inp,
            &base.path().join("out"),
            &RecordSortOptions {
                io,
                tmp_dir: Some(full.clone()),
                ..opts(1 << 20)
            },
            &mut |_| {},
        );
        outcomes.push((io, result.map(drop)));
    }
    // The entry sorter, spilling its first batch.
    let mut sorter = EntrySorter::new(EntrySortOptions {
        memory_bytes: ENTRY_MEMORY_MIN_BYTES,
        tmp_dir: full.clone(),
        threads: 1,
    })
    .unwrap();
    let spilled = (0u64..100_000)
        .map(|i| sorter.push(&i.to_be_bytes(), &[7; 64]))
        .find_map(Result::err);
    drop(sorter);
    let left = (names_in(base.path()), names_in(&full));
    drop(mounted);
    for (io, result) in outcomes {
        match result {
            Err(SortError::NoSpace { needed_bytes, .. }) => assert!(
                (4_000_000..=5_000_000).contains(&needed_bytes),
                "{io:?}: {needed_bytes}"
            ),
            other => panic!("{io:?}: {other:?}"),
        }
    }
    match spilled {
        Some(SortError::NoSpace { needed_bytes, .. }) => assert!(needed_bytes > 0),
        other => panic!("entry sorter: {other:?}"),
    }
    assert_eq!(left.0, ["full", "in"], "left beside the input");
    assert!(left.1.is_empty(), "left in the full tmpfs: {:?}", left.1);
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
        let names = names_in(small);
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

#[test]
fn an_input_written_to_during_the_sort_gives_an_error_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    // In memory (one read) and larger than memory (pass one reads it).
    for (records, memory) in [(2_000u64, 64u64 << 20), (40_000, 1 << 20)] {
        generate(&inp, &records_opts(records)).unwrap();
        let mut grown = false;
        let e = sort_file(&inp, &out, &opts(memory), &mut |_| {
            if !grown {
                // Another writer appends a record while the sort reads.
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().append(true).open(&inp).unwrap();
                f.write_all(&[b'z'; 100]).unwrap();
                grown = true;
            }
        })
        .unwrap_err();
        assert!(grown, "the sort reported no progress");
        assert!(
            matches!(e, SortError::InputModified { what: "length", .. }),
            "{records}: {e}"
        );
        assert!(
            e.to_string().contains("was modified during the sort"),
            "{e}"
        );
        assert_eq!(names_in(dir.path()), ["in"], "{records}: left behind");
    }
}

#[test]
fn inputs_that_are_not_files_and_outputs_that_cannot_be_written_are_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    generate(&inp, &records_opts(100)).unwrap();
    for not_a_file in [dir.path(), Path::new("/dev/null")] {
        let e = sort_file(not_a_file, &out, &opts(64 << 20), &mut |_| {}).unwrap_err();
        assert!(matches!(e, SortError::InputNotFile { .. }), "{e}");
    }
    std::fs::create_dir(dir.path().join("a-dir")).unwrap();
    for (bad, why) in [
        (dir.path().join("a-dir"), "it is a directory"),
        (
            dir.path().join("absent/out"),
            "its directory does not exist",
        ),
    ] {
        let e = sort_file(&inp, &bad, &opts(64 << 20), &mut |_| {}).unwrap_err();
        assert!(matches!(e, SortError::BadOutput { .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    assert_eq!(names_in(dir.path()), ["a-dir", "in"]);
}

#[test]
fn two_sorts_into_one_output_at_once_do_not_clobber_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let inputs: Vec<_> = (0..2u64)
        .map(|i| {
            let inp = dir.path().join(format!("in{i}"));
            generate(
                &inp,
                &GenOptions {
                    seed: 20 + i,
                    ..records_opts(30_000)
                },
            )
            .unwrap();
            inp
        })
        .collect();
    std::thread::scope(|s| {
        for inp in &inputs {
            let out = &out;
            s.spawn(move || sort_file(inp, out, &opts(1 << 20), &mut |_| {}).unwrap());
        }
    });
    // The output is one whole sort: of one input or the other, never a mix.
    let sorted = check_file(&out).unwrap();
    assert!(sorted.is_sorted());
    let sums: Vec<_> = inputs
        .iter()
        .map(|i| check_file(i).unwrap().checksum)
        .collect();
    assert!(sums.contains(&sorted.checksum), "a mix of both inputs");
    assert_eq!(names_in(dir.path()), ["in0", "in1", "out"]);
}

#[test]
fn generated_records_on_a_full_disk_leave_nothing_and_say_so() {
    let base = tempfile::tempdir().unwrap();
    let small = base.path().join("small");
    std::fs::create_dir(&small).unwrap();
    if !mount_tmpfs(&small, "1m") {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let e = generate(&small.join("in"), &records_opts(20_000)).unwrap_err();
    let names = names_in(&small);
    let _ = Command::new("umount").arg(&small).status();
    assert!(
        matches!(
            e,
            SortError::NoSpaceForRecords {
                needed_bytes: 2_000_000,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("the partial file was removed"),
        "{e}"
    );
    assert!(names.is_empty(), "left behind: {names:?}");
}

fn records_opts(records: u64) -> GenOptions {
    self::records(records, false, 5)
}
