//! A graceful shutdown lets the views reach the log's durable index even when the tailer
//! is several batches behind when it begins (feature `failpoints`: every tailer read is
//! slowed down), so a restart resumes exactly where the log ends.
#![cfg(feature = "failpoints")]

mod common;

use spindle_core::{ItemKey, Partition, Transaction, Value};
use spindle_server::fanout::TAIL_BATCH_RECORDS_MAX;
use spindle_view::DiskView;

#[test]
fn views_reach_the_durable_index_at_shutdown_though_the_tailer_lagged() {
    let scenario = fail::FailScenario::setup();
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 2;
        c.memory_view = false;
    });
    fail::cfg("fanout::read", "sleep(200)").unwrap();
    let node = server.node.clone();
    // Several tailer batches' worth, appended at once: the slowed tailer is far behind.
    let per_txn = 1000;
    let txns: Vec<Transaction> = (0..3 * TAIL_BATCH_RECORDS_MAX / per_txn)
        .map(|t| {
            (0..per_txn).fold(Transaction::new(), |txn, i| {
                let key = ItemKey::node(format!("n{t}-{i}")).unwrap();
                txn.write(key, Value::json("{}").unwrap())
            })
        })
        .collect();
    server.rt.block_on(async {
        for r in node.log.append_many(&txns).await {
            r.unwrap();
        }
    });
    let durable = node.log.durable_index();
    let data_dir = node.config.data_dir.clone();
    drop(node);
    let _dir = server.stop();
    fail::remove("fanout::read");
    for i in 0..2 {
        let view = DiskView::open(
            data_dir.join(format!("views/disk-{i}-of-2")),
            Partition::nth(i, 2),
        )
        .unwrap();
        assert_eq!(view.applied_index(), durable, "disk-{i}");
    }
    scenario.teardown();
}
