//! `spindle bench cluster --json --rounds 2` on a tiny workload: it starts a real cluster (3
//! NATS servers, Disk View servers, an api server), runs every system once per round in an
//! order rotated each round, checks that both boots give the same Memory View (it fails
//! otherwise), prints the summary objects of its targets, and leaves no cluster behind (a
//! format check, not a performance test).

#![cfg(feature = "jetstream")]

mod bench_json;

use std::process::Command;

#[path = "../../log/tests/nats_cluster/mod.rs"]
mod nats_cluster;

fn spindle_netns() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with("spn"))
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

/// The tests that start a cluster run one at a time: two `cluster up` at once would choose
/// the same free subnet, and one of them fails (by design: see `netns::check_alone`).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Command lines of running processes that name a path under `dir`.
fn processes_under(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir))
        .collect()
}

#[test]
fn bench_cluster_rotates_rounds_checks_boots_and_stops_the_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let before = spindle_netns();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .env("SPINDLE_NATS_SERVER", nats_cluster::nats_server_bin())
        .env("RUST_LOG", "warn")
        .args(["bench", "cluster", "--events", "400", "--clients", "8"])
        .args(["--partitions", "2", "--nodes", "200", "--edges", "600"])
        .args(["--versions", "2", "--rounds", "2", "--json", "--dir"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let appends = [
        "spindle-jetstream",
        "jetstream-raw",
        "jetstream-raw-batch",
        "spindle-file",
    ];
    let boots = ["boot-diskview-servers", "boot-replay"];
    assert_eq!(rows.len(), 2 * (appends.len() + boots.len()), "{rows:#?}");
    for round in 0..2usize {
        let systems: Vec<&str> = rows
            .iter()
            .filter(|r| r["round"] == round)
            .map(|r| r["system"].as_str().unwrap())
            .collect();
        // The boots run first (on a log that holds the graph only), then the appends.
        let mut rotated = bench_json::rotated(&boots, round);
        rotated.extend(bench_json::rotated(&appends, round));
        assert_eq!(systems, rotated, "round {round}");
    }
    let mut items = Vec::new();
    for r in &rows {
        let boot = r["system"].as_str().unwrap().starts_with("boot-");
        let fields: &[&str] = if boot {
            &["items", "bytes", "seconds", "items_per_s", "bytes_per_item"]
        } else {
            &[
                "events",
                "bytes",
                "seconds",
                "events_per_s",
                "p50_ack_us",
                "p99_ack_us",
            ]
        };
        for f in fields {
            assert!(r[*f].as_f64().unwrap() > 0.0, "{f} in {r}");
        }
        if boot {
            items.push(r["items"].as_u64().unwrap());
        } else {
            assert_eq!(r["events"], 400, "{r}");
            // The NATS servers' share is measured on the cluster's systems only.
            let on_cluster = r["system"] != "spindle-file";
            assert_eq!(r["nats_cpu_s"].is_number(), on_cluster, "{r}");
            // Raw publishes say where their stream's leader was placed.
            let raw = r["system"].as_str().unwrap().starts_with("jetstream-raw");
            assert_eq!(r["leader"].is_string(), raw, "{r}");
        }
    }
    // 200 nodes and up to 600 edges (fewer if the generator drew an edge twice): every boot
    // alike, and none of the append systems' events (they run after the boots).
    assert!(
        items.iter().all(|&n| n == items[0] && n > 200 && n <= 800),
        "{items:?}"
    );
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("spindle-jetstream / jetstream-raw"));
    assert!(names[1].starts_with("boot-replay / boot-diskview-servers"));
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean(), "{s}");
    }
    // The cluster was stopped: its directory is gone, and no namespace or process of it
    // is left.
    assert!(!dir.path().join("b").exists());
    assert_eq!(spindle_netns(), before);
    assert_eq!(processes_under(dir.path()), Vec::<String>::new());
}

#[test]
fn bench_cluster_without_a_nats_server_says_so_and_leaves_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .env(
            "SPINDLE_NATS_SERVER",
            dir.path().join("no-such-nats-server"),
        )
        .args(["bench", "cluster", "--loopback", "--rounds", "1", "--dir"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("scripts/nats.sh"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("b"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// A bench that fails once its cluster is up stops the cluster and removes its files.
#[cfg(feature = "failpoints")]
#[test]
fn bench_cluster_failing_midway_stops_its_cluster() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let before = spindle_netns();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .env("SPINDLE_NATS_SERVER", nats_cluster::nats_server_bin())
        .env("FAILPOINTS", "bench_cluster::after_up=return")
        .args([
            "bench",
            "cluster",
            "--partitions",
            "1",
            "--rounds",
            "1",
            "--dir",
        ])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("injected failure"), "{stderr}");
    // It had started: `cluster up` printed its table.
    assert!(stderr.contains("nats-0"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("b"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(processes_under(dir.path()), Vec::<String>::new());
    assert_eq!(spindle_netns(), before);
}
