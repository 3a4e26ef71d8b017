//! With `leader_follows_appender` off, an appender connected to a server that does not lead
//! its stream leaves the leader where it is, and its appends (relayed by its server to the
//! leader) are acknowledged at their indexes.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::Index;

#[test]
fn off_the_leader_stays_and_appends_are_relayed() {
    let cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("UNPLACED");
    // The first open places the leader; it must be done before the leader is read.
    config.leader_move_wait = std::time::Duration::from_secs(30);
    let first = JetStreamLog::open(nats_cluster::through(&cluster, &config, 0)).unwrap();
    first.append_blocking(&put("a", 1)).unwrap();
    let led_by = nats_cluster::stream_leader_name(&first.client(), "UNPLACED");
    futures::executor::block_on(first.close());
    let other = (0..3).find(|&i| cluster.nodes[i].name != led_by).unwrap();
    let mut off = nats_cluster::through(&cluster, &config, other);
    off.leader_follows_appender = false;
    let log = JetStreamLog::open(off).unwrap();
    assert_ne!(log.client().server_info().server_name, led_by);
    assert_eq!(log.append_blocking(&put("b", 2)).unwrap(), Index::new(2));
    assert_eq!(log.append_blocking(&put("c", 3)).unwrap(), Index::new(3));
    assert_eq!(
        nats_cluster::stream_leader_name(&log.client(), "UNPLACED"),
        led_by
    );
    futures::executor::block_on(log.close());
}
