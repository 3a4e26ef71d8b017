//! A Disk View killed with SIGKILL while it applies the log reopens in a state that is
//! exactly the log up to its stored applied index (the versions of the transactions one
//! apply takes, the applied index and the checksum share one write batch, so the checksum
//! still matches the data and a replay's), then resumes and converges; over several
//! kill-and-reopen rounds.
//!
//! The test re-executes its own binary as the child (selected by an environment variable).
//! The child applies one to five transactions at a time and prints each applied index; the
//! parent kills it once it has seen enough of them, mid-stream.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::{follow, DiskView, IterRequest};

const CHILD_DIR_ENV: &str = "SPINDLE_VIEW_CRASH_CHILD_DIR";
const TEST_NAME: &str = "a_killed_view_reopens_at_a_transaction_boundary";
const APPLIES_BEFORE_KILL: usize = 300;
const ROUNDS: usize = 3;
const TXNS: u32 = 4000;

fn partition() -> Partition {
    Partition::nth(1, 2)
}

/// The child: apply one to five transactions (of two records each) at a time, forever
/// slower than the parent reads.
fn child(dir: &str) -> ! {
    let dir = std::path::Path::new(dir);
    let log = open_log(&dir.join("log"));
    let view = DiskView::open(dir.join("view"), partition()).unwrap();
    loop {
        let next = view.applied_index().next();
        if next > log.durable_index() {
            println!("DONE");
            std::process::exit(0);
        }
        let records = log.read(next, 2 * (1 + next.get() as usize % 5)).unwrap();
        let applied = view.apply(&records).unwrap();
        println!("APPLIED {applied}");
    }
}

fn assert_equals_replay(view: &DiskView, log: &spindle_log::FileLog) {
    let (frames, cut) = iterate_all(view, &IterRequest::range(view.partition()));
    assert_eq!(cut, view.applied_index());
    assert_eq!(
        frames_to_versions(&frames),
        replay(log, cut, view.partition())
    );
    // The stored checksum survived the kill with the versions it covers: it matches the
    // data and what a replay of the log to the same index gives, checkpoints included.
    let report = view.verify().unwrap();
    assert!(report.ok(), "{report:?}");
    let (sum, checkpoints) = checksum_by_replay(
        log,
        cut,
        view.partition(),
        spindle_view::checksum::CHECKPOINT_INTERVAL_INDEXES,
    );
    assert_eq!(view.checksum().applied, cut);
    assert_eq!(view.checksum().checksum, sum);
    assert_eq!(view.checkpoints(), checkpoints);
    assert_eq!(
        view.checkpoints().is_empty(),
        cut.get() < spindle_view::checksum::CHECKPOINT_INTERVAL_INDEXES
    );
}

#[test]
fn a_killed_view_reopens_at_a_transaction_boundary() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        child(&dir);
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open_log(&dir.path().join("log"));
        for n in 0..TXNS {
            let spec = vec![((n % 97) as u8, Some(n as u8)), ((n % 13) as u8 + 50, None)];
            log.append_blocking(&transaction(&spec)).unwrap();
        }
        log.close();
    }
    let mut last_applied = Index::ZERO;
    for _ in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut seen = 0;
        let mut reported = Index::ZERO;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            if let Some(n) = line.unwrap().strip_prefix("APPLIED ") {
                reported = Index::new(n.parse().unwrap());
                seen += 1;
                if seen == APPLIES_BEFORE_KILL {
                    break;
                }
            }
        }
        assert_eq!(seen, APPLIES_BEFORE_KILL, "child stopped early");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let log = open_log(&dir.path().join("log"));
        let view = DiskView::open(dir.path().join("view"), partition()).unwrap();
        // A process kill loses nothing RocksDB's WAL received, and keeps batches whole.
        assert!(
            view.applied_index() >= reported,
            "{} < {reported}",
            view.applied_index()
        );
        assert!(
            view.applied_index() > last_applied,
            "the view made progress"
        );
        last_applied = view.applied_index();
        assert_equals_replay(&view, &log);
        log.close();
    }
    let log = open_log(&dir.path().join("log"));
    let view = DiskView::open(dir.path().join("view"), partition()).unwrap();
    runtime().block_on(follow::catch_up(&view, &log)).unwrap();
    assert_eq!(view.applied_index(), log.durable_index());
    assert_equals_replay(&view, &log);
}
