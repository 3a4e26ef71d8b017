//! `spindle bench ring --json --rounds 3` measures every system once per round and consumer
//! count, in an order rotated each round, tags each row with its round, and prints one
//! summary object per target with the documented names (a format check, not a performance
//! test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_ring_rotates_rounds_and_prints_summaries() {
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "ring", "--events", "20000", "--capacity", "1024"])
        .args(["--consumers", "1,4", "--rounds", "3", "--json"])
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = [
        "spindle",
        "crossbeam-channel",
        "crossbeam-batched",
        "disruptor",
        "limit",
    ];
    assert_eq!(rows.len(), 3 * 2 * order.len(), "{rows:#?}");
    for round in 0..3usize {
        for k in [1u64, 4] {
            let systems: Vec<&str> = rows
                .iter()
                .filter(|r| r["round"] == round && r["consumers"] == k)
                .map(|r| r["system"].as_str().unwrap())
                .collect();
            let rotated = bench_json::rotated(&order, round);
            assert_eq!(systems, rotated, "round {round}, {k} consumers");
        }
    }
    for r in &rows {
        assert_eq!(r["events"], 20000, "{r}");
        assert!(r["events_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let mut expected = Vec::new();
    for k in [1, 4] {
        for peer in ["crossbeam-batched", "crossbeam-channel", "disruptor"] {
            expected.push(format!("{k} consumers: spindle / {peer} (events/s)"));
        }
        expected.push(format!(
            "{k} consumers: limit / crossbeam-batched (events/s; the ceiling of spindle's ratio)"
        ));
    }
    assert_eq!(names, expected);
    for s in &summaries {
        assert_eq!(s["rounds"], 3, "{s}");
        assert!(s["met"].is_boolean() && s["target"].is_string(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
    let bar = |name: &str| {
        summaries
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["target"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        bar("4 consumers: spindle / crossbeam-batched (events/s)").as_deref(),
        Some(">= 3")
    );
}
