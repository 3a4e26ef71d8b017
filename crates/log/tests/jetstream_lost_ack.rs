//! A batch whose acknowledgement is lost (failpoint `jetstream::ack_lost`) is resolved
//! against the stream: the append succeeds once, at its true index, with no duplicate
//! records, and the next append follows it.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod common;
mod nats_cluster;

use common::*;
use spindle_core::Transaction;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Index, Log};

#[test]
fn a_lost_ack_is_resolved_without_duplicates() {
    let scenario = fail::FailScenario::setup();
    let cluster = nats_cluster::Cluster::start(3);
    let log = JetStreamLog::open(cluster.config("LOSTACK")).unwrap();
    assert_eq!(log.append_blocking(&put("a", 1)).unwrap(), Index::new(1));

    fail::cfg("jetstream::ack_lost", "1*return").unwrap();
    let two = Transaction::new()
        .write(node("b"), obj(2))
        .write(node("c"), obj(3));
    assert_eq!(log.append_blocking(&two).unwrap(), Index::new(3));
    fail::cfg("jetstream::ack_lost", "2*return").unwrap();
    let cond = put("d", 4).condition(node("b"), Index::new(2));
    assert_eq!(log.append_blocking(&cond).unwrap(), Index::new(4));
    let again = put("e", 5).condition(node("d"), Index::new(4));
    assert_eq!(log.append_blocking(&again).unwrap(), Index::new(5));
    fail::remove("jetstream::ack_lost");

    assert_eq!(log.append_blocking(&put("f", 6)).unwrap(), Index::new(6));
    let records = futures::executor::block_on(log.read(Index::FIRST, usize::MAX)).unwrap();
    let keys: Vec<String> = records.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(keys.len(), 6, "duplicates or losses: {keys:?}");
    for (i, id) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
        assert_eq!(records[i].key, node(id));
        assert_eq!(records[i].index, Index::new(i as u64 + 1));
    }
    assert!(log.failure().is_none());
    futures::executor::block_on(log.close());
    scenario.teardown();
}
