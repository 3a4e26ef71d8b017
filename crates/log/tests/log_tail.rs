//! A tail waits for the durable index to pass its position and wakes when a write lands;
//! readers never see a record beyond the durable index or part of a transaction.

mod common;

use common::*;
use spindle_core::Transaction;
use spindle_log::{Index, Tail};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_wakes_on_append_and_yields_whole_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    let mut tail = Tail::new(log.clone(), Index::FIRST, 2);
    let waiter = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < 8 {
            let batch = tail.next_batch().await.unwrap();
            assert!(batch.last().unwrap().commit, "a batch ends on a commit");
            seen.extend(batch);
        }
        seen
    });
    // The tail is parked before anything exists; these appends must wake it.
    let three = Transaction::new()
        .write(node("a"), obj(1))
        .write(node("b"), obj(2))
        .write(node("c"), obj(3));
    log.append(&three).await.unwrap();
    for i in 0..5 {
        log.append(&put("d", i)).await.unwrap();
    }
    let seen = waiter.await.unwrap();
    let indexes: Vec<u64> = seen.iter().map(|r| r.index.get()).collect();
    assert_eq!(indexes, (1..=8).collect::<Vec<_>>());
    assert_eq!(seen.iter().filter(|r| r.commit).count(), 6);
    assert!(log.durable_index() >= Index::new(8));
}

#[test]
fn reads_stop_at_the_durable_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    log.append_blocking(&put("a", 1)).unwrap();
    assert!(log.read(Index::new(2), 10).unwrap().is_empty());
    assert_eq!(log.read(Index::new(1), 10).unwrap().len(), 1);
}
