//! An appender that lost its lease is fenced: once a second appender took the lease and
//! wrote, the first one's next batch is refused by the stream (expected last sequence), its
//! append fails as not written and it refuses writes from then on; nothing is duplicated or
//! lost, and the new appender's conditions see everything the old one wrote.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::time::Duration;

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{AppendError, Index, Log};

#[test]
fn a_deposed_appender_is_fenced() {
    let cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("FENCE");
    // A long lease: the old appender must not notice by renewal, only by the fence.
    config.lease_ttl = Duration::from_secs(60);
    let a = JetStreamLog::open(config.clone()).unwrap();
    for i in 0..5 {
        a.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    // The lease "expires": a paused appender's key is gone and another takes it.
    let client = a.client();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(client);
        let kv = js.get_key_value("FENCE_APPENDER").await.unwrap();
        kv.delete("appender").await.unwrap();
    });
    config.lease_wait = Duration::from_secs(5);
    let b = JetStreamLog::open(config).unwrap();
    assert_eq!(b.durable_index(), Index::new(5));
    // B's table holds A's writes.
    let cond = put("b0", 0).condition(node("a4"), Index::new(5));
    assert_eq!(b.append_blocking(&cond).unwrap(), Index::new(6));
    assert_eq!(b.append_blocking(&put("b1", 1)).unwrap(), Index::new(7));

    // A still believes it appends after 5: the stream refuses it.
    let refused = a.append_blocking(&put("a-late", 9));
    match &refused {
        Err(AppendError::Failed { cause }) => assert!(cause.contains("lost the lease"), "{cause}"),
        other => panic!("a deposed appender wrote: {other:?}"),
    }
    assert!(a.failure().is_some());
    assert!(matches!(
        a.append_blocking(&put("a-later", 10)),
        Err(AppendError::Failed { .. })
    ));

    assert_eq!(b.append_blocking(&put("b2", 2)).unwrap(), Index::new(8));
    let records = futures::executor::block_on(b.read(Index::FIRST, usize::MAX)).unwrap();
    let ids: Vec<String> = records.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(records.len(), 8, "{ids:?}");
    assert!(!ids.iter().any(|k| k.contains("a-late")), "{ids:?}");
    futures::executor::block_on(b.close());
}
