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
