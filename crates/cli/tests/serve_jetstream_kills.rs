//! `spindle serve --jetstream`: the node's log on a real 3-server NATS JetStream cluster.
//! Writers append over HTTP; the stream's leader server is SIGKILLed mid-load and writes go
//! on through the failover; then the node itself is SIGKILLed mid-load, the NATS server
//! comes back, and the node restarts on the same data directory and stream. Every
//! acknowledged transaction is then read back at its own index with its value (from the
//! Disk Views, which rebuilt what they had not persisted from the stream), no transaction
//! is partly visible (each writes an edge and then a node, so the edge's version is the
//! node's minus one), and the node keeps taking writes.

#![cfg(feature = "jetstream")]

#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;
use spindle_server::client::HttpClient;

const WRITERS: usize = 4;
const STREAM: &str = "SERVE";

struct Server {
    child: Child,
    http: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, cluster: &nats_cluster::Cluster) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spindle"));
    cmd.args([
        "serve",
        "--http-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
        "--disk-partitions",
        "2",
        "--jetstream-stream",
        STREAM,
    ])
    .arg("--data-dir")
    .arg(dir);
    for url in cluster.servers() {
        cmd.args(["--jetstream", &url]);
    }
    for url in cluster.monitors() {
        cmd.args(["--jetstream-monitor", &url]);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http="))
        .unwrap_or_else(|| panic!("no http= in {line:?}: the node did not start"))
        .to_owned();
    Server { child, http }
}

/// Every acknowledged transaction: (node id, commit index, n).
type Acked = Arc<Mutex<Vec<(String, u64, u64)>>>;

async fn writer(client: HttpClient, w: usize, acked: Acked, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = format!("w{w}-{}", n % 20);
        let body = json!({"writes": [
            {"item": {"kind": "edge", "from": id, "label": "by", "to": format!("writer{w}")}, "value": {"n": n}},
            {"item": {"kind": "node", "id": id}, "value": {"n": n}}
        ]});
        match client.json(Method::POST, "/v1/txn", Some(&body)).await {
            Ok((StatusCode::OK, answer)) => {
                let index = answer["index"].as_u64().unwrap();
                acked.lock().unwrap().push((id, index, n));
            }
            // The node was killed (no answer), or its log failed while a NATS server was
            // down (an error answer): the outcome is unknown and the writer stops.
            Ok(_) | Err(_) => return,
        }
    }
}

fn wait_acks(rt: &tokio::runtime::Runtime, acked: &Acked, at_least: usize) {
    rt.block_on(async {
        for _ in 0..60_000 {
            if acked.lock().unwrap().len() >= at_least {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("fewer than {at_least} acknowledgements after 5 minutes");
    });
}

/// The server that leads `stream`, from /jsz.
fn stream_leader(cluster: &nats_cluster::Cluster) -> usize {
    for node in &cluster.nodes {
        let Some(body) = nats_cluster::http_get(node.http_port, "/jsz?streams=true") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        for account in v["account_details"].as_array().into_iter().flatten() {
            for s in account["stream_detail"].as_array().into_iter().flatten() {
                if s["name"] == STREAM {
                    if let Some(leader) = s["cluster"]["leader"].as_str() {
                        return cluster.node_named(leader);
                    }
                }
            }
        }
    }
    0
}

#[test]
fn acknowledged_writes_survive_a_nats_server_kill_and_a_node_kill() {
    let mut cluster = nats_cluster::Cluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let acked: Acked = Arc::default();
    let server = start(dir.path(), &cluster);
    let stop = Arc::new(AtomicBool::new(false));
    let spawn_writers = |http: &str| -> Vec<_> {
        (0..WRITERS)
            .map(|w| {
                let client = HttpClient::new(http, None);
                rt.spawn(writer(client, w, acked.clone(), stop.clone()))
            })
            .collect()
    };
    let writers = spawn_writers(&server.http);
    wait_acks(&rt, &acked, 200);
    // The stream's leader dies mid-load; appends go on through the failover.
    let victim = stream_leader(&cluster);
    cluster.kill(victim);
    let after_kill = acked.lock().unwrap().len();
    wait_acks(&rt, &acked, after_kill + 200);
    // Then the node dies mid-load.
    drop(server);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).unwrap();
    }
    cluster.restart(victim);
    let acked_all = acked.lock().unwrap().clone();
    let max_acked = acked_all.iter().map(|a| a.1).max().unwrap();

    // The node comes back (it waits for its own appender lease to expire).
    let server = start(dir.path(), &cluster);
    let client = HttpClient::new(&server.http, None);
    rt.block_on(async {
        for (id, index, n) in &acked_all {
            let path = format!("/v1/item?node={id}&as_of={index}&timeout_ms=60000");
            let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
            assert_eq!(status, StatusCode::OK, "{id}@{index}: {answer}");
            assert_eq!(answer["version"].as_u64(), Some(*index), "{id}: {answer}");
            assert_eq!(answer["value"]["n"].as_u64(), Some(*n), "{id}: {answer}");
        }
        // No transaction partly visible: for every node, its edge was written just before
        // it in the same transaction, with the same `n`.
        let ids: std::collections::BTreeSet<&String> = acked_all.iter().map(|a| &a.0).collect();
        for id in ids {
            let w = &id[1..id.find('-').unwrap()];
            let (s, node) = client
                .json(
                    Method::GET,
                    &format!("/v1/item?node={id}&min_index={max_acked}&timeout_ms=60000"),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(s, StatusCode::OK, "{node}");
            let (s, edge) = client
                .json(
                    Method::GET,
                    &format!("/v1/item?from={id}&label=by&to=writer{w}&min_index={max_acked}"),
                    None,
                )
                .await
                .unwrap();
            assert_eq!(s, StatusCode::OK, "{edge}");
            assert_eq!(
                edge["version"].as_u64().unwrap() + 1,
                node["version"].as_u64().unwrap(),
                "{id}: edge {edge} and node {node} are not one transaction"
            );
            assert_eq!(edge["value"]["n"], node["value"]["n"], "{id}");
        }
        let (_, status) = client.json(Method::GET, "/v1/status", None).await.unwrap();
        assert_eq!(status["log"]["kind"], "jetstream", "{status}");
        // It keeps taking writes, above everything acknowledged before.
        let body =
            json!({"writes": [{"item": {"kind": "node", "id": "after"}, "value": {"n": 1}}]});
        let (s, answer) = client
            .json(Method::POST, "/v1/txn", Some(&body))
            .await
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        assert!(answer["index"].as_u64().unwrap() > max_acked);
    });
}
