//! A truncation's checkpoint upload does not hold group commit up: appends made while it
//! uploads (a large version table's takes seconds) are acknowledged meanwhile, the
//! truncation then purges, and a new appender opens on that checkpoint with conditions
//! that see every write, those made during the upload too.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod common;
mod nats_cluster;

use std::time::{Duration, Instant};

use common::*;
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Index, Log};

#[test]
fn appends_go_on_while_the_checkpoint_uploads() {
    let scenario = fail::FailScenario::setup();
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("TRUNCBG");
    let log = JetStreamLog::open(config.clone()).unwrap();
    for i in 0..5 {
        log.append_blocking(&put(&format!("a{i}"), i)).unwrap();
    }
    // The upload takes 4 s.
    fail::cfg("jetstream::checkpoint_put", "1*return(4000)").unwrap();
    let (truncated, answered) = std::thread::scope(|s| {
        let truncating =
            s.spawn(|| futures::executor::block_on(log.truncate_prefix(Index::new(4))));
        // Appends until the truncation ends: each is answered at once, none waits for the
        // upload (before, the first one queued behind the truncation waited all of it).
        let mut answered = 0;
        while !truncating.is_finished() {
            let started = Instant::now();
            log.append_blocking(&put("during", answered)).unwrap();
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "an append waited {:?} for the checkpoint upload",
                started.elapsed()
            );
            answered += 1;
        }
        (truncating.join().unwrap(), answered)
    });
    assert_eq!(truncated.unwrap(), Index::new(4));
    assert!(
        answered >= 3,
        "appends answered during the upload: {answered}"
    );
    assert_eq!(log.first_index(), Index::new(4));
    let last = log.durable_index();
    futures::executor::block_on(log.close());
    // A new appender: checkpoint (through index 5) plus the records after it.
    let next = JetStreamLog::open(config).unwrap();
    let ok = put("n", 0).condition(node("during"), last);
    assert_eq!(next.append_blocking(&ok).unwrap(), last.next());
    let stale = put("n", 1).condition(node("a4"), Index::new(4));
    assert!(next.append_blocking(&stale).is_err(), "a4 was written at 5");
    scenario.teardown();
}
