//! An api server on a shared JetStream log (`--role api`) with two Disk View servers per
//! partition: appends through it are acknowledged at their stream index, reads of one item
//! are forwarded to a Disk View server holding its partition (waiting for the index there),
//! and its Memory and Index Views boot from the Disk View servers over gRPC. Restarted with
//! a slowed boot, the replicas its Memory View boots from are SIGKILLed mid-boot: the boot
//! starts those sources over on the other replicas and finishes, its state equals what was
//! written, and reads go on through the surviving replicas.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use js_serve::Server;

use std::path::Path;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

const STREAM: &str = "API";
const ITEMS: usize = 3000;
const PER_TXN: usize = 100;
/// Bytes of padding in each value: 24 MB in all, far more than a gRPC stream's flow-control
/// window and the socket buffers hold, so a source killed mid-boot breaks its stream.
const PAD: usize = 8000;

/// Start `name` with 64 KiB iteration messages: a boot takes a few hundred, so it can be
/// caught midway.
fn start(
    dir: &Path,
    cluster: &nats_cluster::Cluster,
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    js_serve::start(
        dir,
        cluster,
        STREAM,
        name,
        ("iter_chunk_bytes = 65536\n", "catalog_ttl_ms = 3000\n"),
        args,
        env,
    )
}

/// `client`'s status once `want` holds (`js_serve::status_until`).
fn status_until(
    rt: &tokio::runtime::Runtime,
    client: &HttpClient,
    what: &str,
    want: impl Fn(&Value) -> bool,
) -> Value {
    js_serve::status_until(rt, client, what, want, |s| {
        format!("boots {} cluster {}", s["boots"], s["cluster"])
    })
}

fn boot_of<'a>(status: &'a Value, view: &str) -> &'a Value {
    status["boots"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["view"] == view)
        .unwrap_or(&Value::Null)
}

fn dv_args(i: usize) -> Vec<String> {
    vec![
        "--role".into(),
        "disk-view".into(),
        "--partition".into(),
        format!("{i}/2"),
    ]
}

