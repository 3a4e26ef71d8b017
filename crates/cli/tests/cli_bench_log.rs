//! `spindle bench log --json --rounds 2` runs every system on a tiny workload in each round,
//! in rotated order, and prints one JSON object per system and round with the documented
//! fields, then one summary object per target (a format check, not a performance test).

mod bench_json;

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
        .args(["--peer-seconds", "1", "--rounds", "2", "--json", "--dir"])
        .arg(dir.path().join("b"))
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = [
        "spindle",
        "spindle-nosync",
        "spindle-single",
        "spindle-lone",
        "rocksdb-wal-sync",
        "sqlite-full",
        "device",
        "device-lone",
    ];
    for round in 0..2usize {
        let systems: Vec<&str> = rows
            .iter()
            .filter(|r| r["round"] == round)
            .map(|r| r["system"].as_str().unwrap())
            .collect();
        let rotated = bench_json::rotated(&order, round);
        assert_eq!(systems, rotated, "round {round}");
    }
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
    assert!(rows
        .iter()
        .filter(|r| r["system"] == "spindle")
        .all(|r| r["events"] == 3000));
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean() && s["median"].is_number(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
}
