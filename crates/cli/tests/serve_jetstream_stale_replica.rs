//! An api server boots its Memory View only from Disk View servers whose cut it can follow
//! the log from. A Disk View server that is alive and renews its catalog entry but whose
//! log tailer fails (`FAILPOINTS=fanout::read=return(corrupt)`) stays at applied index 0
//! while the api server truncates the log past it (one replica per range suffices, and the
//! healthy servers cover its range). It holds the smallest range, so view selection alone
//! would take it, and a Memory View booted to cut 0 could never follow the truncated log.
//! Restarted, the api server passes over it, boots from the healthy servers, follows the
//! log and answers every write.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use js_serve::Server;

use std::path::Path;

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

const STREAM: &str = "STALE";
const ITEMS: u64 = 200;
const PER_TXN: u64 = 10;

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
        (
            "truncate_replicas_min = 1\ntruncate_interval_ms = 200\n",
            "catalog_ttl_ms = 3000\n",
        ),
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
        format!(
            "boots {} views {} truncation {}",
            s["boots"], s["views"], s["truncation"]
        )
    })
}

fn memory_boot(status: &Value) -> &Value {
    status["boots"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["view"] == "memory")
        .unwrap_or(&Value::Null)
}

#[test]
fn an_api_server_boots_past_a_stalled_replica_behind_the_truncation() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api_args = ["--role", "api", "--disk-partitions", "2"];
    let api = start(dir.path(), &cluster, "api", &api_args, &[]);
    let mut servers = Vec::new();
    for (name, partition, env) in [
        ("dv0", "0/2", None),
        ("dv1", "1/2", None),
        (
            "stale",
            "0/4",
            Some(("FAILPOINTS", "fanout::read=return(corrupt)")),
        ),
    ] {
        let args = ["--role", "disk-view", "--partition", partition];
        let env: Vec<(&str, &str)> = env.into_iter().collect();
        servers.push(start(dir.path(), &cluster, name, &args, &env));
    }
    let client = HttpClient::new(&api.http, None);
    status_until(&rt, &client, "every server in the catalog", |s| {
        s["cluster"]["catalog"].as_array().map(Vec::len) == Some(4)
    });
    let mut last = 0;
    for t in 0..ITEMS / PER_TXN {
        let writes: Vec<Value> = (t * PER_TXN..(t + 1) * PER_TXN)
            .map(|i| json!({"item": {"kind": "node", "id": format!("n{i}")}, "value": {"i": i}}))
            .collect();
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&json!({"writes": writes}))))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        last = answer["index"].as_u64().unwrap();
    }
    // The healthy servers cover every range, so the log is purged past the stalled one,
    // which stays in the catalog at 0.
    status_until(&rt, &client, "the log truncated", |s| {
        s["truncation"]["first_retained_index"].as_u64() > Some(1)
    });
    let catalog = status_until(
        &rt,
        &client,
        "the stalled server in the catalog at 0",
        |s| {
            s["cluster"]["catalog"].as_array().is_some_and(|members| {
                members.iter().any(|m| {
                    m["entry"]["views"][0]["applied_index"] == 0
                        && m["entry"]["views"][0]["range"][1] == 1u64 << 30
                })
            })
        },
    );
    drop(api);

    // Restarted, the api server boots from the healthy servers only, then follows.
    let api = start(dir.path(), &cluster, "api", &api_args, &[]);
    let client = HttpClient::new(&api.http, None);
    let status = status_until(&rt, &client, "the Memory View booted", |s| {
        memory_boot(s)["state"] == "done"
    });
    let boot = memory_boot(&status);
    let sources: Vec<&str> = boot["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        !sources.is_empty() && sources.iter().all(|s| !s.starts_with("stale")),
        "booted from {sources:?}; catalog {}",
        catalog["cluster"]["catalog"]
    );
    assert!(boot["cut"].as_u64() > Some(0), "{boot}");
    let items: Vec<Value> = (0..ITEMS)
        .map(|i| json!({"kind": "node", "id": format!("n{i}")}))
        .collect();
    let body = json!({"items": items, "min_index": last, "timeout_ms": 60000});
    let (s, answer) = rt
        .block_on(client.json(Method::POST, "/v1/multiget", Some(&body)))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{answer}");
    for (i, v) in answer["values"].as_array().unwrap().iter().enumerate() {
        assert_eq!(v["value"]["i"], i, "n{i}: {v}");
    }
    let status = rt
        .block_on(client.json(Method::GET, "/v1/status", None))
        .unwrap()
        .1;
    let memory = status["views"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "memory")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(memory["stalled"].is_null(), "{memory}");
    drop(servers);
}
