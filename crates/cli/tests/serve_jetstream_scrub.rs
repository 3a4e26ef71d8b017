//! A corrupted replica is caught and not used (docs/cluster.md "Scrubs"): two Disk View
//! servers hold the same partition; one is stopped, a byte in the middle of one of its
//! table files is flipped, and it is started again. Its scrub finds the damage (RocksDB's
//! block checksum), marks the view corrupt in its status and catalog entry, and it answers
//! reads with `503 view_corrupt`. A new Disk View server of the same partition boots from
//! the healthy replica only, every item read through the api server is right, and the api
//! server's truncation does not count the corrupt replica.

#![cfg(feature = "jetstream")]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;

const STREAM: &str = "SCRUB";
const ITEMS: u64 = 2000;

fn start(
    dir: &Path,
    cluster: &nats_cluster::Cluster,
    name: &str,
    args: &[&str],
) -> js_serve::Server {
    js_serve::start(
        dir,
        cluster,
        STREAM,
        name,
        (
            "scrub_interval_ms = 300\ntruncate_replicas_min = 2\ntruncate_interval_ms = 200\n",
            "catalog_ttl_ms = 3000\n",
        ),
        args,
        &[],
    )
}

fn status(rt: &tokio::runtime::Runtime, http: &str) -> Value {
    let (s, v) = rt
        .block_on(HttpClient::new(http, None).json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

fn until(
    rt: &tokio::runtime::Runtime,
    http: &str,
    what: &str,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let s = status(rt, http);
        if want(&s) {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: views {} boots {} cluster {}",
            s["views"],
            s["boots"],
            s["cluster"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The largest table file under `dir`.
fn largest_sst(dir: &Path) -> PathBuf {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "sst") {
                let len = std::fs::metadata(&p).unwrap().len();
                if best.as_ref().is_none_or(|(l, _)| len > *l) {
                    best = Some((len, p));
                }
            }
        }
    }
    best.expect("a table file").1
}

#[test]
fn a_replica_with_a_flipped_byte_is_caught_and_not_used() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = start(
        dir.path(),
        &cluster,
        "api",
        &["--role", "api", "--disk-partitions", "1"],
    );
    let dv = [
        "--role",
        "disk-view",
        "--partition",
        "0/1",
        "--disk-boot",
        "log",
    ];
    let a = start(dir.path(), &cluster, "a", &dv);
    let b = start(dir.path(), &cluster, "b", &dv);
    until(&rt, &api.http, "both replicas in the catalog", |s| {
        s["cluster"]["catalog"].as_array().map(Vec::len) == Some(3)
    });
    let client = HttpClient::new(&api.http, None);
    let mut last = 0;
    for t in 0..ITEMS / 100 {
        let writes: Vec<Value> = (t * 100..(t + 1) * 100)
            .map(|i| {
                json!({"item": {"kind": "node", "id": format!("n{i}")},
                            "value": {"i": i, "pad": "y".repeat(300)}})
            })
            .collect();
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&json!({"writes": writes}))))
            .unwrap();
        assert_eq!(s, StatusCode::OK, "{answer}");
        last = answer["index"].as_u64().unwrap();
    }
    for server in [&a, &b] {
        until(&rt, &server.http, "applied the writes", |s| {
            s["views"][0]["applied_index"].as_u64() >= Some(last)
                && s["views"][0]["scrub"]["runs"].as_u64() >= Some(1)
                && s["views"][0]["corrupt"].is_null()
        });
    }

    // b stops (its views flush to table files), a byte of its largest table file flips,
    // and it starts again on the same data.
    let pid = b.child.id().to_string();
    let mut b = b;
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(b.child.wait().unwrap().success());
    drop(b);
    let sst = largest_sst(&dir.path().join("b"));
    let mut bytes = std::fs::read(&sst).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x40;
    std::fs::write(&sst, &bytes).unwrap();
    let b = start(dir.path(), &cluster, "b", &dv);

    let s = until(&rt, &b.http, "b's scrub finds the damage", |s| {
        s["views"][0]["corrupt"].is_string()
    });
    let why = s["views"][0]["corrupt"].as_str().unwrap();
    assert!(why.to_lowercase().contains("corrupt"), "{why}");
    // It serves nothing: a read there is refused, so readers go to the other replica.
    let (code, answer) = rt
        .block_on(HttpClient::new(&b.http, None).json(Method::GET, "/v1/item?node=n1", None))
        .unwrap();
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["error"], "view_corrupt", "{answer}");
    // The api server sees it in the catalog and does not count it as a replica.
    let s = until(&rt, &api.http, "the api server sees b corrupt", |s| {
        s["cluster"]["catalog"].as_array().is_some_and(|c| {
            c.iter()
                .any(|m| m["name"] == "b" && m["entry"]["views"][0]["corrupt"].is_string())
        })
    });
    let held = s["truncation"]["held_back_by"].as_str().unwrap();
    assert!(
        held.contains("has 1 of the 2 Disk View replicas needed"),
        "only a counts: {held}"
    );

    // A new replica boots from the healthy one only.
    let c = start(
        dir.path(),
        &cluster,
        "c",
        &[
            "--role",
            "disk-view",
            "--partition",
            "0/1",
            "--disk-boot",
            "replicas",
        ],
    );
    let s = until(&rt, &c.http, "c booted", |s| {
        s["boots"][0]["state"] == "done"
    });
    assert_eq!(
        s["boots"][0]["sources"],
        json!(["a/disk-0"]),
        "{}",
        s["boots"]
    );
    let s = until(&rt, &c.http, "c caught up", |s| {
        s["views"][0]["applied_index"].as_u64() >= Some(last)
    });
    let sa = until(&rt, &a.http, "a at c's index or past", |x| {
        x["views"][0]["applied_index"].as_u64() >= s["views"][0]["applied_index"].as_u64()
    });
    // a and c hold the same versions (a checkpoint both have).
    let points = |s: &Value| -> Vec<(u64, String)> {
        s["views"][0]["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["index"].as_u64().unwrap(),
                    c["checksum"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let (pa, pc) = (points(&sa), points(&s));
    let common: Vec<_> = pc.iter().filter(|p| pa.contains(p)).collect();
    assert!(
        !common.is_empty()
            && pc
                .iter()
                .all(|p| !pa.iter().any(|q| q.0 == p.0) || pa.contains(p)),
        "a {pa:?} c {pc:?}"
    );

    // Every item through the api server: answered by a or c, never b.
    for i in (0..ITEMS).step_by(7) {
        let path = format!("/v1/item?node=n{i}&min_index={last}&timeout_ms=30000");
        let (code, answer) = rt.block_on(client.json(Method::GET, &path, None)).unwrap();
        assert_eq!(code, StatusCode::OK, "n{i}: {answer}");
        assert_eq!(answer["value"]["i"], i, "{answer}");
    }
    drop((a, b, c, api));
}
