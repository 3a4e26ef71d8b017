//! `spindle import --memory` below what the largest valid line needs is refused before the
//! data directory is made; at that minimum, a line holding a record near the 1 MiB limit
//! imports (with less, it would fail the import halfway, leaving a directory that must be
//! removed).

use std::path::Path;
use std::process::Command;

fn import(data: &Path, memory: &str, input: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "import",
            "--disk-partitions",
            "2",
            "--memory",
            memory,
            "--data",
        ])
        .arg(data)
        .arg(input)
        .output()
        .unwrap()
}

#[test]
fn too_little_memory_is_refused_before_the_directory_and_the_minimum_takes_a_1_mib_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.jsonl");
    let small = r#"{"item":{"kind":"node","id":"a"},"value":{"v":1}}"#;
    // A value just under the record limit (1 MiB of payload with its key and header).
    let big = format!(
        r#"{{"item":{{"kind":"node","id":"b"}},"value":{{"pad":"{}"}}}}"#,
        "x".repeat((1 << 20) - 100)
    );
    std::fs::write(&input, format!("{small}\n{big}\n{small}\n")).unwrap();
    let data = dir.path().join("data");
    let refused = import(&data, "4MiB", &input);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("too small for an import"), "{stderr}");
    assert!(!data.exists(), "a refused --memory made the data directory");
    let min = spindle_sort::import::MEMORY_MIN_BYTES.to_string();
    let done = import(&data, &min, &input);
    assert!(done.status.success(), "{done:?}");
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("imported 3 records"),
        "{done:?}"
    );
}
