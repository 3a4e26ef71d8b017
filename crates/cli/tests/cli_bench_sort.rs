//! `spindle bench sort --json --rounds 2` on a small input runs every system once per round,
//! in an order rotated each round, tags each row with its round, and prints one summary
//! object per target with the documented names (a format check, not a performance test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_sort_rotates_rounds_and_prints_summaries() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "sort", "--size", "4MiB", "--memory", "1MiB"])
        .args(["--rounds", "2", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = ["spindle", "gnu-sort", "device"];
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
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["bytes"], (4 << 20) / 100 * 100, "{r}");
    }
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "spindle / gnu-sort (MB/s)",
            "spindle / device (seconds)",
            "spindle read bytes / input",
            "spindle write bytes / input",
        ]
    );
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean() && s["target"].is_string(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
    // The input and the outputs were removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
