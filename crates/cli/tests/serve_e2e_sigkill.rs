//! End to end: `spindle serve` as a real process takes writes over HTTP, serves a boot over
//! gRPC (a carousel ride of every Disk View to a cut), is killed with SIGKILL in the middle
//! of concurrent writes, restarts on the same data directory, and still has every write it
//! acknowledged (invariant 1), at the index it acknowledged.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::{grpc_connect, iterate, HttpClient};
use spindle_server::proto::IterateRequest;
use spindle_view::frame::{Frame, FrameReader};

struct Server {
    child: Child,
    http: String,
    grpc: String,
}

impl Drop for Server {
    /// A failed assertion must not leave a server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir)
        .args(["--index", "by_name=/name"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
            .to_owned()
    };
    Server {
        http: field("http="),
        grpc: field("grpc="),
        child,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Acknowledged writes: node id → (commit index, value of `n`).
type Acked = Arc<Mutex<BTreeMap<String, (u64, u64)>>>;

async fn writer(client: HttpClient, w: usize, acked: Acked, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = format!("w{w}-{}", n % 50);
        // The node is written last, so its version is the commit index.
        let body = json!({"writes": [
            {"item": {"kind": "edge", "from": id, "label": "by", "to": format!("writer{w}")}, "value": {}},
            {"item": {"kind": "node", "id": id}, "value": {"name": format!("writer {w}"), "n": n}}
        ]});
        match client.json(Method::POST, "/v1/txn", Some(&body)).await {
            Ok((StatusCode::OK, answer)) => {
                let index = answer["index"].as_u64().unwrap();
                acked.lock().unwrap().insert(id, (index, n));
            }
            Ok((status, answer)) => panic!("append refused: {status} {answer}"),
            // The server was killed: this write's outcome is unknown, and it was not acked.
            Err(_) => return,
        }
    }
}

/// The cut of the Disk View (of 4) that holds node `id`.
fn cut_of(cuts: &[u64; 4], id: &str) -> u64 {
    let hash = spindle_core::ItemKey::node(id).unwrap().hash();
    let view = (0..4)
        .find(|&i| spindle_core::Partition::nth(i, 4).contains(hash))
        .unwrap();
    cuts[view as usize]
}

/// Ride every Disk View's carousel; return node id → (version, n) and each view's cut.
async fn boot_over_grpc(grpc: &str) -> (BTreeMap<String, (u64, u64)>, [u64; 4]) {
    let mut client = grpc_connect(grpc, None).await.unwrap();
    let mut out = BTreeMap::new();
    let mut cuts = [0; 4];
    for (view, view_cut) in cuts.iter_mut().enumerate() {
        let req = IterateRequest {
            view: format!("disk-{view}"),
            latest_only: true,
            kinds: spindle_server::proto::Kinds::Nodes as i32,
            ..IterateRequest::default()
        };
        let mut stream = iterate(&mut client, req).await.unwrap();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            buf.extend_from_slice(&chunk.frames);
        }
        let mut ended = false;
        for frame in FrameReader::new(&buf) {
            match frame.unwrap() {
                Frame::Version(v) => {
                    let spindle_core::ItemKey::Node { id } = v.key else {
                        panic!("kinds=nodes sent {}", v.key)
                    };
                    let value: Value = serde_json::from_str(v.value.as_deref().unwrap()).unwrap();
                    out.insert(id, (v.index.get(), value["n"].as_u64().unwrap()));
                }
                Frame::End(end) => {
                    *view_cut = end.cut.get();
                    ended = true;
                }
            }
        }
        assert!(ended, "disk-{view}: the ride ended without its cut");
    }
    (out, cuts)
}

#[test]
fn acknowledged_writes_survive_sigkill_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let acked: Acked = Arc::default();
    let mut server = start(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let client = HttpClient::new(&server.http, None);
            rt.spawn(writer(client, w, acked.clone(), stop.clone()))
        })
        .collect();
    // Let writes flow, then boot a view over gRPC while they continue.
    rt.block_on(async {
        while acked.lock().unwrap().len() < 200 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    });
    let before_boot = acked.lock().unwrap().clone();
    let (booted, cuts) = rt.block_on(boot_over_grpc(&server.grpc));
    assert!(!booted.is_empty());
    for (id, (version, _)) in &booted {
        let cut = cut_of(&cuts, id);
        assert!(*version <= cut, "{id} at {version} is above the cut {cut}");
    }
    // Every write acknowledged before the boot started is at or below its view's cut: the
    // boot holds it (or a newer version of the same node).
    for (id, (index, _)) in &before_boot {
        if *index <= cut_of(&cuts, id) {
            let (version, _) = booted
                .get(id)
                .unwrap_or_else(|| panic!("{id} missing from the boot"));
            assert!(
                version >= index,
                "{id}: boot has {version}, {index} was acked"
            );
        }
    }
    // Kill the server in the middle of writes.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let max_acked = acked.values().map(|(i, _)| *i).max().unwrap();

    let mut server = start(dir.path());
    let client = HttpClient::new(&server.http, None);
    rt.block_on(async {
        for (id, (index, n)) in &acked {
            // as_of the acknowledged index: exactly that write, even if newer ones landed.
            let path = format!("/v1/item?node={id}&as_of={index}&timeout_ms=30000");
            let (status, answer) = client.json(Method::GET, &path, None).await.unwrap();
            assert_eq!(status, StatusCode::OK, "{id}: {answer}");
            assert_eq!(answer["version"].as_u64(), Some(*index), "{id}: {answer}");
            assert_eq!(answer["value"]["n"].as_u64(), Some(*n), "{id}: {answer}");
        }
        // The Memory View rebuilt itself from the Disk Views and sees the same state.
        let items: Vec<Value> = acked
            .keys()
            .map(|id| json!({"kind": "node", "id": id}))
            .collect();
        let body = json!({"items": items, "min_index": max_acked, "timeout_ms": 30000});
        let (status, answer) = loop {
            let (status, answer) = client
                .json(Method::POST, "/v1/multiget", Some(&body))
                .await
                .unwrap();
            if status != StatusCode::SERVICE_UNAVAILABLE {
                break (status, answer);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(status, StatusCode::OK, "{answer}");
        for (value, (id, (index, _))) in answer["values"].as_array().unwrap().iter().zip(&acked) {
            assert!(
                value["version"].as_u64().unwrap() >= *index,
                "{id}: {value}"
            );
        }
        // And it keeps taking writes.
        let body =
            json!({"writes": [{"item": {"kind": "node", "id": "after"}, "value": {"n": 1}}]});
        let (status, answer) = client
            .json(Method::POST, "/v1/txn", Some(&body))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert!(answer["index"].as_u64().unwrap() > max_acked);
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
