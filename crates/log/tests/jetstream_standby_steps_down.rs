//! A standby's appender that fails does not refuse writes for good: deposed by another
//! appender, or unable to learn a batch's outcome while the whole cluster is down, it
//! answers what it holds, gives the lease up and stands by again; once the lease is free it
//! takes it, rebuilds its table from the stream and appends, with no restart. Nothing is
//! written twice and its conditions see every write made meanwhile.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::time::{Duration, Instant};

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{AppendError, Index, Log};

/// Wait (at most `within`) until `log` is the appender or, with `false`, stands by.
fn wait_appender(log: &JetStreamLog, appender: bool, within: Duration) {
    let start = Instant::now();
    while log.is_appender() != appender {
        assert!(
            start.elapsed() < within,
            "is_appender still {} after {within:?} (stepped down: {:?}, standby error: {:?})",
            !appender,
            log.stepped_down(),
            log.promotion_error()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn keys(log: &JetStreamLog) -> Vec<String> {
    futures::executor::block_on(log.read(Index::FIRST, usize::MAX))
        .unwrap()
        .iter()
        .map(|r| r.key.to_string())
        .collect()
}

#[test]
fn a_deposed_standby_stands_by_and_takes_the_lease_again() {
    let cluster = nats_cluster::Cluster::start(3);
    // A long lease: A must learn it was deposed from the fence, not from its renewal.
    let config = cluster.long_lease_config("REJOIN");
    let a = JetStreamLog::open_standby(config.clone()).unwrap();
    assert!(
        a.is_appender(),
        "the lease was free: the standby takes it at open"
    );
    for i in 0..3 {
        a.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    // A's lease "expires" and B takes it and writes.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let kv = rt.block_on(async {
        let js = async_nats::jetstream::new(a.client());
        js.get_key_value("REJOIN_APPENDER").await.unwrap()
    });
    rt.block_on(kv.delete("appender")).unwrap();
    let b = JetStreamLog::open(config).unwrap();
    assert_eq!(b.append_blocking(&put("b0", 0)).unwrap(), Index::new(4));
    let holder = || rt.block_on(kv.get("appender")).unwrap();
    let b_holds = holder().expect("B holds the lease");

    // A's next batch is fenced: refused, not written; A stands by.
    match a.append_blocking(&put("a-late", 9)) {
        Err(AppendError::Failed { cause }) => assert!(cause.contains("lost the lease"), "{cause}"),
        other => panic!("a deposed appender wrote: {other:?}"),
    }
    wait_appender(&a, false, Duration::from_secs(10));
    let why = a.stepped_down().expect("A says why it stopped appending");
    assert!(why.contains("lost the lease"), "{why}");
    assert!(
        a.failure().is_none(),
        "a standby does not carry its old appender's failure"
    );
    // Refused before it was sent: not written (safe to retry), not a failure of the log.
    match a.append_blocking(&put("a-standby", 9)) {
        Err(AppendError::NotWritten { cause, .. }) => {
            assert!(cause.contains("standby"), "{cause}")
        }
        other => panic!("a standby appended: {other:?}"),
    }
    // B still holds the lease (A's step-down released nothing of B's) and appends.
    assert_eq!(holder(), Some(b_holds));
    assert_eq!(b.append_blocking(&put("b1", 1)).unwrap(), Index::new(5));

    // B gives the lease up: A takes it, rebuilt from the stream (B's writes included).
    futures::executor::block_on(b.close());
    wait_appender(&a, true, Duration::from_secs(30));
    let stale = put("a3", 3).condition(node("b1"), Index::new(4));
    assert!(
        matches!(a.append_blocking(&stale), Err(AppendError::Conflict { .. })),
        "A's rebuilt table must hold B's last write"
    );
    let cond = put("a3", 3).condition(node("b1"), Index::new(5));
    assert_eq!(a.append_blocking(&cond).unwrap(), Index::new(6));
    assert_eq!(
        keys(&a),
        ["a0", "a1", "a2", "b0", "b1", "a3"].map(|k| node(k).to_string())
    );
    futures::executor::block_on(a.close());
    // Closed, it gives the lease up and takes no other.
    assert!(rt.block_on(kv.get("appender")).unwrap().is_none());
}

#[test]
fn a_standby_whose_cluster_was_down_appends_again_once_it_is_back() {
    let mut cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("OUTAGE");
    config.ack_timeout = Duration::from_millis(500);
    config.unavailable_wait = Duration::from_secs(2);
    config.lease_ttl = Duration::from_secs(3);
    let a = JetStreamLog::open_standby(config).unwrap();
    assert!(a.is_appender());
    assert_eq!(a.append_blocking(&put("x", 1)).unwrap(), Index::new(1));
    for i in 0..3 {
        cluster.kill(i);
    }
    // No server answers within `unavailable_wait`: the outcome is unknown, the append
    // fails, and A stands by instead of refusing writes until a restart.
    match a.append_blocking(&put("y", 2)) {
        Err(AppendError::Failed { .. }) => {}
        other => panic!("an append with every server down: {other:?}"),
    }
    wait_appender(&a, false, Duration::from_secs(30));
    assert!(a.stepped_down().is_some());

    cluster.restart_killed();
    // The lease A could not release expires; A takes it again and appends.
    wait_appender(&a, true, Duration::from_secs(60));
    let start = Instant::now();
    loop {
        // The cluster may still be electing the stream's leader: retry what was not
        // written, at most once (a retry of an append whose outcome was unknown conflicts).
        let z = put("z", 3).condition(node("z"), Index::ZERO);
        match a.append_blocking(&z) {
            Ok(_) | Err(AppendError::Conflict { .. }) => break,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "no append after the outage: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
                wait_appender(&a, true, Duration::from_secs(60));
            }
        }
    }
    // "y" made it before the servers died or not; nothing is written twice, and the
    // rebuilt table knows every item written.
    let written = keys(&a);
    let count = |k: &str| {
        written
            .iter()
            .filter(|w| **w == node(k).to_string())
            .count()
    };
    assert_eq!((count("x"), count("z")), (1, 1), "{written:?}");
    assert!(count("y") <= 1, "{written:?}");
    assert_eq!(written.len(), 2 + count("y"), "{written:?}");
    let stale = put("x", 4).condition(node("x"), Index::ZERO);
    assert!(matches!(
        a.append_blocking(&stale),
        Err(AppendError::Conflict { .. })
    ));
    futures::executor::block_on(a.close());
}
