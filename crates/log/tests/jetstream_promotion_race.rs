//! A standby that takes the lease while the old appender, not yet aware it lost it, still
//! commits: the new appender's version table covers the stream through some index, and its
//! first batch is fenced on that index, not on the durable index its readers (the feed)
//! moved further meanwhile. So its conditions see every write the old appender made.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod common;
mod nats_cluster;

use std::time::Duration;

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Index, Log};

#[test]
fn a_promoted_standby_fences_on_what_its_table_covers() {
    let scenario = fail::FailScenario::setup();
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.long_lease_config("PROMOTE");
    let a = JetStreamLog::open(config.clone()).unwrap();
    for i in 0..5 {
        a.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    let s = std::sync::Arc::new(JetStreamLog::open_standby(config).unwrap());
    assert!(!s.is_appender());
    // The standby's readers follow the feed (its durable index moves with A's batches).
    let waiter = {
        let s = s.clone();
        std::thread::spawn(move || futures::executor::block_on(s.wait_for(Index::new(8))))
    };
    // The standby's replay, once it has the lease, is stretched; A writes meanwhile.
    fail::cfg("jetstream::rebuild", "1*sleep(3000)").unwrap();
    let client = a.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(client);
        let kv = js.get_key_value("PROMOTE_APPENDER").await.unwrap();
        kv.delete("appender").await.unwrap();
        // Once the standby holds the lease it replays the stream (stretched to 3 s):
        // A, unaware, writes meanwhile.
        let start = std::time::Instant::now();
        while kv.get("appender").await.unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the standby took no lease"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let late = a.append_blocking(&put("x", 1)).unwrap();
    let later = a.append_blocking(&put("x", 2)).unwrap();
    assert_eq!((late, later), (Index::new(6), Index::new(7)));
    a.append_blocking(&put("a-last", 3)).unwrap();
    waiter.join().unwrap().unwrap();
    // The standby becomes the appender.
    let start = std::time::Instant::now();
    while !s.is_appender() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the standby never took over"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its conditions see A's last write of x (index 7), not an older table's.
    let cond = put("s0", 0).condition(node("x"), Index::new(7));
    assert_eq!(s.append_blocking(&cond).unwrap(), Index::new(9));
    let stale = put("s1", 1).condition(node("x"), Index::new(6));
    assert!(
        s.append_blocking(&stale).is_err(),
        "a condition on an overwritten version held"
    );
    let records = futures::executor::block_on(s.read(Index::FIRST, usize::MAX)).unwrap();
    assert_eq!(records.len(), 9);
    scenario.teardown();
}
