//! A log tailer that fails is not silent (feature `failpoints`): a permanent read error
//! (a corrupt frame) shows in `/v1/status` and `/metrics`, appends are still acknowledged,
//! and reads waiting for an applied index fail at once with `views_stalled` instead of
//! running out their timeout; a transient I/O error is retried and the views go on.
#![cfg(feature = "failpoints")]

mod common;

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::HttpClient;

/// A wait far longer than the test could run, so that only a fail-fast answer returns.
const READ_TIMEOUT_MS: u64 = 600_000;

async fn append(client: &HttpClient, id: &str) -> u64 {
    let body = json!({"writes": [{"item": {"kind": "node", "id": id}, "value": {"v": 1}}]});
    let (status, answer) = client
        .json(Method::POST, "/v1/txn", Some(&body))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["index"].as_u64().unwrap()
}

async fn status(client: &HttpClient) -> serde_json::Value {
    let (code, answer) = client.json(Method::GET, "/v1/status", None).await.unwrap();
    assert_eq!(code, StatusCode::OK);
    answer
}

#[test]
fn a_corrupt_frame_stalls_the_views_visibly_and_waiting_reads_fail_fast() {
    let scenario = fail::FailScenario::setup();
    let server = common::TestServer::start(|c| {
        c.read_wait_ms_max = READ_TIMEOUT_MS;
        c.disk_partitions = 2;
    });
    let client = server.http(None);
    server.rt.block_on(async {
        let first = append(&client, "before").await;
        let (code, _) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=before&min_index={first}&timeout_ms=30000"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, StatusCode::OK);
        // Hang guard only: the Memory View boots in the background.
        let deadline = Instant::now() + Duration::from_secs(60);
        let booted = json!({"items": [{"kind": "node", "id": "before"}], "min_index": first});
        loop {
            let (code, answer) = client
                .json(Method::POST, "/v1/multiget", Some(&booted))
                .await
                .unwrap();
            if code == StatusCode::OK {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the Memory View never booted: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        fail::cfg("fanout::read", "return(corrupt)").unwrap();
        // Still acknowledged: the write is durable in the log.
        let index = append(&client, "after").await;
        // Hang guard only: the tailer fails on its next read.
        let deadline = Instant::now() + Duration::from_secs(60);
        let s = loop {
            let s = status(&client).await;
            if s["tailer"]["state"] == "failed" {
                break s;
            }
            assert!(Instant::now() < deadline, "the tailer never failed: {s}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let error = s["tailer"]["error"].as_str().unwrap();
        assert!(error.contains("corrupt"), "{error}");
        assert_eq!(append(&client, "still-acknowledged").await, index + 1);
        let (_, metrics) = client.request(Method::GET, "/metrics", None).await.unwrap();
        let metrics = String::from_utf8(metrics.to_vec()).unwrap();
        assert!(metrics.contains("spindle_tailer_failed 1"), "{metrics}");
        assert!(
            metrics.contains("spindle_tailer_read_errors_total 1"),
            "{metrics}"
        );
        // A read that waits for the stalled index fails with the reason.
        let (code, answer) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=after&min_index={index}&timeout_ms={READ_TIMEOUT_MS}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"], "views_stalled", "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("corrupt"),
            "{answer}"
        );
        // Every view says so in status, once its follower has seen the closed ring.
        loop {
            let s = status(&client).await;
            let views = s["views"].as_array().unwrap();
            assert_eq!(views.len(), 3, "{s}");
            if views.iter().all(|v| v["stalled"].is_string()) {
                break;
            }
            assert!(Instant::now() < deadline, "not every view is stalled: {s}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The Memory View's wait fails the same way.
        let body = json!({"items": [{"kind": "node", "id": "after"}], "min_index": index,
                          "timeout_ms": READ_TIMEOUT_MS});
        let (code, answer) = client
            .json(Method::POST, "/v1/multiget", Some(&body))
            .await
            .unwrap();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"], "views_stalled", "{answer}");
        // An index the view has already applied is still served.
        let (code, _) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=before&min_index={first}&timeout_ms=1000"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, StatusCode::OK);
    });
    fail::remove("fanout::read");
    server.stop();
    scenario.teardown();
}

#[test]
fn a_transient_read_error_is_retried_and_the_views_go_on() {
    let scenario = fail::FailScenario::setup();
    let server = common::TestServer::start(|c| c.disk_partitions = 1);
    let client = server.http(None);
    server.rt.block_on(async {
        fail::cfg("fanout::read", "1*return(io)").unwrap();
        let index = append(&client, "n").await;
        let (code, answer) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=n&min_index={index}&timeout_ms=60000"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code, StatusCode::OK, "{answer}");
        let s = status(&client).await;
        assert_eq!(s["tailer"]["state"], "running", "{s}");
        assert_eq!(s["tailer"]["read_errors"], 1, "{s}");
        assert_eq!(s["tailer"]["retries"], 1, "{s}");
    });
    fail::remove("fanout::read");
    server.stop();
    scenario.teardown();
}
