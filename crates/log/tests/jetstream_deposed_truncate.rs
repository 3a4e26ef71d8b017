//! An appender deposed while idle (its lease taken over, nothing yet made it append) must
//! not truncate: its version table ends where it stopped, and a checkpoint of it written
//! over its successor's, once the successor purged past that end, would leave a stream no
//! appender could open. It refuses, and after the successor closes, a new appender opens on
//! the successor's checkpoint and its conditions see the successor's writes.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::time::Duration;

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Index, Log};

#[test]
fn a_deposed_appender_does_not_overwrite_its_successors_checkpoint() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.long_lease_config("DEPOSED");
    let a = JetStreamLog::open(config.clone()).unwrap();
    for i in 0..5 {
        a.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    let s = JetStreamLog::open_standby(config.clone()).unwrap();
    assert!(!s.is_appender());
    // The lease is taken from A behind its back.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(a.client());
        let kv = js.get_key_value("DEPOSED_APPENDER").await.unwrap();
        kv.delete("appender").await.unwrap();
    });
    let start = std::time::Instant::now();
    while !s.is_appender() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the standby never took over"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..5 {
        s.append_blocking(&put(&format!("s{i}"), i)).unwrap();
    }
    assert_eq!(s.durable_index(), Index::new(10));
    let block = futures::executor::block_on;
    assert_eq!(
        block(s.truncate_prefix(Index::new(9))).unwrap(),
        Index::new(9)
    );
    // A still believes it appends; its truncation is refused, and says why.
    let refused = block(a.truncate_prefix(Index::new(5))).unwrap_err();
    assert!(refused.to_string().contains("lost the lease"), "{refused}");
    // Closing gives up a lease only its holder's: A's close leaves S's lease alone.
    futures::executor::block_on(a.close());
    futures::executor::block_on(s.close());
    // A new appender opens on the successor's checkpoint: its conditions see index 10.
    let n = JetStreamLog::open(config).unwrap();
    let ok = put("n", 0).condition(node("s4"), Index::new(10));
    assert_eq!(n.append_blocking(&ok).unwrap(), Index::new(11));
    let stale = put("n", 1).condition(node("s4"), Index::new(9));
    assert!(n.append_blocking(&stale).is_err());
    assert_eq!(n.first_index(), Index::new(9));
}
