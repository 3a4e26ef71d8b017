//! Re-partitioning across hosts (docs/cluster.md "Re-partitioning"): with 4 partitions × 2
//! Disk View servers serving a shared JetStream log whose prefix the api server has
//! truncated (so nothing can be rebuilt by replaying it), an 8-way and a 6-way set of Disk
//! View servers are started; each new server boots its partition from the 4-way servers by
//! range (its retention hold published in the catalog) and then follows the log. Their
//! checksums at a common checkpoint equal the 4-way servers' (every version of every item),
//! the 4-way servers are retired, and every item's history read through the api server
//! (now served by the new servers alone) is exactly what was written. A writer appends
//! through the api server the whole time: no write fails or stops.

#![cfg(all(feature = "jetstream", feature = "failpoints"))]

mod js_serve;
#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use js_serve::Server;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_server::client::HttpClient;
use spindle_view::checksum::Checksum;

const STREAM: &str = "REPART";
/// Distinct items the writer updates, round robin.
const ITEMS: u64 = 300;
const PER_TXN: u64 = 20;

fn start(dir: &Path, cluster: &nats_cluster::Cluster, name: &str, args: &[String]) -> Server {
    start_env(dir, cluster, name, args, &[])
}

fn start_env(
    dir: &Path,
    cluster: &nats_cluster::Cluster,
    name: &str,
    args: &[String],
    env: &[(&str, &str)],
) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    js_serve::start(
        dir,
        cluster,
        STREAM,
        name,
        (
            "truncate_replicas_min = 2\ntruncate_interval_ms = 200\n",
            "catalog_ttl_ms = 3000\n",
        ),
        &args,
        env,
    )
}

fn dv(i: u64, n: u64, boot: &str) -> Vec<String> {
    vec![
        "--role".into(),
        "disk-view".into(),
        "--partition".into(),
        format!("{i}/{n}"),
        "--disk-boot".into(),
        boot.into(),
    ]
}

