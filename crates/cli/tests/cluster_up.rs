//! `spindle cluster` on one machine: `up` with 3 NATS servers, 2 partitions × 2 Disk View
//! servers and 1 API process (2 on loopback: one appends, the other stands by and refuses
//! writes, and takes over once the appender is killed at the end) prints every member and
//! the API URLs; a transaction appended
//! through the API URL (with the generated token, kept with mode 0600) is read back there;
//! `kill` of a Disk View server makes `status` show it dead; `start` brings it back, it
//! catches up to the commit index of writes made while it was down and serves them; a NATS
//! server killed and started again answers, and writes go on meanwhile; `down`
//! leaves none of the recorded processes running (and, in namespaces, no namespace, veth or
//! bridge). Once on loopback, once in network namespaces (skipped, saying why, when not root
//! or `ip netns` does not work); in namespaces a Disk View server is also cut off by a
//! network partition (its link taken down): reads through the API go to the other replica,
//! and healed it catches up.

#![cfg(feature = "jetstream")]

#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use spindle_core::{ItemKey, Partition};
use spindle_server::client::HttpClient;

/// One cluster at a time: two at once would share the machine's two cores with 16
/// processes.
static SERIAL: Mutex<()> = Mutex::new(());
/// How long the restarted member may take to catch up.
const CATCH_UP_WAIT: Duration = Duration::from_secs(60);
const PARTITIONS: u64 = 2;

fn spindle(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(args)
        .env("SPINDLE_NATS_SERVER", nats_cluster::nats_server_bin())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = spindle(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "spindle {}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `down` when the test ends, passed or not.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = spindle(&["cluster", "down", "--dir", &self.0]);
    }
}

fn status(dir: &str) -> Value {
    serde_json::from_str(&ok(&["cluster", "status", "--dir", dir, "--json"])).unwrap()
}

