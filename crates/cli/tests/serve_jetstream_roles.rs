//! Disk View servers on a shared JetStream log: a node appends, two `--role disk-view`
//! servers each hold one of two partitions and follow the stream. Each answers reads of its
//! own partition at the node's commit index (waiting for it), refuses reads of the other
//! partition with 421 `not_served_here` and appends with 421 `read_only_role`, and every
//! server shows all three in the catalog with their roles and ranges. The node truncates
//! the stream with two replicas per range required: its own Disk Views and the disk-view
//! servers' (from the catalog) together allow it. A disk-view server killed with SIGKILL
//! drops out of the catalog, truncation then names the under-replicated range and stops
//! short of what the dead server had, so on restart it catches up from the stream.

#![cfg(feature = "jetstream")]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use js_serve::Server;

use std::path::Path;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_core::{ItemKey, Partition};
use spindle_server::client::HttpClient;

const STREAM: &str = "ROLES";

/// Start `name` with truncation needing two replicas per range, every 200 ms.
fn start(dir: &Path, cluster: &nats_cluster::Cluster, name: &str, extra: &[&str]) -> Server {
    js_serve::start(
        dir,
        cluster,
        STREAM,
        name,
        (
            "truncate_replicas_min = 2\ntruncate_interval_ms = 200\n",
            "catalog_ttl_ms = 2000\n",
        ),
        extra,
        &[],
    )
}

