//! Per-item optimistic concurrency: a conflict names each failed condition and writes
//! nothing; conditions see versions across restart and across prefix truncation.

mod common;

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::{AppendError, FailedCondition, Index, LogConfig};

#[test]
fn conflicts_name_each_failed_condition_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    let a1 = log.append_blocking(&put("a", 1)).unwrap();
    let txn = Transaction::single(node("b"), obj(2))
        .condition(node("a"), Index::ZERO)
        .condition(node("c"), Index::new(7))
        .condition(node("d"), Index::ZERO);
    let err = log.append_blocking(&txn).unwrap_err();
    assert_eq!(
        err,
        AppendError::Conflict {
            failed: vec![
                FailedCondition {
                    key: node("a"),
                    expected: Index::ZERO,
                    actual: a1
                },
                FailedCondition {
                    key: node("c"),
                    expected: Index::new(7),
                    actual: Index::ZERO
                },
            ]
        }
    );
    assert!(err
        .to_string()
        .contains("node \"a\" expected version 0, is 1"));
    assert_eq!(log.durable_index(), a1);
    let ok = Transaction::single(node("b"), obj(3)).condition(node("a"), a1);
    assert_eq!(log.append_blocking(&ok).unwrap(), Index::new(2));
}

#[test]
fn versions_survive_restart_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = Index::ZERO;
    {
        let log = open(dir.path(), small_segments());
        for i in 0..200u64 {
            last = log
                .append_blocking(&put(&format!("k{}", i % 10), i))
                .unwrap();
        }
        let first = futures::executor::block_on(log.truncate_prefix(last)).unwrap();
        assert!(
            first > Index::new(100),
            "whole segments were deleted (first = {first})"
        );
    }
    let log = open(dir.path(), small_segments());
    // k9 was last written at index 200.
    let stale = Transaction::single(node("k9"), obj(0)).condition(node("k9"), Index::new(190));
    assert!(matches!(
        log.append_blocking(&stale),
        Err(AppendError::Conflict { .. })
    ));
    let fresh = Transaction::single(node("k9"), obj(0)).condition(node("k9"), last);
    assert_eq!(log.append_blocking(&fresh).unwrap(), last.next());
    // k0 was written at 191, which may itself be truncated: its version still counts.
    let k0 = Transaction::single(node("k0"), obj(0)).condition(node("k0"), Index::new(191));
    assert!(log.append_blocking(&k0).is_ok());
}

#[test]
fn one_submission_of_many_transactions_gets_one_outcome_each_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    let txns = vec![
        put("a", 1),                                                                // 1
        Transaction::new(),                                                         // bad input
        Transaction::single(node("b"), obj(2)).condition(node("a"), Index::ZERO),   // conflict
        Transaction::single(node("b"), obj(3)).condition(node("a"), Index::new(1)), // 2
        Transaction::new()
            .write(node("c"), obj(4))
            .write(node("d"), obj(5)), // 3..=4
    ];
    let results = futures::executor::block_on(log.append_many(&txns));
    assert_eq!(results.len(), 5);
    assert_eq!(results[0], Ok(Index::new(1)));
    assert!(matches!(results[1], Err(AppendError::Input(_))));
    assert!(matches!(results[2], Err(AppendError::Conflict { .. })));
    assert_eq!(results[3], Ok(Index::new(2)));
    assert_eq!(results[4], Ok(Index::new(4)));
    assert_eq!(log.read(Index::FIRST, 100).unwrap().len(), 4);
}

/// A submission larger than the intake bound is queued in parts, one after the other: each
/// transaction still gets its own outcome in order, and a condition sees the versions written
/// by transactions of an earlier part of the same call.
#[test]
fn a_submission_past_the_intake_bound_is_queued_in_parts_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        intake_bytes_max: spindle_log::config::TXN_FRAME_BYTES_MAX,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config);
    // About a third of the bound each: a part holds three or four of them.
    let pad = "x".repeat(900 << 10);
    let big = |id: &str, n: usize| {
        let mut txn = Transaction::new();
        for i in 0..3 {
            let value = Value::json(format!(r#"{{"n":{n},"i":{i},"pad":"{pad}"}}"#)).unwrap();
            txn = txn.write(node(&format!("{id}-{i}")), value);
        }
        txn
    };
    let mut txns = Vec::new();
    let mut expected = Vec::new();
    let mut next = 1u64;
    for n in 0..24 {
        let id = format!("k{}", n % 6);
        match n % 8 {
            // Bad input, in whichever part it falls.
            5 => {
                txns.push(Transaction::new());
                expected.push(None);
            }
            // A condition on what this call wrote six transactions before (an earlier part).
            7 => {
                let at = expected[n - 6].expect("written") + 2;
                txns.push(
                    big(&id, n).condition(node(&format!("k{}-2", (n - 6) % 6)), Index::new(at)),
                );
                expected.push(Some(next));
                next += 3;
            }
            _ => {
                txns.push(big(&id, n));
                expected.push(Some(next));
                next += 3;
            }
        }
    }
    // A stale condition: on the version of k1-2 that transaction 1 wrote, which later parts
    // of this call overwrote.
    let stale = Index::new(expected[1].expect("written") + 2);
    txns.push(Transaction::single(node("k1-2"), obj(0)).condition(node("k1-2"), stale));
    let results = futures::executor::block_on(log.append_many(&txns));
    assert_eq!(results.len(), txns.len());
    for (n, (got, want)) in results.iter().zip(&expected).enumerate() {
        match want {
            Some(first) => assert_eq!(*got, Ok(Index::new(first + 2)), "transaction {n}"),
            None => assert!(matches!(got, Err(AppendError::Input(_))), "transaction {n}"),
        }
    }
    assert!(
        matches!(results.last().unwrap(), Err(AppendError::Conflict { .. })),
        "{:?}",
        results.last()
    );
    assert_eq!(log.durable_index(), Index::new(next - 1));
}
