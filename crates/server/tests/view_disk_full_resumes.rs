//! A Disk View whose disk fills while the log still has room (its segment was preallocated)
//! pauses instead of stopping: appends stay acknowledged, `/v1/status` shows the view
//! `paused` with the reason, a read that waits for an index it has not applied fails at
//! once with `503 view_paused`; once space is freed the view resumes by itself — no
//! restart — applies everything acknowledged meanwhile, the pause clears, and later writes
//! read back. Mounting needs root: without it the test prints why and passes vacuously.

mod common;
#[path = "../../chunk/tests/common/tmpfs.rs"]
mod tmpfs;

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::HttpClient;

fn txn(i: u64) -> serde_json::Value {
    json!({"writes": [{"item": {"kind": "node", "id": format!("n{i}")},
                       "value": {"i": i, "pad": "x".repeat(16 << 10)}}]})
}

async fn disk_view_status(client: &HttpClient) -> serde_json::Value {
    let (status, answer) = client.json(Method::GET, "/v1/status", None).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer["views"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "disk-0")
        .cloned()
        .expect("disk-0 in the status")
}

async fn append(client: &HttpClient, i: u64) -> (StatusCode, serde_json::Value) {
    client
        .json(Method::POST, "/v1/txn", Some(&txn(i)))
        .await
        .unwrap()
}

#[test]
fn a_full_disk_pauses_the_view_and_freed_space_resumes_it() {
    let Some(fs) = tmpfs::Tmpfs::mount_or_skip(400 << 20) else {
        return;
    };
    let dir = tempfile::tempdir_in(fs.path()).unwrap();
    let mut config = common::config(dir.path());
    config.disk_partitions = 1;
    config.memory_view = false;
    // More room in the log's preallocated segment than RocksDB can take once the disk is
    // full, so the view runs out of space first.
    config.log_segment_bytes = 128 << 20;
    let server = common::TestServer::start_in(dir, config);
    let client = server.http(None);
    // What an operator deletes to make room: more than the 64 MiB RocksDB wants free
    // before it resumes writing.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 96 << 20]).unwrap();
    println!(
        "filler: {} bytes",
        tmpfs::Tmpfs::fill(&fs.path().join("filler"))
    );

    server.rt.block_on(async {
        // Append until the view pauses; every append is acknowledged meanwhile.
        let mut acked = Vec::new();
        let paused = loop {
            let i = acked.len() as u64 + 1;
            let (status, answer) = append(&client, i).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "txn {i} refused before the view paused: {answer}"
            );
            acked.push(answer["index"].as_u64().unwrap());
            let view = disk_view_status(&client).await;
            if view["paused"] == true {
                break view;
            }
            assert!(i < 20_000, "the view never ran out of space");
        };
        println!("paused after {} txns: {paused}", acked.len());
        let reason = paused["stalled"].as_str().unwrap();
        assert!(reason.contains("No space left on device"), "{reason}");
        // A few more acknowledged appends while paused (the log still has room).
        for _ in 0..5 {
            let i = acked.len() as u64 + 1;
            let (status, answer) = append(&client, i).await;
            assert_eq!(status, StatusCode::OK, "txn {i} while paused: {answer}");
            acked.push(answer["index"].as_u64().unwrap());
        }
        let last = *acked.last().unwrap();
        let n = acked.len();
        let path = format!("/v1/item?node=n{n}&min_index={last}&timeout_ms=60000");
        let started = Instant::now();
        let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
        println!(
            "read while paused: {status} {answer} after {:?}",
            started.elapsed()
        );
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"], "view_paused", "{answer}");

        std::fs::remove_file(&ballast).unwrap();
        // Hang guard only: RocksDB looks for free space every 5 s.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let view = disk_view_status(&client).await;
            if view["paused"] == false && view["applied_index"].as_u64() >= Some(last) {
                assert!(view["stalled"].is_null(), "{view}");
                break;
            }
            assert!(Instant::now() < deadline, "the view never resumed: {view}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (k, index) in acked.iter().enumerate() {
            let path = format!("/v1/item?node=n{}&min_index={index}", k + 1);
            let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
            assert_eq!(status, StatusCode::OK, "n{}: {answer}", k + 1);
            assert_eq!(answer["value"]["i"], k as u64 + 1, "{answer}");
        }
        let i = n as u64 + 1;
        let (status, answer) = append(&client, i).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let index = answer["index"].as_u64().unwrap();
        let path = format!("/v1/item?node=n{i}&min_index={index}");
        let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
    });
    drop(server.stop());
    drop(fs);
}
