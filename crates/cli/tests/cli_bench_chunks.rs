//! `spindle bench chunks --json --rounds 2` on a few small chunks runs every phase of every
//! system once per round with fresh stores, in an order rotated each round, tags each row
//! with its round, and prints one summary object per target with the documented names (a
//! format check, not a performance test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_chunks_rotates_rounds_and_prints_summaries() {
    // Under the target directory: a real disk, where `device` can read with O_DIRECT.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "chunks", "--chunks", "24", "--size", "65536"])
        .args([
            "--writers",
            "2",
            "--rounds",
            "2",
            "--settle-ms",
            "0",
            "--json",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let order = ["spindle", "file-per-chunk", "sqlite-blob", "device"];
    for round in 0..2usize {
        let rotated = bench_json::rotated(&order, round);
        // Every system puts and reads cold; the stores read twice more, the device does not.
        let stores: Vec<&str> = rotated.iter().copied().filter(|s| *s != "device").collect();
        for (phase, expected) in [
            ("put", &rotated),
            ("get-cold", &rotated),
            ("get-again", &stores),
            ("get-warm", &stores),
        ] {
            let systems: Vec<&str> = rows
                .iter()
                .filter(|r| r["round"] == round && r["phase"] == phase)
                .map(|r| r["system"].as_str().unwrap())
                .collect();
            assert_eq!(&systems, expected, "round {round}, {phase}");
        }
        // Fresh stores every round: every system put all 24 chunks again.
        let puts = rows
            .iter()
            .filter(|r| r["round"] == round && r["phase"] == "put" && r["chunks"] == 24)
            .count();
        assert_eq!(puts, order.len(), "round {round}");
    }
    assert!(rows.iter().all(|r| r["round"].is_u64()), "{rows:#?}");
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "put: spindle / device (MB/s)",
            "put: spindle / file-per-chunk (MB/s)",
            "get-cold: spindle / device (MB/s)",
            "get-cold: spindle / file-per-chunk (MB/s)",
            "get-warm: spindle MB/s (BLAKE3 verified)",
        ]
    );
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean() && s["target"].is_string(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
    // Every round's stores were removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
