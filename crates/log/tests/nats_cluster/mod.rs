//! A real NATS JetStream cluster for tests: N `nats-server` processes on loopback with free
//! ports, `sync_interval: always`, `max_payload: 8MB` and `limits.batch.max_msgs: 10000`,
//! each in its own temp dir, with SIGKILL and restart of single servers; torn down on drop.
//!
//! The binary is `$SPINDLE_NATS_SERVER`, or where scripts/nats.sh installs it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use spindle_log::jetstream::JetStreamConfig;

/// The pinned version scripts/nats.sh installs.
const NATS_SERVER_VERSION: &str = "2.15.1";
/// How long a cluster may take to elect a JetStream meta leader.
const READY_WAIT: Duration = Duration::from_secs(60);

/// Where the nats-server binary is; panics with the fix when it is missing.
pub fn nats_server_bin() -> PathBuf {
    if let Ok(p) = std::env::var("SPINDLE_NATS_SERVER") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "SPINDLE_NATS_SERVER={} does not exist; run scripts/nats.sh",
            p.display()
        );
        return p;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME is set");
    let p = cache
        .join("spindle")
        .join(format!("nats-server-{NATS_SERVER_VERSION}"))
        .join("bin/nats-server");
    assert!(
        p.is_file(),
        "nats-server is not installed at {}: run scripts/nats.sh (scripts/test.sh does) or set SPINDLE_NATS_SERVER",
        p.display()
    );
    p
}

/// `n` distinct free ports: every listener is held until all are chosen, so no port is
/// handed out twice (two servers given one port would leave the cluster never ready).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// `GET http://127.0.0.1:<port><path>`: the body, or None if the server is not up.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub client_port: u16,
    pub http_port: u16,
    pub conf: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

/// A running cluster; every server is killed when it drops.
#[derive(Debug)]
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    bin: PathBuf,
}

/// A server config line set; `sync_always: false` leaves the 2-minute default.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub sync_always: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { sync_always: true }
    }
}

impl Cluster {
    /// Start `n` servers (n ≥ 1; a cluster block when n > 1) and wait for a meta leader.
    pub fn start(n: usize) -> Cluster {
        Self::start_with(n, Options::default())
    }

