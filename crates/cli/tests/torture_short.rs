//! `spindle torture` in short: a few crash trials of the whole node (SIGKILL during
//! concurrent transactions, increments and chunk puts, restart, verify) find no violation,
//! and the same driver does report a lost write and a partly visible transaction when it is
//! made to expect one that did not happen (so a clean run means something).

use std::process::Command;

use serde_json::Value;

/// Run `spindle torture` with `extra` flags; returns its exit code and JSON summary.
fn torture(trials: u64, seed: u64, extra: &[&str]) -> (i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spindle"))
        .args(["torture", "--json", "--clients", "3", "--run-ms-max", "200"])
        .args(["--trials", &trials.to_string(), "--seed", &seed.to_string()])
        .arg("--dir")
        .arg(dir.path().join("run"))
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON summary ({e}): stdout {stdout:?}, stderr {:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), summary)
}

fn violations(summary: &Value) -> Vec<String> {
    summary["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["what"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn crash_trials_find_no_violation() {
    let (code, summary) = torture(6, 1, &[]);
    assert_eq!(violations(&summary), Vec::<String>::new(), "{summary}");
    assert_eq!(code, 0, "{summary}");
    assert_eq!(summary["trials"], 6, "{summary}");
    assert!(
        summary["txns_acknowledged"].as_u64().unwrap() > 0,
        "{summary}"
    );
}

#[test]
fn a_lost_write_is_reported() {
    let (code, summary) = torture(4, 2, &["--sabotage", "lost-write"]);
    let v = violations(&summary);
    assert_eq!(code, 1, "{summary}");
    assert!(v.iter().any(|w| w.contains("lost write")), "{v:?}");
}

#[test]
fn a_partly_visible_transaction_is_reported() {
    let (code, summary) = torture(4, 3, &["--sabotage", "partial-txn"]);
    let v = violations(&summary);
    assert_eq!(code, 1, "{summary}");
    assert!(v.iter().any(|w| w.contains("partly visible")), "{v:?}");
}
