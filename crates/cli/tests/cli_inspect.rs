//! `spindle inspect` on a real log directory: an intact log and a torn tail exit 0 and say
//! so; a flipped byte in a sealed segment, or in the written part of the active segment of a
//! cleanly closed log, exits 1 naming the file and offset.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::process::Command;

use spindle_core::{ItemKey, Transaction, Value};
use spindle_log::{FileLog, LogConfig};

fn spindle() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
}

fn write_log(dir: &std::path::Path) {
    let log = FileLog::open(
        dir,
        LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        },
    )
    .unwrap();
    for i in 0..400 {
        let txn = Transaction::single(
            ItemKey::node(format!("n{i}")).unwrap(),
            Value::json("{\"a\":1}").unwrap(),
        );
        log.append_blocking(&txn).unwrap();
    }
}

#[test]
fn inspect_reports_intact_torn_and_corrupt_logs() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path());

    let out = spindle().arg("inspect").arg(dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("indexes 1..=400"), "{text}");
    assert!(text.contains("no torn tail"), "{text}");

    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    let (_, tail) = segments.last().unwrap();
    let used = spindle_log::inspect::inspect(dir.path())
        .unwrap()
        .segments
        .last()
        .unwrap()
        .used_bytes;
    // A torn tail comes from a crash, which leaves no clean-close hint.
    std::fs::remove_file(dir.path().join(spindle_log::hint::HINT_FILE)).unwrap();
    let f = OpenOptions::new().write(true).open(tail).unwrap();
    f.write_all_at(&[0xAB; 7], used - 5).unwrap();
    drop(f);
    let out = spindle()
        .args(["inspect", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["torn_tail"]["file"].as_str().unwrap(),
        tail.to_str().unwrap()
    );
    assert_eq!(v["last_index"], 399);

    let (_, sealed) = &segments[0];
    let f = OpenOptions::new().write(true).open(sealed).unwrap();
    f.write_all_at(&[0xFF], 60).unwrap();
    drop(f);
    let out = spindle().arg("inspect").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("CORRUPT") && err.contains(sealed.to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("offset"), "{err}");
}

#[test]
fn damage_in_the_active_segment_of_a_cleanly_closed_log_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path());
    let segments = spindle_log::segment::list_segments(dir.path()).unwrap();
    let (_, tail) = segments.last().unwrap();
    let f = OpenOptions::new().write(true).open(tail).unwrap();
    f.write_all_at(&[0xFF], 40).unwrap();
    drop(f);
    let before = std::fs::read(tail).unwrap();
    let out = spindle().arg("inspect").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("CORRUPT") && err.contains(tail.to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("not a torn tail"), "{err}");
    assert!(
        std::fs::read(tail).unwrap() == before,
        "inspect changes nothing"
    );
}