#[test]
fn api_server_reads_and_boots_through_disk_view_servers() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The appender creates the stream; the Disk View servers follow it.
    let api_args = [
        "--role",
        "api",
        "--disk-partitions",
        "2",
        "--index",
        "by_name=/name",
    ];
    let api = start(dir.path(), &cluster, "api", &api_args, &[]);
    let mut servers: Vec<(String, Server)> = Vec::new();
    for (name, part) in [("dv0a", 0), ("dv0b", 0), ("dv1a", 1), ("dv1b", 1)] {
        let args = dv_args(part);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        servers.push((
            name.to_owned(),
            start(dir.path(), &cluster, name, &args, &[]),
        ));
    }
    let client = HttpClient::new(&api.http, None);
    // Reads find the Disk View servers through the catalog, as a user would wait for them.
    status_until(&rt, &client, "every server in the catalog", |s| {
        s["cluster"]["catalog"].as_array().map(Vec::len) == Some(5)
    });

    let mut last = 0;
    let mut index_of = vec![0u64; ITEMS];
    for t in 0..ITEMS / PER_TXN {
        let writes: Vec<Value> = (t * PER_TXN..(t + 1) * PER_TXN)
            .map(|i| {
                json!({"item": {"kind": "node", "id": format!("n{i}")},
                            "value": {"name": format!("name-{i}"), "i": i, "pad": "p".repeat(PAD)}})
            })
            .collect();
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&json!({"writes": writes}))))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        last = answer["index"].as_u64().unwrap();
        // A transaction's records take consecutive indexes, ending at the one answered.
        for (k, i) in (t * PER_TXN..(t + 1) * PER_TXN).enumerate() {
            index_of[i] = last + 1 + k as u64 - PER_TXN as u64;
        }
    }

    // Reads of one item go to a Disk View server of its partition and wait there.
    let read_all = |client: &HttpClient, step: usize| {
        for i in (0..ITEMS).step_by(step) {
            let path = format!(
                "/v1/item?node=n{i}&min_index={}&timeout_ms=60000",
                index_of[i]
            );
            let (s, answer) = rt.block_on(client.json(Method::GET, &path, None)).unwrap();
            assert_eq!(s, StatusCode::OK, "reading n{i}: {answer}");
            assert_eq!(answer["value"]["i"], i, "{answer}");
            assert_eq!(answer["version"].as_u64(), Some(index_of[i]), "{answer}");
        }
        let (s, answer) = rt
            .block_on(client.json(Method::GET, "/v1/item?node=never", None))
            .unwrap();
        assert_eq!(s, StatusCode::NOT_FOUND, "{answer}");
        assert_eq!(answer["error"], "not_found", "{answer}");
    };
    read_all(&client, 7);
    let (s, history) = rt
        .block_on(client.json(Method::GET, "/v1/history?node=n5", None))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{history}");
    assert_eq!(
        history["versions"].as_array().unwrap().len(),
        1,
        "{history}"
    );

    // The api server holds no Disk View; its Memory View boots from the servers and follows
    // the stream, so a multiget sees every write.
    let multiget_all = |client: &HttpClient| {
        let items: Vec<Value> = (0..ITEMS)
            .map(|i| json!({"kind": "node", "id": format!("n{i}")}))
            .collect();
        let body = json!({"items": items, "min_index": last, "timeout_ms": 60000});
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/multiget", Some(&body)))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        let values = answer["values"].as_array().unwrap();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(v["value"]["i"], i, "n{i}: {v}");
            assert_eq!(v["version"].as_u64(), Some(index_of[i]), "n{i}: {v}");
        }
        // The Index View takes no wait: ask until it has applied the last write.
        let path = format!("/v1/index/by_name?value=%22name-{}%22", ITEMS - 1);
        let started = Instant::now();
        let answer = loop {
            let (s, answer) = rt.block_on(client.json(Method::GET, &path, None)).unwrap();
            if s == StatusCode::OK && answer["applied_index"].as_u64() >= Some(last) {
                break answer;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "{s} {answer}");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(
            answer["nodes"],
            json!([format!("n{}", ITEMS - 1)]),
            "{answer}"
        );
    };
    let status = status_until(&rt, &client, "the first boot", |s| {
        boot_of(s, "memory")["state"] == "done"
    });
    assert!(
        status["views"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["kind"] != "disk"),
        "an api server holds no Disk View: {}",
        status["views"]
    );
    // The api server appended everything in group commits of its own, and counts them.
    let log = &status["log"];
    let (commits, records) = (log["group_commits"].as_u64(), log["records"].as_u64());
    assert!(
        commits.is_some_and(|c| c > 0) && records.is_some_and(|r| r >= ITEMS as u64),
        "{log}"
    );
    assert!(commits <= records, "{log}");
    multiget_all(&client);
    // The catalog shows every Disk View server at the last write before the restart, so
    // the restarted api server (which no longer waits for its predecessor's lease: it
    // stands by meanwhile) boots with all of it.
    status_until(&rt, &client, "the catalog at the last write", |s| {
        let members = s["cluster"]["catalog"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        members
            .iter()
            .filter(|m| m["entry"]["role"] == "disk-view")
            .all(|m| m["entry"]["views"][0]["applied_index"].as_u64() >= Some(last))
    });
    drop(api);

    // Restarted with every boot batch slowed, the api server boots from the servers with
    // all the data in them; the members it boots from die midway.
    let api = start(
        dir.path(),
        &cluster,
        "api",
        &api_args,
        &[("FAILPOINTS", "boot::batch=sleep(40)")],
    );
    let client = HttpClient::new(&api.http, None);
    let status = status_until(&rt, &client, "the second boot under way", |s| {
        let b = boot_of(s, "memory");
        b["state"] == "booting" && b["items"].as_u64() > Some(0)
    });
    let boot = boot_of(&status, "memory");
    assert_eq!(boot["cut"].as_u64(), Some(last), "{boot}");
    let sources: Vec<String> = boot["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().split('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(sources.len(), 2, "one source per partition: {boot}");
    for member in &sources {
        let at = servers.iter().position(|(n, _)| n == member).unwrap();
        drop(servers.remove(at));
    }
    let status = status_until(&rt, &client, "the boot after its sources died", |s| {
        let b = boot_of(s, "memory");
        b["state"] != "booting" && b["state"] != "waiting"
    });
    let boot = boot_of(&status, "memory");
    assert_eq!(boot["state"], "done", "{}", status["boots"]);
    assert!(
        boot["source_restarts"].as_u64() >= Some(2),
        "both sources started over on the other replicas: {boot}"
    );
    multiget_all(&client);
    // Reads go on through the surviving replica of each partition (the dead ones are
    // still in the catalog until their entries age out: they are skipped).
    read_all(&client, 13);
    assert_eq!(servers.len(), 2);
    drop(api);
}
