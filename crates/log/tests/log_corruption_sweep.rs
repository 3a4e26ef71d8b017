//! A flipped byte anywhere in a small, cleanly closed log (sealed and active segments, their
//! preallocated space, the version checkpoint, the synced-length hint) is reported by `open`
//! and by `inspect` with the file and an offset at or before the flip, and a changed record is
//! never served. The only flips that open accepts are in the active segment's preallocated
//! zeros past the synced end, where no record lies: those are reported as a torn tail (file
//! and offset) and zeroed.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use spindle_core::{Record, Transaction};
use spindle_log::fs::Fs;
use spindle_log::sim_fs::SimFs;
use spindle_log::{FileLog, Index, LogConfig, OpenError};

const DIR: &str = "/sim/log";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        unsynced_bytes_max: 4096,
        ..LogConfig::default()
    }
}

/// Build the log; returns its files and every retained record.
fn build() -> (Vec<(PathBuf, Vec<u8>)>, Vec<Record>) {
    let sim = SimFs::new(0);
    let fs: Arc<dyn Fs> = Arc::new(sim.clone());
    let dir = Path::new(DIR);
    let log = FileLog::open_in(fs.clone(), dir, config()).unwrap();
    for i in 0..200u64 {
        let txn = Transaction::new()
            .write(node(&format!("n{}", i % 20)), obj(i))
            .write(node("hub"), obj(i));
        log.append_blocking(&txn).unwrap();
        if i == 100 {
            futures::executor::block_on(log.truncate_prefix(Index::new(150))).unwrap();
        }
    }
    let records = log.read(log.first_index(), usize::MAX).unwrap();
    drop(log);
    let mut files = Vec::new();
    let mut names = fs.list(dir).unwrap();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let bytes = sim.contents(&path).unwrap();
        if !bytes.is_empty() {
            files.push((path, bytes));
        }
    }
    (files, records)
}

fn disk(files: &[(PathBuf, Vec<u8>)], damaged: usize, at: usize) -> Arc<dyn Fs> {
    let fs = SimFs::new(1);
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).unwrap();
    for (i, (path, bytes)) in files.iter().enumerate() {
        let mut bytes = bytes.clone();
        if i == damaged {
            bytes[at] ^= 1 << (at % 8);
        }
        let f = fs.create(path).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        f.sync_all().unwrap();
    }
    fs.sync_dir(dir).unwrap();
    Arc::new(fs)
}

/// How one flip was handled.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Corrupt,
    TornPadding,
}

fn check_corrupt(err: OpenError, file: &Path, at: usize, who: &str) -> Outcome {
    match err {
        OpenError::Corrupt {
            file: f,
            offset,
            reason,
        } => {
            assert_eq!(
                f,
                file,
                "{who}: flip at {at} of {}: {reason}",
                file.display()
            );
            assert!(
                offset <= at as u64,
                "{who}: flip at {at} of {} reported at {offset}: {reason}",
                file.display()
            );
            Outcome::Corrupt
        }
        other => panic!("{who}: flip at {at} of {}: {other}", file.display()),
    }
}

#[test]
fn every_flipped_byte_is_reported_with_file_and_offset() {
    let (files, records) = build();
    let segments = files
        .iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "seg"));
    assert!(segments.count() >= 3, "several segments");
    assert!(files.iter().any(|(p, _)| p.ends_with("versions.ckpt")));
    assert!(files.iter().any(|(p, _)| p.ends_with("synced.hint")));
    let (mut tried, mut corrupt, mut torn) = (0u64, 0u64, 0u64);
    for (i, (path, bytes)) in files.iter().enumerate() {
        for at in 0..bytes.len() {
            tried += 1;
            let fs = disk(&files, i, at);
            let inspected = spindle_log::inspect::inspect_in(&*fs, Path::new(DIR));
            let outcome = match FileLog::open_in(fs.clone(), DIR, config()) {
                Err(e) => {
                    let from_inspect = check_corrupt(
                        inspected.expect_err("inspect agrees with open"),
                        path,
                        at,
                        "inspect",
                    );
                    assert_eq!(from_inspect, check_corrupt(e, path, at, "open"));
                    Outcome::Corrupt
                }
                Ok(log) => {
                    let report = inspected.expect("inspect agrees with open");
                    let served = log.read(log.first_index(), usize::MAX).unwrap();
                    assert_eq!(served, records, "flip at {at} of {}", path.display());
                    let cut = log.open_report().torn_tail.clone().unwrap_or_else(|| {
                        panic!("flip at {at} of {} went unreported", path.display())
                    });
                    assert_eq!(&cut.file, path);
                    assert!(cut.offset <= at as u64);
                    assert!(report.torn_tail.is_some());
                    assert!(
                        Some(path)
                            == files
                                .iter()
                                .rev()
                                .find(|(p, _)| p.extension().is_some_and(|e| e == "seg"))
                                .map(|(p, _)| p),
                        "only the active segment has a tail to cut"
                    );
                    Outcome::TornPadding
                }
            };
            match outcome {
                Outcome::Corrupt => corrupt += 1,
                Outcome::TornPadding => torn += 1,
            }
        }
    }
    println!(
        "corruption sweep: {tried} offsets in {} files; {corrupt} reported as corruption \
         ({:.1}%), {torn} in the active segment's zeros past the synced end, reported as a \
         torn tail and zeroed ({:.1}%); changed records served: 0",
        files.len(),
        100.0 * corrupt as f64 / tried as f64,
        100.0 * torn as f64 / tried as f64,
    );
    assert_eq!(corrupt + torn, tried);
}
