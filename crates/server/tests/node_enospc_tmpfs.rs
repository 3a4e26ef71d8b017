//! A node whose data directory runs out of space (a 48 MiB tmpfs) refuses writes with a JSON
//! error and a 507 status (`disk_full`, for chunks and for transactions), keeps answering
//! reads (every acknowledged chunk; items as far as the Disk Views had applied), takes
//! transactions again as soon as space is freed, and after a restart takes chunks again with
//! nothing acknowledged lost: every acknowledged transaction reads back. Mounting needs
//! root: without it the test prints why and passes vacuously.

mod common;
#[path = "../../chunk/tests/common/tmpfs.rs"]
mod tmpfs;

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::HttpClient;

fn txn(i: u64) -> serde_json::Value {
    json!({"writes": [{"item": {"kind": "node", "id": format!("n{i}")},
                       "value": {"i": i, "pad": "x".repeat(16 << 10)}}]})
}

fn chunk(seed: u64) -> Vec<u8> {
    (0..(128u64 << 10))
        .map(|i| (i.wrapping_mul(seed | 1) >> 3) as u8)
        .collect()
}

/// Item `n{i}` for the first and last acknowledged transaction (`txns` holds their commit
/// indexes), waiting for the view to have applied it; and every acknowledged chunk.
async fn assert_reads(client: &HttpClient, txns: &[u64], chunks: &[(String, Vec<u8>)]) {
    let last = txns.len() as u64;
    for (i, index) in [(1, txns[0]), (last, txns[txns.len() - 1])] {
        let (status, answer) = client
            .json(
                Method::GET,
                &format!("/v1/item?node=n{i}&min_index={index}"),
                None,
            )
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "n{i}: {answer}");
        assert_eq!(answer["value"]["i"], i, "n{i}: {answer}");
    }
    for (id, data) in chunks {
        let (status, body) = client
            .request(Method::GET, &format!("/v1/chunks/{id}"), None)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "chunk {id}");
        assert!(body[..] == data[..], "chunk {id}");
    }
}

#[test]
fn a_full_disk_refuses_writes_with_507_and_keeps_reads() {
    let Some(fs) = tmpfs::Tmpfs::mount_or_skip(48 << 20) else {
        return;
    };
    let dir = tempfile::tempdir_in(fs.path()).unwrap();
    let config = common::config(dir.path());
    let server = common::TestServer::start_in(dir, config.clone());
    let client = server.http(None);
    let filler = fs.path().join("filler");
    let (txns, chunks) = server.rt.block_on(async {
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&txn(1)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        let mut txns = vec![answer["index"].as_u64().unwrap()];
        let data = chunk(1);
        let (status, body) = client
            .request(Method::POST, "/v1/chunks", Some(data.clone()))
            .await
            .unwrap();
        assert!(status.is_success(), "{status}");
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let mut chunks = vec![(answer["id"].as_str().unwrap().to_owned(), data)];

        println!("filler: {} bytes", tmpfs::Tmpfs::fill(&filler));

        // Chunks: refused with 507 disk_full once the volume cannot grow.
        let mut refused = None;
        for seed in 2..200 {
            let data = chunk(seed);
            let (status, body) = client
                .request(Method::POST, "/v1/chunks", Some(data.clone()))
                .await
                .unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            if status.is_success() {
                chunks.push((answer["id"].as_str().unwrap().to_owned(), data));
                continue;
            }
            refused = Some((status, answer));
            break;
        }
        let (status, answer) = refused.expect("a chunk put was refused");
        println!("chunk put on a full disk: {status} {answer}");
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{answer}");
        assert_eq!(answer["error"], "disk_full", "{answer}");

        // Transactions: refused once the log cannot grow.
        let mut refused = None;
        for i in 2..2000 {
            let (status, answer) = client
                .json(Method::POST, "/v1/txn", Some(&txn(i)))
                .await
                .unwrap();
            if status == StatusCode::OK {
                txns.push(answer["index"].as_u64().unwrap());
                continue;
            }
            refused = Some((status, answer));
            break;
        }
        let (status, answer) = refused.expect("a transaction was refused");
        println!(
            "txn on a full disk after {} acknowledged: {status} {answer}",
            txns.len()
        );
        // The log's segments are preallocated: only a new one can find the disk full, and
        // the append that needed it is refused with nothing written.
        assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{answer}");
        assert_eq!(answer["error"], "disk_full", "{answer}");
        // Reads: every acknowledged chunk; items up to what the Disk Views applied before
        // their RocksDB could not grow. A view that cannot write pauses and says so in
        // /v1/status (view_disk_full_resumes.rs shows it resuming once space is freed);
        // here the node is restarted instead.
        assert_reads(&client, &txns[..1], &chunks).await;
        let (status, answer) = client.json(Method::GET, "/v1/status", None).await.unwrap();
        assert_eq!(status, StatusCode::OK);
        println!("status failures on a full disk: {}", answer["failures"]);
        // Space freed: the log takes appends again without a restart, at the next index,
        // once its pause between tries to create a segment (about a second) has passed.
        std::fs::remove_file(&filler).unwrap();
        let next = txns.len() as u64 + 1;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let answer = loop {
            let (status, answer) = client
                .json(Method::POST, "/v1/txn", Some(&txn(next)))
                .await
                .unwrap();
            if status == StatusCode::OK {
                break answer;
            }
            assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{answer}");
            assert!(
                std::time::Instant::now() < deadline,
                "still refused: {answer}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert_eq!(
            answer["index"].as_u64(),
            Some(txns.last().unwrap() + 1),
            "{answer}"
        );
        txns.push(answer["index"].as_u64().unwrap());
        (txns, chunks)
    });
    let dir = server.stop();
    let server = common::TestServer::start_in(dir, config);
    let client = server.http(None);
    server.rt.block_on(async {
        let mut txns = txns;
        assert_reads(&client, &txns, &chunks).await;
        let next = txns.len() as u64 + 1;
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&txn(next)))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        txns.push(answer["index"].as_u64().unwrap());
        let (status, _) = client
            .request(Method::POST, "/v1/chunks", Some(chunk(9999)))
            .await
            .unwrap();
        assert!(status.is_success(), "{status}");
        assert_reads(&client, &txns, &chunks).await;
    });
    drop(server.stop());
    drop(fs);
}
