//! A node on the JetStream log registers in the stream's catalog with its name, role,
//! addresses and each Disk View's range, applied index and checksum (renewed, so the index it
//! shows follows the writes); another process on the stream sees it, and a replica of the same
//! range that publishes another checksum at that index is named in the status and left out
//! of truncation. When the node is SIGKILLed
//! its entry drops out by itself once not renewed for `catalog_ttl_ms`; when it stops on
//! SIGTERM it leaves the catalog.

#![cfg(feature = "jetstream")]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_log::jetstream::catalog::Registration;
use spindle_log::jetstream::JetStreamLog;
use spindle_server::client::HttpClient;

use js_serve::Server;

const STREAM: &str = "CATALOG_T";
const TTL: Duration = Duration::from_millis(3000);

/// The node "alpha" on `STREAM`, with 2 Disk Views and the catalog ttl `TTL`; killed when
/// dropped (a failing test leaves none behind).
fn start(dir: &Path, cluster: &nats_cluster::Cluster) -> (Server, String) {
    let ttl = format!("catalog_ttl_ms = {}\n", TTL.as_millis());
    let server = js_serve::start(
        dir,
        cluster,
        STREAM,
        "alpha",
        ("", &ttl),
        &["--disk-partitions", "2"],
        &[],
    );
    let http = server.http.clone();
    (server, http)
}

/// Poll the observer's view of the catalog until `want` holds for alpha's entry (or its
/// absence); panics with the last view after a minute.
fn wait_alpha(observer: &Registration, what: &str, want: impl Fn(Option<&Value>) -> bool) {
    let started = Instant::now();
    loop {
        let members = observer.members();
        let alpha = members.iter().find(|m| m.key == "alpha");
        let entry: Option<Value> = alpha.map(|m| serde_json::from_slice(&m.value).unwrap());
        if want(entry.as_ref()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: the catalog still shows {entry:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_registers_renews_and_drops_out() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let (mut node, http) = start(dir.path(), &cluster);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = HttpClient::new(&http, None);

    // Its own status names it and shows its entry.
    let (s, status) = rt
        .block_on(client.json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(s, StatusCode::OK);
    assert_eq!(status["cluster"]["name"], "alpha", "{status}");
    let mine = &status["cluster"]["catalog"][0];
    assert_eq!(mine["name"], "alpha", "{status}");
    assert_eq!(mine["entry"]["role"], "node");
    assert_eq!(mine["entry"]["http"], http.as_str());
    let ranges: Vec<&Value> = mine["entry"]["views"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "disk")
        .map(|v| &v["range"])
        .collect();
    assert_eq!(
        ranges,
        [&json!([0u64, 1u64 << 31]), &json!([1u64 << 31, 1u64 << 32])]
    );

    // Another process on the stream sees it, and its applied indexes follow the writes.
    let mut reader_config = cluster.config(STREAM);
    reader_config.replicas = 1;
    let reader = JetStreamLog::open_reader(reader_config).unwrap();
    let observer = reader
        .register("observer", TTL, || b"{\"role\":\"observer\"}".to_vec())
        .unwrap();
    let mut last = 0;
    for i in 0..20 {
        let body = json!({"writes": [{"item": {"kind": "node", "id": format!("n{i}")}, "value": {"i": i}}]});
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&body)))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        last = answer["index"].as_u64().unwrap();
    }
    wait_alpha(
        &observer,
        "alpha's applied indexes reach the last write",
        |e| {
            e.is_some_and(|e| {
                e["durable_index"].as_u64() == Some(last)
                    && e["views"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|v| v["kind"] == "disk")
                        .all(|v| v["applied_index"].as_u64() == Some(last))
            })
        },
    );
    assert!(observer.members().iter().any(|m| m.key == "observer"));

    // Each Disk View publishes its checksum; a replica of the same range that publishes
    // another checksum at the same index is named, and truncation does not count it.
    let (_, status) = rt
        .block_on(client.json(Method::GET, "/v1/status", None))
        .unwrap();
    let disk0 = status["views"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "disk-0")
        .unwrap()
        .clone();
    assert_eq!(disk0["applied_index"].as_u64(), Some(last), "{disk0}");
    let sum = disk0["checksum"].as_str().unwrap().to_owned();
    assert_eq!(sum.len(), 32, "{disk0}");
    assert_eq!(status["cluster"]["replica_disagreements"], json!([]));
    let forged = if sum.starts_with('0') { "1" } else { "0" }.repeat(32);
    let twin_entry = json!({"role": "disk-view", "views": [{
        "id": "disk-0", "kind": "disk", "range": disk0["range"], "applied_index": last,
        "persisted_index": last, "checksum": forged, "checkpoints": []}]});
    let twin = reader
        .register("twin", TTL, move || twin_entry.to_string().into_bytes())
        .unwrap();
    let started = Instant::now();
    let status = loop {
        let (_, status) = rt
            .block_on(client.json(Method::GET, "/v1/status", None))
            .unwrap();
        if status["cluster"]["replica_disagreements"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
        {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no disagreement shown: {}",
            status["cluster"]
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let found = &status["cluster"]["replica_disagreements"][0];
    assert_eq!(found["range"], disk0["range"], "{found}");
    assert_eq!(found["index"].as_u64(), Some(last), "{found}");
    assert_eq!(found["suspects"], json!(["alpha/disk-0", "twin/disk-0"]));
    let held = status["truncation"]["held_back_by"].as_str().unwrap();
    assert!(
        held.contains(&format!(
            "not counted: twin/disk-0 (checksum differs at index {last})"
        )),
        "{held}"
    );
    twin.close();

    // SIGKILL: nobody renews the entry, and it drops out after the TTL.
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    wait_alpha(&observer, "a killed node drops out", |e| e.is_none());

    // Back (after its appender lease expires), registered again; SIGTERM: it leaves.
    let (mut node, _) = start(dir.path(), &cluster);
    wait_alpha(&observer, "the restarted node registers", |e| e.is_some());
    let pid = node.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(
        node.child.wait().unwrap().success(),
        "SIGTERM is a clean stop"
    );
    wait_alpha(&observer, "a stopped node leaves", |e| e.is_none());
    observer.close();
    drop(reader);
}
