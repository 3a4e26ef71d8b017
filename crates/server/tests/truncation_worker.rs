//! The truncation worker deletes log segments every Disk View has applied, never past the
//! safe index (invariant 7), and a boot's retention hold keeps the log above its cut.

mod common;

use std::time::{Duration, Instant};

use spindle_core::{Index, ItemKey, Transaction, Value};

fn write_batch(server: &common::TestServer, round: u64) {
    let txns: Vec<Transaction> = (0..100)
        .map(|t| {
            let key = ItemKey::node(format!("n{round}-{t}")).unwrap();
            Transaction::single(
                key,
                Value::json(format!("{{\"pad\":\"{}\"}}", "x".repeat(200))).unwrap(),
            )
        })
        .collect();
    server.rt.block_on(async {
        for r in server.node.log.append_many(&txns).await {
            r.unwrap();
        }
    });
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_worker_truncates_below_the_safe_index_and_holds_keep_the_tail() {
    let server = common::TestServer::start(|c| {
        c.log_segment_bytes = 16 << 10;
        c.truncate_interval_ms = 5;
    });
    let node = server.node.clone();
    let min_applied = || {
        node.disks
            .iter()
            .map(|d| d.view.applied_index())
            .min()
            .unwrap()
    };
    // A hold at index 50: nothing above it may go while it is held.
    let hold = node.holds.hold(Index::new(50));
    for round in 0..20 {
        write_batch(&server, round);
    }
    let durable = node.log.durable_index();
    wait_until("the Disk Views to apply the log", || {
        min_applied() >= durable
    });
    wait_until("a truncation run after the views caught up", || {
        node.truncation.lock().runs > 3
    });
    let held_first = node.log.first_index();
    assert!(
        held_first <= Index::new(51),
        "the log was truncated past the hold: first {held_first}"
    );
    assert!(
        node.status().truncation.held_back_by.contains("hold"),
        "{:?}",
        node.status().truncation
    );
    drop(hold);
    wait_until("truncation after the hold is released", || {
        node.log.first_index() > Index::new(51)
    });
    // Never past the safe index: every record above it is still readable.
    let first = node.log.first_index();
    assert!(
        first.prev() <= min_applied(),
        "truncated through {} but views applied {}",
        first.prev(),
        min_applied()
    );
    let records = node.log.read(first, 10).unwrap();
    assert_eq!(records[0].index, first);
    assert!(matches!(
        node.log.read(Index::FIRST, 1),
        Err(spindle_log::ReadError::Truncated { .. })
    ));
    // And the node keeps working from a restart: the views resume above the deleted prefix.
    let config = node.config.clone();
    drop(node);
    let dir = server.stop();
    let server = common::TestServer::start_in(dir, config);
    write_batch(&server, 99);
    let node = server.node.clone();
    let durable = node.log.durable_index();
    wait_until("the views after the restart", || {
        node.disks.iter().all(|d| d.view.applied_index() >= durable)
            && node.memory.applied() >= durable
    });
    assert!(
        node.failures.lock().is_empty(),
        "{:?}",
        node.failures.lock()
    );
    drop(node);
    server.stop();
}
