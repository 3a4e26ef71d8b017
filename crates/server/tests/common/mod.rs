//! A node served in-process on loopback ports chosen by the system, for the behaviour tests.

#![allow(dead_code)]

use std::sync::Arc;

use spindle_core::{Index, Transaction};
use spindle_server::client::HttpClient;
use spindle_server::serve::Bound;
use spindle_server::{Node, ServerConfig};
use tokio::sync::oneshot;

pub struct TestServer {
    pub node: Arc<Node>,
    pub bound: Bound,
    pub rt: tokio::runtime::Runtime,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub dir: tempfile::TempDir,
}

pub fn config(dir: &std::path::Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_owned(),
        http_listen: "127.0.0.1:0".parse().unwrap(),
        grpc_listen: "127.0.0.1:0".parse().unwrap(),
        log_segment_bytes: 1 << 20,
        ..ServerConfig::default()
    }
}

impl TestServer {
    pub fn start(edit: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        edit(&mut c);
        TestServer::start_in(dir, c)
    }

    pub fn start_in(dir: tempfile::TempDir, c: ServerConfig) -> TestServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let node = Node::open(c).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let done = rt.spawn(spindle_server::serve::serve(
            node.clone(),
            async move {
                let _ = stopped.await;
            },
            move |b| bound_tx.send(b).unwrap(),
        ));
        let bound = bound_rx.recv().unwrap();
        TestServer {
            node,
            bound,
            rt,
            stop: Some(stop),
            done: Some(done),
            dir,
        }
    }

    /// Append `txns` and wait (30 s at most: a hang guard) until the node's first Disk
    /// View has applied them; returns the durable index.
    pub async fn append_and_apply(&self, txns: &[Transaction]) -> Index {
        for r in self.node.log.append_many(txns).await {
            r.unwrap();
        }
        let durable = self.node.log.durable_index();
        self.node
            .disks
            .iter()
            .next()
            .expect("the node keeps a Disk View")
            .view
            .wait_applied_async(durable, std::time::Duration::from_secs(30))
            .await
            .unwrap();
        durable
    }

    pub fn http(&self, token: Option<&str>) -> HttpClient {
        HttpClient::new(&self.bound.http.to_string(), token.map(str::to_owned))
    }

    /// Graceful shutdown, as on SIGTERM; returns the data directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        self.stop.take().unwrap().send(()).unwrap();
        let done = self.done.take().unwrap();
        self.rt.block_on(done).unwrap().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }
}

/// A chunk of `bytes` bytes (a repeating pattern), stored over HTTP; the chunk and its id.
pub fn store_chunk(server: &TestServer, bytes: usize) -> (Vec<u8>, String) {
    let chunk: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let client = server.http(None);
    let id = server.rt.block_on(async {
        let (status, answer) = client
            .request(hyper::Method::POST, "/v1/chunks", Some(chunk.clone()))
            .await
            .unwrap();
        assert!(status.is_success(), "{status}");
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        answer["id"].as_str().unwrap().to_owned()
    });
    (chunk, id)
}

/// Append `txn` (its JSON) over HTTP, which must succeed; its commit index.
pub async fn post_txn(client: &HttpClient, txn: &serde_json::Value) -> u64 {
    let (status, answer) = client
        .json(hyper::Method::POST, "/v1/txn", Some(txn))
        .await
        .unwrap();
    assert_eq!(status, hyper::StatusCode::OK, "{answer}");
    answer["index"].as_u64().unwrap()
}

/// Open `GET /v1/status/stream` on a connection of its own (reads time out after 60 s);
/// the reader is past the answer's status line, which must be 200.
pub fn open_status_stream(
    addr: std::net::SocketAddr,
) -> std::io::Lines<std::io::BufReader<std::net::TcpStream>> {
    use std::io::{BufRead, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    conn.write_all(b"GET /v1/status/stream HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut lines = std::io::BufReader::new(conn).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    lines
}