/// The API process that appends and those that stand by, once every live one says which
/// it is (exactly one appends).
fn api_roles(dir: &str, apis: usize) -> (String, Vec<String>) {
    let started = Instant::now();
    loop {
        let s = status(dir);
        let apis_seen: Vec<(&str, Value)> = s["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "api" && m["alive"] == true)
            .map(|m| (m["name"].as_str().unwrap(), m["appender"].clone()))
            .collect();
        let appenders: Vec<&str> = apis_seen
            .iter()
            .filter(|(_, a)| *a == true)
            .map(|(n, _)| *n)
            .collect();
        if appenders.len() == 1 && apis_seen.iter().all(|(_, a)| a.is_boolean()) {
            let standbys = apis_seen
                .iter()
                .filter(|(_, a)| *a == false)
                .map(|(n, _)| n.to_string())
                .collect();
            return (appenders[0].to_owned(), standbys);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not one appender among {apis} API processes: {apis_seen:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A Spindle member's HTTP URL, from `cluster status --json`.
fn http_url(status: &Value, name: &str) -> String {
    member(status, name)["addresses"]["http"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn member<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

fn partition_of(id: &str) -> u64 {
    let hash = ItemKey::node(id).unwrap().hash();
    (0..PARTITIONS)
        .find(|&p| Partition::nth(p, PARTITIONS).contains(hash))
        .unwrap()
}

/// Process `pid` runs (a zombie, dead but not yet reaped by init, does not).
fn running(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s[s.rfind(')').unwrap() + 1..].split_whitespace().next();
        !matches!(state, Some("Z" | "X"))
    })
}

fn scratch() -> PathBuf {
    std::env::var_os("SPINDLE_TEST_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn write(rt: &tokio::runtime::Runtime, api: &HttpClient, id: &str, i: u64) -> u64 {
    let body = json!({"writes": [{"item": {"kind": "node", "id": id}, "value": {"i": i}}]});
    let (s, answer) = rt
        .block_on(api.json(Method::POST, "/v1/txn", Some(&body)))
        .unwrap();
    assert_eq!(s, StatusCode::OK, "{answer}");
    answer["index"].as_u64().unwrap()
}

fn read(rt: &tokio::runtime::Runtime, from: &HttpClient, id: &str, index: u64) -> Value {
    let path = format!("/v1/item?node={id}&min_index={index}&timeout_ms=30000");
    let (s, answer) = rt.block_on(from.json(Method::GET, &path, None)).unwrap();
    assert_eq!(s, StatusCode::OK, "reading {id}: {answer}");
    answer
}

/// The whole scenario on a new cluster in `root`/cluster, `up` given `network` flags.
fn scenario(root: &Path, network: &[&str], apis: usize) -> Value {
    let apis_arg = apis.to_string();
    let dir = root.join("cluster").display().to_string();
    let mut up = vec![
        "cluster",
        "up",
        "--dir",
        &dir,
        "--nats",
        "3",
        "--partitions",
        "2",
        "--replicas",
        "2",
        "--api",
        &apis_arg,
    ];
    up.extend_from_slice(network);
    let _down = Down(dir.clone());
    let table = ok(&up);
    for name in [
        "nats-0", "nats-1", "nats-2", "dv-0-r0", "dv-0-r1", "dv-1-r0", "dv-1-r1", "api-0",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(name)),
            "{name} not in:\n{table}"
        );
    }
    let s = status(&dir);
    for url in s["api_urls"].as_array().unwrap() {
        assert!(
            table.contains(&format!("API: {}", url.as_str().unwrap())),
            "{table}"
        );
    }
    for m in s["members"].as_array().unwrap() {
        assert_eq!(m["alive"], true, "{m}");
        assert_eq!(m["answering"], true, "{m}");
    }
    // One API process appends; any others stand by.
    let (appender, standbys) = api_roles(&dir, apis);
    let api_url = http_url(&s, &appender);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&appender) && l.contains("api (appender)")),
        "{table}"
    );

    // The token: private to its owner, required by the API.
    let token_file = Path::new(&dir).join("token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (s401, _) = rt
        .block_on(HttpClient::new(&api_url, None).json(Method::GET, "/v1/status", None))
        .unwrap();
    assert_eq!(s401, StatusCode::UNAUTHORIZED);
    let api = HttpClient::new(&api_url, Some(token.clone()));
    for standby in &standbys {
        let client = HttpClient::new(&http_url(&s, standby), Some(token.clone()));
        let body = json!({"writes": [{"item": {"kind": "node", "id": "x"}, "value": {}}]});
        let (code, answer) = rt
            .block_on(client.json(Method::POST, "/v1/txn", Some(&body)))
            .unwrap();
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
        assert!(answer.to_string().contains("standby"), "{answer}");
    }

    // A transaction through the API URL, read back there.
    let first = write(&rt, &api, "n0", 0);
    let answer = read(&rt, &api, "n0", first);
    assert_eq!(answer["version"].as_u64(), Some(first), "{answer}");
    assert_eq!(answer["value"]["i"], 0, "{answer}");

    // One replica of n0's partition dies.
    let p = partition_of("n0");
    let victim = format!("dv-{p}-r1");
    ok(&["cluster", "kill", "--dir", &dir, &victim]);
    let s = status(&dir);
    assert_eq!(member(&s, &victim)["alive"], false, "{s}");
    let text = ok(&["cluster", "status", "--dir", &dir]);
    let line = text.lines().find(|l| l.starts_with(&victim)).unwrap();
    assert!(line.contains("dead"), "{line}");

    // Writes while it is down, some of them in its partition.
    let mut mine = Vec::new();
    for i in 1..=20u64 {
        let id = format!("n{i}");
        let index = write(&rt, &api, &id, i);
        if partition_of(&id) == p {
            mine.push((id, i, index));
        }
    }
    let (last_id, last_i, last_index) = mine.last().cloned().expect("a write in its partition");

    // Back: it catches up to the commit index and serves what it missed.
    ok(&["cluster", "start", "--dir", &dir, &victim]);
    let started = Instant::now();
    loop {
        let s = status(&dir);
        let m = member(&s, &victim);
        assert_eq!(m["alive"], true, "{m}");
        if m["applied_index"].as_u64() >= Some(last_index) {
            break;
        }
        assert!(
            started.elapsed() < CATCH_UP_WAIT,
            "{victim} did not reach {last_index}: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = status(&dir);
    let back = HttpClient::new(
        member(&s, &victim)["addresses"]["http"].as_str().unwrap(),
        Some(token.clone()),
    );
    for (id, i, index) in &mine {
        let answer = read(&rt, &back, id, *index);
        assert_eq!(answer["version"].as_u64(), Some(*index), "{answer}");
        assert_eq!(answer["value"]["i"], *i, "{answer}");
    }
    assert_eq!(read(&rt, &back, &last_id, last_index)["value"]["i"], last_i);

    // A NATS server dies: writes go on through the other two; started again, it answers.
    ok(&["cluster", "kill", "--dir", &dir, "nats-2"]);
    assert_eq!(member(&status(&dir), "nats-2")["alive"], false);
    let index = write(&rt, &api, "during-nats-2-down", 99);
    assert_eq!(
        read(&rt, &api, "during-nats-2-down", index)["value"]["i"],
        99
    );
    ok(&["cluster", "start", "--dir", &dir, "nats-2"]);
    let s = status(&dir);
    let m = member(&s, "nats-2");
    assert!(m["alive"] == true && m["answering"] == true, "{m}");

    if network != ["--loopback"] {
        partition_one_replica(&rt, &dir, &api, p);
    }

    // Re-partitioning: a 3-way set (2 replicas each, as the cluster's) boots from the 2-way
    // one, which is then retired; every
    // write is still read back through the API, now from the 3-way set alone.
    let refused = spindle(&["cluster", "add", "--dir", &dir, "--partitions", "0"]);
    assert!(!refused.status.success());
    let table = ok(&["cluster", "add", "--dir", &dir, "--partitions", "3"]);
    for j in 0..3 {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("dv3-{j}-r0"))),
            "{table}"
        );
    }
    let s = status(&dir);
    for name in (0..3).flat_map(|j| [format!("dv3-{j}-r0"), format!("dv3-{j}-r1")]) {
        let m = member(&s, &name);
        let j = &name[4..5];
        assert_eq!(m["partition"], format!("{j}/3"), "{m}");
        assert_eq!(m["alive"], true, "{m}");
    }
    for (name, why) in [
        ("api-0", "Disk View servers only"),
        ("nats-0", "Disk View servers only"),
        ("dv-9-r9", "no member"),
    ] {
        let out = spindle(&["cluster", "retire", "--dir", &dir, name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{name}: {err}");
    }
    let old = ["dv-0-r0", "dv-0-r1", "dv-1-r0", "dv-1-r1"];
    let mut all = old.to_vec();
    all.extend(["dv3-1-r0", "dv3-1-r1"]);
    let out = spindle(&[&["cluster", "retire", "--dir", &dir][..], &all].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("with no Disk View server"),
        "{err}"
    );
    ok(&[&["cluster", "retire", "--dir", &dir][..], &old].concat());
    let s = status(&dir);
    let names: Vec<&str> = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("dv-")), "{names:?}");
    let index = write(&rt, &api, "after-repartition", 7);
    assert_eq!(read(&rt, &api, "after-repartition", index)["value"]["i"], 7);
    for (id, i, index) in &mine {
        let answer = read(&rt, &api, id, *index);
        assert_eq!(answer["value"]["i"], *i, "{answer}");
    }
    assert_eq!(read(&rt, &api, "n0", first)["value"]["i"], 0);

    // The appender dies: a standby takes the lease over and appends on, after everything.
    if let Some(next) = standbys.first() {
        ok(&["cluster", "kill", "--dir", &dir, &appender]);
        let started = Instant::now();
        while api_roles(&dir, apis).0 != *next {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{next} did not take over from {appender}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        let api = HttpClient::new(&http_url(&status(&dir), next), Some(token.clone()));
        let index = write(&rt, &api, "after-failover", 8);
        assert!(index > last_index, "{index} after {last_index}");
        assert_eq!(read(&rt, &api, "after-failover", index)["value"]["i"], 8);
        for (id, i, index) in &mine {
            assert_eq!(read(&rt, &api, id, *index)["value"]["i"], *i);
        }
    }

    // Down: every process it ever recorded is gone.
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(&dir).join("cluster.json")).unwrap(),
    )
    .unwrap();
    ok(&["cluster", "down", "--dir", &dir]);
    for m in state["members"].as_array().unwrap() {
        let pid = m["pid"].as_u64().unwrap();
        assert!(!running(pid), "{} (pid {pid}) still runs", m["name"]);
    }
    let again = ok(&["cluster", "down", "--dir", &dir]);
    assert!(again.contains("nothing was running"), "{again}");
    state
}

