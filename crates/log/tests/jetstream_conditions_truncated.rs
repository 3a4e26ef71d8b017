//! Conditions on the JetStream log stay exact after the records that set an item's version
//! are purged: "absent" (0) is refused for an item whose last write was truncated away (a
//! per-subject mapping accepts it), its true version still holds, a deleted item still
//! counts as absent — in the running appender and in a new one rebuilt from the checkpoint.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use spindle_core::{Transaction, Value};
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{AppendError, FailedCondition, Index, Log};

fn create(id: &str, n: u64) -> Transaction {
    put(id, n).condition(node(id), Index::ZERO)
}

fn check(log: &JetStreamLog, live_at: Index, deleted_at: Index) {
    let before = log.durable_index();
    assert_eq!(
        log.append_blocking(&create("live", 9)),
        Err(AppendError::Conflict {
            failed: vec![FailedCondition {
                key: node("live"),
                expected: Index::ZERO,
                actual: live_at
            }]
        }),
        "absent was accepted for an item whose write was purged"
    );
    let stale = put("gone", 1).condition(node("gone"), Index::new(1));
    assert!(matches!(
        log.append_blocking(&stale),
        Err(AppendError::Conflict { .. })
    ));
    assert_eq!(log.durable_index(), before, "a conflict wrote");
    // Exact versions hold; checked with a failing condition so nothing is written.
    let exact = put("other", 1)
        .condition(node("live"), live_at)
        .condition(node("gone"), deleted_at)
        .condition(node("never"), Index::new(3));
    match log.append_blocking(&exact) {
        Err(AppendError::Conflict { failed }) => {
            assert_eq!(failed.len(), 1, "{failed:?}");
            assert_eq!(failed[0].key, node("never"));
        }
        other => panic!("expected one failed condition, got {other:?}"),
    }
}

#[test]
fn conditions_hold_across_purge_and_a_rebuilt_appender() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("TRUNC");
    let log = JetStreamLog::open(config.clone()).unwrap();
    let live_at = log.append_blocking(&create("live", 1)).unwrap();
    log.append_blocking(&create("gone", 2)).unwrap();
    let deleted_at = log
        .append_blocking(&Transaction::single(node("gone"), Value::TOMBSTONE))
        .unwrap();
    let mut last = Index::ZERO;
    for i in 0..20 {
        last = log
            .append_blocking(&put(&format!("k{}", i % 5), i))
            .unwrap();
    }
    let first = futures::executor::block_on(log.truncate_prefix(last)).unwrap();
    assert_eq!(first, last, "purge keeps exactly from `below`");
    assert_eq!(log.first_index(), last);
    assert!(matches!(
        futures::executor::block_on(log.read(Index::FIRST, 10)),
        Err(spindle_log::ReadError::Truncated { first: f }) if f == last
    ));
    check(&log, live_at, deleted_at);
    futures::executor::block_on(log.close());
    drop(log);

    let log = JetStreamLog::open(config).unwrap();
    assert_eq!(log.first_index(), last);
    check(&log, live_at, deleted_at);
    let recreated = log.append_blocking(&create("gone", 3)).unwrap();
    assert_eq!(recreated, last.next());
    let next = put("live", 4).condition(node("live"), live_at);
    assert_eq!(log.append_blocking(&next).unwrap(), recreated.next());
}
