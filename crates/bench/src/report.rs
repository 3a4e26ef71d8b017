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