/// A network partition of one Disk View server of partition `p` (its link to the bridge
/// taken down): writes into its partition go on, reads through the API are answered by the
/// other replica; healed, it catches up with what it missed and serves it.
fn partition_one_replica(rt: &tokio::runtime::Runtime, dir: &str, api: &HttpClient, p: u64) {
    let victim = format!("dv-{p}-r0");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(dir).join("cluster.json")).unwrap(),
    )
    .unwrap();
    let veth = member(&state, &victim)["veth"].as_str().unwrap().to_owned();
    let ip = |state: &str| {
        let out = Command::new("ip")
            .args(["link", "set", &veth, state])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip link set {veth} {state}: {out:?}");
    };
    ip("down");
    let mut during = Vec::new();
    for i in 200..240u64 {
        let id = format!("p{i}");
        let index = write(rt, api, &id, i);
        if partition_of(&id) == p {
            during.push((id, i, index));
        }
    }
    let (_, _, last) = *during.last().expect("a write in its partition");
    for (id, i, index) in &during {
        let answer = read(rt, api, id, *index);
        assert_eq!(answer["value"]["i"], *i, "{answer}");
    }
    ip("up");
    let started = Instant::now();
    loop {
        let s = status(dir);
        let m = member(&s, &victim);
        if m["applied_index"].as_u64() >= Some(last) {
            break;
        }
        assert!(
            started.elapsed() < CATCH_UP_WAIT,
            "{victim} did not reach {last} after the partition healed: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_loopback_cluster_comes_up_loses_a_member_and_gets_it_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let root = tempfile::Builder::new()
        .prefix("spindle-cluster-")
        .tempdir_in(scratch())
        .unwrap();
    scenario(root.path(), &["--loopback"], 2);
}

/// Why namespaces cannot be used here, if they cannot.
fn namespaces_unavailable() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Some("not root".into());
    }
    let probe = format!("spn-probe-{}", std::process::id());
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Ok(out) if out.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &probe]).output();
            None
        }
        Ok(out) => Some(format!(
            "`ip netns add` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run ip(8): {e}")),
    }
}

