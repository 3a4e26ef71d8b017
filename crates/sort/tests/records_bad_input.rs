//! Bad input gets a clear error and leaves no output and no temporary files: a length that
//! is not a whole number of records, a missing input, a memory budget too small, and a full
//! disk (a small tmpfs, mounted when running as root; skipped otherwise). And a disk with
//! room for the input's size but not twice it is enough: pass two removes each bucket as it
//! reads it.

use std::path::Path;
use std::process::Command;

use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{sort_file, IoMode, RecordSortOptions, RECORD_MEMORY_MIN_BYTES};
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

#[test]
fn full_disk_removes_temporary_files_and_says_how_much_space() {
    let base = tempfile::tempdir().unwrap();
    let small = base.path().join("small");
    std::fs::create_dir(&small).unwrap();
    if !mount_tmpfs(&small, "3m") {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let inp = base.path().join("in");
    generate(
        &inp,
        &GenOptions {
            records: 40_000,
            ascii: false,
            skew: false,
            seed: 9,
        },
    )
    .unwrap();
    let out = small.join("out");
    // Larger than memory: the buckets (4 MB) do not fit in 3 MiB. Through the page cache and
    // with O_DIRECT (tmpfs takes it on Linux 6.6 and later).
    let mut results = Vec::new();
    for io in [IoMode::Buffered, IoMode::Auto] {
        let result = sort_file(
            &inp,
            &out,
            &RecordSortOptions {
                io,
                ..opts(1 << 20)
            },
            &mut |_| {},
        );
        results.push((io, result, entries(&small)));
    }
    let _ = Command::new("umount").arg(&small).status();
    for (io, result, names) in results {
        let e = result.unwrap_err();
        assert!(e.is_no_space(), "{io:?}: {e}");
        // About the input's size: the input and one arena of the 1 MiB budget.
        let SortError::NoSpace { needed_bytes, .. } = e else {
            unreachable!()
        };
        assert!(
            (4_000_000..=5_000_000).contains(&needed_bytes),
            "{io:?}: {needed_bytes}"
        );
        assert!(
            e.to_string()
                .contains(&format!("about {needed_bytes} bytes free")),
            "{io:?}: {e}"
        );
        assert!(names.is_empty(), "{io:?}: left behind: {names:?}");
    }
}

#[test]
fn a_disk_with_room_for_less_than_twice_the_input_is_enough() {
    let base = tempfile::tempdir().unwrap();
    let small = base.path().join("small");
    std::fs::create_dir(&small).unwrap();
    // 4 MB of records in 6 MiB: the buckets and the whole output (8 MB) never coexist.
    if !mount_tmpfs(&small, "6m") {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
    let inp = base.path().join("in");
    generate(
        &inp,
        &GenOptions {
            records: 40_000,
            ascii: false,
            skew: false,
            seed: 11,
        },
    )
    .unwrap();
    let out = small.join("out");
    let mut results = Vec::new();
    for io in [IoMode::Buffered, IoMode::Auto] {
        let result = sort_file(
            &inp,
            &out,
            &RecordSortOptions {
                io,
                ..opts(1 << 20)
            },
            &mut |_| {},
        );
        let check = result
            .as_ref()
            .ok()
            .map(|_| (check_file(&out).unwrap(), check_file(&inp).unwrap()));
        let names = entries(&small);
        let _ = std::fs::remove_file(&out);
        results.push((io, result, check, names));
    }
    let _ = Command::new("umount").arg(&small).status();
    for (io, result, check, names) in results {
        let report = result.unwrap_or_else(|e| panic!("{io:?}: {e}"));
        assert!(report.buckets > 1, "{io:?}: an external sort: {report:?}");
        let (sorted, input) = check.unwrap();
        assert!(sorted.is_sorted(), "{io:?}: {sorted:?}");
        assert_eq!(sorted.records, 40_000, "{io:?}");
        assert_eq!(sorted.checksum, input.checksum, "{io:?}: the same records");
        assert_eq!(names, ["out"], "{io:?}: only the output is left");
    }
}
