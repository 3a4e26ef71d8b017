//! A graceful shutdown lets the views reach the log's durable index even when the tailer
//! is behind when it begins (feature `failpoints`: every tailer read is slowed down), so a
//! restart resumes exactly where the log ends.
#![cfg(feature = "failpoints")]

mod common;

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_core::{Index, Partition};
use spindle_view::DiskView;

#[test]
fn views_reach_the_durable_index_at_shutdown_though_the_tailer_lagged() {
    let scenario = fail::FailScenario::setup();
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 2;
        c.memory_view = false;
    });
    fail::cfg("fanout::read", "sleep(20)").unwrap();
    let client = server.http(None);
    let mut last = 0;
    server.rt.block_on(async {
        for i in 0..40 {
            let body = json!({"writes": [{"item": {"kind": "node", "id": format!("n{i}")}, "value": {"i": i}}]});
            let (status, answer) = client
                .json(Method::POST, "/v1/txn", Some(&body))
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK, "{answer}");
            last = answer["index"].as_u64().unwrap();
        }
    });
    let data_dir = server.node.config.data_dir.clone();
    let _dir = server.stop();
    fail::remove("fanout::read");
    for i in 0..2 {
        let view = DiskView::open(
            data_dir.join(format!("views/disk-{i}-of-2")),
            Partition::nth(i, 2),
        )
        .unwrap();
        assert_eq!(view.applied_index(), Index::new(last), "disk-{i}");
    }
    scenario.teardown();
}