#[test]
fn a_cluster_in_network_namespaces_does_the_same_over_a_bridge() {
    if let Some(why) = namespaces_unavailable() {
        println!("skipped: network namespaces are not available here ({why})");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let root = tempfile::Builder::new()
        .prefix("spindle-cluster-")
        .tempdir_in(scratch())
        .unwrap();
    // No --subnet: `up` takes the first free /24 of 10.77.0.0/16.
    let state = scenario(root.path(), &[], 1);
    // Each member had its own namespace and address; none of it is left.
    let netns = String::from_utf8(
        Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bridge = state["network"]["bridge"].as_str().unwrap();
    assert!(bridge.starts_with("spb"), "{}", state["network"]);
    assert!(!Path::new("/sys/class/net").join(bridge).exists());
    let mut ips = std::collections::BTreeSet::new();
    for m in state["members"].as_array().unwrap() {
        let ns = m["netns"].as_str().unwrap();
        assert!(
            !netns
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "{ns} is left: {netns}"
        );
        let veth = m["veth"].as_str().unwrap();
        assert!(!Path::new("/sys/class/net").join(veth).exists(), "{veth}");
        let ip = m["ip"].as_str().unwrap();
        let gateway = state["network"]["gateway"].as_str().unwrap();
        let net = &gateway[..gateway.rfind('.').unwrap() + 1];
        assert!(
            gateway.starts_with("10.77.") && ip.starts_with(net),
            "{ip} {gateway}"
        );
        assert!(ips.insert(ip.to_owned()), "{ip} twice");
    }
}
