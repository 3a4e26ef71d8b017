//! An appender leads its stream from the server it is connected to: opened through a 3-node
//! cluster's servers 0, 1, 2 and 0 in turn (so the leader must move at least three times;
//! the first open creates the stream), the stream's leader is there when the open returns,
//! before the first append, and appends, reads and conditions are as before.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{AppendError, Index};

#[test]
fn the_leader_follows_the_appender() {
    let cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("PLACED");
    // The move is best effort within its time; here it must be seen, on a loaded machine too.
    config.leader_move_wait = std::time::Duration::from_secs(30);
    let mut written = 0u64;
    let mut led_by = None;
    for (round, i) in [0, 1, 2, 0].into_iter().enumerate() {
        let log = JetStreamLog::open(nats_cluster::through(&cluster, &config, i)).unwrap();
        let here = log.client().server_info().server_name;
        assert_eq!(here, cluster.nodes[i].name);
        let now = nats_cluster::stream_leader_name(&log.client(), "PLACED");
        assert_eq!(now, here, "opened through {here}, led by {led_by:?} before");
        led_by = Some(now);
        let mut txn = put(&format!("n{round}"), round as u64);
        if round > 0 {
            // Conditioned on the previous open's item at its index: the table rebuilt
            // around the move sees it.
            txn = txn.condition(node(&format!("n{}", round - 1)), Index::new(written));
        }
        written += 1;
        assert_eq!(log.append_blocking(&txn).unwrap(), Index::new(written));
        let stale = put("x", 0).condition(node(&format!("n{round}")), Index::new(written - 1));
        assert!(matches!(
            log.append_blocking(&stale),
            Err(AppendError::Conflict { .. })
        ));
        futures::executor::block_on(log.close());
    }
    let reader = JetStreamLog::open_reader(config).unwrap();
    let records = reader.read_blocking(Index::FIRST, 100).unwrap();
    assert_eq!(records.len() as u64, written);
}
