//! A truncation's checkpoint upload does not hold group commit up: appends made while it
//! uploads (a large version table's takes seconds) are acknowledged meanwhile, the
//! truncation then purges, and a new appender opens on that checkpoint with conditions
//! that see every write: purged ones (from the checkpoint), and those made during the
//! upload. A close made while a truncation uploads waits for it.

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
    // The upload takes 6 s.
    fail::cfg("jetstream::checkpoint_put", "1*return(6000)").unwrap();
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
                started.elapsed() < Duration::from_secs(3),
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
    let next = JetStreamLog::open(config.clone()).unwrap();
    let ok = put("n", 0).condition(node("during"), last);
    assert_eq!(next.append_blocking(&ok).unwrap(), last.next());
    let stale = put("n", 1).condition(node("a4"), Index::new(4));
    assert!(next.append_blocking(&stale).is_err(), "a4 was written at 5");
    // Purged records, known from the checkpoint alone: a0 at 1, a1 exists.
    let purged = put("m", 0).condition(node("a0"), Index::FIRST);
    let at = next.append_blocking(&purged).unwrap();
    let absent = put("m", 1).condition(node("a1"), Index::ZERO);
    assert!(
        next.append_blocking(&absent).is_err(),
        "a1 was written at 2"
    );

    // A close queued behind a truncation that is uploading answers once it has purged.
    fail::cfg("jetstream::checkpoint_put", "1*return(2000)").unwrap();
    futures::executor::block_on(async {
        let mut truncating = Box::pin(next.truncate_prefix(at));
        // Polled once: the truncation is queued (and then waits for its answer).
        assert!(futures::poll!(&mut truncating).is_pending());
        let (truncated, ()) = futures::join!(truncating, next.close());
        assert_eq!(truncated.unwrap(), at);
    });
    let reopened = JetStreamLog::open(config).unwrap();
    assert_eq!(reopened.first_index(), at);
    let ok = put("o", 0).condition(node("m"), at);
    assert_eq!(reopened.append_blocking(&ok).unwrap(), at.next());
    scenario.teardown();
}
