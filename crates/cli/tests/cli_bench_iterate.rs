//! `spindle bench iterate --json --rounds 2` on a tiny graph measures every system once per
//! round, in an order rotated each round, tags each row with its round, and prints one
//! summary object per target with the documented names (a format check, not a performance
//! test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_iterate_rotates_rounds_and_prints_summaries() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "iterate", "--nodes", "300", "--edges", "900"])
        .args(["--versions", "2", "--rounds", "2", "--json", "--dir"])
        // A directory that does not exist yet is created.
        .arg(dir.path().join("new"))
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = [
        "rocksdb-raw",
        "iterate-nothing",
        "iterate-all",
        "boot-memory-diskviews",
        "boot-memory-replay",
    ];
    assert_eq!(rows.len(), 2 * order.len(), "{rows:#?}");
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
        for f in ["items", "bytes", "seconds", "mib_per_s"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f} in {r}");
        }
    }
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "iterate-nothing / rocksdb-raw (seconds)",
            "iterate-all / rocksdb-raw (seconds)",
            "boot-memory-replay / boot-memory-diskviews (seconds)",
        ]
    );
    let targets: Vec<&str> = summaries
        .iter()
        .map(|s| s["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["<= 1.05", "<= 1.15", ">= 2.5"]);
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
    // The temporary data directory inside `dir` was removed.
    assert_eq!(
        std::fs::read_dir(dir.path().join("new")).unwrap().count(),
        0
    );
}