    pub fn start_with(n: usize, options: Options) -> Cluster {
        let bin = nats_server_bin();
        let dir = tempfile::Builder::new()
            .prefix("spindle-nats-")
            .tempdir_in(scratch())
            .unwrap();
        let ports: Vec<(u16, u16, u16)> = free_ports(3 * n)
            .chunks(3)
            .map(|p| (p[0], p[1], p[2]))
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|p| format!("    nats://127.0.0.1:{}", p.2))
            .collect();
        let mut nodes = Vec::new();
        for (i, &(client, http, cluster)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let store = dir.path().join(format!("data{}", i + 1));
            let sync = if options.sync_always {
                "  sync_interval: always\n"
            } else {
                ""
            };
            let cluster_block = if n > 1 {
                format!(
                    "cluster {{\n  name: spindle\n  listen: 127.0.0.1:{cluster}\n  routes: [\n{}\n  ]\n}}\n",
                    routes.join("\n")
                )
            } else {
                String::new()
            };
            let conf_text = format!(
                "max_payload: 8MB\nserver_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{http}\n\
                 jetstream {{\n  store_dir: {}\n{sync}  limits {{\n    batch {{ max_msgs: 10000 }}\n  }}\n}}\n{cluster_block}",
                store.display()
            );
            let conf = dir.path().join(format!("{name}.conf"));
            std::fs::write(&conf, conf_text).unwrap();
            let log = dir.path().join(format!("{name}.log"));
            nodes.push(Node {
                name,
                client_port: client,
                http_port: http,
                conf,
                log,
                child: None,
            });
        }
        let mut c = Cluster { dir, nodes, bin };
        for i in 0..n {
            c.start_node(i);
        }
        c.wait_ready();
        c
    }

    fn start_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        assert!(node.child.is_none(), "{} is running", node.name);
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(&node.conf)
            .arg("-l")
            .arg(&node.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.display()));
        node.child = Some(child);
    }

    /// Wait until every running server answers, takes client connections, and the
    /// JetStream meta group has a leader with all of them current.
    pub fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            if self.ready() {
                return;
            }
            assert!(
                started.elapsed() < READY_WAIT,
                "the NATS cluster did not become ready within {READY_WAIT:?}; logs in {}",
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ready(&self) -> bool {
        self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
            // The monitoring port can answer before the client port listens.
            if TcpStream::connect(("127.0.0.1", n.client_port)).is_err() {
                return false;
            }
            let Some(body) = http_get(n.http_port, "/jsz") else {
                return false;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
                return false;
            };
            if self.nodes.len() == 1 {
                return v["config"].is_object();
            }
            // A leader, and (on the leader) every other server a current follower.
            let meta = &v["meta_cluster"];
            let Some(leader) = meta["leader"].as_str().filter(|l| !l.is_empty()) else {
                return false;
            };
            if leader != n.name {
                return true;
            }
            let running = self.nodes.iter().filter(|n| n.child.is_some()).count();
            let current = meta["replicas"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| {
                    r["current"].as_bool() == Some(true) && r["offline"].as_bool() != Some(true)
                })
                .count();
            current + 1 >= running
        })
    }

    /// SIGKILL server `i` and reap it.
    pub fn kill(&mut self, i: usize) {
        let mut child = self.nodes[i].child.take().expect("the server runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Start server `i` again on its own store and wait for the cluster.
    pub fn restart(&mut self, i: usize) {
        self.start_node(i);
        self.wait_ready();
    }

    /// Start every killed server again, each on its own store, and wait for the cluster
    /// (one at a time would wait for a leader a minority cannot elect).
    pub fn restart_killed(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.start_node(i);
            }
        }
        self.wait_ready();
    }

    /// The process ids of the servers running now.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref().map(Child::id))
            .collect()
    }

    pub fn servers(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.client_port))
            .collect()
    }

    pub fn monitors(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("http://127.0.0.1:{}", n.http_port))
            .collect()
    }

    /// A log config for this cluster with short bounds, on stream `stream`.
    pub fn config(&self, stream: &str) -> JetStreamConfig {
        let mut c = JetStreamConfig::new(self.servers(), self.monitors());
        c.stream = stream.to_owned();
        c.replicas = self.nodes.len().min(3);
        c.lease_ttl = Duration::from_secs(2);
        c.lease_wait = Duration::from_secs(10);
        c.ack_timeout = Duration::from_secs(2);
        c.unavailable_wait = Duration::from_secs(30);
        c
    }

    /// `config` with a lease of 60 s taken within 1 s: an appender whose lease is taken
    /// behind its back does not notice by renewal while a test runs.
    pub fn long_lease_config(&self, stream: &str) -> JetStreamConfig {
        let mut c = self.config(stream);
        c.lease_ttl = Duration::from_secs(60);
        c.lease_wait = Duration::from_secs(1);
        c
    }

    /// The index of the node named `name`.
    pub fn node_named(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .expect("a node of this cluster")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Where clusters keep their stores: `$SPINDLE_TEST_SCRATCH` or the system temp dir.
fn scratch() -> PathBuf {
    std::env::var_os("SPINDLE_TEST_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A client of the cluster's first server and a stream made with the log's own stream
/// settings (`replicas` replicas, subjects `subjects`), for experiments that publish to
/// JetStream directly.
pub async fn experiment_stream(
    cluster: &Cluster,
    name: &str,
    subjects: &str,
    replicas: usize,
) -> async_nats::Client {
    let client = async_nats::connect(cluster.servers()[0].clone())
        .await
        .unwrap();
    async_nats::jetstream::new(client.clone())
        .create_stream(spindle_log::jetstream::check::stream_config(
            name, subjects, replicas,
        ))
        .await
        .unwrap();
    client
}

/// The headers of message `i` (from 0) of an atomic batch of `n` messages: the batch's id
/// and the message's sequence, the commit on the last message and, on the first when
/// `first` is given, the stream's expected last sequence and a message id.
pub fn batch_headers(
    batch_id: &str,
    i: usize,
    n: usize,
    first: Option<(u64, &str)>,
) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Batch-Id", batch_id);
    headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
    if let (0, Some((expected, msg_id))) = (i, first) {
        headers.insert("Nats-Expected-Last-Sequence", expected.to_string().as_str());
        headers.insert("Nats-Msg-Id", msg_id);
    }
    if i + 1 == n {
        headers.insert("Nats-Batch-Commit", "1");
    }
    headers
}

/// CPU seconds (user + system) the processes `pids` have used so far.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks: u64 = pids
        .iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .unwrap()
                .split_whitespace()
                .collect();
            fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
        })
        .sum();
    ticks as f64 / 100.0
}

/// Send message `headers` of an atomic batch: published, or when `commit` (the batch's
/// last message) sent as a request whose reply, the batch's ack, must not be an error.
pub async fn send_batch_message(
    client: &async_nats::Client,
    subject: String,
    headers: async_nats::HeaderMap,
    payload: bytes::Bytes,
    commit: bool,
) {
    if !commit {
        client
            .publish_with_headers(subject, headers, payload)
            .await
            .unwrap();
        return;
    }
    let reply = client
        .request_with_headers(subject, headers, payload)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&reply.payload);
    assert!(!text.contains("error"), "{text}");
}

/// The name of the server leading `stream`, asked through `client`.
pub fn stream_leader_name(client: &async_nats::Client, stream: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(client.clone());
        let s = js.get_stream(stream).await.unwrap();
        let info = s.cached_info();
        info.cluster.as_ref().unwrap().leader.clone().unwrap()
    })
}

/// `config` with only the cluster's server `i` to connect to.
pub fn through(cluster: &Cluster, config: &JetStreamConfig, i: usize) -> JetStreamConfig {
    let mut c = config.clone();
    c.servers = vec![cluster.servers()[i].clone()];
    c
}
