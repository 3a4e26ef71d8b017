//! A full disk (a small tmpfs mounted by the test; needs root, skipped with a message
//! otherwise): appends are refused with an error that says the disk is full, everything
//! acknowledged stays readable, and once space is freed a reopened log takes appends again.

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
        AppendError::Failed { cause } => {
            assert!(cause.contains("No space left"), "unclear error: {cause}")
        }
        other => panic!("expected Failed, got {other}"),
    }
    println!("disk full after {} appends: {err}", acked.len());
    // Refused from now on, readable up to the last acknowledged append.
    assert!(log.append_blocking(&put("more", 1)).is_err());
    let last = *acked.last().unwrap();
    assert_eq!(log.durable_index(), last);
    assert_eq!(
        log.read(Index::FIRST, usize::MAX).unwrap().len() as u64,
        last.get()
    );
    drop(log);

    std::fs::remove_file(&filler).unwrap();
    let log = open(&dir, config);
    let records = log.read(Index::FIRST, usize::MAX).unwrap();
    assert!(
        records.len() as u64 >= last.get(),
        "acknowledged appends lost"
    );
    assert!(records[..last.get() as usize]
        .iter()
        .all(|r| r.value == value));
    let next = log.append_blocking(&put("after", 1)).unwrap();
    assert_eq!(next, log.durable_index());
}
