//! A deleted item does not exist for conditions: "version 0" holds for it (so it can be
//! re-created), its delete's index still names it exactly, and a live item's 0-condition
//! fails — in the running log, after reopen (scan) and after truncation (checkpoint).

mod common;

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::{AppendError, FileLog, Index};

/// "Create `id` unless it exists."
fn create(id: &str, n: u64) -> Transaction {
    put(id, n).condition(node(id), Index::ZERO)
}

fn delete(id: &str) -> Transaction {
    Transaction::single(node(id), Value::TOMBSTONE)
}

fn conflict(log: &FileLog, txn: &Transaction) -> Vec<(Index, Index)> {
    match log.append_blocking(txn) {
        Err(AppendError::Conflict { failed }) => {
            failed.iter().map(|f| (f.expected, f.actual)).collect()
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}

/// Items "gone" (deleted at the returned index) and "live" (written at the returned index).
fn setup(log: &FileLog) -> (Index, Index) {
    log.append_blocking(&create("gone", 1)).unwrap();
    let deleted_at = log.append_blocking(&delete("gone")).unwrap();
    let live_at = log.append_blocking(&create("live", 2)).unwrap();
    (deleted_at, live_at)
}

/// Check the semantics against a log where `setup` ran; leaves the log as it was.
fn check(log: &FileLog, deleted_at: Index, live_at: Index) {
    let before = log.durable_index();
    assert_eq!(
        conflict(log, &create("live", 3)),
        vec![(Index::ZERO, live_at)]
    );
    let stale = put("gone", 4).condition(node("gone"), Index::new(1));
    assert_eq!(conflict(log, &stale), vec![(Index::new(1), deleted_at)]);
    assert_eq!(log.durable_index(), before, "a conflict wrote");
    // Both "absent" and the delete's exact index hold for a deleted item; checked together
    // with a failing condition so that nothing is written.
    let both = put("other", 5)
        .condition(node("gone"), Index::ZERO)
        .condition(node("live"), Index::ZERO);
    assert_eq!(conflict(log, &both), vec![(Index::ZERO, live_at)]);
    let exact = put("other", 5)
        .condition(node("gone"), deleted_at)
        .condition(node("live"), Index::ZERO);
    assert_eq!(conflict(log, &exact), vec![(Index::ZERO, live_at)]);
}

#[test]
fn a_deleted_item_can_be_created_again_under_version_zero() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    let (deleted_at, live_at) = setup(&log);
    check(&log, deleted_at, live_at);
    let recreated = log.append_blocking(&create("gone", 6)).unwrap();
    assert_eq!(
        conflict(&log, &create("gone", 7)),
        vec![(Index::ZERO, recreated)]
    );
}

#[test]
fn deletes_are_remembered_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (deleted_at, live_at) = {
        let log = open(dir.path(), small_segments());
        let ids = setup(&log);
        log.close();
        ids
    };
    let log = open(dir.path(), small_segments());
    check(&log, deleted_at, live_at);
    log.append_blocking(&create("gone", 6)).unwrap();
}

#[test]
fn deletes_are_remembered_across_truncation_and_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (deleted_at, live_at) = {
        let log = open(dir.path(), small_segments());
        let ids = setup(&log);
        // Push the setup records into deleted segments, so only the checkpoint knows them.
        let mut last = Index::ZERO;
        for i in 0..200u64 {
            last = log
                .append_blocking(&put(&format!("k{}", i % 10), i))
                .unwrap();
        }
        let first = futures::executor::block_on(log.truncate_prefix(last)).unwrap();
        assert!(
            first > ids.1,
            "the setup records were not truncated (first = {first})"
        );
        log.close();
        ids
    };
    let log = open(dir.path(), small_segments());
    check(&log, deleted_at, live_at);
    log.append_blocking(&create("gone", 6)).unwrap();
}
