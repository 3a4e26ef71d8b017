//! `spindle bench import --json --rounds 2` on a tiny graph runs every system once per
//! round, in an order rotated each round, tags each row with its round, and prints the
//! summary object of its target (a format check, not a performance test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_import_rotates_rounds_and_prints_summaries() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "import", "--items", "500", "--memory", "16777216"])
        .args(["--rounds", "2", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = ["import", "online-load", "log-only"];
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
        for f in ["items", "bytes", "seconds", "items_per_s", "mb_per_s"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f} in {r}");
        }
    }
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["online-load seconds / import seconds"]);
    let s = &summaries[0];
    assert_eq!(s["rounds"], 2, "{s}");
    assert_eq!(s["target"], ">= 5", "{s}");
    assert!(s["met"].is_boolean(), "{s}");
    let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
    assert!(min <= med && med <= max, "{s}");
    // The temporary directory inside `dir` was removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
