//! An appender leads its stream from the server it is connected to: opened through each of
//! a 3-node cluster's servers in turn (so the leader must move three times), the stream's
//! leader is there by the first append, and appends, reads and conditions are as before. With
//! `leader_follows_appender` off the leader stays where it was and appends are relayed.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use spindle_log::jetstream::{JetStreamConfig, JetStreamLog};
use spindle_log::{AppendError, Index};

/// The name of the server leading `stream`, asked through `client`.
fn leader(client: &async_nats::Client, stream: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(client.clone());
        let s = js.get_stream(stream).await.unwrap();
        let info = s.cached_info();
        info.cluster.as_ref().unwrap().leader.clone().unwrap()
    })
}

/// `config` with only the cluster's server `i` to connect to.
fn through(cluster: &nats_cluster::Cluster, config: &JetStreamConfig, i: usize) -> JetStreamConfig {
    let mut c = config.clone();
    c.servers = vec![cluster.servers()[i].clone()];
    c
}

#[test]
fn the_leader_follows_the_appender() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("PLACED");
    let mut written = 0u64;
    let mut led_by = None;
    for (round, i) in [0, 1, 2, 0].into_iter().enumerate() {
        let log = JetStreamLog::open(through(&cluster, &config, i)).unwrap();
        let here = log.client().server_info().server_name;
        assert_eq!(here, cluster.nodes[i].name);
        let mut txn = put(&format!("n{round}"), round as u64);
        if round > 0 {
            // Conditioned on the previous open's item at its index: the table rebuilt
            // around the move sees it.
            txn = txn.condition(node(&format!("n{}", round - 1)), Index::new(written));
        }
        written += 1;
        assert_eq!(log.append_blocking(&txn).unwrap(), Index::new(written));
        let now = leader(&log.client(), "PLACED");
        assert_eq!(now, here, "opened through {here}, led by {led_by:?} before");
        led_by = Some(now);
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

#[test]
fn off_the_leader_stays_and_appends_are_relayed() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("UNPLACED");
    let first = JetStreamLog::open(through(&cluster, &config, 0)).unwrap();
    first.append_blocking(&put("a", 1)).unwrap();
    let led_by = leader(&first.client(), "UNPLACED");
    futures::executor::block_on(first.close());
    let other = (0..3).find(|&i| cluster.nodes[i].name != led_by).unwrap();
    let mut off = through(&cluster, &config, other);
    off.leader_follows_appender = false;
    let log = JetStreamLog::open(off).unwrap();
    assert_eq!(log.append_blocking(&put("b", 2)).unwrap(), Index::new(2));
    assert_eq!(leader(&log.client(), "UNPLACED"), led_by);
    futures::executor::block_on(log.close());
}
