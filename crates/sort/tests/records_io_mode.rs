//! The sort's I/O modes: `Auto` uses O_DIRECT where the file system takes it and the page
//! cache where it refuses (a ramfs, mounted when running as root), `Direct` refuses such a
//! file system with an error that says so and leaves nothing behind, `Buffered` never uses
//! O_DIRECT; every mode sorts the same.

use std::path::Path;
use std::process::Command;

use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{sort_file, DirectReport, IoMode, RecordSortOptions};

fn opts(io: IoMode) -> RecordSortOptions {
    RecordSortOptions {
        memory_bytes: 1 << 20,
        tmp_dir: None,
        threads: 2,
        io,
    }
}

fn input(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("in");
    let g = GenOptions {
        records: 30_000,
        ascii: false,
        skew: false,
        seed: 11,
    };
    generate(&p, &g).unwrap();
    p
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

/// Whether `dir`'s file system takes O_DIRECT (what `Auto` should find).
fn takes_direct(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join("probe");
    let ok = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

#[test]
fn every_mode_sorts_the_same_and_reports_what_it_used() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let expected = check_file(&inp).unwrap();
    let direct_here = takes_direct(dir.path());
    for io in [IoMode::Auto, IoMode::Direct, IoMode::Buffered] {
        let out = dir.path().join("out");
        let result = sort_file(&inp, &out, &opts(io), &mut |_| {});
        if io == IoMode::Direct && !direct_here {
            let e = result.unwrap_err();
            assert!(e.to_string().contains("refuses O_DIRECT"), "{e}");
            continue;
        }
        let report = result.unwrap();
        let on = io != IoMode::Buffered && direct_here;
        assert_eq!(
            report.direct,
            DirectReport {
                input: on,
                buckets: on,
                output: on
            },
            "{io:?}"
        );
        let got = check_file(&out).unwrap();
        assert!(got.is_sorted(), "{io:?}");
        assert_eq!(
            (got.records, got.checksum),
            (expected.records, expected.checksum)
        );
        std::fs::remove_file(&out).unwrap();
        assert_eq!(names(dir.path()), ["in"], "{io:?}: temporary files left");
    }
}

/// Mounts a ramfs (no O_DIRECT) at `dir`; false if that is not possible here (not root).
fn mount_ramfs(dir: &Path) -> bool {
    Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn a_file_system_without_o_direct_falls_back_or_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let ram = base.path().join("ram");
    std::fs::create_dir(&ram).unwrap();
    if !mount_ramfs(&ram) {
        eprintln!("skipped: cannot mount a ramfs here (needs root)");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        assert!(!takes_direct(&ram), "ramfs took O_DIRECT");
        // The input on the disk, the buckets and the output on the ramfs.
        let inp = input(base.path());
        let expected = check_file(&inp).unwrap();
        let out = ram.join("out");
        let report = sort_file(&inp, &out, &opts(IoMode::Auto), &mut |_| {}).unwrap();
        let direct_input = takes_direct(base.path());
        assert_eq!(
            report.direct,
            DirectReport {
                input: direct_input,
                buckets: false,
                output: false
            }
        );
        let got = check_file(&out).unwrap();
        assert!(got.is_sorted());
        assert_eq!(
            (got.records, got.checksum),
            (expected.records, expected.checksum)
        );
        std::fs::remove_file(&out).unwrap();

        let e = sort_file(&inp, &out, &opts(IoMode::Direct), &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("refuses O_DIRECT"), "{e}");
        assert!(e.to_string().contains("drop --direct"), "{e}");
        assert!(names(&ram).is_empty(), "left behind: {:?}", names(&ram));
    });
    let _ = Command::new("umount").arg(&ram).status();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}
