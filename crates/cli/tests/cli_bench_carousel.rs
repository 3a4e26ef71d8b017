//! `spindle bench carousel --json --rounds 2` on a tiny view prints one object per rider and
//! one per run, each with its round, the four runs in an order rotated each round (round 0:
//! carousel-1, dedicated-1, carousel-5, dedicated-5), with the documented fields and every
//! rider's numbers positive, then one summary object per target (a format check, not a
//! performance test).

mod bench_json;

use std::process::Command;

#[test]
fn bench_carousel_prints_one_object_per_rider_and_per_run() {
    // Under the target directory: a real disk, where the view can be read with O_DIRECT.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "carousel", "--items", "30000", "--rounds", "2"])
        .args(["--json", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (rows, summaries) = bench_json::rows_and_summaries(&out);
    let runs = [
        ("carousel", 1),
        ("dedicated", 1),
        ("carousel", 5),
        ("dedicated", 5),
    ];
    let mut expected = Vec::new();
    for round in 0..2usize {
        for i in 0..runs.len() {
            let (mode, riders) = runs[(i + round) % runs.len()];
            for rider in 1..=riders {
                expected.push((round, mode, riders, Some(rider)));
            }
            expected.push((round, mode, riders, None));
        }
    }
    assert_eq!(rows.len(), expected.len(), "{rows:#?}");
    let mut read_total = 0;
    for (row, (round, mode, riders, rider)) in rows.iter().zip(expected) {
        let fields = row.as_object().unwrap().len();
        assert_eq!(row["round"], round, "{row}");
        assert_eq!(row["mode"], mode, "{row}");
        assert_eq!(row["riders"], riders, "{row}");
        match rider {
            Some(rider) => {
                assert_eq!(fields, 6, "{row}");
                assert_eq!(row["rider"], rider, "{row}");
                for f in ["seconds", "mib_per_s"] {
                    assert!(row[f].as_f64().unwrap() > 0.0, "{f} in {row}");
                }
            }
            None => {
                assert_eq!(fields, 7, "{row}");
                assert!(row["data_bytes"].as_u64().unwrap() > 0, "{row}");
                assert!(row["server_cpu_s"].as_f64().unwrap() >= 0.0, "{row}");
                assert!(row["demotions"].is_u64(), "{row}");
                read_total += row["storage_read_bytes"].as_u64().unwrap();
            }
        }
    }
    // Direct reads with the page cache dropped: the server read the view from the disk.
    assert!(read_total > 0, "{rows:#?}");
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "carousel, 5 riders: storage read / data",
            "server CPU, carousel: 5 riders / 1 rider",
            "slowest rider MiB/s, 5 riders: carousel / dedicated",
            "one rider alone MiB/s: carousel / dedicated",
            "carousel demotions (1 and n riders; none is slow)",
        ]
    );
    for s in &summaries {
        assert_eq!(s["rounds"], 2, "{s}");
        assert!(s["met"].is_boolean() && s["target"].is_string(), "{s}");
        let (min, med, max) = (s["min"].as_f64(), s["median"].as_f64(), s["max"].as_f64());
        assert!(min <= med && med <= max, "{s}");
    }
    // The temporary data directory inside `dir` was removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
