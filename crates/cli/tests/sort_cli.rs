//! `spindle gen-records`, `spindle sort` and `spindle sort --check` work end to end: a
//! larger-than-memory sort passes the check, an unsorted file makes `--check` exit 1, and a
//! bad input leaves no OUTPUT.

use std::process::Command;

fn spindle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
}

#[test]
fn generate_sort_check() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    let ok = spindle()
        .args(["gen-records", "--records", "50000", "--skew"])
        .arg(&inp)
        .status()
        .unwrap();
    assert!(ok.success());
    let unsorted = spindle()
        .args(["sort", "--check"])
        .arg(&inp)
        .output()
        .unwrap();
    assert_eq!(unsorted.status.code(), Some(1));
    let sort = spindle()
        .args(["sort", "--memory", "1MiB", "--threads", "2"])
        .arg(&inp)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        sort.status.success(),
        "{}",
        String::from_utf8_lossy(&sort.stderr)
    );
    assert!(String::from_utf8_lossy(&sort.stdout).contains("in 2 passes"));
    let check = spindle()
        .args(["sort", "--check"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(check.status.success());
    let text = String::from_utf8_lossy(&check.stdout);
    let sum = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("checksum"))
            .map(str::to_owned)
    };
    assert_eq!(sum(&text), sum(&String::from_utf8_lossy(&unsorted.stdout)));
}

#[test]
fn bad_length_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&inp, vec![1u8; 150]).unwrap();
    let r = spindle().arg("sort").arg(&inp).arg(&out).output().unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("not a multiple of the 100-byte record"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A sort stopped by SIGINT or SIGTERM in its first pass removes its bucket directory and
/// its temporary output, leaves no OUTPUT, and exits as the signal's shell code says.
#[test]
fn a_sort_stopped_by_a_signal_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in");
    // 1,000,000 records (100 MB), sorted with 8 MiB: an external sort of many buckets.
    let ok = spindle()
        .args(["gen-records", "--records", "1000000"])
        .arg(&inp)
        .status()
        .unwrap();
    assert!(ok.success());
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        let tmp = dir.path().join(format!("tmp-{signal}"));
        std::fs::create_dir(&tmp).unwrap();
        let out = dir.path().join(format!("out-{signal}"));
        let mut child = spindle()
            .args([
                "sort",
                "--memory",
                "8MiB",
                "--threads",
                "1",
                "--buffered",
                "--tmp",
            ])
            .arg(&tmp)
            .arg(&inp)
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until bucket files exist.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let has_buckets = || {
            std::fs::read_dir(&tmp).unwrap().any(|e| {
                let e = e.unwrap();
                e.file_type().unwrap().is_dir()
                    && std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_some())
            })
        };
        while !has_buckets() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the sort ended before it wrote buckets"
            );
            assert!(std::time::Instant::now() < deadline, "no bucket files");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let killed = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let done = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains("temporary files removed"), "{stderr}");
        let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
        assert!(left.is_empty(), "left in --tmp: {left:?}");
        let beside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("spindle-sort") || n.starts_with("out"))
            .collect();
        assert!(beside.is_empty(), "left beside OUTPUT: {beside:?}");
    }
}
