//! A read with `min_index` waits until the Disk View has applied that index (feature
//! `failpoints`): while the log tailer is paused after an acknowledged append, `/v1/item`,
//! `/v1/history` and `/v1/out_edges` asking for the append's index answer
//! `504 not_yet_applied` when their timeout runs out, and a read still waiting when the
//! tailer goes on answers with the new versions, never the older state.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::HttpClient;

/// Write node `a` and an edge from it to `b{v}` in one transaction; its (last) index.
async fn write_a_and_edge(client: &HttpClient, v: u64) -> u64 {
    let txn = json!({"writes": [
        {"item": {"kind": "node", "id": "a"}, "value": {"v": v}},
        {"item": {"kind": "edge", "from": "a", "label": "l", "to": format!("b{v}")}, "value": {"v": v}},
    ]});
    let (status, answer) = client
        .json(Method::POST, "/v1/txn", Some(&txn))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["index"].as_u64().unwrap()
}

/// Releases the paused tailer however the test ends, so a failed assertion fails the test
/// rather than hanging the server's stop.
struct Unpause;

impl Drop for Unpause {
    fn drop(&mut self) {
        fail::remove("fanout::read");
    }
}

#[test]
fn reads_with_min_index_wait_for_the_disk_view() {
    let scenario = fail::FailScenario::setup();
    let server = common::TestServer::start(|c| c.read_wait_ms_max = 600_000);
    let client = server.http(None);
    server.rt.block_on(async {
        let first = write_a_and_edge(&client, 1).await;
        let (status, _) = client
            .json(
                Method::GET,
                &format!("/v1/history?node=a&min_index={first}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);

        // The tailer stops before its next read of the log: the next append is durable
        // and acknowledged, but no view applies it.
        fail::cfg("fanout::read", "pause").unwrap();
        let unpause = Unpause;
        // The transaction's last index (its edge's); the node's version is the one before.
        let second = write_a_and_edge(&client, 2).await;
        let node_version = second - 1;
        let reads = [
            format!("/v1/item?node=a&min_index={second}"),
            format!("/v1/history?node=a&min_index={second}"),
            format!("/v1/out_edges?node=a&label=l&min_index={second}"),
        ];
        for read in &reads {
            let (status, answer) = client
                .json(Method::GET, &format!("{read}&timeout_ms=300"), None)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{read}: {answer}");
            assert_eq!(answer["error"], "not_yet_applied", "{read}: {answer}");
        }
        // Without min_index the view answers at once, with what it has applied.
        let (status, answer) = client
            .json(Method::GET, "/v1/history?node=a", None)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["versions"].as_array().unwrap().len(), 1, "{answer}");

        // Reads that are waiting when the tailer goes on answer with the new versions.
        let counted = server.node.metrics.reads.load(Ordering::Relaxed);
        let waiting: Vec<_> = reads
            .iter()
            .map(|read| {
                let client = client.clone();
                let read = format!("{read}&timeout_ms=120000");
                tokio::spawn(async move { client.json(Method::GET, &read, None).await.unwrap() })
            })
            .collect();
        // Hang guard only: each read is counted before it waits.
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.node.metrics.reads.load(Ordering::Relaxed) < counted + reads.len() as u64 {
            assert!(Instant::now() < deadline, "the reads were not made");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(unpause);
        let mut answers = Vec::new();
        for (read, task) in reads.iter().zip(waiting) {
            let (status, answer) = task.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{read}: {answer}");
            answers.push(answer);
        }
        assert_eq!(
            answers[0]["version"].as_u64(),
            Some(node_version),
            "{}",
            answers[0]
        );
        assert_eq!(answers[0]["value"]["v"], 2, "{}", answers[0]);
        let versions = answers[1]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 2, "{}", answers[1]);
        assert_eq!(versions[1]["version"].as_u64(), Some(node_version));
        let targets: Vec<_> = answers[2]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["item"]["to"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(targets, ["b1", "b2"], "{}", answers[2]);
    });
    server.stop();
    scenario.teardown();
}
