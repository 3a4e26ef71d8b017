//! Torn tails: cutting the last segment at any byte (or scribbling past the last sync)
//! recovers to the last whole transaction before the damage, reports the cut, zeroes what
//! follows, and appends continue at the next index.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use common::*;
use rand::{Rng, SeedableRng};
use spindle_core::Transaction;
use spindle_log::{Index, LogConfig};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

fn build(dir: &std::path::Path) -> (u64, Vec<u64>) {
    let log = open(dir, config());
    let mut commits = Vec::new();
    for i in 0..60u64 {
        let txn = Transaction::new()
            .write(node(&format!("a{i}")), obj(i))
            .write(node("b"), obj(i));
        commits.push(log.append_blocking(&txn).unwrap().get());
    }
    let used = spindle_log::inspect::inspect(dir).unwrap().segments[0].used_bytes;
    (used, commits)
}

#[test]
fn torn_tails_at_random_offsets_recover() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let (used, commits) = build(dir.path());
        // A torn tail comes from a crash, which leaves no clean-close hint.
        forget_clean_close(dir.path());
        let seg = spindle_log::segment::list_segments(dir.path()).unwrap()[0]
            .1
            .clone();
        let cut = rng.random_range(32..used);
        let file = OpenOptions::new().write(true).open(&seg).unwrap();
        if round % 2 == 0 {
            // Power cut: bytes past `cut` never reached the disk.
            file.write_all_at(&vec![0u8; (used - cut) as usize], cut)
                .unwrap();
        } else {
            // Torn sector: garbage past `cut`.
            let junk: Vec<u8> = (0..(used - cut)).map(|_| rng.random()).collect();
            file.write_all_at(&junk, cut).unwrap();
        }
        drop(file);

        let report = spindle_log::inspect::inspect(dir.path()).unwrap();
        let log = open(dir.path(), config());
        let last = log.durable_index().get();
        assert!(
            last == 0 || commits.contains(&last),
            "round {round}: cut mid-transaction at {last}"
        );
        assert_eq!(log.open_report().last_index.get(), last);
        if last < 120 {
            let torn = log
                .open_report()
                .torn_tail
                .clone()
                .expect("the cut is reported");
            assert!(
                torn.offset <= cut,
                "round {round}: kept bytes past the damage"
            );
            assert!(report.torn_tail.is_some(), "inspect reports it too");
        }
        let records = log.read(Index::FIRST, usize::MAX).unwrap();
        assert_eq!(records.len() as u64, last);
        let next = log.append_blocking(&put("after", 1)).unwrap();
        assert_eq!(next.get(), last + 1, "appends continue at the next index");
        drop(log);
        let log = open(dir.path(), config());
        assert_eq!(log.durable_index().get(), last + 1);
        assert!(
            log.open_report().torn_tail.is_none(),
            "round {round}: the cut left no stale frames"
        );
    }
}
