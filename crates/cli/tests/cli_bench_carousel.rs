//! `spindle bench carousel --json` on a tiny view prints one object per rider and one per run,
//! in the order carousel-1, dedicated-1, carousel-5, dedicated-5, with the documented fields
//! and every rider's numbers positive (a format check, not a performance test).

use std::process::Command;

#[test]
fn bench_carousel_prints_one_object_per_rider_and_per_run() {
    // Under the target directory: a real disk, where the view can be read with O_DIRECT.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["bench", "carousel", "--items", "30000", "--json", "--dir"])
        .arg(dir.path())
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
    let mut expected = Vec::new();
    for (mode, riders) in [
        ("carousel", 1),
        ("dedicated", 1),
        ("carousel", 5),
        ("dedicated", 5),
    ] {
        for rider in 1..=riders {
            expected.push((mode, riders, Some(rider)));
        }
        expected.push((mode, riders, None));
    }
    assert_eq!(rows.len(), expected.len(), "{rows:#?}");
    let mut read_total = 0;
    for (row, (mode, riders, rider)) in rows.iter().zip(expected) {
        let fields: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(row["mode"], mode, "{row}");
        assert_eq!(row["riders"], riders, "{row}");
        match rider {
            Some(rider) => {
                assert_eq!(fields.len(), 5, "{row}");
                assert_eq!(row["rider"], rider, "{row}");
                for f in ["seconds", "mib_per_s"] {
                    assert!(row[f].as_f64().unwrap() > 0.0, "{f} in {row}");
                }
            }
            None => {
                assert_eq!(fields.len(), 5, "{row}");
                assert!(row["data_bytes"].as_u64().unwrap() > 0, "{row}");
                assert!(row["server_cpu_s"].as_f64().unwrap() >= 0.0, "{row}");
                read_total += row["storage_read_bytes"].as_u64().unwrap();
            }
        }
    }
    // Direct reads with the page cache dropped: the server read the view from the disk.
    assert!(read_total > 0, "{rows:#?}");
    // The temporary data directory inside `dir` was removed.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
