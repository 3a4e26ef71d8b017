//! A standby api server (docs/cluster.md "Standby api servers"): two api servers on one
//! stream; the first holds the appender lease, the second serves reads and answers appends
//! with `503 standby` naming the appender. The appender is SIGKILLed: once its lease
//! expires the standby takes it, rebuilds the version table from the stream and appends;
//! every write acknowledged before is read back through it at its index, conditions on
//! them hold, and new writes follow the last one.

#![cfg(feature = "jetstream")]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

const STREAM: &str = "STANDBY";

fn status(rt: &tokio::runtime::Runtime, http: &str) -> Value {
    let (s, v) = rt
        .block_on(HttpClient::new(http, None).json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

fn txn(rt: &tokio::runtime::Runtime, http: &str, body: &Value) -> (StatusCode, Value) {
    rt.block_on(HttpClient::new(http, None).json(Method::POST, "/v1/txn", Some(body)))
        .unwrap()
}

fn write(id: &str, i: u64) -> Value {
    json!({"writes": [{"item": {"kind": "node", "id": id}, "value": {"i": i}}]})
}

#[test]
fn a_standby_api_server_serves_reads_and_takes_over_appends() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = |name: &str, args: &[&str]| {
        js_serve::start(
            dir.path(),
            &cluster,
            STREAM,
            name,
            ("", "catalog_ttl_ms = 3000\n"),
            args,
            &[],
        )
    };
    let api_args = ["--role", "api", "--disk-partitions", "1"];
    let first = start("first", &api_args);
    let second = start("second", &api_args);
    let _dv = start("dv", &["--role", "disk-view", "--partition", "0/1"]);
    assert_eq!(status(&rt, &first.http)["log"]["appender"], true);
    assert_eq!(status(&rt, &second.http)["log"]["appender"], false);

    let mut written = Vec::new();
    for i in 0..50u64 {
        let (s, answer) = txn(&rt, &first.http, &write(&format!("n{i}"), i));
        assert_eq!(s, StatusCode::OK, "{answer}");
        written.push((i, answer["index"].as_u64().unwrap()));
    }
    let last = written.last().unwrap().1;
    // The standby answers reads (through the Disk View server) and refuses appends,
    // naming the appender once the catalog shows it.
    let started = Instant::now();
    loop {
        let (s, answer) = txn(&rt, &second.http, &write("refused", 0));
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert_eq!(answer["error"], "standby", "{answer}");
        if answer["message"].as_str().unwrap().contains("first at") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let read = |http: &str, i: u64, index: u64| {
        let path = format!("/v1/item?node=n{i}&min_index={index}&timeout_ms=30000");
        let (s, answer) = rt
            .block_on(HttpClient::new(http, None).json(Method::GET, &path, None))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "n{i}: {answer}");
        assert_eq!(answer["value"]["i"], i, "{answer}");
        assert_eq!(answer["version"].as_u64(), Some(index), "{answer}");
    };
    for &(i, index) in &written {
        read(&second.http, i, index);
    }

    // The appender dies without releasing its lease: the standby takes over once it
    // expires, and appends from the end of the stream.
    drop(first);
    let killed = Instant::now();
    let (index, took) = loop {
        let (s, answer) = txn(&rt, &second.http, &write("after", 1));
        if s == StatusCode::OK {
            break (answer["index"].as_u64().unwrap(), killed.elapsed());
        }
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "the standby did not take over: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("the standby appended {took:?} after the appender was killed");
    assert!(index > last, "{index} follows {last}");
    assert_eq!(status(&rt, &second.http)["log"]["appender"], true);
    for &(i, index) in &written {
        read(&second.http, i, index);
    }
    // Its version table came from the stream: a condition on a write made through the
    // dead appender holds, a stale one fails.
    let (i, at) = written[7];
    let cond = json!({"conditions": [{"item": {"kind": "node", "id": format!("n{i}")}, "version": at}],
                      "writes": [{"item": {"kind": "node", "id": format!("n{i}")}, "value": {"i": 1000}}]});
    let (s, answer) = txn(&rt, &second.http, &cond);
    assert_eq!(s, StatusCode::OK, "{answer}");
    let (s, answer) = txn(&rt, &second.http, &cond);
    assert_eq!(s, StatusCode::CONFLICT, "{answer}");
    drop(second);
}
