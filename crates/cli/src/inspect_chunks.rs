//! `spindle inspect DIR` for chunk-store directories: read every volume, check every record's
//! checksums and every chunk's BLAKE3, compare hint files, and report volumes, chunk counts,
//! live and garbage bytes. A torn tail of the last volume of a lane is reported and is not an error
//! (opening the store cuts it); corruption names the volume file and offset and exits 1.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use spindle_chunk::{verify_store, HintStatus, VerifyReport, VolumeStatus};

/// Whether `dir` holds a chunk store rather than a log.
pub fn looks_like_chunk_store(dir: &Path) -> bool {
    dir.join(spindle_chunk::MARKER_FILE).is_file()
}

/// Verify a chunk store offline and print a report.
pub fn run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let report = verify_store(dir)?;
    if json {
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&to_json(&report))?
        ))?;
    } else {
        emit(&text(&report))?;
    }
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Write to stdout; a closed pipe (`spindle inspect DIR | head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn hint_name(h: HintStatus) -> &'static str {
    match h {
        HintStatus::Matches => "ok",
        HintStatus::Missing => "missing",
        HintStatus::Stale => "stale",
        HintStatus::Unreadable => "CORRUPT",
        HintStatus::Mismatch => "MISMATCH",
    }
}

fn status_text(s: &VolumeStatus) -> String {
    match s {
        VolumeStatus::Clean => "clean".into(),
        VolumeStatus::TornTail { offset, bytes } => {
            format!("torn tail at offset {offset} ({bytes} bytes; open cuts it)")
        }
        VolumeStatus::Corrupt { offset, reason } => format!("CORRUPT at offset {offset}: {reason}"),
    }
}

/// The report as text; damage also goes to stderr as `error:` lines.
fn text(r: &VerifyReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "chunk store {}", r.dir.display());
    let _ = writeln!(
        out,
        "{} volumes, {} live chunks, {} live bytes, {} garbage bytes",
        r.volumes.len(),
        r.chunks,
        r.live_bytes,
        r.garbage_bytes
    );
    for v in &r.volumes {
        let _ = writeln!(
            out,
            "  {}: {} bytes, {} puts, {} tombstones, {} live chunks, {} live bytes, {} garbage bytes, hint {}, {}",
            v.path.display(),
            v.bytes,
            v.puts,
            v.tombstones,
            v.live_chunks,
            v.live_bytes,
            v.garbage_bytes,
            hint_name(v.hint),
            status_text(&v.status)
        );
    }
    for v in &r.volumes {
        for (offset, reason) in &v.damaged {
            eprintln!("error: {} at offset {offset}: {reason}", v.path.display());
        }
        if let (VolumeStatus::Corrupt { offset, reason }, true) = (&v.status, v.damaged.is_empty())
        {
            eprintln!("error: {} at offset {offset}: {reason}", v.path.display());
        }
        if let Some((offset, reason)) = &v.hint_damage {
            eprintln!(
                "error: {} at offset {offset}: {reason} (open scans the volume instead and \
                 rewrites the hint of a sealed volume)",
                v.path.with_extension("hint").display()
            );
        }
        if v.hint == HintStatus::Mismatch {
            eprintln!(
                "error: hint file of {} lists other records than the volume holds; delete the \
                 .hint file so that open scans the volume",
                v.path.display()
            );
        }
    }
    let _ = writeln!(out, "{}", if r.is_ok() { "ok" } else { "CORRUPT" });
    out
}

fn to_json(r: &VerifyReport) -> serde_json::Value {
    let volumes: Vec<_> = r
        .volumes
        .iter()
        .map(|v| {
            let (status, offset, detail) = match &v.status {
                VolumeStatus::Clean => ("clean", None, None),
                VolumeStatus::TornTail { offset, bytes } => (
                    "torn-tail",
                    Some(*offset),
                    Some(format!("{bytes} bytes after the cut")),
                ),
                VolumeStatus::Corrupt { offset, reason } => {
                    ("corrupt", Some(*offset), Some(reason.clone()))
                }
            };
            json!({
                "volume": v.volume,
                "file": v.path,
                "bytes": v.bytes,
                "puts": v.puts,
                "tombstones": v.tombstones,
                "live_chunks": v.live_chunks,
                "live_bytes": v.live_bytes,
                "garbage_bytes": v.garbage_bytes,
                "hint": hint_name(v.hint).to_lowercase(),
                "hint_file": v.path.with_extension("hint"),
                "hint_offset": v.hint_damage.as_ref().map(|(o, _)| o),
                "hint_detail": v.hint_damage.as_ref().map(|(_, r)| r),
                "status": status,
                "offset": offset,
                "detail": detail,
                "damaged": v.damaged.iter().map(|(o, r)| json!({"offset": o, "reason": r})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "kind": "chunk-store",
        "dir": r.dir,
        "ok": r.is_ok(),
        "chunks": r.chunks,
        "live_bytes": r.live_bytes,
        "garbage_bytes": r.garbage_bytes,
        "volumes": volumes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_chunks(dir: &Path) {
        let store =
            spindle_chunk::ChunkStore::open(dir, spindle_chunk::Options::default()).unwrap();
        let a = store.put(b"first chunk").unwrap();
        store.put(b"second chunk").unwrap();
        store.delete(&a).unwrap();
        store.close().unwrap();
    }

    #[test]
    fn a_chunk_store_is_recognised_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!looks_like_chunk_store(dir.path()));
        store_with_chunks(dir.path());
        assert!(looks_like_chunk_store(dir.path()));
        let report = verify_store(dir.path()).unwrap();
        let json = to_json(&report);
        assert_eq!(json["ok"], true);
        assert_eq!(json["chunks"], 1);
        let tombstones: u64 = (json["volumes"].as_array().unwrap().iter())
            .map(|v| v["tombstones"].as_u64().unwrap())
            .sum();
        assert_eq!(tombstones, 1, "in the volume of the chunk's lane");
        assert_eq!(run(dir.path(), true).unwrap(), ExitCode::SUCCESS);
    }

    #[test]
    fn corruption_names_volume_and_offset_and_fails() {
        let dir = tempfile::tempdir().unwrap();
        store_with_chunks(dir.path());
        let volume = dir.path().join("00000001.volume");
        let mut bytes = std::fs::read(&volume).unwrap();
        bytes[100] ^= 0xff; // inside the first record's header
        std::fs::write(&volume, bytes).unwrap();
        let json = to_json(&verify_store(dir.path()).unwrap());
        assert_eq!(json["ok"], false);
        assert_eq!(json["volumes"][0]["status"], "corrupt");
        assert_eq!(
            json["volumes"][0]["offset"],
            spindle_chunk::VOLUME_HEADER_LEN
        );
        assert_ne!(run(dir.path(), false).unwrap(), ExitCode::SUCCESS);
    }

    #[test]
    fn a_damaged_hint_names_its_file_and_offset_and_fails() {
        let dir = tempfile::tempdir().unwrap();
        store_with_chunks(dir.path());
        let hint = dir.path().join("00000001.hint");
        let mut bytes = std::fs::read(&hint).unwrap();
        bytes[40] ^= 0x01; // inside the first entry
        std::fs::write(&hint, bytes).unwrap();
        let json = to_json(&verify_store(dir.path()).unwrap());
        assert_eq!(json["ok"], false);
        assert_eq!(json["volumes"][0]["hint"], "corrupt");
        assert_eq!(json["volumes"][0]["hint_file"], hint.to_str().unwrap());
        assert_eq!(json["volumes"][0]["hint_offset"], 32);
        assert_ne!(run(dir.path(), false).unwrap(), ExitCode::SUCCESS);
    }
}
