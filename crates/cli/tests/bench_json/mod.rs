//! The `--json` output of a `spindle bench` scenario, for the format tests: the run must
//! have succeeded; its lines are one object per system and round, then `"summary": true`
//! objects.

use serde_json::Value;

/// The rows and the summary objects of a finished `spindle bench … --json` (panics, with
/// its stderr, if it failed).
pub fn rows_and_summaries(out: &std::process::Output) -> (Vec<Value>, Vec<Value>) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summaries, rows) = lines.into_iter().partition(|r| r["summary"] == true);
    (rows, summaries)
}

/// `order` as round `round` runs it: rotated left by `round`.
#[allow(
    dead_code,
    reason = "not every scenario's test checks a single rotation"
)]
pub fn rotated<'a>(order: &[&'a str], round: usize) -> Vec<&'a str> {
    (0..order.len())
        .map(|i| order[(i + round) % order.len()])
        .collect()
}
