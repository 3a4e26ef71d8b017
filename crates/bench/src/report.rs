//! Shared output helpers for benchmark scenarios: JSON lines and Markdown tables.

use serde::Serialize;

/// Print one JSON object per line.
pub fn print_json<T: Serialize>(rows: &[T]) -> anyhow::Result<()> {
    for row in rows {
        println!("{}", serde_json::to_string(row)?);
    }
    Ok(())
}

/// Print a Markdown table: a header row and rows of cells.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    println!("| {} |", header.join(" | "));
    println!(
        "|{}|",
        header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for row in rows {
        println!("| {} |", row.join(" | "));
    }
}

/// The systems of round `round` in interleaved order: A B C, then B C A, then C A B …, so
/// drift over the run and the cost of going first or last fall on every system alike.
pub fn round_order<T: Clone>(systems: &[T], round: usize) -> Vec<T> {
    let n = systems.len().max(1);
    (0..systems.len())
        .map(|i| systems[(i + round) % n].clone())
        .collect()
}

/// Median, smallest and largest of some measurements (the median of an even count is the
/// mean of the middle two).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no values (or any NaN).
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

/// What a ratio must be, judged on the median of the rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    AtLeast(f64),
    AtMost(f64),
}

impl Target {
    pub fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(t) => value >= t,
            Target::AtMost(t) => value <= t,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(t) => format!(">= {t}"),
            Target::AtMost(t) => format!("<= {t}"),
        }
    }
}

/// One target's verdict over the rounds: printed as a JSON object with `"summary": true`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub summary: bool,
    pub name: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
    pub target: String,
    pub met: bool,
}

impl Summary {
    /// The verdict on per-round values (a ratio measured within each round, or an absolute
    /// rate); `None` when no round measured it.
    pub fn judge(name: &str, per_round: &[f64], target: Target) -> Option<Summary> {
        let s = Spread::of(per_round)?;
        Some(Summary {
            summary: true,
            name: name.to_owned(),
            median: s.median,
            min: s.min,
            max: s.max,
            rounds: per_round.len(),
            target: target.text(),
            met: target.met(s.median),
        })
    }
}

/// A result row tagged with its round, for `--json`.
#[derive(Debug, Serialize)]
pub struct InRound<'a, T: Serialize> {
    pub round: usize,
    #[serde(flatten)]
    pub row: &'a T,
}

/// Per round, `pick(rows of the round)` where it measured something (a ratio of two systems
/// of the round, or one system's rate).
pub fn per_round<R>(rounds: &[Vec<R>], pick: impl Fn(&[R]) -> Option<f64>) -> Vec<f64> {
    rounds.iter().filter_map(|rows| pick(rows)).collect()
}

/// `--json` output of a scenario run in rounds: every row tagged with its round (counted
/// from 0), then one summary object per target.
pub fn print_rounds_json<R: Serialize>(
    rounds: &[Vec<R>],
    summaries: &[Summary],
) -> anyhow::Result<()> {
    for (round, rows) in rounds.iter().enumerate() {
        let tagged: Vec<_> = rows.iter().map(|row| InRound { round, row }).collect();
        print_json(&tagged)?;
    }
    print_json(summaries)
}

/// One Markdown row per system: for each column its median over the rounds and its range.
/// `columns` names the values (`(label, digits)`); `rows` gives each system's spreads in the
/// same order (`None` where the system did not measure that value).
pub fn print_spreads(
    first: &str,
    columns: &[(&str, usize)],
    rows: &[(String, Vec<Option<Spread>>)],
) {
    let mut header = vec![first.to_owned()];
    for (label, _) in columns {
        header.push(format!("{label} (median)"));
        header.push("range".to_owned());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, spreads)| {
            let mut cells = vec![name.clone()];
            for (s, (_, d)) in spreads.iter().zip(columns) {
                match s {
                    Some(s) => {
                        cells.push(format!("{:.d$}", s.median));
                        cells.push(format!("{:.d$} – {:.d$}", s.min, s.max));
                    }
                    None => cells.extend(["-".to_owned(), "-".to_owned()]),
                }
            }
            cells
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    print_table(&header, &table);
}

/// The spread over the rounds of `value` of the row `find` picks in each round.
pub fn spread_of<R>(
    rounds: &[Vec<R>],
    find: impl Fn(&[R]) -> Option<&R>,
    value: impl Fn(&R) -> f64,
) -> Option<Spread> {
    Spread::of(&per_round(rounds, |rows| find(rows).map(&value)))
}

/// Print the verdicts as a Markdown table.
pub fn print_summaries(summaries: &[Summary]) {
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                format!("{:.3}", s.median),
                format!("{:.3} – {:.3}", s.min, s.max),
                s.rounds.to_string(),
                s.target.clone(),
                if s.met { "met" } else { "missed" }.to_owned(),
            ]
        })
        .collect();
    print_table(
        &["target", "median", "range", "rounds", "bar", "verdict"],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_rotate_every_system_through_every_place() {
        let s = ["a", "b", "c"];
        assert_eq!(round_order(&s, 0), ["a", "b", "c"]);
        assert_eq!(round_order(&s, 1), ["b", "c", "a"]);
        assert_eq!(round_order(&s, 2), ["c", "a", "b"]);
        assert_eq!(round_order(&s, 3), ["a", "b", "c"]);
    }

    #[test]
    fn spread_and_verdicts_use_the_median() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[1.0, f64::NAN]).is_none());
        // One round over the bar does not make the target met.
        let v = Summary::judge("r", &[0.5, 0.95, 0.6], Target::AtLeast(0.9)).unwrap();
        assert!(!v.met);
        assert_eq!(v.median, 0.6);
        let v = Summary::judge("r", &[1.0, 1.1, 1.3], Target::AtMost(1.15)).unwrap();
        assert!(v.met);
    }

    #[test]
    fn per_round_values_skip_rounds_that_did_not_measure_them() {
        // Rounds of (system, value); the second round lacks system "b".
        let rounds = vec![
            vec![("a", 2.0), ("b", 1.0)],
            vec![("a", 3.0)],
            vec![("b", 2.0), ("a", 8.0)],
        ];
        let find = |rows: &[(&str, f64)], s: &str| rows.iter().find(|r| r.0 == s).map(|r| r.1);
        let ratios = per_round(&rounds, |rows| Some(find(rows, "a")? / find(rows, "b")?));
        assert_eq!(ratios, [2.0, 4.0]);
        let a = spread_of(&rounds, |rows| rows.iter().find(|r| r.0 == "a"), |r| r.1).unwrap();
        assert_eq!((a.median, a.min, a.max), (3.0, 2.0, 8.0));
        assert!(spread_of(&rounds, |rows| rows.iter().find(|r| r.0 == "c"), |r| r.1).is_none());
    }
}