/// The catalog as `client`'s server sees it: name → entry, once `want` holds (a minute at
/// most).
fn catalog_until(
    rt: &tokio::runtime::Runtime,
    client: &HttpClient,
    what: &str,
    want: impl Fn(&serde_json::Map<String, Value>) -> bool,
) -> serde_json::Map<String, Value> {
    let started = Instant::now();
    loop {
        let (_, status) = rt
            .block_on(client.json(Method::GET, "/v1/status", None))
            .unwrap();
        let members: serde_json::Map<String, Value> = status["cluster"]["catalog"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| (m["name"].as_str().unwrap().to_owned(), m["entry"].clone()))
            .collect();
        if want(&members) {
            return members;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: the catalog shows {members:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn disk_view_servers_serve_their_partitions_of_a_shared_log() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = start(dir.path(), &cluster, "alpha", &["--disk-partitions", "2"]);
    let servers: Vec<Server> = (0..2)
        .map(|i| {
            let part = format!("{i}/2");
            start(
                dir.path(),
                &cluster,
                &format!("dv{i}"),
                &["--role", "disk-view", "--partition", &part],
            )
        })
        .collect();
    let writer = HttpClient::new(&node.http, None);
    let readers: Vec<HttpClient> = servers
        .iter()
        .map(|s| HttpClient::new(&s.http, None))
        .collect();

    let mut written = Vec::new();
    for i in 0..40 {
        let id = format!("n{i}");
        let body = json!({"writes": [{"item": {"kind": "node", "id": id}, "value": {"i": i}}]});
        let (s, answer) = rt
            .block_on(writer.json(Method::POST, "/v1/txn", Some(&body)))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        written.push((id, i, answer["index"].as_u64().unwrap()));
    }
    let part_of = |id: &str| {
        let hash = ItemKey::node(id).unwrap().hash();
        (0..2)
            .find(|&p| Partition::nth(p, 2).contains(hash))
            .unwrap() as usize
    };
    let check_reads = |written: &[(String, i32, u64)]| {
        for (id, i, index) in written {
            let own = part_of(id);
            let path = format!("/v1/item?node={id}&min_index={index}&timeout_ms=60000");
            let (s, answer) = rt
                .block_on(readers[own].json(Method::GET, &path, None))
                .unwrap();
            assert_eq!(s, StatusCode::OK, "dv{own} reading {id}: {answer}");
            assert_eq!(answer["version"].as_u64(), Some(*index), "{answer}");
            assert_eq!(answer["value"]["i"], *i, "{answer}");
            let (s, answer) = rt
                .block_on(readers[1 - own].json(Method::GET, &path, None))
                .unwrap();
            assert_eq!(s, StatusCode::MISDIRECTED_REQUEST, "{answer}");
            assert_eq!(answer["error"], "not_served_here", "{answer}");
        }
    };
    check_reads(&written);
    assert!(
        written.iter().any(|w| part_of(&w.0) == 0) && written.iter().any(|w| part_of(&w.0) == 1)
    );

    // A disk-view server refuses appends.
    let body = json!({"writes": [{"item": {"kind": "node", "id": "x"}, "value": {}}]});
    let (s, answer) = rt
        .block_on(readers[0].json(Method::POST, "/v1/txn", Some(&body)))
        .unwrap();
    assert_eq!(s, StatusCode::MISDIRECTED_REQUEST, "{answer}");
    assert_eq!(answer["error"], "read_only_role", "{answer}");

    // Every server sees all three in the catalog, with roles and ranges.
    for client in std::iter::once(&writer).chain(&readers) {
        let members = catalog_until(&rt, client, "all three registered", |m| m.len() == 3);
        assert_eq!(members["alpha"]["role"], "node");
        for i in 0..2u64 {
            let e = &members[&format!("dv{i}")];
            assert_eq!(e["role"], "disk-view", "{e}");
            let views = e["views"].as_array().unwrap();
            assert_eq!(views.len(), 1, "{e}");
            let p = Partition::nth(i, 2);
            assert_eq!(views[0]["range"], json!([p.lo(), p.hi()]), "{e}");
        }
    }

    // Two replicas per range: the node's own Disk Views alone could not allow any
    // truncation; with the disk-view servers' persisted indexes from the catalog they do.
    let status_until = |what: &str, want: &dyn Fn(&Value) -> bool| -> Value {
        let started = Instant::now();
        loop {
            let (_, status) = rt
                .block_on(writer.json(Method::GET, "/v1/status", None))
                .unwrap();
            if want(&status) {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{what}: {}",
                status["truncation"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    status_until("truncation with the disk-view servers' replicas", &|s| {
        s["truncation"]["first_retained_index"].as_u64() > Some(1)
    });

    // dv1 dies: it drops out; its range is under-replicated and truncation stops; writes go
    // on; back, it catches up from the stream.
    let mut servers = servers;
    drop(servers.pop());
    catalog_until(&rt, &writer, "dv1 drops out", |m| {
        !m.contains_key("dv1") && m.contains_key("dv0")
    });
    let p1 = Partition::nth(1, 2);
    let blocked = format!(
        "hash range [{}, {}) has 1 of the 2 Disk View replicas needed",
        p1.lo(),
        p1.hi()
    );
    status_until("the under-replicated range named", &|s| {
        s["truncation"]["held_back_by"]
            .as_str()
            .is_some_and(|t| t.contains(&blocked))
    });
    for i in 40..60 {
        let id = format!("n{i}");
        let body = json!({"writes": [{"item": {"kind": "node", "id": id}, "value": {"i": i}}]});
        let (s, answer) = rt
            .block_on(writer.json(Method::POST, "/v1/txn", Some(&body)))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        written.push((id, i, answer["index"].as_u64().unwrap()));
    }
    servers.push(start(
        dir.path(),
        &cluster,
        "dv1",
        &["--role", "disk-view", "--partition", "1/2"],
    ));
    let readers: Vec<HttpClient> = servers
        .iter()
        .map(|s| HttpClient::new(&s.http, None))
        .collect();
    for (id, i, index) in &written {
        let own = part_of(id);
        let path = format!("/v1/item?node={id}&min_index={index}&timeout_ms=60000");
        let (s, answer) = rt
            .block_on(readers[own].json(Method::GET, &path, None))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "dv{own} reading {id}: {answer}");
        assert_eq!(answer["value"]["i"], *i, "{answer}");
    }
    drop(node);
}
