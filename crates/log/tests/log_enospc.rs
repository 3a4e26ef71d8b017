//! A full disk (a small tmpfs mounted by the test; needs root, skipped with a message
//! otherwise): an append that needs a new segment is refused with `NotWritten` saying the
//! disk is full, nothing of it written; the log does not fail, everything acknowledged stays
//! readable, and once space is freed the same log takes appends again at the next index, no
//! reopen, and a reopened one finds them all.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::{AppendError, Index, LogConfig};

/// Unmounts on drop, whatever the test did.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount_tmpfs(at: &Path, bytes: u64) -> Option<Mount> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        println!("SKIPPED: not root, cannot mount a small tmpfs");
        return None;
    }
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
        .arg("tmpfs")
        .arg(at)
        .status();
    match status {
        Ok(s) if s.success() => Some(Mount(at.to_path_buf())),
        other => {
            println!("SKIPPED: mounting a tmpfs failed: {other:?}");
            None
        }
    }
}

#[test]
fn a_full_disk_refuses_appends_keeps_what_was_acknowledged_and_recovers() {
    let root = tempfile::tempdir().unwrap();
    let Some(_mount) = mount_tmpfs(root.path(), 4 << 20) else {
        return;
    };
    let filler = root.path().join("filler");
    std::fs::write(&filler, vec![1u8; 2 << 20]).unwrap();
    let dir = root.path().join("log");
    let config = LogConfig {
        segment_bytes: 256 << 10,
        ..LogConfig::default()
    };
    let value = Value::json(format!("{{\"pad\":\"{}\"}}", "p".repeat(4000))).unwrap();
    let log = open(&dir, config.clone());
    let mut acked = Vec::new();
    let err = loop {
        let txn = Transaction::single(node(&format!("n{}", acked.len())), value.clone());
        match log.append_blocking(&txn) {
            Ok(i) => acked.push(i),
            Err(e) => break e,
        }
        assert!(acked.len() < 10_000, "the disk never filled");
    };
    match &err {
        AppendError::NotWritten { cause, disk_full } => {
            assert!(*disk_full, "not a full disk: {cause}");
            assert!(cause.contains("No space left"), "unclear error: {cause}");
        }
        other => panic!("expected NotWritten, got {other}"),
    }
    println!("disk full after {} appends: {err}", acked.len());
    assert_eq!(log.failure(), None, "a full disk failed the log");
    // Refused while the disk is full, readable up to the last acknowledged append.
    assert!(matches!(
        log.append_blocking(&Transaction::single(node("more"), value.clone())),
        Err(AppendError::NotWritten {
            disk_full: true,
            ..
        })
    ));
    let last = *acked.last().unwrap();
    assert_eq!(log.durable_index(), last);
    assert_eq!(
        log.read(Index::FIRST, usize::MAX).unwrap().len() as u64,
        last.get()
    );
    // Space freed: the same log goes on at the next index (nothing refused was written),
    // once its pause between tries to create a segment (about a second) has passed.
    std::fs::remove_file(&filler).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let next = loop {
        match log.append_blocking(&Transaction::single(node("after"), value.clone())) {
            Ok(index) => break index,
            Err(AppendError::NotWritten { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => panic!("appending after space was freed: {e}"),
        }
    };
    assert_eq!(next, last.next(), "a refused append took an index");
    drop(log);

    let log = open(&dir, config);
    let records = log.read(Index::FIRST, usize::MAX).unwrap();
    assert_eq!(
        records.len() as u64,
        next.get(),
        "acknowledged appends lost"
    );
    assert!(records.iter().all(|r| r.value == value));
    let again = log.append_blocking(&put("again", 1)).unwrap();
    assert_eq!(again, next.next());
    assert_eq!(again, log.durable_index());
}
