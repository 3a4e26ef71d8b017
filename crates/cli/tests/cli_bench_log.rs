//! `spindle bench log --json` runs every system on a tiny workload and prints one JSON object
//! per system with the documented fields (a format check, not a performance test).

use std::process::Command;

#[test]
fn bench_log_prints_one_object_per_system() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "bench",
            "log",
            "--events",
            "3000",
            "--concurrency",
            "100",
            "--group",
            "10",
        ])
        .args(["--peer-seconds", "1", "--json", "--dir"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let systems: Vec<&str> = rows.iter().map(|r| r["system"].as_str().unwrap()).collect();
    assert_eq!(
        systems,
        [
            "spindle",
            "spindle-nosync",
            "spindle-single",
            "rocksdb-wal-sync",
            "sqlite-full",
            "device"
        ]
    );
    for r in &rows {
        for field in [
            "events",
            "seconds",
            "events_per_s",
            "mb_per_s",
            "p50_ack_us",
            "p99_ack_us",
            "events_per_fsync",
        ] {
            assert!(r[field].is_number(), "{field} missing in {r}");
        }
        assert!(r["events"].as_u64().unwrap() > 0);
    }
    assert_eq!(rows[0]["events"], 3000);
}
