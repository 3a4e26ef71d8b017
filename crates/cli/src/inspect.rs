//! `spindle inspect DIR`: verify a log directory (or a chunk store) offline.
//!
//! Exit status: 0 when the data is intact (a torn tail, which opening the log would cut, is
//! reported but is not damage), 1 when it is corrupt, 2 when it cannot be read at all.

use std::path::Path;
use std::process::ExitCode;

use spindle_log::inspect::inspect;
use spindle_log::OpenError;

use crate::inspect_chunks;

pub fn run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if inspect_chunks::looks_like_chunk_store(dir) {
        return inspect_chunks::run(dir, json);
    }
    match inspect(dir) {
        Ok(report) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(OpenError::Corrupt {
            file,
            offset,
            reason,
        }) => {
            if json {
                let v = serde_json::json!({ "corrupt": { "file": file, "offset": offset, "reason": reason } });
                println!("{v}");
            }
            eprintln!("CORRUPT: {}: offset {offset}: {reason}", file.display());
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

fn print_report(r: &spindle_log::inspect::InspectReport) {
    println!("log {}", r.dir.display());
    println!(
        "{:<26} {:>14} {:>14} {:>10} {:>12} {:>12}",
        "segment", "first", "last", "records", "used B", "file B"
    );
    for s in &r.segments {
        let name = s
            .file
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        println!(
            "{:<26} {:>14} {:>14} {:>10} {:>12} {:>12}",
            name, s.first_index, s.last_index, s.records, s.used_bytes, s.file_bytes
        );
    }
    println!(
        "indexes {}..={}, {} items in the version table{}",
        r.first_index,
        r.last_index,
        r.items,
        r.checkpoint_as_of
            .map_or(String::new(), |a| format!(" (checkpoint as of {a})"))
    );
    if let Some((segment, bytes)) = r.synced_hint {
        println!(
            "last clean close synced segment {segment} to {bytes} bytes; damage below that is corruption"
        );
    }
    match &r.torn_tail {
        Some(t) => println!(
            "torn tail: {} at offset {} ({} uncommitted records, {}); opening the log cuts it",
            t.file.display(),
            t.offset,
            t.discarded_records,
            t.reason
        ),
        None => println!("no torn tail; all frames verified"),
    }
}
