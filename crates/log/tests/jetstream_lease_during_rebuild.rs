//! A standby that took the lease keeps renewing it while it rebuilds its version table,
//! however long that takes: a rebuild longer than the lease's TTL does not let a second
//! standby take the lease and rebuild too, so exactly one becomes the appender.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod common;
mod nats_cluster;

use std::time::{Duration, Instant};

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::Index;

#[test]
fn a_rebuild_longer_than_the_lease_keeps_the_lease() {
    let scenario = fail::FailScenario::setup();
    let cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("REBUILD");
    config.lease_ttl = Duration::from_secs(2);
    config.lease_wait = Duration::from_millis(500);
    let a = JetStreamLog::open(config.clone()).unwrap();
    for i in 0..3 {
        a.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    let standbys = [
        JetStreamLog::open_standby(config.clone()).unwrap(),
        JetStreamLog::open_standby(config).unwrap(),
    ];
    // The first rebuild after the takeover takes two and a half lease TTLs (a pause of its
    // task, as a long replay's reads would be, not of its thread).
    fail::cfg("jetstream::rebuild", "1*return(5000)").unwrap();
    futures::executor::block_on(a.close());
    let start = Instant::now();
    while !standbys.iter().any(JetStreamLog::is_appender) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no standby took over"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Two more TTLs: a lease left unrenewed during the rebuild would have been taken.
    std::thread::sleep(Duration::from_secs(4));
    let appenders: Vec<_> = standbys.iter().filter(|s| s.is_appender()).collect();
    assert_eq!(appenders.len(), 1, "both standbys became the appender");
    assert_eq!(
        appenders[0].append_blocking(&put("s", 0)).unwrap(),
        Index::new(4)
    );
    scenario.teardown();
}