fn status(rt: &tokio::runtime::Runtime, http: &str) -> Value {
    let client = HttpClient::new(http, None);
    let (s, status) = rt
        .block_on(client.json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{status}");
    status
}

/// `http`'s status once `want` holds (three minutes at most: a liveness bound).
fn status_until(
    rt: &tokio::runtime::Runtime,
    http: &str,
    what: &str,
    mut want: impl FnMut(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let s = status(rt, http);
        if want(&s) {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{what}: boots {} views {} truncation {}",
            s["boots"],
            s["views"],
            s["truncation"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every acknowledged write: item number → (index, value number), in index order.
type Written = Arc<Mutex<BTreeMap<u64, Vec<(u64, u64)>>>>;

/// Append through the api server until `stop`: transactions of `PER_TXN` items, each
/// acknowledged, or the test fails (writes must not stop during re-partitioning).
fn writer(api: String, stop: Arc<AtomicBool>, written: Written, last: Arc<Mutex<u64>>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = HttpClient::new(&api, None);
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let items: Vec<u64> = (0..PER_TXN).map(|k| (seq + k) % ITEMS).collect();
        let writes: Vec<Value> = items
            .iter()
            .enumerate()
            .map(|(k, &item)| {
                json!({"item": {"kind": "node", "id": format!("n{item}")},
                       "value": {"v": seq + k as u64, "pad": "x".repeat(200)}})
            })
            .collect();
        let asked = Instant::now();
        let (s, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&json!({"writes": writes}))))
            .unwrap();
        assert_eq!(
            s,
            StatusCode::OK,
            "a write failed during re-partitioning: {answer}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "a write took {:?}",
            asked.elapsed()
        );
        let index = answer["index"].as_u64().unwrap();
        let mut w = written.lock().unwrap();
        for (k, &item) in items.iter().enumerate() {
            let at = index + 1 + k as u64 - PER_TXN;
            w.entry(item).or_default().push((at, seq + k as u64));
        }
        drop(w);
        *last.lock().unwrap() = index;
        seq += PER_TXN;
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The checksum of every Disk View of `members` (catalog entries) at checkpoint `index`,
/// summed; `None` if one of them has no checkpoint there.
fn sum_at(entries: &[&Value], index: u64) -> Option<Checksum> {
    let mut sum = Checksum::default();
    for e in entries {
        for v in e["views"].as_array().unwrap() {
            if v["kind"] != "disk" {
                continue;
            }
            let c = v["checkpoints"]
                .as_array()?
                .iter()
                .find(|c| c["index"].as_u64() == Some(index))?;
            sum = sum.plus(Checksum::from_hex(c["checksum"].as_str()?)?);
        }
    }
    Some(sum)
}

/// The latest checkpoint index every Disk View of `entries` keeps.
fn common_checkpoint(entries: &[&Value]) -> Option<u64> {
    let mut common: Option<std::collections::BTreeSet<u64>> = None;
    for e in entries {
        for v in e["views"].as_array()? {
            if v["kind"] != "disk" {
                continue;
            }
            let kept: std::collections::BTreeSet<u64> = v["checkpoints"]
                .as_array()?
                .iter()
                .filter_map(|c| c["index"].as_u64())
                .collect();
            common = Some(match common {
                None => kept,
                Some(c) => c.intersection(&kept).copied().collect(),
            });
        }
    }
    common?.last().copied()
}

fn sigterm(server: Server) {
    let pid = server.child.id().to_string();
    let mut server = server;
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(ok.success());
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "a retired server exited with {exit}");
}

#[test]
fn disk_view_servers_repartition_by_booting_from_others_while_writes_go_on() {
    let cluster = nats_cluster::Cluster::start(1);
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = start(
        dir.path(),
        &cluster,
        "api",
        &["--role", "api", "--disk-partitions", "4"].map(String::from),
    );
    let mut old: Vec<Server> = Vec::new();
    for i in 0..4 {
        for r in ["a", "b"] {
            old.push(start(
                dir.path(),
                &cluster,
                &format!("old{i}{r}"),
                &dv(i, 4, "log"),
            ));
        }
    }
    status_until(&rt, &api.http, "the 4-way servers in the catalog", |s| {
        s["cluster"]["catalog"].as_array().map(Vec::len) == Some(9)
    });

    let stop = Arc::new(AtomicBool::new(false));
    let written: Written = Arc::default();
    let last = Arc::new(Mutex::new(0u64));
    let writing = std::thread::spawn({
        let (api, stop, written, last) = (
            api.http.clone(),
            stop.clone(),
            written.clone(),
            last.clone(),
        );
        move || writer(api, stop, written, last)
    });

    // The api server truncates the log once two persisted replicas cover every range: a
    // new server can then be filled only from the others.
    let truncated = status_until(&rt, &api.http, "the log truncated", |s| {
        s["truncation"]["first_retained_index"].as_u64() > Some(1500)
    });
    let first_before = truncated["truncation"]["first_retained_index"]
        .as_u64()
        .unwrap();

    // The 8-way set insists on booting from replicas; the 6-way one uses the default rule,
    // which must choose the replicas too (the log no longer starts at 1).
    let mut new: Vec<(String, Server)> = Vec::new();
    for (n, boot) in [(8, "replicas"), (6, "auto")] {
        for i in 0..n {
            let name = format!("new{n}x{i}");
            let server = start(dir.path(), &cluster, &name, &dv(i, n, boot));
            new.push((name, server));
        }
    }
    let mut cuts = Vec::new();
    for (name, server) in &new {
        let s = status_until(&rt, &server.http, &format!("{name} booted"), |s| {
            s["boots"][0]["state"] == "done" && s["views"].as_array().map(Vec::len) == Some(1)
        });
        let boot = &s["boots"][0];
        let cut = boot["cut"].as_u64().unwrap();
        assert!(
            cut + 1 >= first_before,
            "{name} booted from replicas at a cut above the truncated prefix: {boot}"
        );
        // The 8-way servers boot from the 4-way ones (no other set covers their ranges);
        // a 6-way server may also take ranges from 8-way servers already serving.
        let set = &name[..4];
        let sources = boot["sources"].as_array().unwrap();
        assert!(
            !sources.is_empty()
                && sources.iter().all(|s| {
                    let s = s.as_str().unwrap();
                    s.starts_with("old") || (set == "new6" && s.starts_with("new8x"))
                }),
            "{name} booted from servers of another partitioning: {boot}"
        );
        assert!(boot["items"].as_u64() > Some(0), "{name}: {boot}");
        cuts.push(cut);
    }
    let cut_max = *cuts.iter().max().unwrap();

    // A boot on another host holds truncation back at its cut, through its catalog entry:
    // one more server, 2-way, with every boot batch slowed.
    let slow = start_env(
        dir.path(),
        &cluster,
        "slow",
        &dv(0, 2, "replicas"),
        &[("FAILPOINTS", "boot::batch=sleep(2000)")],
    );
    let s = status_until(&rt, &slow.http, "the slowed boot under way", |s| {
        s["boots"][0]["state"] == "booting" && s["boots"][0]["cut"].is_u64()
    });
    let slow_cut = s["boots"][0]["cut"].as_u64().unwrap();
    let s = status_until(&rt, &api.http, "the api server sees the hold", |s| {
        s["truncation"]["holds"]
            .as_array()
            .is_some_and(|h| h.iter().any(|h| h["owner"] == "slow"))
    });
    let holds = &s["truncation"]["holds"];
    assert!(
        holds
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["owner"] != "slow" || h["cut"].as_u64() <= Some(slow_cut)),
        "{holds}"
    );
    assert!(
        s["truncation"]["safe_index"].as_u64() <= Some(slow_cut),
        "truncation waits for the boot: {}",
        s["truncation"]
    );
    // Held back while it boots: the log keeps everything after the cut.
    let mut checks = 0;
    status_until(&rt, &slow.http, "the slowed boot done", |s| {
        if s["boots"][0]["state"] == "done" {
            return true;
        }
        let t = &status(&rt, &api.http)["truncation"];
        assert!(
            t["first_retained_index"].as_u64() <= Some(slow_cut + 1),
            "the log was truncated past a boot's cut {slow_cut}: {t}"
        );
        checks += 1;
        false
    });
    assert!(
        checks > 10,
        "the boot was watched while it ran ({checks} looks)"
    );
    drop(slow);

    // A common checkpoint after every boot: the 8-way set, the 6-way set and each replica
    // set of the 4-way servers hold the same versions there. (The latest checkpoint every
    // view still keeps: views keep their last 16, and the writer goes on meanwhile.)
    let mut checkpoint = 0;
    let cluster_status = status_until(&rt, &api.http, "a checkpoint past every boot", |s| {
        let entries: Vec<&Value> = s["cluster"]["catalog"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| &m["entry"])
            .filter(|e| e["role"] == "disk-view")
            .collect();
        if entries.len() != 22 || entries.iter().any(|e| e["name"] == "slow") {
            return false;
        }
        match common_checkpoint(&entries) {
            Some(c) if c > cut_max => {
                checkpoint = c;
                true
            }
            _ => false,
        }
    });
    let members: BTreeMap<String, &Value> = cluster_status["cluster"]["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_owned(), &m["entry"]))
        .collect();
    let set = |prefix: &str, suffix: &str| -> Vec<&Value> {
        members
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && k.ends_with(suffix))
            .map(|(_, v)| *v)
            .collect()
    };
    let reference = sum_at(&set("old", "a"), checkpoint).expect("4-way a checkpoints");
    assert_eq!(
        sum_at(&set("old", "b"), checkpoint),
        Some(reference),
        "the 4-way replicas agree"
    );
    assert_eq!(
        sum_at(&set("new8x", ""), checkpoint),
        Some(reference),
        "the 8-way set holds the same versions as the 4-way one at {checkpoint}"
    );
    assert_eq!(
        sum_at(&set("new6x", ""), checkpoint),
        Some(reference),
        "the 6-way set holds the same versions as the 4-way one at {checkpoint}"
    );
    assert_eq!(
        cluster_status["cluster"]["replica_disagreements"],
        json!([]),
        "{}",
        cluster_status["cluster"]
    );

    // Retire the 4-way servers (they leave the catalog) while writes go on.
    for server in old.drain(..) {
        sigterm(server);
    }
    let retired_at = *last.lock().unwrap();
    // Truncation goes on with the new servers as the replicas.
    let s = status_until(&rt, &api.http, "truncation past the retirement", |s| {
        s["truncation"]["first_retained_index"].as_u64() > Some(retired_at + 1)
    });
    assert_eq!(
        s["truncation"]["holds"],
        json!([]),
        "no boot holds the log any more: {}",
        s["truncation"]
    );
    stop.store(true, Ordering::Relaxed);
    writing.join().expect("the writer failed");
    let last = *last.lock().unwrap();

    // Every item's history, read through the api server from the new servers alone, is
    // exactly what was written.
    let client = HttpClient::new(&api.http, None);
    let written = written.lock().unwrap();
    assert_eq!(written.len() as u64, ITEMS);
    for (item, versions) in written.iter() {
        let path =
            format!("/v1/history?node=n{item}&min_index={last}&timeout_ms=60000&limit=10000");
        let (s, history) = rt.block_on(client.json(Method::GET, &path, None)).unwrap();
        assert_eq!(s, StatusCode::OK, "n{item}: {history}");
        assert!(history["next"].is_null(), "one page: {history}");
        let got: Vec<(u64, u64)> = history["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v["version"].as_u64().unwrap(),
                    v["value"]["v"].as_u64().unwrap(),
                )
            })
            .collect();
        let mut want = versions.clone();
        want.sort_unstable();
        let mut got = got;
        got.sort_unstable();
        assert_eq!(got, want, "n{item}'s history");
    }
    drop(new);
    drop(api);
}
